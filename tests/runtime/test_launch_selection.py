"""Per-launch selection of the native version (runtime_cuda.session.selection) and the provenance that
allows it (hbfcc/passes/provenance.py, recorded per kernel in the admission artifact)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hbfcc.passes import timing as T
from hbfcc.ptx import parse_module
from hbfcommon import artifact as A
from runtime_cuda import devstate as D
from runtime_cuda.session import KernelInfo, selection

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triton"
R = [D.DevRange(0x10000, 0x1000, 0, 1, 1, 7, 4096)]
PARAMS = KernelInfo("k", 0, 0, True, [], "params")


@pytest.mark.parametrize("spans,native,why", [
    ([(0x20000, 256)], True, "reaches no range (storage)"),
    ([(0x10800, 4)], False, "reaches a range (storage)"),
    ([(0x0F000, 0x1001)], False, "reaches a range (storage)"),    # ends at the range's first byte
    ([(0x0F000, 0x1000)], True, "reaches no range (storage)"),    # ends just before it
    (None, False, "arguments unknown"),
])
def test_selection_by_argument_extents(spans, native, why):
    assert selection(R, PARAMS, spans, "storage") == (native, why)


def test_addresses_from_memory_always_run_instrumented():
    info = KernelInfo("g", 0, 0, True, [], "memory")
    assert selection(R, info, [(0x20000, 256)], "storage") == (False, "addresses from memory")
    assert selection(R, None, [(0x20000, 256)], "storage") == (False, "addresses from memory")
    assert selection([], info, None, "storage") == (None, "nothing registered")


def _sources(text: str) -> dict[str, str]:
    meta: dict = {}
    T.timing_pass(parse_module(text), meta)
    return {f["name"]: f["address_source"] for f in meta["timing"]["functions"] if f["kind"] == "entry"}


HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"
PARAM_K = HEAD + """
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
  .reg .b32 %r<4>; .reg .b64 %rd<6>; .reg .f32 %f<2>;
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f1, [%rd3];
  st.global.f32 [%rd3+4], %f1;
  ret;
}
"""
GATHER_K = HEAD + """
.visible .entry g(.param .u64 g_param_0, .param .u64 g_param_1)
{
  .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f32 %f<2>;
  ld.param.u64 %rd1, [g_param_0];
  ld.param.u64 %rd4, [g_param_1];
  ld.global.u32 %r1, [%rd4];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f1, [%rd3];
  ret;
}
"""
CHASE_K = HEAD + """
.visible .entry c(.param .u64 c_param_0)
{
  .reg .b64 %rd<4>; .reg .f32 %f<2>;
  ld.param.u64 %rd1, [c_param_0];
  ld.global.u64 %rd2, [%rd1];
  ld.global.f32 %f1, [%rd2];
  ret;
}
"""


def test_provenance_params_gather_and_pointer_chase():
    assert _sources(PARAM_K) == {"k": "params"}
    assert _sources(GATHER_K) == {"g": "memory"}      # an index loaded from memory
    assert _sources(CHASE_K) == {"c": "memory"}       # a pointer loaded from memory


def test_provenance_on_captured_triton_kernels():
    assert set(_sources((FIX / "vector_add_f32.ptx").read_text()).values()) == {"params"}
    assert set(_sources((FIX / "matmul_f16_s3.ptx").read_text()).values()) == {"params"}
    assert set(_sources((FIX / "embedding_gather.ptx").read_text()).values()) == {"memory"}


def test_artifact_address_sources():
    doc = {"kernels": [{"name": "a", "address_source": "params"}, {"name": "b", "address_source": "memory"},
                       {"name": "c"}]}
    assert A.address_sources(doc) == {"a": "params", "b": "memory", "c": "memory"}
    nv = {"modules": [{"kernels": [{"name": "a", "address_source": "params"}]},
                      {"kernels": [{"name": "a", "address_source": "memory"}]}]}
    assert A.address_sources(nv) == {"a": "memory"}
