# hbfsimConfig.cmake -- find_package(hbfsim) for the C/C++ host API (docs/runtime.md "C/C++ host API").
#
#   cmake -Dhbfsim_DIR=$(python -m runtime_cuda.capi --cmake-dir) ...
#   find_package(hbfsim REQUIRED)
#   target_link_libraries(app PRIVATE hbfsim::hbfsim)
#
# The library (libhbfsim, one C file) is built in the project's build tree from the sources shipped in the
# Python package, against the Python that holds this package: it embeds that interpreter and runs the
# session there. That Python is Python3_EXECUTABLE when given, else the one FindPython3 picks (an active
# virtual environment first); this file checks that it is the Python whose hbfsim this is, and says which
# to pass when it is not.
cmake_minimum_required(VERSION 3.18)

if(TARGET hbfsim::hbfsim)
  return()
endif()

get_filename_component(_hbfsim_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
include("${CMAKE_CURRENT_LIST_DIR}/hbfsimConfigVersion.cmake")
set(hbfsim_VERSION "${PACKAGE_VERSION}")

if(NOT DEFINED Python3_FIND_VIRTUALENV)
  set(Python3_FIND_VIRTUALENV FIRST)
endif()
find_package(Python3 3.10 COMPONENTS Interpreter Development.Embed QUIET)
if(NOT Python3_Interpreter_FOUND OR NOT Python3_Development.Embed_FOUND)
  set(hbfsim_FOUND FALSE)
  set(hbfsim_NOT_FOUND_MESSAGE
      "hbfsim needs a Python 3.10+ interpreter with its embedding library (libpython, python3-dev): pass "
      "-DPython3_EXECUTABLE=<the python where hbfsim is installed>")
  return()
endif()

execute_process(
  COMMAND "${Python3_EXECUTABLE}" -m runtime_cuda.capi --cmake-dir
  OUTPUT_VARIABLE _hbfsim_dir RESULT_VARIABLE _hbfsim_rc ERROR_VARIABLE _hbfsim_err
  OUTPUT_STRIP_TRAILING_WHITESPACE)
get_filename_component(_hbfsim_here "${CMAKE_CURRENT_LIST_DIR}" REALPATH)
if(_hbfsim_rc EQUAL 0)
  get_filename_component(_hbfsim_dir "${_hbfsim_dir}" REALPATH)
endif()
if(NOT _hbfsim_rc EQUAL 0 OR NOT _hbfsim_dir STREQUAL _hbfsim_here)
  set(hbfsim_FOUND FALSE)
  set(hbfsim_NOT_FOUND_MESSAGE
      "the Python CMake found (${Python3_EXECUTABLE}) is not the one this hbfsim (${_hbfsim_here}) is installed "
      "in (it answers '${_hbfsim_dir}'${_hbfsim_err}): pass -DPython3_EXECUTABLE=<that python>")
  return()
endif()

get_property(_hbfsim_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "C" IN_LIST _hbfsim_langs)
  enable_language(C)
endif()

add_library(hbfsim SHARED "${_hbfsim_root}/src/hbfsim.c")
set_target_properties(hbfsim PROPERTIES
  C_STANDARD 11 C_STANDARD_REQUIRED ON C_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON
  OUTPUT_NAME hbfsim LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}")
target_include_directories(hbfsim PUBLIC "${_hbfsim_root}/include")
target_link_libraries(hbfsim PRIVATE Python3::Python)
find_package(Threads REQUIRED)
target_link_libraries(hbfsim PRIVATE Threads::Threads)
target_compile_definitions(hbfsim PRIVATE
  HBFSIM_PYTHON_EXECUTABLE="${Python3_EXECUTABLE}" HBFSIM_PACKAGE_VERSION="${hbfsim_VERSION}")
add_library(hbfsim::hbfsim ALIAS hbfsim)
set(hbfsim_INCLUDE_DIRS "${_hbfsim_root}/include")
set(hbfsim_PYTHON_EXECUTABLE "${Python3_EXECUTABLE}")

# hbfsim_record_program(<target>): after each build of <target>, write <target file>.hbfcc.json, the
# program's admission record that hbfsim_bind_all reads: every kernel of the target's objects with hbfcc's
# verdict (each object's <obj>.hbfcc.json, written when hbfcc compiled it). Needed when CMake links the
# program with the host compiler (a target with CUDA sources links through g++/clang++ by default), where
# hbfcc does not see the link; harmless when hbfcc linked it (then its link record is kept).
function(hbfsim_record_program target)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${hbfsim_PYTHON_EXECUTABLE}" -m runtime_cuda.capi --program-record "$<TARGET_FILE:${target}>"
            "$<TARGET_OBJECTS:${target}>"
    COMMAND_EXPAND_LISTS VERBATIM
    COMMENT "hbfsim: admission record of ${target}")
endfunction()

set(hbfsim_FOUND TRUE)
