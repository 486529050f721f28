"""The plain cubin kept for the runtime's HBF_NATIVE_MODULE=plain (issue 15, wt/natmod15; docs/design.md "Native
entries in graphs"): hbfcc-ptxas's eager build stores its baseline build -- the ORIGINAL PTX assembled with the
caller's own ptxas options -- in the artifact store, content-addressed by its sha256, and records it as the module
document's ``native_module``. It is byte for byte what a plain ``ptxas`` makes of the original with those options
(the module without hbfcc's constants, whose kernels are the native entries' machine code). Not kept, with the
reason recorded, when HBFCC_NATIVE_ENTRY=0, HBFCC_BASELINE=0, for a relocatable build (-c) or a module without
native entries. The store's write is atomic and a second build leaves the one file as it was."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import artifact as A  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402

FIX = U.REPO / "tests" / "fixtures" / "triton"


def _build(tmp_path: Path, name: str, args: list[str], out: str = "k.cubin", **env) -> tuple[dict, Path]:
    """hbfcc-ptxas on a Triton fixture: its record (validated) and the store."""
    U.tool("ptxas")
    src = tmp_path / "k.ptx"
    src.write_text((FIX / f"{name}.ptx").read_text())
    store = tmp_path / "store"
    e = U.env_with(HBFCC_ARTIFACT_DIR=store, HBFCC_CACHE_DIR=tmp_path / "hc", HBFCC_REAL_PTXAS=U.tool("ptxas"),
                   HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx(), PYTHONPATH=U.REPO, **env)
    cp = subprocess.run([U.console("hbfcc-ptxas"), *args, str(src), "-o", str(tmp_path / out)], capture_output=True,
                        text=True, env=e, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads((tmp_path / (out + ".hbfcc.json")).read_text())
    A.validate(doc)
    return doc, store


def _plain(tmp_path: Path, name: str, args: list[str]) -> bytes:
    """What CUDA's ptxas makes of the original PTX with the same options."""
    src = tmp_path / "plain.ptx"
    src.write_text((FIX / f"{name}.ptx").read_text())
    out = tmp_path / "plain.cubin"
    subprocess.run([U.tool("ptxas"), *args, str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


TKINFO = ".note.nv.tkinfo"     # the ptxas command line: hbfcc's baseline adds -v where the caller did not


# Triton's own ptxas options (-lineinfo, -v, --fmad, --gpu-name): the kept cubin is the plain build byte for byte;
# without -v the baseline adds it, which only ptxas's tool note (its command line) records: every other section equal
@pytest.mark.parametrize("name,args", [("tma_matmul_host_desc_s3", ["-lineinfo", "-v", "--fmad=true",
                                                                    "--gpu-name=sm_90a"]),
                                       ("tma_matmul_host_desc_s3", ["-arch=sm_90a"]),
                                       ("vector_add_f32", ["-arch=sm_90a", "-O3", "-lineinfo"])])
def test_the_plain_cubin_is_kept_and_is_the_plain_ptxas_build(name, args, tmp_path):
    doc, store = _build(tmp_path, name, args)
    assert A.native_entries(doc)                                    # the module has native entries
    rec = doc["native_module"]
    assert "native_module_reason" not in doc
    plain = _plain(tmp_path, name, args)
    kept = (store / rec["file"]).read_bytes()
    if "-v" in args:
        assert kept == plain, "the kept cubin is not the plain ptxas build of the original PTX"
    else:
        ks, ps = U._elf_sections(kept), U._elf_sections(plain)
        assert ks.keys() == ps.keys() and any(n.startswith(".text.") for n in ks)
        assert {n: v for n, v in ks.items() if n != TKINFO} == {n: v for n, v in ps.items() if n != TKINFO}
    sha = hashlib.sha256(kept).hexdigest()
    assert rec == {"sha256": sha, "bytes": len(kept), "file": f"{A.NATIVE_SUBDIR}/{sha}.cubin"}
    assert (store / rec["file"]) == A.native_module_path(store, rec["sha256"])
    out = (tmp_path / "k.cubin").read_bytes()
    assert kept != out and b"__hbnat" not in kept and b"__hb_cdesc" not in kept and b"__hb_cdesc" in out
    # the runtime's readers: the record of the module, the bytes verified
    got, why = A.native_module(doc)
    assert got == rec and why == ""
    assert A.read_native_module(store, rec) == kept
    # the store's own records (by original PTX, by output) carry it too
    by_out = json.loads(A.output_store_path(store, hashlib.sha256(out).hexdigest()).read_text())
    assert by_out["native_module"] == rec
    # nothing half-written beside it (atomic write: the temp file renamed away)
    assert sorted(p.name for p in (store / A.NATIVE_SUBDIR).iterdir()) == [Path(rec["file"]).name]


def test_a_second_build_keeps_the_one_file(tmp_path):
    doc, store = _build(tmp_path, "vector_add_f32", ["-arch=sm_90a"])
    p = store / doc["native_module"]["file"]
    st = p.stat()
    doc2, _ = _build(tmp_path, "vector_add_f32", ["-arch=sm_90a"])
    assert doc2["native_module"] == doc["native_module"]
    assert p.stat().st_ino == st.st_ino and p.stat().st_mtime_ns == st.st_mtime_ns       # not rewritten
    good = p.read_bytes()
    p.write_bytes(b"\x7fELF damaged")                       # a damaged file is replaced by the next build
    _build(tmp_path, "vector_add_f32", ["-arch=sm_90a"])
    assert A.read_native_module(store, doc["native_module"]) == good


@pytest.mark.parametrize("env,args,why", [
    ({"HBFCC_NATIVE_ENTRY": "0"}, ["-arch=sm_90a"], "HBFCC_NATIVE_ENTRY=0"),
    ({"HBFCC_BASELINE": "0"}, ["-arch=sm_90a"], "HBFCC_BASELINE=0"),
    ({}, ["-arch=sm_90a", "-c"], "relocatable"),
])
def test_not_kept_when_the_knobs_or_the_build_say_so(env, args, why, tmp_path):
    doc, store = _build(tmp_path, "vector_add_f32", args, out="k.o" if "-c" in args else "k.cubin", **env)
    assert doc["native_module"] is None and why in doc["native_module_reason"]
    assert not (store / A.NATIVE_SUBDIR).exists()
    rec, reason = A.native_module(doc)
    assert rec is None and why in reason


def test_store_write_is_atomic_and_verified(tmp_path, monkeypatch):
    """store_native_module writes through the project's atomic writer (a failure leaves no file, no temp file);
    read_native_module refuses bytes that are not the recorded ones and a missing file, naming the file."""
    import hbfcommon.artifact as art
    data = b"\x7fELF" + os.urandom(64)
    calls = []
    real = art.atomic_write_bytes

    def boom(p, d, **kw):
        calls.append(p)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(art, "atomic_write_bytes", boom)
    with pytest.raises(OSError):
        A.store_native_module(tmp_path, data)
    assert calls and not list(tmp_path.rglob("*.cubin")) and not list(tmp_path.rglob("*.tmp*"))
    monkeypatch.setattr(art, "atomic_write_bytes", real)
    rec = A.store_native_module(tmp_path, data)
    assert A.read_native_module(tmp_path, rec) == data
    p = tmp_path / rec["file"]
    p.write_bytes(data[:-1] + b"x")
    with pytest.raises(ConfigError, match="not the one recorded") as ei:
        A.read_native_module(tmp_path, rec)
    assert str(p) in str(ei.value)
    p.unlink()
    with pytest.raises(ConfigError, match="cannot read the plain cubin"):
        A.read_native_module(tmp_path, rec)


def test_reader_says_why_for_documents_without_it():
    assert A.native_module(None)[0] is None
    assert "records no native_module" in A.native_module({"kernels": []})[1]
    assert "several modules" in A.native_module({"modules": [{"kernels": []}]})[1]
    assert A.native_module({"native_module": None, "native_module_reason": "HBFCC_BASELINE=0 (no plain build)"}) == \
        (None, "HBFCC_BASELINE=0 (no plain build)")
