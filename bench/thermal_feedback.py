#!/usr/bin/env python3
"""The thermal feedback loop on the GPU (issue 17 item 4). Run once on an H100 (2026-12-05, r1:
bench/results/thermal_feedback_h100_r1.json): the kernel achieved 52.3 GB/s of its modeled 67.6 GB/s, the stack
peaked 0.26 K below LTT and nothing crossed; this version plans from the rate measured on the card. Its planning,
the replay of a recorded trace through the model and the checks are tested on the CPU
(tests/thermal/test_thermal_feedback_bench.py, which feeds them the r1 record).

One long kernel (rate_instr of workloads/microbench: one load request per warp per iteration, each waited) over a
registered TIMING range, hbfd with the package thermal model (HBFD_THERMAL=auto), the retention/refresh service
(HBFD_REFRESH=auto) and the fixed engine; profile ocp-sg1 derived (``derived``): the FIXED timing source (each
request's unthrottled service is exactly fixed_read_ns, so q's effect can be checked to the nanosecond), a
constant compute-die telemetry (``--gpu-w``), the HBF energy per byte multiplied so the kernel dissipates
``--hbf-w`` (a disclosed acceleration: the microbench moves far less than a real stream, and the kernel's own HBF
activity must heat the stack for the loop to close).

1. **Calibration launch** (``calibrate_rate``, in a child process with its own hbfd that cannot throttle): the
   same kernel, same grid, ``--cal-iters`` iterations; the achieved bytes/s = the slope of the live activity
   section's bytes (what the thermal model sees; ``measured_rate``), with the counters' bytes over the host wall
   time beside it. ``--rate-bps`` skips it (the rate is then "given").
2. **Plan** (``plan``) from that one rate, recorded with its source and the modeled rate: energy_x so that
   ``--hbf-w`` is dissipated at the measured rate; thresholds (``scenario``) on the trajectory of a kernel
   ``--derate`` x slower from ambient: LTT where Normal reaches it at ``--light-at-s``, STT where the kernel,
   from then on in Light at q of the power (the modeled service is 1/q longer; the low end), reaches it at
   ``--severe-at-s`` -- so STT lies below Light's own steady state (r1 put it on the full-power trajectory,
   above what Light can reach); then the closed loop with hbfd's controller (``simulate_loop``) at the measured
   rate (after ``--pre-idle-s`` of idle hbfd) and at the derated one must enter Light and Severe, clear Severe and
   end within ``--max-s``, or the run is refused before the long kernel.
3. **The kernel** under an hbfd on the planned profile. Severe withholds admission, the stack cools, falls back to
   Light: the kernel oscillates between them. Retention is accelerated (``a_t``, disclosed) so that a registered
   block reaches its refresh threshold ``--retention-s`` after reaching LTT and about five times later at ambient:
   refresh debt is published and claimed by the kernel's admissions as injected latency.

While the kernel runs the bench polls the control region every ~5 ms (trace rows: mode, q, HBF temperature,
refresh debt, the live activity section's bytes, requests and publications); after it: the kernel's counters and
hbfd's summary (transitions, residency, timeline, refresh), the achieved rate.

Checks (``evaluate``: from the record only, each with a ``why`` line):
* light_and_severe_during_the_kernel: both modes published while the stream was busy;
* live_activity_during_the_kernel: the activity section's bytes grew during the kernel (issue 17 item 2);
* severe_withholds: the kernel's thermal_waits > 0 (counted only when a warp finds admission closed) and Severe seen;
* q_exact: modeled_ns decomposes exactly into requests served at q = 1e6 and at the Light q, with and without a
  refresh quantum (``exact_decompositions``), AND the split's Light requests equal (within the bound of
  ``light_requests_from_trace``) those the trace counted while Light or Severe was published, and are > 0 (r1
  called Normal alone exact: that shows nothing of q);
* refresh_injected: refresh_claims > 0 and the refresh bytes equal claims x quantum (last one partial);
* retention_shortens: blocks refreshed (read disturb under its limit), the first debt published while hbfd was
  younger than the threshold time at ambient.

    python3 bench/thermal_feedback.py --out $OUT/fb     # one device call (needs the runtime's PTX: make helpers-ptx,
                                                        # and grpcio/protobuf + hbfproto, as bench/runtime_thermal_q.py)
    .venv/bin/python bench/thermal_feedback.py --plan-only [--rate-bps 52.3e9]   # the plan, on the CPU

Arguments are checked before any GPU time is spent (``check_args``); ``$OUT/fb/thermal_feedback.json`` is rewritten
(atomic) when calibrated, planned (or the plan refused), at launch, every 2 s of the kernel with the trace so far,
on failure and at the end (``status`` says which), so a call cut short still returns what it saw.
"""
from __future__ import annotations

import argparse
import json
import logging
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
BASE_PROFILE = "ocp-sg1"
log = logging.getLogger("thermal_feedback")


def base_constants() -> dict:
    """The numbers of the base profile the plan uses (one place: the derived profile changes only what
    ``derived`` says): transfer energy, idle power, the Light q, the dwell, ambient, the retention law."""
    d = json.loads((PROFILE_DIR / f"{BASE_PROFILE}.json").read_text())
    v = lambda sec, k: d[sec][k]["value"]  # noqa: E731
    return {"j_per_byte": float(v("energy", "j_per_byte")), "idle_w": float(v("energy", "idle_w")),
            "light_q_ppm": int(v("thermal", "light_q_ppm")), "min_dwell_ticks": int(v("thermal", "min_dwell_ticks")),
            "ambient_c": float(v("thermal", "ambient_c")), "ea_ev": float(v("reliability", "ea_retention_ev")),
            "l_ref_h": float(v("reliability", "l_ref_h")), "t_ref_c": float(v("reliability", "t_ref_c")),
            "refresh_threshold": float(v("reliability", "refresh_damage_threshold"))}


