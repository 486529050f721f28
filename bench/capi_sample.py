#!/usr/bin/env python3
"""A cuda-samples-style program (cudart, ``<<<>>>``) modeled end to end through the C/C++ host API (issue 18
item 1; docs/runtime.md "C/C++ host API").

The program is tests/capi/cuda_sample (vector_add, a grid-stride saxpy, a templated shared-memory block sum;
its inputs ``a`` and ``b`` registered as timing ranges). It is built twice with CMake and find_package(hbfsim):
plain nvcc (the reference) and hbfcc (CUDACXX=hbfcc, ``hbfsim_record_program``). Then, on the GPU:

* plain build, ``--native``: the reference output and time;
* hbfcc build, ``--native`` (no session: every module unbound, the native version runs): output identical;
* hbfcc build, modeled: a real hbfd, ``hbfsim::Session``, ``bind_all`` (every kernel bound without touching a
  module global), ranges registered, the kernels run, ``synchronize`` (device failures reported), counters,
  the summary written; the output must be identical to the plain build's (timing never changes values).

Each run is repeated ``--reps`` times (medians and spreads of the program's own cudaEvent time). The program runs
with ``CUDA_MODULE_LOADING=EAGER``: its timed region holds each kernel's first launch, and with lazy loading that
launch loads the module (on 2026-12-05 the hbfcc build's ~30x larger cubin made its native run 1.19 ms against the
plain build's 0.20 ms at n = 64 Ki: a load time, not a kernel cost). Writes
``bench/results/capi_sample.json`` and keeps the last modeled run's summary beside it.

    python3 bench/capi_sample.py                      # GPU (an H200): builds, runs, checks, writes the JSON
    python3 bench/capi_sample.py --build-only         # CPU: configure + build both variants, check the record
    python3 bench/capi_sample.py --jit --profile ocp-sg1 --n 262144 --reps 3 --out $OUT/capi_jit.json
        # GPU: the hbfcc variant built with HBFCC_JIT=1 (PTX only); its first load timed on an empty driver cache
    python3 bench/capi_sample.py --hunt 8 --run-timeout 20 --work /tmp/capiw --out $OUT/capi/hunt.json
        # GPU: the modeled run 8 times over --hunt-sizes; one that does not end is looked at (daemon status twice,
        # summary, log, program output) before it is killed (2026-12-05: found the reference ring's deadlock)
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

SAMPLE = REPO / "tests" / "capi" / "cuda_sample"
COUNTERS_RE = re.compile(r"^counters (.*)$", re.M)
BIND_RE = re.compile(r"^bind modules=(\d+) kernels=(\d+) admitted=(\d+) not_admitted=(\d+)$", re.M)
ELAPSED_RE = re.compile(r"^elapsed_ms=([0-9.]+) sum=(\S+)$", re.M)


def _env(**kw: str) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), e.get("PATH", "")])
    e.update(kw)
    return e


def _run(argv, *, env=None, cwd=None, timeout=900) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env or _env(), cwd=cwd,
                            timeout=timeout)
    except subprocess.TimeoutExpired as e:     # what it printed so far says where it was
        def tail(b):
            return (b.decode(errors="replace") if isinstance(b, bytes) else (b or ""))[-3000:]
        raise SystemExit(f"did not end in {timeout:.0f} s: {' '.join(map(str, argv))}\nstdout:\n{tail(e.stdout)}\n"
                         f"stderr:\n{tail(e.stderr)}") from None
    if cp.returncode != 0:
        raise SystemExit(f"failed ({cp.returncode}): {' '.join(map(str, argv))}\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}")
    return cp


def _hbfcc(work: Path) -> str:
    """The hbfcc executable: the installed entry point beside this interpreter or on PATH; where the package is not
    installed (a checkout on the GPU machine), a wrapper running ``python -m hbfcc.cli`` with this interpreter."""
    for c in (Path(sys.executable).parent / "hbfcc", shutil.which("hbfcc")):
        if c and Path(c).exists():
            return str(c)
    from hbfcc.toolchain import cli_wrapper  # noqa: PLC0415
    return str(cli_wrapper(work / "bin" / "hbfcc"))


def build(kind: str, work: Path, arch: str, reuse: bool = False, jit: bool = False) -> tuple[Path, float]:
    """Configure and build the sample with CUDACXX = nvcc (plain) or hbfcc; (program, seconds). With ``reuse`` a
    program already built in ``work`` is kept (0 seconds). ``jit``: the hbfcc build with HBFCC_JIT=1 (PTX only, in
    its own folder ``hbfcc_jit``); else HBFCC_JIT is left out of the build's environment."""
    from runtime_cuda.capi import cmake_dir  # noqa: PLC0415
    b = work / (kind + ("_jit" if jit else ""))
    if reuse and (b / "capi_sample").exists():
        return b / "capi_sample", 0.0
    shutil.rmtree(b, ignore_errors=True)
    cxx = shutil.which("nvcc") if kind == "plain" else _hbfcc(work)
    if not cxx or not Path(cxx).exists():
        raise SystemExit(f"no CUDA compiler for the {kind} build ({cxx})")
    env = _env(CUDACXX=cxx)
    env.pop("HBFCC_JIT", None)
    if jit:
        env["HBFCC_JIT"] = "1"
    t = time.monotonic()
    _run(["cmake", "-S", SAMPLE, "-B", b, f"-Dhbfsim_DIR={cmake_dir()}", f"-DPython3_EXECUTABLE={sys.executable}",
          f"-DCMAKE_CUDA_ARCHITECTURES={arch}", "-DCMAKE_BUILD_TYPE=Release"], env=env)
    _run(["cmake", "--build", b, "-j4"], env=env)
    return b / "capi_sample", time.monotonic() - t


