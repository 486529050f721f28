#!/usr/bin/env python3
"""Triton kernels through the runtime on the GPU (issue 4): TRITON_PTXAS_PATH=hbfcc-ptxas + Session hooks.

    PYTHONUNBUFFERED=1 python3 bench/runtime_triton.py [--out DIR]

Each part runs in its own process with its own hbfd (python3 -m hbfd.cli, private socket, thermal none,
refresh none, fixed-latency engine) and runtime_cuda.attach() + Session.install_triton_hooks():

* ``fixed`` / ``curve`` (profile nominal with timing_model.timing_source = fixed / a 3-point curve):
  Triton kernels (vector add, softmax, cp.async matmul) are compiled twice in one process: ``*_plain``
  with TRITON_PTXAS_PATH=<CUDA's ptxas> and ``*_hbf`` with TRITON_PTXAS_PATH=hbfcc-ptxas (same real ptxas
  underneath; the two copies differ only in their names, so Triton's caches keep them apart). The plain
  ones run first on the inputs (nothing registered), then a timing range is registered over each
  kernel's first input tensor and the hbf ones run on the same inputs. Checked: outputs bit-identical;
  every hbf module bound by the load hook (__hb_state = the session's device block, artifact found by
  the original PTX's sha256, admitted); per-kernel counters: loads of the registered tensor counted
  (requests, bytes, modeled_ns), stores and the unregistered tensors not (a second launch on
  unregistered clones adds nothing); modeled_ns = requests x the source's per-request time (fixed:
  fixed read_ns; curve: the curve at one page; every request is one page group of one warp).
  Gate (fixed only): ``prio_hbf`` (an ``applypriority.global`` in inline asm: hbfcc refuses it, the
  kernel is instrumented but NOT admitted) and ``copy_foreign`` (built with the plain ptxas: no
  artifact, no __hb_state) are refused with LaunchRefused when an argument reaches the registered
  tensor (output untouched, reason in hbfd's summary), and run when they do not.
* ``unmodeled``: the same with attach(allow_unmodeled=True): prio_hbf on the registered tensor runs,
  computes the right output, and the summary (reports + attaches) says an unmodeled launch happened.

Writes <out>/runtime_triton.json; prints a summary. Exit 0 when every check passed.
"""
from __future__ import annotations
from hbfcommon.profile import PROFILE_DIR

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
T0 = time.time()

from hbfcc.toolchain import cli_wrapper  # noqa: E402
from hbfd.runner import DaemonProcess, start_daemon  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------
# shared helpers (also used by bench/runtime_thermal_q.py and bench/triton_matmul_overhead.py)
# ------------------------------------------------------------------------------------------------
def real_ptxas() -> str:
    p = shutil.which("ptxas") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("nvcc") or "/x")), "ptxas")
    if not os.path.isfile(p):
        raise SystemExit("no ptxas found (PATH or beside nvcc)")
    return p


