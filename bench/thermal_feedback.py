#!/usr/bin/env python3
"""The thermal feedback loop on the GPU (issue 17 item 4), ready for a GPU session -- NOT RUN yet (no GPU on
2026-12-04 and 2026-12-05); its scenario planning and the exactness decomposition are tested on the CPU
(tests/thermal/test_thermal_feedback_bench.py).

One long kernel (rate_instr of workloads/microbench: one load request per warp per iteration, each waited) over a
registered TIMING range, hbfd with the package thermal model (HBFD_THERMAL=auto), the retention/refresh service
(HBFD_REFRESH=auto) and the fixed engine; profile ocp-sg1 derived (``derived``): the FIXED timing source (each
request's unthrottled service is exactly fixed_read_ns, so q's effect can be checked to the nanosecond), a
constant compute-die telemetry (``--gpu-w``), the HBF energy per byte multiplied so the kernel dissipates ``--hbf-w`` (a disclosed
acceleration: the microbench moves far less than a real stream, and the kernel's own HBF activity must heat the
stack for the loop to close), and thresholds placed on the model's own trajectory (``scenario``: the ROM run
offline from ambient at the telemetry power plus the kernel's accelerated HBF power): Light is crossed about
``--light-at-s`` into the kernel and Severe about ``--severe-at-s``. Severe withholds admission, the stack cools,
falls back to Light: the kernel oscillates between them. Retention is accelerated (``a_t``, disclosed) so that
a registered block reaches its refresh threshold within seconds at the hot temperatures and ten times later at
ambient: refresh debt is published and claimed by the kernel's admissions as injected latency.

While the kernel runs the bench polls the control region every ~5 ms (trace rows: mode, q, HBF temperature,
refresh debt, the live activity section's bytes and publications); after it: the kernel's counters and hbfd's
summary (transitions, residency, timeline, refresh).

Checks:
* light_and_severe_during_the_kernel: both modes published while the stream was busy;
* live_activity_during_the_kernel: the activity section's bytes grew during the kernel (issue 17 item 2);
* severe_withholds: the kernel's thermal_waits > 0;
* q_exact: modeled_ns decomposes exactly into requests served at q = 1e6 and at the Light q, with and without a
  refresh quantum (``exact_decomposition``); no other q appears;
* refresh_injected: refresh_claims > 0 and the refresh bytes equal claims x quantum (last one partial);
* retention_shortens: the refresh service's summary shows blocks made eligible by damage (not read disturb).

    python3 bench/thermal_feedback.py --out $OUT/fb     # one device call (needs the runtime's PTX: make helpers-ptx,
                                                        # and grpcio/protobuf + hbfproto, as bench/runtime_thermal_q.py)
    .venv/bin/python bench/thermal_feedback.py --plan-only   # the scenario, on the CPU

Arguments are checked before any GPU time is spent (``check_args``); ``$OUT/fb/thermal_feedback.json`` is rewritten
(atomic) when planned, at launch, every 2 s of the kernel with the trace so far, on failure and at the end
(``status`` says which), so a call cut short still returns what it saw.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hbfcommon.profile import PROFILE_DIR  # noqa: E402

KERNEL_BYTES_PER_REQUEST = 128          # rate_instr: one 4-byte load per lane of a warp (32 x 4 B)


def scenario(*, gpu_w: float, hbf_w: float, ambient_c: float, light_at_s: float, severe_at_s: float,
             rom=None, horizon_s: float = 30.0) -> dict:
    """Thresholds on the model's trajectory: the package ROM from ambient with ``gpu_w`` in the compute die (less
    the HBM model's share, as the service does) and the kernel's HBF power over the NAND layers; LTT = the hottest
    HBF output at ``light_at_s``, STT at ``severe_at_s``, RTT 2 K below LTT, shutdown far above the steady state.
    The idle (no-kernel) steady state must stay below LTT minus the hysteresis, or Severe never clears."""
    from hbfd.thermal import load_rom_for
    from hbfd.thermal.power import DEFAULT_HBM, gpu_die_power_w, hbf_layer_weights
    if rom is None:
        rom, _ = load_rom_for("hbf-package-8hi", ambient_c=ambient_c)
    names = list(rom.input_names)
    hbm = DEFAULT_HBM.power_w(0.0)
    base = np.zeros(len(names))
    base[names.index("gpu")] = gpu_die_power_w(gpu_w, hbm)
    base[names.index("hbm")] = hbm
    idle = base + 5.0 * hbf_layer_weights(names, dynamic=False)
    busy = idle + hbf_w * hbf_layer_weights(names, dynamic=True)
    hb = [i for i, o in enumerate(rom.output_names) if o.startswith("hbf")]
    rom.reset()
    n = int(round(horizon_s / rom.dt_s))
    Y = rom.run(np.tile(busy, (n, 1)))[:, hb].max(axis=1)
    rom.reset()
    t = (np.arange(n) + 1) * rom.dt_s
    ltt = float(np.interp(light_at_s, t, Y))
    stt = float(np.interp(severe_at_s, t, Y))
    idle_ss = float(rom.steady_state_c(idle)[hb].max())
    busy_ss = float(rom.steady_state_c(busy)[hb].max())
    hyst = max(0.5, min(2.0, (stt - ltt) / 2))
    if not idle_ss < ltt - hyst:
        raise SystemExit(f"the idle steady state {idle_ss:.2f} C is not below LTT - hysteresis ({ltt - hyst:.2f} C): "
                         "Severe would never clear; lower --gpu-w or raise --hbf-w")
    if not stt > ltt + 0.5:
        raise SystemExit(f"LTT {ltt:.2f} C and STT {stt:.2f} C are too close: move --severe-at-s later")
    return {"rtt_c": ltt - 2.0, "ltt_c": ltt, "stt_c": stt, "shutdown_c": max(busy_ss, stt) + 20.0,
            "hysteresis_k": hyst, "idle_steady_c": idle_ss, "busy_steady_c": busy_ss,
            "light_at_s": light_at_s, "severe_at_s": severe_at_s}


def derived(out: Path, *, gpu_w: float, energy_x: float, sc: dict, a_t: float, fixed_read_ns: int) -> Path:
    """ocp-sg1 with the FIXED source, constant telemetry, accelerated energy/retention, the scenario's thresholds."""
    d = json.loads((PROFILE_DIR / "ocp-sg1.json").read_text())
    num = lambda v, why: {"value": v, "provenance": "assumed", "source": f"bench/thermal_feedback.py: {why}"}  # noqa: E731
    d["timing_model"]["timing_source"] = "fixed"
    d["timing_model"].setdefault("fixed", {})["read_ns"] = num(fixed_read_ns, "FIXED service so q is exact")
    th = d["thermal"]
    th["telemetry"] = "constant"
    th["telemetry_gpu_power_w"] = num(gpu_w, "constant compute-die telemetry")
    th["hbm_traffic_bytes_per_s"] = num(0, "no HBM traffic modeled")
    for k in ("rtt_c", "ltt_c", "stt_c", "shutdown_c", "hysteresis_k"):
        th[k] = num(round(sc[k], 3), "placed on the model's trajectory (scenario())")
    th["policy"] = "hysteresis"
    e = d["energy"]
    e["j_per_byte"] = num(e["j_per_byte"]["value"] * energy_x, f"x{energy_x:g} acceleration (disclosed)")
    d["reliability"]["a_t"] = num(a_t, "retention acceleration (disclosed): deadlines of seconds")
    d["name"] = "ocp-sg1-feedback"
    out.write_text(json.dumps(d, indent=1))
    return out