def jit_record(b: Path) -> dict:
    """What the objects' records (``<obj>.hbfcc.json`` under the build folder ``b``) say of HBFCC_JIT, and the
    program's embedded images (``cuobjdump --list-elf --list-ptx`` when it is on PATH or beside nvcc)."""
    objs = sorted(b.rglob("*.o.hbfcc.json"))
    recs = [json.loads(p.read_text()) for p in objs]
    out: dict = {"objects": len(recs), "jit": [r.get("jit") for r in recs],
                 "applied": bool(recs) and all((r.get("jit") or {}).get("applied") for r in recs),
                 "admitted": bool(recs) and all(r["admitted"] for r in recs)}
    nvcc = shutil.which("nvcc")
    cuobjdump = shutil.which("cuobjdump") or (str(Path(os.path.realpath(nvcc)).with_name("cuobjdump")) if nvcc else None)
    prog = b / "capi_sample"
    if cuobjdump and Path(cuobjdump).exists() and prog.exists():
        cp = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", str(prog)], capture_output=True, text=True)
        lines = (cp.stdout + cp.stderr).splitlines()
        out["images"] = {"elf": sum("ELF file" in ln for ln in lines), "ptx": sum("PTX file" in ln for ln in lines),
                         "listing": lines[:20]}
    return out