class _Package:
    """The package ROM fed as hbfd's service feeds it (``hbfd.thermal.service``): constant compute-die telemetry
    less the HBM model's share, the idle HBF power on the base die, the kernel's HBF power over the NAND layers."""

    def __init__(self, *, gpu_w: float, idle_w: float, ambient_c: float, rom=None):
        from hbfd.thermal import load_rom_for
        from hbfd.thermal.power import DEFAULT_HBM, gpu_die_power_w, hbf_layer_weights
        if rom is None:
            rom, _ = load_rom_for("hbf-package-8hi", ambient_c=ambient_c)
        self.rom = rom
        names = list(rom.input_names)
        hbm = DEFAULT_HBM.power_w(0.0)
        base = np.zeros(len(names))
        base[names.index("gpu")] = gpu_die_power_w(gpu_w, hbm)
        base[names.index("hbm")] = hbm
        self.idle = base + idle_w * hbf_layer_weights(names, dynamic=False)
        self.w_dyn = hbf_layer_weights(names, dynamic=True)
        self.hb = [i for i, o in enumerate(rom.output_names) if o.startswith("hbf")]
        self.dt_s = rom.dt_s

    def power(self, hbf_dyn_w) -> np.ndarray:
        """Input rows for dynamic HBF power ``hbf_dyn_w`` (scalar or one value per tick)."""
        w = np.atleast_1d(np.asarray(hbf_dyn_w, float))
        return self.idle[None, :] + w[:, None] * self.w_dyn[None, :]

    def run(self, hbf_dyn_w) -> np.ndarray:
        """Hottest HBF output per tick, continuing from the current state."""
        return self.rom.run(self.power(hbf_dyn_w))[:, self.hb].max(axis=1)

    def start(self, pre_idle_s: float) -> None:
        """From ambient, then ``pre_idle_s`` of hbfd running idle before the launch."""
        self.rom.reset()
        n = int(round(pre_idle_s / self.dt_s))
        if n:
            self.rom.run(self.power(np.zeros(n)))

    def steady_c(self, hbf_dyn_w: float) -> float:
        return float(self.rom.steady_state_c(self.power(hbf_dyn_w)[0])[self.hb].max())


def scenario(*, gpu_w: float, hbf_w: float, ambient_c: float, light_at_s: float, severe_at_s: float,
             light_frac: float = 1.0, pre_idle_s: float = 0.0, idle_w: float | None = None, rom=None) -> dict:
    """Thresholds on the model's trajectory: the package ROM from ambient (then ``pre_idle_s`` idle) with
    ``gpu_w`` in the compute die (less the HBM model's share, as the service does) and the kernel's HBF power
    ``hbf_w`` over the NAND layers: LTT = the hottest HBF output at ``light_at_s``; from there the kernel runs in
    Light at ``light_frac`` of that power (the modeled service is 1/q longer, so at most q of the bytes/s), and
    STT = the output at ``severe_at_s`` on THAT trajectory. RTT 2 K below LTT, shutdown far above every steady
    state. Refused (SystemExit, one line): the idle steady state not below LTT minus the hysteresis (Severe and
    Light would never clear), or Light not heating past LTT + 0.5 K by ``severe_at_s`` (Severe never reached)."""
    k = base_constants()
    pk = _Package(gpu_w=gpu_w, idle_w=k["idle_w"] if idle_w is None else idle_w, ambient_c=ambient_c, rom=rom)
    pk.start(pre_idle_s)
    n_l = max(1, int(round(light_at_s / pk.dt_s)))
    n_s = max(1, int(round(severe_at_s / pk.dt_s)) - n_l)
    ltt = float(pk.run(np.full(n_l, hbf_w))[-1])
    stt = float(pk.run(np.full(n_s, hbf_w * light_frac))[-1])
    pk.rom.reset()
    idle_ss = pk.steady_c(0.0)
    busy_ss = pk.steady_c(hbf_w)
    light_ss = pk.steady_c(hbf_w * light_frac)
    hyst = max(0.5, min(2.0, (stt - ltt) / 2))
    if not idle_ss < ltt - hyst:
        raise SystemExit(f"the idle steady state {idle_ss:.2f} C is not below LTT - hysteresis ({ltt - hyst:.2f} C): "
                         "Severe would never clear; lower --gpu-w or raise --hbf-w")
    if not stt > ltt + 0.5:
        raise SystemExit(f"LTT {ltt:.2f} C and STT {stt:.2f} C are too close (in Light the stack reaches only "
                         f"{light_ss:.2f} C): raise --hbf-w or move --severe-at-s later")
    return {"rtt_c": ltt - 2.0, "ltt_c": ltt, "stt_c": stt, "shutdown_c": max(busy_ss, stt) + 20.0,
            "hysteresis_k": hyst, "idle_steady_c": idle_ss, "busy_steady_c": busy_ss, "light_steady_c": light_ss,
            "light_at_s": light_at_s, "severe_at_s": severe_at_s, "hbf_w": hbf_w, "light_frac": light_frac,
            "pre_idle_s": pre_idle_s}