def retention_a_t(*, hot_c: float, cold_c: float, to_threshold_s: float, ea_ev: float, l_ref_h: float,
                  t_ref_c: float, threshold: float) -> tuple[float, float]:
    """a_t so that a block reaches ``threshold`` damage after ``to_threshold_s`` at ``hot_c``; also returns the
    time it would take at ``cold_c`` (the deadline shortens with temperature by the Arrhenius ratio)."""
    from hbfd.reliability.ledger import lifetime_h
    L_hot = float(lifetime_h(np.array([hot_c]), ea_ev=ea_ev, l_ref_h=l_ref_h, t_ref_c=t_ref_c)[0])
    L_cold = float(lifetime_h(np.array([cold_c]), ea_ev=ea_ev, l_ref_h=l_ref_h, t_ref_c=t_ref_c)[0])
    a_t = threshold * L_hot * 3600.0 / to_threshold_s
    return a_t, threshold * L_cold * 3600.0 / a_t


def ceil_scale(s: int, q: int) -> int:
    return -((-s * 1_000_000) // q)


def exact_decomposition(*, requests: int, modeled_ns: int, claims: int, s: int, refresh_ns: int, q_light: int,
                        last_claim_ns: int | None = None) -> dict | None:
    """Integers (n_light, claims_light) with requests = n_normal + n_light, every request's service
    ceil((s + r)·1e6/q) for q in {1e6, q_light} and r the refresh service of a claimed quantum (0 otherwise), that
    add up to ``modeled_ns`` exactly; None if no split does (a q other than the two, or service not applied
    exactly once). ``last_claim_ns``: the refresh service of a final partial quantum, if any."""
    a0, a1 = s, ceil_scale(s, q_light)
    b0, b1 = s + refresh_ns, ceil_scale(s + refresh_ns, q_light)
    for cl in range(claims + 1):                       # claims made in Light
        cn = claims - cl
        rest = modeled_ns - cn * b0 - cl * b1
        plain = requests - claims
        # rest = (plain - nl) * a0 + nl * a1  ->  nl = (rest - plain * a0) / (a1 - a0)
        num = rest - plain * a0
        if a1 == a0:
            if num == 0:
                return {"n_light_plain": 0, "claims_light": cl, "claims_normal": cn}
            continue
        if num % (a1 - a0) == 0 and 0 <= num // (a1 - a0) <= plain:
            return {"n_light_plain": num // (a1 - a0), "claims_light": cl, "claims_normal": cn}
    return None


def save(out: Path, res: dict, status: str) -> Path:
    """Write what the run has so far (atomic replace): a call cut short by the device limit still leaves its
    scenario, the trace up to then and where it stopped (``status``)."""
    from hbfcommon.fsutil import atomic_write_text
    res["status"] = status
    return atomic_write_text(out / "thermal_feedback.json", json.dumps(res, indent=1, default=str) + "\n")


def check_args(args) -> None:
    """Refuse, before any GPU time is spent, arguments that cannot give the run the issue asks for."""
    if args.blocks <= 0 or args.threads <= 0 or args.threads % 32 or args.threads > 1024:
        raise SystemExit(f"--blocks must be > 0 and --threads a multiple of 32 in 32..1024 "
                         f"(got {args.blocks} x {args.threads})")
    if args.fixed_read_ns <= 0 or args.iters <= 0:
        raise SystemExit("--fixed-read-ns and --iters must be > 0")
    if not 0 < args.light_at_s < args.severe_at_s:
        raise SystemExit(f"need 0 < --light-at-s < --severe-at-s (got {args.light_at_s:g}, {args.severe_at_s:g})")
    if args.hbf_w <= 0 or args.gpu_w < 0 or args.retention_s <= 0:
        raise SystemExit("--hbf-w and --retention-s must be > 0, --gpu-w >= 0")
    if not 0 < args.max_s <= 540:
        raise SystemExit(f"--max-s must be in (0, 540] (one device call is at most 600 s; got {args.max_s:g})")
    if args.iters * args.fixed_read_ns * 1e-9 < args.severe_at_s * 2:
        raise SystemExit(f"the kernel's modeled length ({args.iters} x {args.fixed_read_ns} ns) is shorter than twice "
                         f"--severe-at-s: Severe would not be crossed and cleared while it runs")


def run_gpu(args, out: Path) -> dict:  # pragma: no cover - needs a GPU
    import runtime_cuda
    from hbfcommon import ctl as C
    from runtime_cuda import cudrv, linker
    from runtime_thermal_q import bind_microbench, kc, rate_args
    from runtime_triton import start_hbfd
    tmp = Path(tempfile.mkdtemp(prefix="hbf-feedback-"))
    res: dict = {"what": "thermal feedback loop on the GPU (issue 17 item 4)", "date_utc": time.strftime("%F %T", time.gmtime()),
                 "command": "python3 bench/thermal_feedback.py " + " ".join(sys.argv[1:])}
    warps, iters = args.blocks * args.threads // 32, args.iters
    kernel_bps = warps * KERNEL_BYTES_PER_REQUEST / (args.fixed_read_ns * 1e-9)     # modeled bandwidth at q = 1e6
    hbf_w = args.hbf_w
    args.energy_x = hbf_w / (kernel_bps * 8.4e-11)
    res["energy_x"] = args.energy_x
    sc = scenario(gpu_w=args.gpu_w, hbf_w=hbf_w, ambient_c=35.0, light_at_s=args.light_at_s, severe_at_s=args.severe_at_s)
    a_t, cold_s = retention_a_t(hot_c=sc["ltt_c"], cold_c=35.0, to_threshold_s=args.retention_s, ea_ev=1.1, l_ref_h=2160,
                                t_ref_c=40, threshold=0.7)
    res.update({"scenario": sc, "kernel_modeled_bytes_per_s": kernel_bps, "hbf_dynamic_w": hbf_w, "a_t": a_t,
                "retention_s_at_ltt": args.retention_s, "retention_s_at_ambient": cold_s})
    prof = derived(tmp / "profile.json", gpu_w=args.gpu_w, energy_x=args.energy_x, sc=sc, a_t=a_t,
                   fixed_read_ns=args.fixed_read_ns)
    res["profile_json"] = json.loads(prof.read_text())
    save(out, res, "planned: starting hbfd")
    hb = start_hbfd(tmp, prof, {"HBFD_THERMAL": "auto", "HBFD_REFRESH": "auto", "HBFD_ENGINE": "fixed"})
    trace = []
    res["trace"] = trace
    try:
        cubin = str(linker.build_microbench()["cubin"])
        s = runtime_cuda.attach(socket=str(hb.socket))
        f = bind_microbench(s, cubin)
        nwords = (64 << 20) // 4
        buf = cudrv.mem_alloc(nwords * 4)
        s.register_timing_range(buf, nwords * 4, label="feedback")
        outbuf = cudrv.mem_alloc(args.blocks * args.threads * 4)
        b0 = kc(s)
        t0 = time.monotonic()
        s.launch(f, (args.blocks,), (args.threads,), rate_args(buf, nwords, outbuf, iters), kernel="rate_instr")
        save(out, res, "kernel launched")
        last_save = time.monotonic()
        d = cudrv.drv()
        th, act, rf = s.ctl.ctl.thermal, s.ctl.ctl.activity, s.ctl.ctl.refresh
        while True:
            q = d.cuStreamQuery(d.CUstream(0))
            busy = int(q[0] if isinstance(q, tuple) else q) == int(d.CUresult.CUDA_ERROR_NOT_READY)
            a = C.read_activity(s.ctl.ctl)
            trace.append({"t_s": round(time.monotonic() - t0, 4), "busy": busy, "mode": int(th.mode), "q_ppm": int(th.q_ppm),
                          "hbf_c": int(th.hbf_max_millic) / 1000, "refresh_debt": int(rf.debt_total_bytes),
                          "live_bytes": sum(a.bytes), "live_flushes": a.flushes})
            if not busy or time.monotonic() - t0 > args.max_s:
                break
            if time.monotonic() - last_save > 2.0:                 # the trace so far, every 2 s
                save(out, res, f"kernel running ({trace[-1]['t_s']:.1f} s)")
                last_save = time.monotonic()
            time.sleep(0.005)
        s.synchronize()
        b1 = kc(s)
        s.close()
        summ = hb.shutdown("bench done") == 0 and json.loads(hb.summary.read_text())
    except BaseException as e:
        res["error"] = f"{type(e).__name__}: {e}"
        save(out, res, "failed")                                   # the trace up to the failure stays
        raise
    finally:
        hb.stop()
    busy_rows = [r for r in trace if r["busy"]]
    modes = {r["mode"] for r in busy_rows}
    req = b1["ops"]["load"]["requests"] - b0["ops"]["load"]["requests"]
    mod = b1["ops"]["load"]["modeled_ns"] - b0["ops"]["load"]["modeled_ns"]
    claims = b1["refresh_claims"] - b0["refresh_claims"]
    rbytes = b1["refresh_bytes"] - b0["refresh_bytes"]
    from hbfcommon.profile import load_profile
    mp = load_profile(str(prof)).to_media_params()
    quantum = int(mp["refresh_quantum_bytes"])
    # hb_refresh_service: pages of the claimed quantum x (tR + tPROG)
    r_ns = math.ceil(quantum / mp["page_bytes"]) * (int(mp["t_read_ns"]) + int(mp["t_prog_ns"]))
    dec = exact_decomposition(requests=req, modeled_ns=mod, claims=claims, s=args.fixed_read_ns, refresh_ns=r_ns,
                              q_light=750_000)
    th_s = (summ or {}).get("services", {}).get("thermal", {})
    rf_s = (summ or {}).get("services", {}).get("refresh", {})
    res.update({"trace": trace, "kernel": {"requests": req, "modeled_ns": mod, "thermal_waits": b1["thermal_waits"] - b0["thermal_waits"],
                                           "refresh_claims": claims, "refresh_bytes": rbytes},
                "decomposition": dec, "summary_thermal": {k: th_s.get(k) for k in ("transitions", "residency_ns", "live_activity",
                                                                                     "peak_hbf_c", "terminal_status")},
                "summary_refresh": rf_s})
    res["checks"] = {
        "light_and_severe_during_the_kernel": {C.HBF_TH_LIGHT, C.HBF_TH_SEVERE} <= modes,
        "live_activity_during_the_kernel": len(busy_rows) > 2 and busy_rows[-1]["live_bytes"] > busy_rows[0]["live_bytes"],
        "severe_withholds": res["kernel"]["thermal_waits"] > 0,
        "q_exact": dec is not None,
        "refresh_injected": claims > 0 and rbytes <= claims * quantum,
    }
    res["ok"] = all(res["checks"].values())
    return res


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--gpu-w", type=float, default=150.0, help="constant compute-die telemetry (W)")
    ap.add_argument("--hbf-w", type=float, default=40.0,
                    help="HBF dynamic power the kernel should dissipate at its modeled bandwidth: sets the disclosed "
                         "energy-per-byte acceleration (the helpers' overhead makes the achieved rate lower: the "
                         "crossings then come later; the trace shows when they did)")
    ap.add_argument("--fixed-read-ns", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=264)
    ap.add_argument("--threads", type=int, default=128)
    ap.add_argument("--iters", type=int, default=4_000_000, help="kernel length (iterations per warp)")
    ap.add_argument("--light-at-s", type=float, default=2.0)
    ap.add_argument("--severe-at-s", type=float, default=4.0)
    ap.add_argument("--retention-s", type=float, default=5.0, help="seconds to the refresh threshold at LTT")
    ap.add_argument("--max-s", type=float, default=120.0, help="stop polling after this long")
    ap.add_argument("--plan-only", action="store_true", help="print the scenario (CPU) and exit")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    if args.plan_only:
        warps = args.blocks * args.threads // 32
        bps = warps * KERNEL_BYTES_PER_REQUEST / (args.fixed_read_ns * 1e-9)
        sc = scenario(gpu_w=args.gpu_w, hbf_w=args.hbf_w, ambient_c=35.0,
                      light_at_s=args.light_at_s, severe_at_s=args.severe_at_s)
        a_t, cold = retention_a_t(hot_c=sc["ltt_c"], cold_c=35.0, to_threshold_s=args.retention_s, ea_ev=1.1,
                                  l_ref_h=2160, t_ref_c=40, threshold=0.7)
        print(json.dumps({"scenario": sc, "kernel_modeled_bytes_per_s": bps, "a_t": a_t,
                          "energy_x": args.hbf_w / (bps * 8.4e-11),
                          "retention_s_at_ambient": cold}, indent=1))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run_gpu(args, out)
    save(out, res, "done")
    print(json.dumps(res["checks"]))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