def first_load(a: argparse.Namespace, plain: Path, hb: Path, work: Path, cache: Path) -> dict:
    """HBFCC_JIT: the program's process wall time with an EMPTY driver compute cache (``CUDA_CACHE_PATH`` =
    ``cache``, fresh: the driver JIT-compiles the rewritten PTX at the module load, CUDA_MODULE_LOADING=EAGER) and
    again with it filled (the cached machine code), native runs; the plain build's run beside them (SASS, no JIT)."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    env = _env(CUDA_MODULE_LOADING="EAGER", CUDA_CACHE_PATH=str(cache))
    env.pop("CUDA_CACHE_DISABLE", None)
    args = ["--n", str(a.n), "--iters", str(a.iters)]
    out: dict = {"cuda_cache_path": str(cache)}
    for name, prog in (("first_load", hb), ("cached", hb), ("cached_again", hb), ("plain", plain)):
        t = time.monotonic_ns()
        cp = _run([prog, "--native", "--out", work / f"jit_{name}.bin", *args], env=env, timeout=a.run_timeout)
        out[f"{name}_wall_ns"] = time.monotonic_ns() - t
        out[f"{name}_elapsed_ms"] = float(ELAPSED_RE.search(cp.stdout).group(1))
    out["jit_cost_ns"] = out["first_load_wall_ns"] - out["cached_wall_ns"]
    out["cache_bytes"] = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    ref = (work / "jit_plain.bin").read_bytes()
    out["identical"] = all((work / f"jit_{n}.bin").read_bytes() == ref for n in ("first_load", "cached"))
    return out


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs), "samples": xs}


def _counters(text: str) -> dict:
    m = COUNTERS_RE.search(text)
    return {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())} if m else {}


def run_gpu(a: argparse.Namespace, plain: Path, hb: Path, work: Path) -> dict:
    from hbfd.runner import start_daemon  # noqa: PLC0415
    args = ["--n", str(a.n), "--iters", str(a.iters)]
    out: dict = {"runs": {}, "cuda_module_loading": "EAGER"}
    run_env = _env(CUDA_MODULE_LOADING="EAGER")
    if a.jit:       # the first load (JIT) measured on an empty compute cache; the runs below then load from it
        cache = work / "cuda_cache_jit"
        out["jit_load"] = first_load(a, plain, hb, work, cache)
        run_env["CUDA_CACHE_PATH"] = str(cache)
    ref = work / "plain.bin"
    times = {"plain_native": [], "hbfcc_native": [], "hbfcc_modeled": []}
    for _ in range(a.reps):
        cp = _run([plain, "--native", "--out", ref, *args], env=run_env, timeout=a.run_timeout)
        times["plain_native"].append(float(ELAPSED_RE.search(cp.stdout).group(1)))
    nat = work / "hbfcc_native.bin"
    for _ in range(a.reps):
        cp = _run([hb, "--native", "--out", nat, *args], env=run_env, timeout=a.run_timeout)
        times["hbfcc_native"].append(float(ELAPSED_RE.search(cp.stdout).group(1)))
    counters, binds = [], []
    env = {} if a.thermal == "profile" else {"HBFD_THERMAL": a.thermal}
    with start_daemon(a.profile, workdir=work / "hbfd", env=env, pythonpath=[REPO], timeout_s=300.0) as d:
        for i in range(a.reps):
            mod = work / f"modeled{i}.bin"
            summ = work / f"summary{i}.json"
            cp = _run([hb, "--socket", d.socket, "--summary", summ, "--out", mod, *args], env=run_env,
                      timeout=a.run_timeout)
            times["hbfcc_modeled"].append(float(ELAPSED_RE.search(cp.stdout).group(1)))
            binds.append(tuple(int(x) for x in BIND_RE.search(cp.stdout).groups()))
            counters.append(_counters(cp.stdout))
            out.setdefault("identical", []).append(mod.read_bytes() == ref.read_bytes())
            out["stderr_tail"] = cp.stderr[-2000:]
        last_summary = json.loads(summ.read_text())
    out["identical_native"] = nat.read_bytes() == ref.read_bytes()
    out["identical_modeled"] = all(out.pop("identical"))
    out["bind"] = [dict(zip(("modules", "kernels", "admitted", "not_admitted"), b)) for b in binds]
    out["times_ms"] = {k: _spread(v) for k, v in times.items()}
    out["ratio_modeled_vs_plain"] = statistics.median(times["hbfcc_modeled"]) / statistics.median(
        times["plain_native"])
    out["counters"] = counters
    out["counters_median"] = {k: statistics.median(c[k] for c in counters) for k in counters[0]} if counters else {}
    keep = Path(a.out).with_name("capi_sample.summary.json")
    atomic_write_json(keep, last_summary, indent=1, end="\n")
    out["summary"] = str(keep.relative_to(REPO)) if keep.is_relative_to(REPO) else str(keep)
    out["ok"] = bool(out["identical_native"] and out["identical_modeled"] and counters
                     and all(c.get("requests", 0) > 0 for c in counters)
                     and all(b[0] >= 1 and b[2] == 3 for b in binds)
                     and (not a.jit or out["jit_load"]["identical"]))
    return out


def _hbfctl(sock: Path, *cmd: str) -> object:
    """``hbfctl --json CMD`` against the daemon at ``sock``: its JSON, or what went wrong (never raises)."""
    try:
        cp = subprocess.run([sys.executable, "-m", "hbfd.ctl_cli", "--socket", str(sock), "--json", *cmd],
                            capture_output=True, text=True, env=_env(), timeout=30)
        return json.loads(cp.stdout) if cp.returncode == 0 else {"rc": cp.returncode, "stderr": cp.stderr[-1500:]}
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def hunt(a: argparse.Namespace, hb: Path, work: Path) -> dict:
    """``--hunt R``: the modeled run R times over --hunt-sizes (cycled), each with --run-timeout; a run that does
    not end is looked at before it is killed -- the daemon's ``status`` twice, 2 s apart (does anything still
    move?), its ``summary`` so far, its log tail and the program's output so far -- and the daemon is restarted
    for the next run. Written after every run (a cut call keeps what it saw)."""
    from hbfd.runner import start_daemon  # noqa: PLC0415
    sizes = a.hunt_sizes                       # parsed and checked by main()
    env = {} if a.thermal == "profile" else {"HBFD_THERMAL": a.thermal}
    run_env = _env(CUDA_MODULE_LOADING="EAGER")
    out: dict = {"runs": [], "sizes": sizes, "run_timeout_s": a.run_timeout, "profile": a.profile,
                 "card": _card(), "command": " ".join(["python3", *sys.argv])}
    d = None
    try:
        for i in range(a.hunt):
            n = sizes[i % len(sizes)]
            if d is None:
                d = start_daemon(a.profile, workdir=work / f"hbfd{i}", env=env, pythonpath=[REPO], timeout_s=300.0)
            argv = [str(hb), "--socket", str(d.socket), "--summary", str(work / f"hunt{i}.json"), "--out",
                    str(work / f"hunt{i}.bin"), "--n", str(n), "--iters", str(a.iters)]
            t0 = time.monotonic()
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env)
            rec: dict = {"i": i, "n": n}
            try:
                so, se = p.communicate(timeout=a.run_timeout)
                rec.update(rc=p.returncode, wall_s=round(time.monotonic() - t0, 3), counters=_counters(so))
                m = ELAPSED_RE.search(so)
                rec["elapsed_ms"] = float(m.group(1)) if m else None
                if p.returncode:
                    rec["stderr_tail"] = se[-1500:]
            except subprocess.TimeoutExpired:
                rec.update(rc=None, hung=True, wall_s=round(time.monotonic() - t0, 3))
                rec["status"] = [_hbfctl(d.socket, "status")]
                time.sleep(2.0)
                rec["status"].append(_hbfctl(d.socket, "status"))
                rec["summary_so_far"] = _hbfctl(d.socket, "summary")
                rec["daemon_log_tail"] = d.log_tail(4000)
                p.kill()
                so, se = p.communicate()
                rec["stdout_tail"], rec["stderr_tail"] = so[-3000:], se[-3000:]
                d.stop(timeout_s=10.0)
                d = None
            logging.info("hunt %d n=%d: %s", i, n, "HUNG" if rec.get("hung") else f"rc {rec['rc']} "
                         f"{rec['wall_s']} s")
            out["runs"].append(rec)
            out["hung"] = sum(bool(r.get("hung")) for r in out["runs"])
            atomic_write_json(a.out, out, indent=1, end="\n", default=str)
    finally:
        if d is not None:
            d.stop(timeout_s=10.0)
    return out


def _card() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "CPU (no GPU)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "capi_sample.json"), help="result JSON")
    ap.add_argument("--n", type=int, default=1 << 22, help="elements per array (default 4Mi floats)")
    ap.add_argument("--iters", type=int, default=3, help="vector_add + saxpy rounds per run")
    ap.add_argument("--reps", type=int, default=5, help="runs of each variant (medians and spreads)")
    ap.add_argument("--arch", default="90a", help="CMAKE_CUDA_ARCHITECTURES (default 90a: the H200)")
    ap.add_argument("--profile", default="nominal", help="hbfd profile (a bundled name or a path)")
    ap.add_argument("--thermal", default="none", help="HBFD_THERMAL for the run ('profile': the profile's model)")
    ap.add_argument("--run-timeout", type=float, default=300.0,
                    help="seconds one run of the program may take (then its output so far is reported)")
    ap.add_argument("--build-only", action="store_true", help="configure + build both variants (CPU), no run")
    ap.add_argument("--work", default=None, help="build/run directory (default: a temporary one, removed)")
    ap.add_argument("--reuse-build", action="store_true",
                    help="keep the builds already in --work (configure + build only what is missing)")
    ap.add_argument("--hunt", type=int, default=0, metavar="R",
                    help="only the modeled run, R times over --hunt-sizes, each looked at if it does not end")
    ap.add_argument("--hunt-sizes", default="262144,1048576,4194304", help="--n of the hunt's runs, cycled")
    ap.add_argument("--jit", action="store_true",
                    help="build the hbfcc variant with HBFCC_JIT=1 (PTX only: the driver JIT-compiles the rewritten "
                         "PTX at the first load); on the GPU the first load is timed on an empty CUDA_CACHE_PATH")
    a = ap.parse_args(argv)
    if a.n <= 0 or a.iters <= 0 or a.reps <= 0:
        ap.error("--n, --iters and --reps must be > 0")
    if a.hunt < 0 or a.run_timeout <= 0:
        ap.error("--hunt must be >= 0 and --run-timeout > 0")
    try:
        a.hunt_sizes = [int(x) for x in a.hunt_sizes.split(",")]
    except ValueError:
        ap.error(f"--hunt-sizes takes comma-separated element counts, not {a.hunt_sizes!r}")
    if not a.hunt_sizes or min(a.hunt_sizes) <= 0:
        ap.error("--hunt-sizes: every size must be > 0")
    if shutil.which("cmake") is None:
        ap.error("cmake is not installed")
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="capi_sample."))
    work.mkdir(parents=True, exist_ok=True)
    try:
        plain, t_plain = build("plain", work, a.arch, reuse=a.reuse_build)
        hb, t_hb = build("hbfcc", work, a.arch, reuse=a.reuse_build, jit=a.jit)
        if a.hunt:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
            res = hunt(a, hb, work)
            print(json.dumps({k: res[k] for k in ("hung", "sizes")} | {"runs": [
                {k: r.get(k) for k in ("i", "n", "rc", "wall_s", "elapsed_ms", "hung")} for r in res["runs"]]},
                indent=1))
            return 0
        rec = json.loads(Path(str(hb) + ".hbfcc.json").read_text())
        res = {"what": "cuda-samples-style program (cudart, <<<>>>) modeled through the C/C++ host API",
               "date": time.strftime("%Y-%m-%d"), "card": _card(), "command": " ".join(["python3", *sys.argv]),
               "n": a.n, "iters": a.iters, "reps": a.reps, "arch": a.arch, "profile": a.profile,
               "build_s": {"plain": round(t_plain, 2), "hbfcc": round(t_hb, 2)},
               "record": {"kernels": [k["name"] for k in rec["kernels"]], "admitted": rec["admitted"]},
               "no_plain_record": not Path(str(plain) + ".hbfcc.json").exists()}
        if a.jit:
            res["jit"] = jit_record(hb.parent)
        if a.build_only:
            print(json.dumps(res, indent=1))
            return 0 if rec["admitted"] and res["no_plain_record"] and (not a.jit or (
                res["jit"]["applied"] and res["jit"].get("images", {}).get("elf", 0) == 0)) else 1
        res.update(run_gpu(a, plain, hb, work))
        atomic_write_json(a.out, res, indent=1, end="\n")
        print(json.dumps({k: res[k] for k in ("ok", "identical_native", "identical_modeled", "times_ms",
                                              "counters_median", "bind", "jit", "jit_load") if k in res},
                         indent=1, default=str))
        return 0 if res["ok"] else 1
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