def simulate_loop(*, sc: dict, gpu_w: float, hbf_w: float, rate_bps: float, kernel_bytes: float,
                  pre_idle_s: float, limit_s: float, ambient_c: float | None = None, rom=None) -> dict:
    """The closed loop offline, with hbfd's own controller (``hbfd.thermal.controller``, policy hysteresis, the
    profile's dwell) on the ROM: the kernel moves ``rate_bps`` in Normal (dissipating ``hbf_w``), q of it in
    Light, nothing in Severe (admission withheld); it ends when ``kernel_bytes`` are moved or at ``limit_s``.
    Light at q x the Normal rate is the low end (the per-request overhead outside the modeled service does not
    stretch by 1/q), so the real Light is at least as hot. Returns when each mode was first entered, when
    Severe first cleared, how many Severe episodes, the peak, the predicted kernel length."""
    from hbfd.thermal.controller import LIGHT, SEVERE, Policy, PolicyConfig
    k = base_constants()
    q = k["light_q_ppm"] / 1e6
    pk = _Package(gpu_w=gpu_w, idle_w=k["idle_w"], ambient_c=k["ambient_c"] if ambient_c is None else ambient_c,
                  rom=rom)
    pk.start(pre_idle_s)
    pol = Policy(PolicyConfig(name="hysteresis", rtt_c=sc["rtt_c"], ltt_c=sc["ltt_c"], stt_c=sc["stt_c"],
                              shutdown_c=sc["shutdown_c"], hysteresis_k=sc["hysteresis_k"],
                              light_q_ppm=k["light_q_ppm"], min_dwell_ticks=k["min_dwell_ticks"]))
    moved, tick, peak = 0.0, 0, -math.inf
    first = {LIGHT: None, SEVERE: None}
    severe_clear, episodes = None, 0
    frac = {0: 1.0, LIGHT: q, SEVERE: 0.0}
    n_max = int(math.ceil(limit_s / pk.dt_s))
    while moved < kernel_bytes and tick < n_max:
        f = frac[pol.mode]
        t_c = float(pk.run([hbf_w * f])[0])
        moved += rate_bps * f * pk.dt_s
        peak = max(peak, t_c)
        before = pol.mode
        pol.decide(tick, t_c)
        tick += 1
        t_s = tick * pk.dt_s
        if pol.mode != before:
            if pol.mode in first and first[pol.mode] is None:
                first[pol.mode] = t_s
            if pol.mode == SEVERE:
                episodes += 1
            if before == SEVERE and severe_clear is None:
                severe_clear = t_s
        if pol.mode == 3:
            break
    return {"rate_bytes_per_s": rate_bps, "hbf_w": hbf_w, "pre_idle_s": pre_idle_s,
            "first_light_s": first[LIGHT], "first_severe_s": first[SEVERE], "first_severe_clear_s": severe_clear,
            "severe_episodes": episodes, "peak_hbf_c": peak, "kernel_s": tick * pk.dt_s,
            "completed": moved >= kernel_bytes, "shutdown": pol.mode == 3}


def plan(*, rate_bps: float, rate_source: str, modeled_bps: float, kernel_bytes: float, gpu_w: float,
         hbf_w: float, light_at_s: float, severe_at_s: float, derate: float, pre_idle_s: float, limit_s: float,
         rom=None) -> dict:
    """Everything the run is planned from one rate, ``rate_bps`` (``rate_source``: measured by the calibration
    launch, given, or the modeled rate): the energy acceleration so that the kernel dissipates ``hbf_w`` at that
    rate; the thresholds placed on the trajectory of a kernel ``derate`` x slower (so a rate that much below the
    measured one still crosses them by ``light_at_s`` / ``severe_at_s``); and the closed loop predicted at both
    rates (``simulate_loop``), each of which must enter Light and Severe, clear Severe, and end within
    ``limit_s``. Refused (SystemExit, one line) otherwise, before the long kernel."""
    if not (rate_bps > 0 and math.isfinite(rate_bps)):
        raise SystemExit(f"the rate to plan from must be > 0 bytes/s (got {rate_bps!r} from {rate_source})")
    if not 0 < derate <= 1:
        raise SystemExit(f"--derate must be in (0, 1] (got {derate:g})")
    k = base_constants()
    q = k["light_q_ppm"] / 1e6
    energy_x = hbf_w / (rate_bps * k["j_per_byte"])
    sc = scenario(gpu_w=gpu_w, hbf_w=hbf_w * derate, ambient_c=k["ambient_c"], light_at_s=light_at_s,
                  severe_at_s=severe_at_s, light_frac=q, rom=rom)
    cases = {"nominal": simulate_loop(sc=sc, gpu_w=gpu_w, hbf_w=hbf_w, rate_bps=rate_bps, kernel_bytes=kernel_bytes,
                                      pre_idle_s=pre_idle_s, limit_s=limit_s, rom=rom),
             "derated": simulate_loop(sc=sc, gpu_w=gpu_w, hbf_w=hbf_w * derate, rate_bps=rate_bps * derate,
                                      kernel_bytes=kernel_bytes, pre_idle_s=0.0, limit_s=limit_s, rom=rom)}
    for name, c in cases.items():
        why = None
        if c["shutdown"]:
            why = f"reaches Shutdown ({c['peak_hbf_c']:.2f} C)"
        elif c["first_light_s"] is None or c["first_severe_s"] is None:
            why = f"never enters {'Light' if c['first_light_s'] is None else 'Severe'} (peak {c['peak_hbf_c']:.2f} C)"
        elif c["first_severe_clear_s"] is None:
            why = "never clears Severe before the kernel ends: raise --iters"
        elif not c["completed"]:
            why = f"does not end within {limit_s:g} s: lower --iters or raise --max-s"
        if why:
            raise SystemExit(f"plan refused: the kernel at {c['rate_bytes_per_s'] / 1e9:.2f} GB/s ({name}, planned from "
                             f"{rate_source} {rate_bps / 1e9:.2f} GB/s) {why}")
    return {"planned_from": {"rate_bytes_per_s": rate_bps, "source": rate_source},
            "kernel_modeled_bytes_per_s": modeled_bps, "rate_over_modeled": rate_bps / modeled_bps,
            "derate": derate, "energy_x": energy_x, "j_per_byte_base": k["j_per_byte"], "hbf_dynamic_w": hbf_w,
            "light_q_ppm": k["light_q_ppm"], "kernel_bytes": kernel_bytes, "scenario": sc, "predicted": cases}


def measured_rate(trace: list[dict], *, skip_s: float = 0.2) -> dict:
    """The kernel's achieved bytes/s as the thermal model sees it: the least-squares slope of the live activity
    section's bytes over the poller's busy rows, leaving out the first ``skip_s`` (the first publications).
    ValueError when the trace cannot give one (fewer than 10 busy rows, no bytes)."""
    rows = [r for r in trace if r["busy"] and r["t_s"] >= skip_s]
    if len(rows) < 10:
        raise ValueError(f"{len(rows)} busy trace rows after {skip_s:g} s: too few to measure the rate")
    t = np.array([r["t_s"] for r in rows], float)
    b = np.array([r["live_bytes"] for r in rows], float)
    if not b[-1] > b[0]:
        raise ValueError("the live activity bytes did not grow during the kernel: no rate to measure")
    slope = float(np.polyfit(t, b, 1)[0])
    return {"bytes_per_s": slope, "rows": len(rows), "span_s": float(t[-1] - t[0]), "bytes": float(b[-1] - b[0]),
            "endpoints_bytes_per_s": float((b[-1] - b[0]) / (t[-1] - t[0])), "skip_s": skip_s,
            "source": "live activity section (trace slope)"}


