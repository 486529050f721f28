"""The C/C++ host API (issue 18 item 1; docs/runtime.md "C/C++ host API"): libhbfsim built by CMake through
find_package(hbfsim) from the package's own files, a C and a C++ program against a REAL hbfd (sessions without
CUDA: this box has no GPU), bad input answered with the documented codes, and a cuda-samples-style program
(cudart, <<<>>>) built through hbfcc whose kernels bind_all finds (host stubs, verdicts) on the CPU. The
GPU run of that program is bench/capi_sample.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hbfcommon import ctl as C
from hbfcommon.errors import ErrorCode
from hbfd.runner import start_daemon
from runtime_cuda import capi

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
HEADER = ROOT / "runtime_cuda" / "capi" / "include" / "hbfsim.h"
CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake not installed")


def _env(**kw) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), e.get("PATH", "")])
    e.update(kw)
    return e


def _cmake(src: Path, build: Path, *extra: str, env=None) -> None:
    cfg = [CMAKE, "-S", str(src), "-B", str(build), f"-Dhbfsim_DIR={capi.cmake_dir()}",
           f"-DPython3_EXECUTABLE={sys.executable}", *extra]
    for argv in (cfg, [CMAKE, "--build", str(build), "-j2"]):
        cp = subprocess.run(argv, capture_output=True, text=True, env=env or _env(), timeout=300)
        assert cp.returncode == 0, f"{' '.join(argv)}\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with start_daemon("nominal", workdir=tmp_path_factory.mktemp("hbfd"), env={"HBFD_THERMAL": "none"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        yield d


@pytest.fixture(scope="module")
def cbuild(tmp_path_factory) -> Path:
    b = tmp_path_factory.mktemp("capi_c")
    _cmake(HERE / "c_prog", b)
    return b


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory) -> Path:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    hbfcc = Path(sys.executable).parent / "hbfcc"
    if not hbfcc.exists():
        pytest.skip("hbfcc not on this venv's PATH")
    b = tmp_path_factory.mktemp("capi_cuda")
    _cmake(HERE / "cuda_sample", b, env=_env(CUDACXX=str(hbfcc), HBFCC_ARTIFACT_DIR=str(b / "store")))
    return b


def _run(argv, cwd, **kw) -> subprocess.CompletedProcess:
    cp = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=120, env=_env(**kw))
    assert "Traceback" not in cp.stderr + cp.stdout, cp.stderr
    return cp


def _steps(out: str) -> dict[str, tuple[int, str]]:
    return {m.group(1): (int(m.group(2)), m.group(3)) for m in re.finditer(r"^(\w+) rc=(-?\d+) msg=(.*)$", out, re.M)}


# ---------------------------------------------------------------------------------------- the contract
def test_header_agrees_with_the_python_side():
    """hbfsim.h's codes are the error tree's, its op count and permissions hbf_ctl's, its versions the
    bridge's and pyproject's (one definition each, mirrored and checked here)."""
    h = HEADER.read_text()
    codes = {m.group(1): int(m.group(2)) for m in re.finditer(r"HBFSIM_E_(\w+) = (\d+)", h)}
    assert {k: v for k, v in codes.items() if k != "PYTHON"} == {e.name: int(e) for e in ErrorCode if e.name != "OK"}
    assert codes["PYTHON"] == capi.E_PYTHON and capi.E_PYTHON not in {int(e) for e in ErrorCode}
    assert int(re.search(r"#define HBFSIM_N_OPS (\d+)", h).group(1)) == len(C.OP_NAMES)
    ops = re.findall(r"HBFSIM_OP_(\w+) = (\d+)", h)
    assert [(n.lower(), int(v)) for n, v in ops] == [(n, i) for i, n in enumerate(C.OP_NAMES)]
    for p in ("READ", "WRITE", "ATOMIC"):
        assert int(re.search(rf"#define HBFSIM_PERM_{p} (0x\w+)u", h).group(1), 16) == getattr(C, f"HBF_PERM_{p}")
    assert int(re.search(r"#define HBFSIM_ABI_VERSION (\d+)", h).group(1)) == capi.ABI_VERSION
    assert int(re.search(r"#define HBFSIM_COUNTERS_VERSION (\d+)", h).group(1)) == capi.COUNTERS_VERSION
    assert f"HBFSIM_ATTACH_NO_CUDA {capi.ATTACH_NO_CUDA:#x}" in h
    assert f"HBFSIM_ATTACH_ALLOW_UNMODELED {capi.ATTACH_ALLOW_UNMODELED:#x}" in h
    # the counters struct: its scalar fields after ops[] are the bridge's SCALARS, in order
    body = re.search(r"hbfsim_op_counters ops\[HBFSIM_N_OPS\];(.*?)\} hbfsim_counters;", h, re.S).group(1)
    assert tuple(re.findall(r"uint64_t (\w+);", body)) == capi.SCALARS
    opbody = re.search(r"typedef struct hbfsim_op_counters \{(.*?)\}", h, re.S).group(1)
    assert tuple(re.findall(r"uint64_t (\w+);", opbody)) == capi.OP_FIELDS
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f'set(PACKAGE_VERSION "{version}")' in (capi.cmake_dir() / "hbfsimConfigVersion.cmake").read_text()


def test_cmake_dir_cli():
    cp = subprocess.run([sys.executable, "-m", "runtime_cuda.capi", "--cmake-dir"], capture_output=True, text=True,
                        env=_env(), check=True)
    d = Path(cp.stdout.strip())
    assert (d / "hbfsimConfig.cmake").is_file() and (d.parent / "include" / "hbfsim.hpp").is_file()
    assert (d.parent / "src" / "hbfsim.c").is_file()


# ---------------------------------------------------------------------------------------- C and C++ programs
def test_c_program_against_hbfd(daemon, cbuild, tmp_path):
    summ = tmp_path / "run.json"
    cp = _run([cbuild / "capi_c", "flow", daemon.socket, summ], tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    st = _steps(cp.stdout)
    for k in ("attach", "register_a", "register_b", "unregister_a", "counters", "synchronize", "summary", "detach"):
        assert st[k][0] == 0, (k, st[k])
    assert st["register_overlap"][0] == ErrorCode.RANGE_OVERLAP and "overlaps range" in st["register_overlap"][1]
    assert st["unregister_a_again"][0] == ErrorCode.RANGE_NOT_FOUND
    m = re.search(r"counters version=(\d+) size=(\d+) generation=(\d+) requests=0", cp.stdout)
    assert m and int(m.group(1)) == capi.COUNTERS_VERSION and int(m.group(3)) >= 3   # 2 registers + 1 unregister
    doc = json.loads(summ.read_text())
    assert doc["schema"] == capi.SUMMARY_SCHEMA and doc["cuda"] is False
    ids = [int(x) for x in re.search(r"ids (\d+) (\d+)", cp.stdout).groups()]
    # hbfd's view at summary time: range b registered (read-only, as asked), a gone
    live = {r["label"]: r for r in doc["daemon"]["ranges"] if r["range_id"] in ids}
    assert set(live) == {"b"} and live["b"]["perms"] == C.HBF_PERM_READ and live["b"]["length"] == 1 << 20
    assert doc["counters"]["generation"] == int(m.group(3))
    assert "version hbfsim" in cp.stdout and f"abi={capi.ABI_VERSION}" in cp.stdout


def test_bad_input_gets_codes_not_crashes(daemon, cbuild, tmp_path):
    cp = _run([cbuild / "capi_c", "bad", daemon.socket], tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    st = _steps(cp.stdout)
    want = {"attach_null_out": ErrorCode.INVALID_ARGUMENT, "register_null_session": ErrorCode.INVALID_ARGUMENT,
            "counters_null_out": ErrorCode.INVALID_ARGUMENT, "detach_null": 0,
            "attach_bad_flags": ErrorCode.INVALID_ARGUMENT, "attach": 0,
            "unregister_unknown": ErrorCode.RANGE_NOT_FOUND, "register_zero": ErrorCode.RANGE_ZERO_LENGTH,
            "register_null_ptr": ErrorCode.INVALID_ARGUMENT, "register_null_out": ErrorCode.INVALID_ARGUMENT,
            "counters_no_size": ErrorCode.INVALID_ARGUMENT, "summary_null_path": ErrorCode.INVALID_ARGUMENT,
            "summary_bad_dir": ErrorCode.INVALID_ARGUMENT, "bind_no_artifact": ErrorCode.INVALID_ARGUMENT,
            "detach": 0}
    assert {k: st[k][0] for k in want} == {k: int(v) for k, v in want.items()}
    for k, v in want.items():
        assert bool(st[k][1]) == bool(v), (k, st[k])     # a message exactly when there is an error
    assert "987654" in st["unregister_unknown"][1] and "struct_size" in st["counters_no_size"][1]
    assert "cannot write the summary" in st["summary_bad_dir"][1]


def test_no_daemon_and_no_python(cbuild, tmp_path):
    cp = _run([cbuild / "capi_c", "nodaemon", tmp_path / "none.sock"], tmp_path)
    st = _steps(cp.stdout)
    assert st["attach"][0] == ErrorCode.DAEMON_UNAVAILABLE and "none.sock" in st["attach"][1]
    assert "session_null=1" in cp.stdout
    # an interpreter that cannot start: the library's own code, the reason, and the program goes on
    cp = _run([cbuild / "capi_c", "nodaemon", tmp_path / "none.sock"], tmp_path, PYTHONHOME=str(tmp_path / "nopy"))
    st = _steps(cp.stdout)
    assert st["attach"][0] == capi.E_PYTHON and "did not start" in st["attach"][1]
    assert cp.returncode == 0 and "session_null=1" in cp.stdout


def test_cxx_raii(daemon, cbuild, tmp_path):
    cp = _run([cbuild / "capi_cxx", daemon.socket], tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"overlap error code={int(ErrorCode.RANGE_OVERLAP)}" in cp.stdout and cp.stdout.rstrip().endswith("ok")
    rid = int(re.search(r"range (\d+)", cp.stdout).group(1))
    with daemon.client() as c:   # the Range's destructor unregistered it, detach closed the session
        ids = [int(r.range_id) for r in c.call("ListRanges").ranges]
    assert rid not in ids


# ---------------------------------------------------------------------------------------- a cudart program
def test_cuda_sample_binds_its_kernels(daemon, cuda_build, tmp_path):
    """Built through hbfcc with CMake, the program's record names its three kernels (a template among them);
    bind_all finds each host stub at the very address the program sees (symbol table + load bias)."""
    rec = json.loads((cuda_build / "capi_sample.hbfcc.json").read_text())
    assert rec["schema"] == capi.PROGRAM_SCHEMA and rec["admitted"] is True and len(rec["kernels"]) == 3
    summ = tmp_path / "dry.json"
    cp = _run([cuda_build / "capi_sample", "--dry-run", "--socket", daemon.socket, "--summary", summ], tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "bind modules=0 kernels=3 admitted=3 not_admitted=0" in cp.stdout
    seen = {m.group(1): int(m.group(2), 16) for m in re.finditer(r"^stub (\S+) (0x[0-9a-f]+)$", cp.stdout, re.M)}
    bound = json.loads(summ.read_text())["bound_kernels"]
    assert len(seen) == 3 and {k: int(v["stub"], 16) for k, v in bound.items()} == seen
    assert all(v["binary"] == str((cuda_build / "capi_sample").resolve()) for v in bound.values())


def _record_with(cuda_build: Path, tmp_path: Path, edit) -> Path:
    rec = json.loads((cuda_build / "capi_sample.hbfcc.json").read_text())
    edit(rec)
    p = tmp_path / "edited.hbfcc.json"
    p.write_text(json.dumps(rec))
    return p


def test_not_admitted_kernel_is_refused_at_bind(daemon, cuda_build, tmp_path):
    def refuse(rec):
        k = next(k for k in rec["kernels"] if k["name"].startswith("_Z5saxpy"))
        k["admitted"], k["reason"] = False, "test: one refused operation"
    art = _record_with(cuda_build, tmp_path, refuse)
    cp = _run([cuda_build / "capi_sample", "--dry-run", "--socket", daemon.socket, "--artifacts", art,
               "--summary", tmp_path / "s.json"], tmp_path)
    assert cp.returncode == 5 and f"hbfsim error {int(ErrorCode.LAUNCH_REFUSED)}" in cp.stderr
    assert "_Z5saxpyfPKfPfi" in cp.stderr and "test: one refused operation" in cp.stderr
    cp = _run([cuda_build / "capi_sample", "--dry-run", "--allow-unmodeled", "--socket", daemon.socket,
               "--artifacts", art, "--summary", tmp_path / "s.json"], tmp_path)
    assert cp.returncode == 0 and "admitted=2 not_admitted=1" in cp.stdout
    assert "non-admitted kernels allowed" in cp.stderr          # one logged line, no traceback
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [e["kernel"] for e in doc["counters"]["unmodeled_launches"]] == ["_Z5saxpyfPKfPfi"]


def test_kernel_without_host_stub_is_an_error(daemon, cuda_build, tmp_path):
    art = _record_with(cuda_build, tmp_path, lambda rec: rec["kernels"].append(
        {"name": "_Z13not_in_binaryPf", "admitted": True, "reason": ""}))
    cp = _run([cuda_build / "capi_sample", "--dry-run", "--socket", daemon.socket, "--artifacts", art], tmp_path)
    assert cp.returncode == 5 and f"hbfsim error {int(ErrorCode.UNSUPPORTED)}" in cp.stderr
    assert "_Z13not_in_binaryPf" in cp.stderr and "symbol tables" in cp.stderr


def test_program_record_of_a_plain_build(tmp_path):
    """No object record (a plain nvcc build): nothing written, and a stale record of ours removed; an hbfcc
    link record newer than the program is kept."""
    prog = tmp_path / "app"
    prog.write_bytes(b"\x7fELF")
    obj = tmp_path / "a.o"
    obj.write_bytes(b"")
    assert capi.write_program_record(str(prog), [str(obj)]) == (None, 0)
    Path(str(obj) + ".hbfcc.json").write_text(json.dumps(
        {"schema": "hbfcc.admission.nvcc", "kernels": [{"name": "k", "admitted": True, "reason": ""}], "modules": []}))
    path, n = capi.write_program_record(str(prog), [str(obj)])
    assert n == 1 and json.loads(path.read_text())["schema"] == capi.PROGRAM_SCHEMA
    os.unlink(str(obj) + ".hbfcc.json")
    assert capi.write_program_record(str(prog), [str(obj)]) == (None, 0) and not path.exists()
    path.write_text(json.dumps({"schema": "hbfcc.admission.link", "kernels": [{"name": "k"}, {"name": "j"}]}))
    assert capi.write_program_record(str(prog), [str(obj)]) == (path, 2)


def test_daemon_lost_mid_session(cbuild, tmp_path):
    """hbfd stops while a C program is attached: its next calls return the daemon's code and a message, detach
    still frees the session, the program ends normally."""
    d = start_daemon("nominal", workdir=tmp_path / "hbfd", env={"HBFD_THERMAL": "none"}, pythonpath=[ROOT],
                     timeout_s=90.0)
    try:
        p = subprocess.Popen([str(cbuild / "capi_c"), "lost", str(d.socket), str(tmp_path / "s.json")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path, env=_env())
        assert p.stdout.readline().startswith("version")
        assert p.stdout.readline().startswith("attach rc=0")
        assert p.stdout.readline().strip() == "waiting"
    finally:
        d.stop(timeout_s=20.0)
    out, err = p.communicate("go\n", timeout=120)
    assert p.returncode == 0 and "Traceback" not in err, err
    st = _steps(out)
    lost = {int(ErrorCode.DAEMON_UNAVAILABLE), int(ErrorCode.DAEMON_LOST), int(ErrorCode.SHUTTING_DOWN)}
    assert st["register"][0] in lost and st["register"][1], st
    assert st["summary"][0] in lost, st
    assert "detach" in st and not (tmp_path / "s.json").exists()


def test_module_document_of_the_real_record(cuda_build):
    """The compiled module bind_all binds a loaded module with: a counting image (sm_90a cubin or compute_90a
    PTX) holding all its kernels, whose .entry order gives the counter slots; a name set no module holds is
    an error naming it."""
    rec = json.loads((cuda_build / "capi_sample.hbfcc.json").read_text())
    names = {k["name"] for k in rec["kernels"]}
    m = capi.module_document([rec], names)
    assert {k["name"] for k in m["kernels"]} == names and not m["input"].get("below_helper_target")
    assert sorted(int(k["kernel_index"]) for k in m["kernels"]) == list(range(3))
    with pytest.raises(capi.HbfError) as ei:
        capi.module_document([rec], names | {"_Z5otherv"})
    assert ei.value.code == ErrorCode.UNSUPPORTED and "_Z5otherv" in str(ei.value.fields)


def test_program_without_a_record(daemon, cuda_build, tmp_path):
    """A program with no record beside it (a plain build, or a copy): bind_all says which file it looked for
    and how to get one."""
    app = tmp_path / "copy_of_sample"
    shutil.copy2(cuda_build / "capi_sample", app)
    cp = _run([app, "--dry-run", "--socket", daemon.socket], tmp_path)
    assert cp.returncode == 5 and f"hbfsim error {int(ErrorCode.INVALID_ARGUMENT)}" in cp.stderr
    assert f"{app}.hbfcc.json" in cp.stderr and "hbfsim_record_program" in cp.stderr


def test_synchronize_reports_a_recorded_device_failure(daemon, cbuild, tmp_path):
    """A failure word in the control region (what the helpers' hb_fail writes on the GPU) comes back from
    hbfsim_synchronize as its code with status, site, kernel and site index, every time; hbfd gets one report."""
    from runtime_cuda import attach
    p = subprocess.Popen([str(cbuild / "capi_c"), "failure", str(daemon.socket), str(tmp_path / "s.json")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tmp_path, env=_env())
    site = (3 << 16) | 5
    with attach(str(daemon.socket), cuda=False) as other:   # the same region, mapped here
        h = other.ctl.ctl.header
        try:
            seen = [p.stdout.readline().strip() for _ in range(4)]
            assert seen[1:] == ["attach rc=0 msg=", "synchronize_before rc=0 msg=", "waiting"], seen
            h.device_failure = (C.HBF_ST_DAEMON_LOST << 32) | site
            out, err = p.communicate("go\n", timeout=120)
        finally:
            h.device_failure = 0
    assert p.returncode == 0 and "Traceback" not in err, err
    st = _steps(out)
    assert st["synchronize"][0] == ErrorCode.DAEMON_LOST and "DAEMON_LOST" in st["synchronize"][1]
    assert st["synchronize_null"][0] == ErrorCode.DAEMON_LOST
    fails = re.findall(r"^failure status=(\d+) name=(\w+) site=(\d+) kernel=(\d+) site_index=(\d+)$", out, re.M)
    assert fails == [(str(C.HBF_ST_DAEMON_LOST), "DAEMON_LOST", str(site), "3", "5")] * 2
    reps = [r for r in json.loads((tmp_path / "s.json").read_text())["daemon"]["reports"]
            if r.get("kind") == "device_failure"]
    assert len(reps) == 1 and reps[0]["data"]["site"] == site      # reported once, returned every time