def toolchain_env(work: Path) -> dict:
    """Environment for hbfcc-ptxas (an executable wrapper in work/bin) and a fresh Triton cache.
    HBFCC_HELPER_PTX is left unset: hbfcc picks the helper build as it does for users."""
    work.mkdir(parents=True, exist_ok=True)
    wrap = cli_wrapper(work / "bin" / "hbfcc-ptxas", "ptxas")
    return {"HBFCC_ARTIFACT_DIR": str(work / "artifacts"), "HBFCC_CACHE_DIR": str(work / "hbfcc-cache"),
            "HBFCC_REAL_PTXAS": real_ptxas(), "TRITON_CACHE_DIR": str(work / "triton-cache"),
            "HBF_BENCH_HBFCC_PTXAS": str(wrap), "HBF_BENCH_REAL_PTXAS": real_ptxas(),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def derived_profile(out: Path, source: str, curve: list | None = None) -> Path:
    """profiles/nominal.json with timing_model.timing_source = source (and a curve when given)."""
    d = json.loads((PROFILE_DIR / "nominal.json").read_text())
    tm = d["timing_model"]
    tm["timing_source"] = source
    if curve is not None:
        tm["curve"] = {"points": {"value": curve, "provenance": "assumed", "source": "bench test curve"},
                       "write_ns": {"value": 600_000, "provenance": "assumed", "source": "bench test curve"}}
    d["name"] = f"nominal-{source}"
    out.write_text(json.dumps(d, indent=1))
    return out


HBFD_BENCH_ENV = {"HBFD_THERMAL": "none", "HBFD_REFRESH": "none", "HBFD_ENGINE": "fixed"}


def start_hbfd(tmp: Path, profile: str | Path = "nominal", extra_env: dict | None = None) -> DaemonProcess:
    """The real daemon on a private socket, ready (hbfd.runner): thermal none, refresh none, fixed engine."""
    return start_daemon(profile, workdir=tmp, summary=tmp / "summary.json", cwd=ROOT, timeout_s=60.0,
                        env={**HBFD_BENCH_ENV, **(extra_env or {})})


def shutdown_summary(hb: DaemonProcess) -> dict:
    """Shutdown RPC, wait for hbfd (ordered stop if that fails), return the summary it wrote ({} when none)."""
    rc = hb.shutdown("bench done")
    if rc != 0:
        log(f"hbfd exit {rc} at shutdown")
    return json.loads(hb.summary.read_text()) if hb.summary.exists() else {}


def run_child(script: str, which: str, env: dict, timeout: float, partial: Path | None = None) -> dict:
    t = time.time()
    try:
        r = subprocess.run([sys.executable, script, "--child", which], capture_output=True, text=True,
                           timeout=timeout, env=dict(os.environ, **env, PYTHONUNBUFFERED="1"))
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    last = [ln for ln in out.splitlines() if ln.startswith("CHILD-JSON ")]
    res = json.loads(last[-1][len("CHILD-JSON "):]) if last else {"error": f"child {which} rc={rc}",
                                                                     "stdout": out[-2000:], "stderr": err[-4000:]}
    if not last and partial is not None and partial.exists():   # what the child recorded before it died
        res["partial"] = json.loads(partial.read_text())
    res["child_seconds"] = round(time.time() - t, 1)
    res["child_rc"] = rc
    if rc not in (0,):
        res.setdefault("stderr_tail", err[-2500:])
    return res


def use_ptxas(which: str) -> None:
    """Point Triton at the plain or the hbfcc ptxas for the NEXT compile (knobs are read per compile)."""
    os.environ["TRITON_PTXAS_PATH"] = os.environ["HBF_BENCH_HBFCC_PTXAS" if which == "hbf" else "HBF_BENCH_REAL_PTXAS"]


def module_state(module: int, name: str = "__hb_state") -> int | None:
    """The value of a module's __hb_state, or of another u64 module global (``name``: abi.DETACHED_GLOBAL, the attach
    switch in its constant bank); None: the module has no such global."""
    import ctypes

    from runtime_cuda import cudrv
    g = cudrv.module_global(int(module), name)
    if g is None:
        return None
    v = ctypes.c_uint64(0)
    cudrv.dtoh(v, g[0], 8)
    return int(v.value)


# ------------------------------------------------------------------------------------------------
# the kernels (workloads/triton_kernels.py): each compiled twice, *_plain with the plain ptxas and
# *_hbf through hbfcc-ptxas; prio_hbf (an applypriority.global: instrumented, not admitted) and
# copy_foreign (plain ptxas: no artifact, no __hb_state) for the launch gate
KERNELS = {"add_plain": "add", "softmax_plain": "softmax", "matmul_plain": "matmul",
           "add_hbf": "add", "softmax_hbf": "softmax", "matmul_hbf": "matmul",
           "prio_hbf": "prio", "copy_foreign": "copy"}


def kernels_module(work: Path):
    from workloads import triton_kernels
    return triton_kernels.load(work / "tk_runtime_triton.py", KERNELS)


def child(which: str) -> dict:
    import torch
    import triton

    import runtime_cuda
    from hbfcommon.errors import HbfError
    from runtime_cuda.session import LaunchRefused, triton_artifact
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    tmp = Path(tempfile.mkdtemp(prefix=f"hbf-triton-{which}-"))
    curve = [[1, 30_000], [16, 160_000], [256, 2_000_000]]
    prof = derived_profile(tmp / "profile.json", "curve" if which == "curve" else "fixed",
                           curve if which == "curve" else None)
    hb = start_hbfd(tmp, prof)
    res: dict = {"profile": json.loads(prof.read_text())["timing_model"]}
    checks: dict = {}
    partial = work / f"{which}.partial.json"

    def save(stage: str) -> None:   # progress, so a child killed at its timeout still reports
        res["stage"] = stage
        partial.write_text(json.dumps({**res, "checks": checks}, default=str))
    try:
        s = runtime_cuda.attach(socket=str(hb.socket), allow_unmodeled=(which == "unmodeled"))
        s.install_triton_hooks()
        media = s.state.media
        res["media"] = {"timing_source": int(media.timing_source), "fixed_read_ns": int(media.fixed_read_ns),
                        "curve_points": int(media.curve_points), "read_granularity": int(media.read_granularity),
                        "page_bytes": int(media.page_bytes)}
        per_req = int(media.fixed_read_ns) if which != "curve" else -(-curve[0][1] * 1 // curve[0][0])
        K = kernels_module(work)
        torch.manual_seed(0)
        dev = "cuda"
        n = 1 << 20   # small: every modeled request costs the issue path (see RESULTS)
        x, y = torch.rand(n, device=dev), torch.rand(n, device=dev)
        sm = torch.randn(256, 1000, device=dev)
        M = N = Kd = 512
        A = torch.randn(M, Kd, device=dev, dtype=torch.float16)
        Bm = torch.randn(Kd, N, device=dev, dtype=torch.float16)
        launched: dict = {}

        def run_set(sfx: str):
            o_add = torch.full_like(x, -1.0)
            launched["add_" + sfx] = getattr(K, "add_" + sfx)[(triton.cdiv(n, 1024),)](x, y, o_add, n, B=1024)
            o_sm = torch.full_like(sm, -1.0)
            launched["softmax_" + sfx] = getattr(K, "softmax_" + sfx)[(sm.shape[0],)](sm, o_sm, 1000, sm.stride(0), B=1024)
            C = torch.full((M, N), -1.0, device=dev, dtype=torch.float16)
            launched["matmul_" + sfx] = getattr(K, "matmul_" + sfx)[(M // 64, N // 64)](
                A, Bm, C, M, N, Kd, A.stride(0), A.stride(1), Bm.stride(0), Bm.stride(1), C.stride(0), C.stride(1),
                BM=64, BN=64, BK=32, num_stages=3, num_warps=4)
            torch.cuda.synchronize()
            return {"add": o_add, "softmax": o_sm, "matmul": C}

        use_ptxas("plain")
        plain = run_set("plain")
        log(f"{which}: plain set done")
        save("plain set done")
        ranges = {"add": s.register_timing_range(x.data_ptr(), x.numel() * x.element_size(), label="add.x"),
                  "softmax": s.register_timing_range(sm.data_ptr(), sm.numel() * sm.element_size(), label="softmax.x"),
                  "matmul": s.register_timing_range(A.data_ptr(), A.numel() * A.element_size(), label="matmul.A")}
        res["ranges"] = {k: {"range_id": int(r.range_id), "base": hex(r.base), "length": int(r.length)}
                         for k, r in ranges.items()}
        use_ptxas("hbf")
        t = time.time()
        hbf = run_set("hbf")
        res["hbf_compile_and_run_s"] = round(time.time() - t, 1)
        log(f"{which}: hbf set done ({res['hbf_compile_and_run_s']} s)")
        save("hbf set done")
        ident = {k: bool(torch.equal(plain[k].view(torch.int8), hbf[k].view(torch.int8))) for k in plain}
        res["identical"] = ident
        checks["outputs_identical"] = all(ident.values())
        # bindings
        binds = {}
        for name, k in launched.items():
            b = s.bindings.get(int(k.module))
            info = s.functions.get(int(k.function), (None, None))[1]
            art = triton_artifact(k.metadata_group)
            binds[name] = {"bound": b is not None, "instrumented": bool(b and b.instrumented),
                           "hb_state": module_state(k.module), "admitted": bool(info and info.admitted),
                           "artifact_found": art is not None, "cubin_has_hb_issue": b"__hb_issue" in k.asm["cubin"],
                           "ptx_sha256": hashlib.sha256(k.asm["ptx"].encode()).hexdigest()[:16],
                           "n_regs": k.n_regs, "n_spills": k.n_spills,
                           "helper": (art or {}).get("helper", {}) and Path(art["helper"]["path"]).name,
                           "ptxas_before": (art or {}).get("kernels", [{}])[0].get("ptxas_before") if art else None,
                           "ptxas_after": (art or {}).get("kernels", [{}])[0].get("ptxas_after") if art else None}
        res["bindings"] = binds
        checks["hbf_bound_and_admitted"] = all(v["instrumented"] and v["hb_state"] == s.state_dptr and v["admitted"]
                                               and v["artifact_found"] and v["cubin_has_hb_issue"]
                                               for k, v in binds.items() if k.endswith("_hbf"))
        checks["plain_not_instrumented"] = all(not v["instrumented"] and v["hb_state"] is None and not v["cubin_has_hb_issue"]
                                               for k, v in binds.items() if k.endswith("_plain"))
        c = s.counters()
        kc = {k: c["kernels"].get(k) for k in ("add_hbf", "softmax_hbf", "matmul_hbf", "add_plain")}
        res["counters"] = {k: (None if v is None else {"load": v["ops"]["load"], "store": v["ops"]["store"],
                                                       "cpasync": v["ops"]["cpasync"],
                                                       "wait_wall_ns": v["wait_wall_ns"], "status": v["status"]})
                           for k, v in kc.items()}
        cnt = {}
        for k in ("add", "softmax", "matmul"):
            v = kc[k + "_hbf"]
            reads = {op: v["ops"][op] for op in v["ops"] if op in ("load", "cpasync")}
            req = sum(o["requests"] for o in reads.values())
            byt = sum(o["bytes"] for o in reads.values())
            mod = sum(o["modeled_ns"] for o in reads.values())
            nbytes = {"add": x, "softmax": sm, "matmul": A}[k]
            nbytes = nbytes.numel() * nbytes.element_size()
            cnt[k] = {"requests": req, "bytes": byt, "modeled_ns": mod, "tensor_bytes": nbytes,
                      "bytes_over_tensor": byt / nbytes, "modeled_per_request": mod / req if req else None,
                      "expected_per_request": per_req, "stores": v["ops"]["store"]["requests"]}
        res["modeled"] = cnt
        checks["registered_counted"] = all(v["requests"] > 0 and v["bytes"] >= v["tensor_bytes"] for v in cnt.values())
        checks["add_bytes_exact"] = cnt["add"]["bytes"] == cnt["add"]["tensor_bytes"]
        checks["modeled_matches_source"] = all(v["modeled_ns"] == v["requests"] * per_req for v in cnt.values())
        checks["stores_unregistered_zero"] = all(v["stores"] == 0 for v in cnt.values())
        save("counters read")
        # unregistered tensors: a launch on clones adds nothing
        before = s.counters(publish=False)["kernels"]["add_hbf"]["ops"]["load"]["requests"]
        x2, o2 = x.clone(), torch.empty_like(x)
        K.add_hbf[(triton.cdiv(n, 1024),)](x2, y, o2, n, B=1024)
        torch.cuda.synchronize()
        after = s.counters(publish=False)["kernels"]["add_hbf"]["ops"]["load"]["requests"]
        res["unregistered_launch_requests"] = after - before
        checks["unregistered_zero"] = after == before and bool(torch.equal(o2, hbf["add"]))
        # wall time of add_hbf with x registered (modeled) vs on the unregistered clone (native path);
        # a torch.cuda._sleep before each launch keeps host-side launch work out of the events
        def add_hbf_ms(xin) -> float:
            o3 = torch.empty_like(x)
            torch.cuda._sleep(1_000_000)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            K.add_hbf[(triton.cdiv(n, 1024),)](xin, y, o3, n, B=1024)
            e1.record()
            torch.cuda.synchronize()
            return e0.elapsed_time(e1)
        ev = {"registered": [], "unregistered": []}
        for _ in range(3):
            for tag, xin in (("unregistered", x2), ("registered", x)):
                ev[tag].append(add_hbf_ms(xin))
        res["add_hbf_ms"] = ev
        ka = s.counters(publish=False)["kernels"]["add_hbf"]
        lo = ka["ops"]["load"]
        res["add_hbf_issue_cost"] = {"requests": lo["requests"], "overhead_ns_per_request": lo["overhead_ns"] / max(1, lo["requests"]),
                                     "wait_wall_ns_per_call": ka["wait_wall_ns"] / max(1, ka["wait_calls"]),
                                     "wait_calls": ka["wait_calls"], "launches": ka["launches"]}
        if which == "fixed":   # diagnostic: the same launch with the device reusing its thermal snapshot for 1 s
            s.set_run_params(thermal_max_age_ns=1_000_000_000)
            d0 = s.counters(publish=False)["kernels"]["add_hbf"]["ops"]["load"]
            diag = [add_hbf_ms(x) for _ in range(2)]
            d1 = s.counters(publish=False)["kernels"]["add_hbf"]["ops"]["load"]
            res["diag_thermal_age_1s"] = {"ms": diag, "overhead_ns_per_request": (d1["overhead_ns"] - d0["overhead_ns"])
                                          / max(1, d1["requests"] - d0["requests"])}
            s.set_run_params(thermal_max_age_ns=s.params.thermal_max_age_ns)
        save("timing done")
        # gate
        if which in ("fixed", "unmodeled"):
            use_ptxas("hbf")
            g: dict = {}
            o = torch.full_like(x, -7.0)
            o_far = torch.full_like(x, -7.0)
            kp = K.prio_hbf[(triton.cdiv(n, 1024),)](y, o_far, n, B=1024)   # compiles; y is not registered: runs
            torch.cuda.synchronize()
            g["prio_on_unregistered_ran"] = bool(torch.equal(o_far, y))
            use_ptxas("plain")
            o_far.fill_(-7.0)
            kf = K.copy_foreign[(triton.cdiv(n, 1024),)](y, o_far, n, B=1024)
            torch.cuda.synchronize()
            g["foreign_on_unregistered_ran"] = bool(torch.equal(o_far, y))
            for kname, fn in (("prio_hbf", K.prio_hbf), ("copy_foreign", K.copy_foreign)):
                o.fill_(-7.0)
                torch.cuda.synchronize()
                try:
                    fn[(triton.cdiv(n, 1024),)](x, o, n, B=1024)
                    torch.cuda.synchronize()
                    g[kname] = {"refused": False, "output_is_copy": bool(torch.equal(o, x))}
                except LaunchRefused as e:
                    torch.cuda.synchronize()
                    g[kname] = {"refused": True, "code": e.code.name, "reason": e.fields.get("reason"),
                                "output_untouched": bool((o == -7.0).all())}
                except HbfError as e:
                    g[kname] = {"refused": False, "error": f"{type(e).__name__}: {e}"}
            info = {kk: s.functions.get(int(k.function), (None, None))[1] for kk, k in
                    (("prio_hbf", kp), ("copy_foreign", kf))}
            g["prio_cubin_has_hb_issue"] = b"__hb_issue" in kp.asm["cubin"]
            g["foreign_cubin_has_hb_issue"] = b"__hb_issue" in kf.asm["cubin"]
            g["admission"] = {k: {"admitted": v.admitted, "reasons": v.reasons[:3]} if v else None for k, v in info.items()}
            g["refused_launches"] = s.refused_launches
            g["unmodeled_launches"] = s.unmodeled_launches
            if which == "fixed":
                checks["gate_refuses_non_admitted"] = all(g[k]["refused"] and g[k]["output_untouched"]
                                                          and g[k]["code"] == "LAUNCH_REFUSED"
                                                          for k in ("prio_hbf", "copy_foreign"))
                checks["gate_reason_names_cause"] = ("applypriority" in (g["prio_hbf"].get("reason") or "")
                                                     and "no admission artifact" in (g["copy_foreign"].get("reason") or ""))
            else:
                checks["unmodeled_runs"] = all(not g[k]["refused"] and g[k].get("output_is_copy")
                                               for k in ("prio_hbf", "copy_foreign"))
            checks["non_admitted_on_unregistered_run"] = g["prio_on_unregistered_ran"] and g["foreign_on_unregistered_ran"]
            res["gate"] = g
        s.close()
        doc = shutdown_summary(hb)
        reps = doc.get("reports", [])
        res["summary"] = {"terminal_status": doc.get("terminal_status"),
                          "attaches": doc.get("attaches"),
                          "reports": [{"kind": r["kind"], "kernel": (r.get("data") or {}).get("kernel"),
                                       "reason": (r.get("data") or {}).get("reason")} for r in reps
                                      if r["kind"] in ("launch_refused", "unmodeled_launch")]}
        if which == "fixed":
            kinds = [r["kind"] for r in res["summary"]["reports"]]
            checks["summary_has_refusals"] = kinds.count("launch_refused") >= 2
        if which == "unmodeled":
            checks["summary_says_unmodeled"] = (sum(r["kind"] == "unmodeled_launch" for r in res["summary"]["reports"]) >= 2
                                                and any(a.get("allow_unmodeled") for a in doc.get("attaches", [])))
    finally:
        hb.stop()
    res["checks"] = checks
    res["ok"] = bool(checks) and all(checks.values())
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--child", default="")
    ap.add_argument("--only", default="fixed,curve,unmodeled")
    ap.add_argument("--child-timeout", type=float, default=100.0)
    a = ap.parse_args()
    os.environ.setdefault("HBF_COMPLETION_TIMEOUT_NS", "5000000000")
    if a.child:
        try:
            r = child(a.child)
        except BaseException as e:  # noqa: BLE001
            r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:], "ok": False}
        print("CHILD-JSON " + json.dumps(r, default=str), flush=True)
        os._exit(0)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hbf-runtime-triton."))
    env = toolchain_env(work)
    res: dict = {"what": "Triton kernels through runtime_cuda (hbfcc-ptxas + Session hooks + launch gate)",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "command": "python3 bench/runtime_triton.py"}
    try:
        res["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        res["gpu"] = f"nvidia-smi failed: {e}"
    for which in a.only.split(","):
        log(f"--- {which}")
        res[which] = run_child(__file__, which, env, timeout=a.child_timeout, partial=work / f"{which}.partial.json")
        brief = res[which].get("checks") or {k: res[which].get(k) for k in ("error", "stderr_tail", "traceback")}
        log(f"{which}: ok={res[which].get('ok')} {json.dumps(brief, default=str)[:1500]}")
        (out / "runtime_triton.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    res["ok"] = all(res[w].get("ok") for w in a.only.split(","))
    (out / "runtime_triton.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    log(f"ok={res['ok']}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