def replay(trace: list[dict], *, j_per_byte: float, gpu_w: float, pre_idle_s: float, skip_s: float = 0.2,
           rom=None) -> dict:
    """The recorded kernel's live bytes fed back through the package model (10 ms bins, linear between polls) from
    ambient plus ``pre_idle_s`` idle: the modeled hottest HBF temperature against the trace's, over the busy rows
    after ``skip_s`` (hbfd publishes a 10 ms step's temperature after the step: in the first tens of ms the sharp
    rise shows that lag as ~1 K). Says whether the temperatures the run saw follow from the rate it achieved."""
    k = base_constants()
    pk = _Package(gpu_w=gpu_w, idle_w=k["idle_w"], ambient_c=k["ambient_c"], rom=rom)
    pk.start(pre_idle_s)
    rows = [r for r in trace if r["busy"]]
    t = np.array([r["t_s"] for r in rows], float)
    b = np.array([r["live_bytes"] for r in rows], float)
    y = np.array([r["hbf_c"] for r in rows], float)
    edges = np.arange(int(t[-1] / pk.dt_s) + 2) * pk.dt_s
    w = np.diff(np.interp(edges, t, b)) * j_per_byte / pk.dt_s
    Y = pk.run(w)
    e = (np.interp(t, edges[1:], Y) - y)[t >= skip_s]
    return {"rows": int(e.size), "skip_s": skip_s, "rms_k": float(np.sqrt(np.mean(e ** 2))),
            "max_abs_k": float(np.abs(e).max()), "bias_k": float(e.mean()), "pre_idle_s": pre_idle_s,
            "peak_model_c": float(Y.max()), "peak_trace_c": float(y.max())}


def derived(out: Path, *, gpu_w: float, energy_x: float, sc: dict, a_t: float, fixed_read_ns: int,
            thresholds_from: str = "placed on the model's trajectory (scenario())") -> Path:
    """ocp-sg1 with the FIXED source, constant telemetry, accelerated energy/retention, the scenario's thresholds."""
    d = json.loads((PROFILE_DIR / f"{BASE_PROFILE}.json").read_text())
    num = lambda v, why: {"value": v, "provenance": "assumed", "source": f"bench/thermal_feedback.py: {why}"}  # noqa: E731
    d["timing_model"]["timing_source"] = "fixed"
    d["timing_model"].setdefault("fixed", {})["read_ns"] = num(fixed_read_ns, "FIXED service so q is exact")
    th = d["thermal"]
    th["telemetry"] = "constant"
    th["telemetry_gpu_power_w"] = num(gpu_w, "constant compute-die telemetry")
    th["hbm_traffic_bytes_per_s"] = num(0, "no HBM traffic modeled")
    for k in ("rtt_c", "ltt_c", "stt_c", "shutdown_c", "hysteresis_k"):
        th[k] = num(round(sc[k], 3), thresholds_from)
    th["policy"] = "hysteresis"
    e = d["energy"]
    e["j_per_byte"] = num(e["j_per_byte"]["value"] * energy_x, f"x{energy_x:g} acceleration (disclosed)")
    d["reliability"]["a_t"] = num(a_t, "retention acceleration (disclosed): deadlines of seconds")
    d["name"] = f"{BASE_PROFILE}-feedback"
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


