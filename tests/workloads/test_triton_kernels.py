"""workloads/triton_kernels.py: the shared Triton kernel sources. Every kind compiles for sm_90a on the
CPU (real Triton, real ptxas: no GPU needed), under the names a caller gives it; bad requests are
clear errors. The benches that launch them (bench/hbfcc_identity.py, runtime_triton.py,
triton_matmul_overhead.py) run on the GPU only."""
from __future__ import annotations

import ast
import shutil

import pytest

from hbfcommon.errors import ConfigError
from workloads import triton_kernels as tk

F32 = {"x": "*fp32", "o": "*fp32", "n": "i32"}
MM = {"sam": "i32", "sak": "i32", "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32"}
# kind -> (signature, constexprs) for triton.compile
SIGS = {
    "add": ({"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32"}, {"B": 1024}),
    "softmax": ({"x": "*fp32", "o": "*fp32", "ncols": "i32", "stride": "i32"}, {"B": 1024}),
    "matmul": ({"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32", **MM},
               {"BM": 64, "BN": 64, "BK": 32}),
    "matmul_grouped": ({"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                        **MM}, {"BM": 128, "BN": 128, "BK": 64, "GM": 8}),
    "hist": ({"x": "*i32", "h": "*i32", "n": "i32"}, {"BINS": 97, "B": 1024}),
    "layernorm": ({"x": "*fp32", "w": "*fp32", "bias": "*fp32", "y": "*fp32", "ncols": "i32", "eps": "fp32"},
                  {"B": 1024}),
    "prio": (F32, {"B": 1024}),
    "copy": (F32, {"B": 1024}),
}


def test_every_kind_has_a_compile_signature():
    assert sorted(SIGS) == sorted(tk.KERNELS)


def test_source_names_each_function_and_parses():
    text = tk.source({"add_plain": "add", "add_hbf": "add", "gate": "prio"})
    tree = ast.parse(text)
    defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert defs == ["add_plain", "add_hbf", "gate"]
    assert text.startswith(tk.HEADER) and "KNAME" not in text
    # the two copies differ only in their names
    a, b = (ast.dump(ast.FunctionDef(**{**vars(f), "name": "_"})) for f in tree.body[1:3])
    assert a == b


@pytest.mark.parametrize("names,field", [({}, "names"), ({"k": "nope"}, "kind"), ({"1k": "add"}, "name")])
def test_bad_requests_are_config_errors(names, field):
    with pytest.raises(ConfigError) as ei:
        tk.source(names)
    assert ei.value.fields["field"] == field


def test_every_kind_compiles_for_sm90(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not installed")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tc"))
    monkeypatch.setenv("TRITON_PTXAS_PATH", ptxas)
    names = {f"tk_{kind}": kind for kind in tk.KERNELS}
    mod = tk.load(tmp_path / "tk_all.py", names)
    assert (tmp_path / "tk_all.py").read_text() == tk.source(names)   # Triton reads the kernels from there
    for name, kind in names.items():
        sig, const = SIGS[kind]
        src = ASTSource(fn=getattr(mod, name), signature={**sig, **{k: "constexpr" for k in const}},
                        constexprs=const)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        assert k.name == name and f".entry {name}(" in k.asm["ptx"], kind
        assert k.asm["cubin"], kind
