# hbfsim — two set-up commands: `make demo` and `make test`. Both build everything they need.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-stamp
INSTALL_STAMP := $(VENV)/.install-stamp
NVCC ?= $(shell command -v nvcc 2>/dev/null)
BUILD := build

PROTO_SRC := proto/hbf.proto
PROTO_OUT := hbfproto/hbf_pb2.py hbfproto/hbf_pb2_grpc.py

# Device helper library: runtime_cuda/src/hbf_helpers.cu (which may #include other .cuh) is
# compiled to one PTX module (compute_90a) when nvcc exists.
HELPER_SRC := $(wildcard runtime_cuda/src/hbf_helpers.cu)
HELPER_HDR := $(wildcard runtime_cuda/include/*.h runtime_cuda/src/*.cuh)
HELPER_PTX := $(BUILD)/runtime_cuda/hbf_helpers.ptx
# Lean build of the same source (out-of-line pieces behind ABI calls; see hbf_helpers.cu, docs/runtime.md)
HELPER_LEAN_PTX := $(BUILD)/runtime_cuda/hbf_helpers_lean.ptx
# Eidola extern API (hbf_eidola.cuh) as the helper module hbfcc's flags pass links (HBFCC_PASSES=timing,flags)
EIDOLA_HELPER_SRC := $(wildcard eidola/src/hbf_eidola_helpers.cu)
EIDOLA_HELPER_PTX := $(BUILD)/runtime_cuda/hbf_eidola_helpers.ptx
NVCC_PTX_FLAGS := -std=c++17 -O3 -arch=compute_90a -rdc=true -ptx -Iruntime_cuda/include

.PHONY: all venv proto helpers-ptx test test-gpu demo clean

all: $(INSTALL_STAMP) helpers-ptx

$(DEPS_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q 'numpy>=1.26' 'scipy>=1.11' 'jsonschema>=4.20' 'grpcio>=1.66' 'protobuf>=5.27' \
	  'pytest>=8' 'hypothesis>=6.100' 'grpcio-tools>=1.66' 'matplotlib>=3.8' 'control>=0.10.1' \
	  'cuda-python>=12.6' 'nvidia-ml-py>=12.0' 'triton==3.6.0'
	touch $@

venv: $(INSTALL_STAMP)

$(PROTO_OUT): $(PROTO_SRC) $(DEPS_STAMP)
	@mkdir -p hbfproto && [ -f hbfproto/__init__.py ] || \
	  echo '"""gRPC stubs generated from proto/hbf.proto at build time (make proto). Never edited by hand."""' > hbfproto/__init__.py
	$(VPY) -m grpc_tools.protoc -Iproto --python_out=hbfproto --grpc_python_out=hbfproto $(PROTO_SRC)
	sed -i 's/^import hbf_pb2 as/from hbfproto import hbf_pb2 as/' hbfproto/hbf_pb2_grpc.py

proto: $(PROTO_OUT)

$(INSTALL_STAMP): $(DEPS_STAMP) $(PROTO_OUT)
	$(VPY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

helpers-ptx: $(HELPER_PTX) $(HELPER_LEAN_PTX) $(EIDOLA_HELPER_PTX)

$(HELPER_PTX): $(HELPER_SRC) $(HELPER_HDR)
	@mkdir -p $(dir $@)
	@if [ -z "$(NVCC)" ]; then echo "nvcc not found: device helper PTX not built (GPU paths unavailable)"; \
	elif [ -z "$(HELPER_SRC)" ]; then echo "no helper sources yet"; \
	else $(NVCC) $(NVCC_PTX_FLAGS) $(HELPER_SRC) -o $@.tmp && \
	  sed -E 's/^\.visible \.func/.weak .func/' $@.tmp > $@ && rm -f $@.tmp; fi

$(HELPER_LEAN_PTX): $(HELPER_SRC) $(HELPER_HDR)
	@mkdir -p $(dir $@)
	@if [ -n "$(NVCC)" ] && [ -n "$(HELPER_SRC)" ]; then \
	  $(NVCC) $(NVCC_PTX_FLAGS) -DHBF_OOL_OPAQUE=1 $(HELPER_SRC) -o $@.tmp && \
	  sed -E 's/^\.visible \.func/.weak .func/' $@.tmp > $@ && rm -f $@.tmp; fi

$(EIDOLA_HELPER_PTX): $(EIDOLA_HELPER_SRC) $(HELPER_HDR) $(wildcard eidola/src/*.cuh)
	@mkdir -p $(dir $@)
	@if [ -n "$(NVCC)" ] && [ -n "$(EIDOLA_HELPER_SRC)" ]; then \
	  $(NVCC) $(NVCC_PTX_FLAGS) -Iruntime_cuda/src -Ieidola/src $(EIDOLA_HELPER_SRC) -o $@.tmp && \
	  sed -E 's/^\.visible \.func/.weak .func/' $@.tmp > $@ && rm -f $@.tmp; fi

test: $(INSTALL_STAMP) helpers-ptx
	$(VPY) -m pytest -q -p no:cacheprovider

test-gpu: $(INSTALL_STAMP) helpers-ptx
	$(VPY) -m pytest -q -p no:cacheprovider -m gpu

demo: $(INSTALL_STAMP) helpers-ptx
	$(VPY) -m workloads.demo

clean:
	rm -rf $(BUILD) $(VENV) $(PROTO_OUT)