def exact_decompositions(*, requests: int, modeled_ns: int, claims: int, s: int, refresh_ns: int,
                         q_light: int) -> list[dict]:
    """Every integer split (n_light_plain, claims_light) with requests = n_normal + n_light, every request's service
    ceil((s + r)·1e6/q) for q in {1e6, q_light} and r the refresh service of a claimed quantum (0 otherwise), that
    adds up to ``modeled_ns`` exactly. Empty: no split does (a q other than the two, or service not applied
    exactly once). Several can: with claims ≥ (a1 - a0) every large enough total has one, so the split alone
    says little; ``evaluate`` holds its Light count against the trace's."""
    a0, a1 = s, ceil_scale(s, q_light)
    b0, b1 = s + refresh_ns, ceil_scale(s + refresh_ns, q_light)
    plain = requests - claims
    out = []
    for cl in range(claims + 1):                       # claims made in Light
        cn = claims - cl
        # modeled = (plain - nl)·a0 + nl·a1 + cn·b0 + cl·b1  ->  nl = (modeled - plain·a0 - cn·b0 - cl·b1) / (a1 - a0)
        num = modeled_ns - cn * b0 - cl * b1 - plain * a0
        if a1 == a0:
            if num == 0:
                out.append({"n_light_plain": 0, "claims_light": cl, "claims_normal": cn})
            continue
        if num % (a1 - a0) == 0 and 0 <= num // (a1 - a0) <= plain:
            out.append({"n_light_plain": num // (a1 - a0), "claims_light": cl, "claims_normal": cn})
    return out


def exact_decomposition(*, requests: int, modeled_ns: int, claims: int, s: int, refresh_ns: int, q_light: int,
                        last_claim_ns: int | None = None) -> dict | None:
    """The first of ``exact_decompositions`` (None if there is none)."""
    d = exact_decompositions(requests=requests, modeled_ns=modeled_ns, claims=claims, s=s, refresh_ns=refresh_ns,
                             q_light=q_light)
    return d[0] if d else None


def light_requests_from_trace(trace: list[dict], kernel_requests: int | None = None) -> tuple[float, float]:
    """Requests served at the Light q, from the poller's rows up to the first idle one (the live activity section's
    requests, or bytes / 128 in a trace without that column), and a bound on the error. Severe admits nothing, so
    every request counted between two rows that are both Light or Severe was admitted in Light (the waiting warps
    are admitted at Light's q when Severe clears), wherever in the interval the switch fell and however late the
    count was published. Only intervals touching Normal are ambiguous: each such interval, and the one after it
    (a late publication), goes into the bound, with the requests never published (``kernel_requests`` less the
    last count)."""
    from hbfcommon import ctl as C
    rows = []
    for r in trace:
        rows.append(r)
        if not r["busy"]:
            break
    n = lambda r: r["live_requests"] if "live_requests" in r else r["live_bytes"] / KERNEL_BYTES_PER_REQUEST  # noqa: E731
    throttled = (C.HBF_TH_LIGHT, C.HBF_TH_SEVERE)
    d = [n(b) - n(a) for a, b in zip(rows, rows[1:])]
    est = tol = 0.0
    for i, (a, b) in enumerate(zip(rows, rows[1:])):
        if a["mode"] in throttled and b["mode"] in throttled:
            est += d[i]
        elif (a["mode"] in throttled) != (b["mode"] in throttled):
            tol += d[i] + (d[i + 1] if i + 1 < len(d) else 0.0)
    if kernel_requests is not None and rows:
        tol += max(0.0, kernel_requests - n(rows[-1]))
    return est, tol


def refresh_service(profile_path: str | Path) -> tuple[int, int]:
    """(refresh quantum bytes, the service the device adds to the admission that claims one): hb_refresh_service,
    pages of the quantum x (tR + tPROG) of the run's profile."""
    from hbfcommon.profile import load_profile
    mp = load_profile(str(profile_path)).to_media_params()
    quantum = int(mp["refresh_quantum_bytes"])
    return quantum, math.ceil(quantum / mp["page_bytes"]) * (int(mp["t_read_ns"]) + int(mp["t_prog_ns"]))


def evaluate(*, trace: list[dict], kernel: dict, s_ns: int, refresh_ns: int, quantum: int, light_q_ppm: int,
             summary_thermal: dict, summary_refresh: dict, ltt_c: float, stt_c: float,
             retention_s_at_ambient: float) -> dict:
    """The checks of a finished run, from what it recorded only (the poller's trace, the kernel's counters, hbfd's
    summary), each with the line that says why it holds or not. Pure: tested on the recorded H100 run."""
    from hbfcommon import ctl as C
    busy = [r for r in trace if r["busy"]]
    modes = {r["mode"] for r in busy}
    peak = max((r["hbf_c"] for r in busy), default=math.nan)
    checks, why = {}, {}
    checks["light_and_severe_during_the_kernel"] = {C.HBF_TH_LIGHT, C.HBF_TH_SEVERE} <= modes
    why["light_and_severe_during_the_kernel"] = (
        f"published modes while busy: {sorted(modes)}; peak HBF {peak:.2f} C vs LTT {ltt_c:.2f} / STT {stt_c:.2f} C")
    grew = len(busy) > 2 and busy[-1]["live_bytes"] > busy[0]["live_bytes"]
    checks["live_activity_during_the_kernel"] = grew
    why["live_activity_during_the_kernel"] = (f"live bytes {busy[0]['live_bytes'] if busy else 0} -> "
                                              f"{busy[-1]['live_bytes'] if busy else 0} over {len(busy)} busy rows")
    tw = int(kernel["thermal_waits"])
    checks["severe_withholds"] = tw > 0 and C.HBF_TH_SEVERE in modes
    why["severe_withholds"] = (f"thermal_waits {tw} (counted only when a warp finds admission closed, i.e. Severe, "
                               f"hb_admit_withheld); Severe {'seen' if C.HBF_TH_SEVERE in modes else 'never published'}"
                               " while busy")
    decs = exact_decompositions(requests=int(kernel["requests"]), modeled_ns=int(kernel["modeled_ns"]),
                                claims=int(kernel["refresh_claims"]), s=s_ns, refresh_ns=refresh_ns, q_light=light_q_ppm)
    est, tol = light_requests_from_trace(trace, int(kernel["requests"]))
    best = min(decs, key=lambda d: abs(d["n_light_plain"] + d["claims_light"] - est), default=None)
    n_light = None if best is None else best["n_light_plain"] + best["claims_light"]
    checks["q_exact"] = best is not None and n_light > 0 and abs(n_light - est) <= tol
    why["q_exact"] = (("no split of modeled_ns into services at q = 1e6 and q = %d" % light_q_ppm) if best is None else
                      f"{len(decs)} exact split(s); the nearest serves {n_light} requests at q = {light_q_ppm} "
                      f"against {est:.0f} +- {tol:.0f} in Light from the trace"
                      + ("" if n_light else ": the Light q was never exercised (Normal alone is exact)"))
    claims, rbytes = int(kernel["refresh_claims"]), int(kernel["refresh_bytes"])
    checks["refresh_injected"] = claims > 0 and (claims - 1) * quantum < rbytes <= claims * quantum
    why["refresh_injected"] = f"{claims} claims, {rbytes} refresh bytes, quantum {quantum} (last one may be partial)"
    led = summary_refresh.get("ledger") or {}
    lifetime_s = sum((summary_thermal.get("residency_ns") or {}).values()) / 1e9
    first_debt = next((r["t_s"] for r in trace if r["refresh_debt"] > 0), None)
    # hbfd's age when the first debt was published, at most: its time outside the polled kernel plus the debt's time
    age = None if first_debt is None else first_debt + max(0.0, lifetime_s - trace[-1]["t_s"])
    done = int(summary_refresh.get("completed_refresh_blocks") or 0)
    rd_max, rd_lim = led.get("read_disturb_max", math.inf), led.get("read_disturb_limit", 0)
    checks["retention_shortens"] = done > 0 and rd_max < rd_lim and age is not None and age < retention_s_at_ambient
    why["retention_shortens"] = (
        "no refresh debt published" if age is None else
        f"first refresh debt {first_debt:.2f} s into the kernel, hbfd at most {age:.2f} s old (the threshold at ambient: "
        f"{retention_s_at_ambient:.1f} s); {done} blocks refreshed; read disturb max {rd_max} < limit {rd_lim}: eligible "
        "by temperature-driven damage")
    return {"checks": checks, "why": why, "decompositions": decs, "decomposition": best,
            "light_requests_from_trace": est, "light_requests_tolerance": tol}


def save(out: Path, res: dict, status: str) -> Path:
    """Write what the run has so far (atomic replace): a call cut short by the device limit still leaves its
    scenario, the trace up to then and where it stopped (``status``)."""
    from hbfcommon.fsutil import atomic_write_text
    res["status"] = status
    return atomic_write_text(out / "thermal_feedback.json", json.dumps(res, indent=1, default=str) + "\n")


CAL_THRESHOLDS = {"rtt_c": 80.0, "ltt_c": 85.0, "stt_c": 90.0, "shutdown_c": 100.0, "hysteresis_k": 2.0}


def kernel_shape(args) -> dict:
    """The kernel's modeled bandwidth (one 128-byte request per warp per ``--fixed-read-ns`` at q = 1e6) and the
    bytes the main launch moves."""
    warps = args.blocks * args.threads // 32
    return {"warps": warps, "modeled_bytes_per_s": warps * KERNEL_BYTES_PER_REQUEST / (args.fixed_read_ns * 1e-9),
            "kernel_bytes": float(warps * args.iters * KERNEL_BYTES_PER_REQUEST),
            "calibration_bytes": float(warps * args.cal_iters * KERNEL_BYTES_PER_REQUEST)}


def make_plan(args, rate_bps: float, rate_source: str) -> dict:
    """``plan`` for these arguments, plus the retention acceleration at the planned LTT."""
    k = base_constants()
    ks = kernel_shape(args)
    pl = plan(rate_bps=rate_bps, rate_source=rate_source, modeled_bps=ks["modeled_bytes_per_s"],
              kernel_bytes=ks["kernel_bytes"], gpu_w=args.gpu_w, hbf_w=args.hbf_w, light_at_s=args.light_at_s,
              severe_at_s=args.severe_at_s, derate=args.derate, pre_idle_s=args.pre_idle_s, limit_s=args.max_s)
    a_t, cold_s = retention_a_t(hot_c=pl["scenario"]["ltt_c"], cold_c=k["ambient_c"], to_threshold_s=args.retention_s,
                                ea_ev=k["ea_ev"], l_ref_h=k["l_ref_h"], t_ref_c=k["t_ref_c"],
                                threshold=k["refresh_threshold"])
    pl.update({"a_t": a_t, "retention_s_at_ltt": args.retention_s, "retention_s_at_ambient": cold_s})
    return pl


def check_args(args) -> None:
    """Refuse, before any GPU time is spent, arguments that cannot give the run the issue asks for."""
    if args.blocks <= 0 or args.threads <= 0 or args.threads % 32 or args.threads > 1024:
        raise SystemExit(f"--blocks must be > 0 and --threads a multiple of 32 in 32..1024 "
                         f"(got {args.blocks} x {args.threads})")
    if args.fixed_read_ns <= 0 or args.iters <= 0 or args.cal_iters <= 0:
        raise SystemExit("--fixed-read-ns, --iters and --cal-iters must be > 0")
    if not 0 < args.light_at_s < args.severe_at_s:
        raise SystemExit(f"need 0 < --light-at-s < --severe-at-s (got {args.light_at_s:g}, {args.severe_at_s:g})")
    if args.hbf_w <= 0 or args.gpu_w < 0 or args.retention_s <= 0:
        raise SystemExit("--hbf-w and --retention-s must be > 0, --gpu-w >= 0")
    if not 0 < args.derate <= 1 or args.pre_idle_s < 0:
        raise SystemExit(f"--derate must be in (0, 1] and --pre-idle-s >= 0 (got {args.derate:g}, {args.pre_idle_s:g})")
    if args.rate_bps is not None and not args.rate_bps > 0:
        raise SystemExit(f"--rate-bps must be > 0 (got {args.rate_bps:g})")
    if not 0 < args.max_s <= 540:
        raise SystemExit(f"--max-s must be in (0, 540] (one device call is at most 600 s; got {args.max_s:g})")
    if args.iters * args.fixed_read_ns * 1e-9 < args.severe_at_s * 2:
        raise SystemExit(f"the kernel's modeled length ({args.iters} x {args.fixed_read_ns} ns) is shorter than twice "
                         f"--severe-at-s: Severe would not be crossed and cleared while it runs")
    if args.cal_iters * args.fixed_read_ns * 1e-9 < 0.5:
        raise SystemExit(f"the calibration launch ({args.cal_iters} x {args.fixed_read_ns} ns modeled) is under 0.5 s: "
                         "too short to measure the rate")


def _launch_and_poll(s, f, buf, nwords, outbuf, args, iters: int, trace: list, max_s: float,
                     on_save=None) -> dict:  # pragma: no cover - needs a GPU
    """One launch of rate_instr; polls the control region every ~5 ms into ``trace`` until the stream is idle or
    ``max_s``; returns the kernel counters' difference and the host wall time from launch to synchronize."""
    from hbfcommon import ctl as C
    from hbfcommon.errors import ControlRegionError
    from runtime_cuda import cudrv
    from runtime_thermal_q import kc, rate_args
    d = cudrv.drv()
    th, rf = s.ctl.ctl.thermal, s.ctl.ctl.refresh
    b0 = kc(s)
    last = C.Activity.zero()                                   # before the first consistent read
    t0 = time.monotonic()
    s.launch(f, (args.blocks,), (args.threads,), rate_args(buf, nwords, outbuf, iters), kernel="rate_instr")
    if on_save:
        on_save("kernel launched")
    last_save = time.monotonic()
    while True:
        q = d.cuStreamQuery(d.CUstream(0))
        busy = int(q[0] if isinstance(q, tuple) else q) == int(d.CUresult.CUDA_ERROR_NOT_READY)
        try:
            a, unsettled = C.read_activity(s.ctl.ctl), False
        except ControlRegionError:
            # a GPU publication in flight through the whole read (seen on the H100 as Severe began, stop 40): like
            # hbfd, keep the last consistent totals (lower bounds of what the device did) and mark the row
            a, unsettled = last, True
        last = a
        trace.append({"t_s": round(time.monotonic() - t0, 4), "busy": busy, "mode": int(th.mode), "q_ppm": int(th.q_ppm),
                      "hbf_c": int(th.hbf_max_millic) / 1000, "refresh_debt": int(rf.debt_total_bytes),
                      "live_bytes": sum(a.bytes), "live_requests": sum(a.requests), "live_flushes": a.flushes,
                      "live_unsettled": unsettled})
        if not busy or time.monotonic() - t0 > max_s:
            break
        if on_save and time.monotonic() - last_save > 2.0:                 # the trace so far, every 2 s
            on_save(f"kernel running ({trace[-1]['t_s']:.1f} s)")
            last_save = time.monotonic()
        time.sleep(0.005)
    s.synchronize()
    wall = time.monotonic() - t0
    b1 = kc(s)
    ld0, ld1 = b0["ops"]["load"], b1["ops"]["load"]
    return {"requests": ld1["requests"] - ld0["requests"], "bytes": ld1["bytes"] - ld0["bytes"],
            "modeled_ns": ld1["modeled_ns"] - ld0["modeled_ns"], "thermal_waits": b1["thermal_waits"] - b0["thermal_waits"],
            "refresh_claims": b1["refresh_claims"] - b0["refresh_claims"],
            "refresh_bytes": b1["refresh_bytes"] - b0["refresh_bytes"], "wall_s": wall,
            "ended_by": "stream idle" if not trace[-1]["busy"] else f"--max-s {max_s:g}"}


def _session(tmp: Path, prof: Path, cubin: str, args):  # pragma: no cover - needs a GPU
    """hbfd on ``prof`` (thermal model, refresh service, fixed engine), a session, the kernel, a 64 MiB registered
    TIMING range, the kernel's output buffer."""
    import runtime_cuda
    from runtime_cuda import cudrv
    from runtime_thermal_q import bind_microbench
    from runtime_triton import start_hbfd
    hb = start_hbfd(tmp, prof, {"HBFD_THERMAL": "auto", "HBFD_REFRESH": "auto", "HBFD_ENGINE": "fixed"})
    try:
        s = runtime_cuda.attach(socket=str(hb.socket))
        f = bind_microbench(s, cubin)
        nwords = (64 << 20) // 4
        buf = cudrv.mem_alloc(nwords * 4)
        s.register_timing_range(buf, nwords * 4, label="feedback")
        outbuf = cudrv.mem_alloc(args.blocks * args.threads * 4)
    except BaseException:
        hb.stop()
        raise
    return hb, s, f, buf, nwords, outbuf


def calibration_child(args, cal: Path) -> int:  # pragma: no cover - needs a GPU
    """In its own process (its own CUDA context, its own hbfd): the same kernel (same grid, ``--cal-iters``
    iterations) under an hbfd that cannot throttle (thresholds far above, no energy or retention acceleration);
    writes ``cal/calibration.json``: the trace, the counters, the achieved rate."""
    from hbfcommon.fsutil import atomic_write_text
    from runtime_cuda import linker
    cubin = str(linker.build_microbench()["cubin"])
    prof = derived(cal / "profile.json", gpu_w=args.gpu_w, energy_x=1.0, sc=CAL_THRESHOLDS, a_t=1.0,
                   fixed_read_ns=args.fixed_read_ns, thresholds_from="calibration launch: far above, never throttles")
    trace: list = []
    hb, s, f, buf, nwords, outbuf = _session(cal, prof, cubin, args)
    try:
        kern = _launch_and_poll(s, f, buf, nwords, outbuf, args, args.cal_iters, trace, args.max_s)
        s.close()
        hb.shutdown("calibration done")
    finally:
        hb.stop()
    res = {"iters": args.cal_iters, "kernel": kern, "trace": trace}
    if kern["thermal_waits"] or any(r["q_ppm"] != 1_000_000 for r in trace):
        res["error"] = "the calibration launch was throttled: its rate is not the kernel's own"
    else:
        try:
            res["rate"] = measured_rate(trace)
            res["rate"]["counters_bytes_per_s"] = kern["bytes"] / kern["wall_s"]
        except ValueError as e:
            res["error"] = f"no rate from the calibration launch: {e}"
    atomic_write_text(cal / "calibration.json", json.dumps(res, indent=1) + "\n")
    return 0 if "error" not in res else 1


def calibrate_rate(args, tmp: Path, res: dict, out: Path) -> dict:  # pragma: no cover - needs a GPU
    """Runs ``calibration_child`` (this script, ``--calibration-child``) and returns its measured rate: the
    achieved bytes/s on this card from the live activity section (what the thermal model will see), with the
    counters' bytes over the host's wall time beside it. SystemExit (one line) when it gives none."""
    import subprocess
    cal = tmp / "cal"
    cal.mkdir()
    argv = list(args.argv)
    t = time.monotonic()
    try:
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--calibration-child", str(cal)],
                           capture_output=True, text=True, timeout=args.max_s + 120)
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = "timeout", (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or ""))
    f = cal / "calibration.json"
    res["calibration"] = json.loads(f.read_text()) if f.exists() else {}
    res["calibration"].update({"child_rc": rc, "child_s": round(time.monotonic() - t, 2)})
    m = res["calibration"].get("rate")
    if rc != 0 or not m:
        res["calibration"]["stderr_tail"] = err[-4000:]
        res["error"] = res["calibration"].get("error") or f"calibration launch failed (rc {rc})"
        save(out, res, "calibration failed")
        raise SystemExit(res["error"])
    save(out, res, "calibrated")
    log.info("calibration: %.2f GB/s from the live activity, %.2f GB/s from the counters over %.2f s",
             m["bytes_per_s"] / 1e9, m["counters_bytes_per_s"] / 1e9, res["calibration"]["kernel"]["wall_s"])
    return m


