"""Finding packaged data and the built helper PTX: the one way (issue 12).

Every data file the code reads at run time lives inside a package and travels in the wheel as package
data (pyproject.toml ``[tool.setuptools.package-data]``): the profiles (``hbfcommon/profiles``), the
demo trace (``workloads/data``), the device sources (``runtime_cuda/src``, ``runtime_cuda/include``,
``eidola/src``, ``workloads/*/``) and the helper PTX (``runtime_cuda/ptx``, built at package build time
when nvcc is on PATH, or by ``make helpers-ptx`` in a source tree: the same directory in both).

A package's directory is the one ``importlib.resources.files(package)`` names, found here through the
package's import spec (:func:`importlib.util.find_spec`) so that the package is NOT imported: hbfcc
finds runtime_cuda's helper PTX without importing runtime_cuda (tests/test_import_rules.py). Only
regular (non-zipped) installs are supported: the paths go to nvcc/ptxas as files.

Environment overrides (``HBFCC_HELPER_PTX``, ``HBFCC_EIDOLA_HELPER_PTX``) are read by each binary's
knobs.py, not here; this module gives the packaged defaults and the one "not built" error.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .errors import ConfigError

# The helper builds (runtime_cuda/ptx/<file>): Makefile `helpers-ptx` and setup.py build the same set
HELPER_PTX_PACKAGE = "runtime_cuda"
HELPER_PTX_SUBDIR = "ptx"
HELPER_PTX_FILES = {
    "direct": "hbf_helpers.ptx",            # runtime_cuda/src/hbf_helpers.cu (the default build)
    "lean": "hbf_helpers_lean.ptx",         # the same source with -DHBF_OOL_OPAQUE=1
    "l2": "hbf_helpers_l2.ptx",             # the same source with -DHBF_L2_MODEL=1 (docs/design.md §3.12)
    "eidola": "hbf_eidola_helpers.ptx",     # eidola/src/hbf_eidola_helpers.cu (hbfcc's flags pass)
}
# The variable that names a helper module in place of the packaged one
HELPER_PTX_ENV = {"direct": "HBFCC_HELPER_PTX", "lean": "HBFCC_HELPER_PTX", "l2": "HBFCC_HELPER_PTX",
                  "eidola": "HBFCC_EIDOLA_HELPER_PTX"}


def package_dir(package: str) -> Path:
    """The directory of top-level ``package`` (where its package data lies), without importing it."""
    if not package or "." in package:
        raise ConfigError("package_dir takes a top-level package name", package=package)
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as e:
        raise ConfigError(f"package {package} cannot be found: {e}", package=package) from e
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {package} is not installed", package=package)
    locations = [Path(p) for p in spec.submodule_search_locations]
    for p in locations:
        if p.is_dir():
            return p
    raise ConfigError(f"package {package} is not on the file system (zipped installs are not supported)",
                      package=package, locations=[str(p) for p in locations])


def data_path(package: str, *parts: str) -> Path:
    """Where packaged data ``package/parts...`` lies (it need not exist: see :func:`data_file`)."""
    return package_dir(package).joinpath(*parts)


def data_file(package: str, *parts: str) -> Path:
    """Packaged data file ``package/parts...``; a ConfigError naming it when the install lacks it."""
    p = data_path(package, *parts)
    if not p.is_file():
        raise ConfigError("packaged data file missing (a broken install or source tree)",
                          path=str(p), package=package)
    return p


def _check_build(build: str) -> str:
    if build not in HELPER_PTX_FILES:
        raise ConfigError("unknown helper PTX build", build=build, known=sorted(HELPER_PTX_FILES))
    return build


def helper_ptx_dir() -> Path:
    """runtime_cuda/ptx of the runtime_cuda that imports would load (the dev tree or the install)."""
    return data_path(HELPER_PTX_PACKAGE, HELPER_PTX_SUBDIR)


def helper_ptx_path(build: str = "direct") -> Path:
    """Where the packaged helper PTX of ``build`` (direct | lean | l2 | eidola) lies; it may not be built."""
    return helper_ptx_dir() / HELPER_PTX_FILES[_check_build(build)]


def helper_ptx_missing(build: str = "direct", path: Path | str | None = None) -> ConfigError:
    """The one error for a packaged helper PTX that is not there."""
    var = HELPER_PTX_ENV[_check_build(build)]
    what = "eidola helper PTX" if build == "eidola" else "helper PTX"
    return ConfigError(f"{what} not built: install with nvcc on PATH, or run `make helpers-ptx` in a source "
                       f"tree, or set {var}", path=str(path if path is not None else helper_ptx_path(build)),
                       build=build)


def helper_ptx(build: str = "direct") -> Path:
    """The packaged helper PTX of ``build``; :func:`helper_ptx_missing` when it was not built."""
    p = helper_ptx_path(build)
    if not p.is_file():
        raise helper_ptx_missing(build, p)
    return p