def run_gpu(args, out: Path) -> dict:  # pragma: no cover - needs a GPU
    from runtime_cuda import linker
    tmp = Path(tempfile.mkdtemp(prefix="hbf-feedback-"))
    res: dict = {"what": "thermal feedback loop on the GPU (issue 17 item 4)", "date_utc": time.strftime("%F %T", time.gmtime()),
                 "command": "python3 bench/thermal_feedback.py " + " ".join(args.argv)}
    ks = kernel_shape(args)
    if args.rate_bps is not None:
        rate, source = args.rate_bps, "given (--rate-bps)"
    else:
        m = calibrate_rate(args, tmp, res, out)
        rate, source = m["bytes_per_s"], f"measured (calibration launch, {args.cal_iters} iterations)"
    try:
        pl = make_plan(args, rate, source)
    except SystemExit as e:
        res["error"] = str(e)
        save(out, res, "plan refused")
        raise
    res["plan"] = pl
    res.update({"kernel_modeled_bytes_per_s": ks["modeled_bytes_per_s"], "energy_x": pl["energy_x"],
                "scenario": pl["scenario"], "a_t": pl["a_t"]})
    main_dir = tmp / "main"
    main_dir.mkdir()
    prof = derived(main_dir / "profile.json", gpu_w=args.gpu_w, energy_x=pl["energy_x"], sc=pl["scenario"],
                   a_t=pl["a_t"], fixed_read_ns=args.fixed_read_ns,
                   thresholds_from=f"placed on the model's trajectory at {args.derate:g} x the {source} rate")
    res["profile_json"] = json.loads(prof.read_text())
    save(out, res, "planned: starting hbfd")
    cubin = str(linker.build_microbench()["cubin"])
    trace: list = []
    res["trace"] = trace
    hb = None
    try:
        hb, s, f, buf, nwords, outbuf = _session(main_dir, prof, cubin, args)
        kern = _launch_and_poll(s, f, buf, nwords, outbuf, args, args.iters, trace, args.max_s,
                                on_save=lambda st: save(out, res, st))
        s.close()
        summ = json.loads(hb.summary.read_text()) if hb.shutdown("bench done") == 0 else {}
    except BaseException as e:
        res["error"] = f"{type(e).__name__}: {e}"
        save(out, res, "failed")                                   # the trace up to the failure stays
        raise
    finally:
        if hb is not None:
            hb.stop()
    quantum, r_ns = refresh_service(prof)
    th_s = (summ or {}).get("services", {}).get("thermal", {})
    rf_s = (summ or {}).get("services", {}).get("refresh", {})
    res.update({"kernel": kern, "summary_thermal": {k: th_s.get(k) for k in ("transitions", "residency_ns", "live_activity",
                                                                            "peak_hbf_c", "terminal_status")},
                "summary_refresh": rf_s})
    try:
        res["achieved"] = measured_rate(trace)
    except ValueError as e:
        res["achieved"] = {"error": str(e)}
    ev = evaluate(trace=trace, kernel=kern, s_ns=args.fixed_read_ns, refresh_ns=r_ns, quantum=quantum,
                  light_q_ppm=pl["light_q_ppm"], summary_thermal=res["summary_thermal"], summary_refresh=rf_s,
                  ltt_c=pl["scenario"]["ltt_c"], stt_c=pl["scenario"]["stt_c"],
                  retention_s_at_ambient=pl["retention_s_at_ambient"])
    res.update(ev)
    res["ok"] = all(ev["checks"].values())
    return res


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--gpu-w", type=float, default=150.0, help="constant compute-die telemetry (W)")
    ap.add_argument("--hbf-w", type=float, default=40.0,
                    help="HBF dynamic power the kernel dissipates at the rate the plan is made from (the calibration "
                         "launch's measured rate, or --rate-bps): sets the disclosed energy-per-byte acceleration")
    ap.add_argument("--fixed-read-ns", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=264)
    ap.add_argument("--threads", type=int, default=128)
    ap.add_argument("--iters", type=int, default=4_000_000, help="kernel length (iterations per warp)")
    ap.add_argument("--cal-iters", type=int, default=500_000,
                    help="the calibration launch's iterations per warp (same grid; measures the achieved rate)")
    ap.add_argument("--rate-bps", type=float, default=None,
                    help="plan from this achieved rate (bytes/s) instead of a calibration launch (--plan-only: "
                         "instead of the modeled rate)")
    ap.add_argument("--derate", type=float, default=0.8,
                    help="place the thresholds for a kernel this fraction of the planning rate (margin)")
    ap.add_argument("--pre-idle-s", type=float, default=3.0,
                    help="hbfd's idle time before the launch in the nominal prediction (r1 on the H100: ~2.7 s)")
    ap.add_argument("--light-at-s", type=float, default=0.5)
    ap.add_argument("--severe-at-s", type=float, default=4.0)
    ap.add_argument("--retention-s", type=float, default=5.0, help="seconds to the refresh threshold at LTT")
    ap.add_argument("--max-s", type=float, default=120.0, help="stop polling after this long")
    ap.add_argument("--plan-only", action="store_true", help="print the plan (CPU) and exit")
    ap.add_argument("--calibration-child", default=None, help=argparse.SUPPRESS)   # run_gpu's calibration process
    return ap


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    check_args(args)
    if args.plan_only:
        ks = kernel_shape(args)
        rate, source = ((args.rate_bps, "given (--rate-bps)") if args.rate_bps is not None else
                        (ks["modeled_bytes_per_s"], "modeled (no calibration on the CPU; the GPU run measures it)"))
        print(json.dumps(make_plan(args, rate, source), indent=1))
        return 0
    if args.calibration_child:
        return calibration_child(args, Path(args.calibration_child))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run_gpu(args, out)
    save(out, res, "done")
    print(json.dumps(res["checks"]))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
