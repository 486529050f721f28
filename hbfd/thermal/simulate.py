"""Closed-loop thermal simulation in simulated time (the thermal experiments; no daemon, no GPU).

Per 10 ms tick: the policy's decision sets what the HBF stack may serve (``q`` of the media
bandwidth while admission is open, nothing while closed); refresh traffic planned by the reliability
scheduler is served first out of that budget (it shares the media with the application); the rest
goes to application reads up to the offered load. Media energy ``E = E_cmd + e_byte × bytes`` of
what was served, the HBF idle power, the HBM power from its traffic and the GPU power from the
telemetry source form the package power vector; the ROM gives the temperatures at the tick's end;
the policy decides the next tick; retention damage and the failure hazard integrate.

Long horizons: while the decision, the telemetry and the refresh state hold, the input is constant,
and the ROM's modal form gives the whole stretch in closed form (``ModalROM.outputs_constant``); the
stretch ends at the first tick where the policy's decision would change (``Policy.scan``), the
telemetry changes, or a block reaches its refresh threshold. ``fast=False`` runs tick by tick; the
two agree (tested). 86,400 s at a decision that holds for long stretches take seconds; a policy that changes its
decision every few ticks pays per tick (ocp-sg2 16-high, 700 W: hysteresis-early flips every ~7 ticks, 12.5 CPU-s
per 600 s simulated on the 2-core box, so ~30 CPU-min a day; PI while it regulates, 9.9 CPU-s per 600 s).

Pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hbfd.reliability.hazard import HazardSweep
from hbfd.reliability.ledger import BlockLedger, lifetime_h
from hbfd.reliability.refresh import RefreshScheduler

from .controller import MODE_NAMES, SHUTDOWN, Decision, Policy
from .power import HbmPowerModel, gpu_die_power_w, hbf_layer_weights
from .rom import ThermalROM
from .service import ThermalRecorder
from .telemetry import ConstantSource, TelemetryGuard, TraceSource


@dataclass
class Scenario:
    horizon_s: float
    offered_read_bytes_per_s: float          # application demand (384 GB/s at SG1)
    media_bytes_per_s: float                 # what the stack can serve at q = 1e6
    idle_w: float
    j_per_byte: float
    read_j: float                            # per read command
    program_j: float
    read_command_bytes: int                  # bytes per read command (for E_cmd)
    hbm: HbmPowerModel
    hbm_traffic_bytes_per_s: float
    telemetry_max_age_ns: int = 1_000_000_000
    sample_period_s: float = 1.0
    bandwidth_window_s: tuple[float, float] = (30.0, 60.0)
    thresholds: dict[str, float] = field(default_factory=dict)
    max_chunk_ticks: int = 6000
    page_bytes: int = 4096
    refresh_max_share: float = 0.5          # refresh takes at most this share of a tick's media budget


MAX_BACKOFF = 64          # ticks taken step by step, at most, between two stretches computed for nothing


def _trace_changes(src) -> np.ndarray | None:
    if isinstance(src, TraceSource):
        return np.asarray(src.t, np.int64)
    return None


def run_closed_loop(rom: ThermalROM, policy: Policy, telemetry: TelemetryGuard, sc: Scenario, *,
                    ledger: BlockLedger | None = None, refresh: RefreshScheduler | None = None,
                    hazard: HazardSweep | None = None, fast: bool = True) -> dict[str, Any]:
    dt_ns = rom.dt_ns
    dt_s = dt_ns / 1e9
    n_ticks = int(round(sc.horizon_s / dt_s))
    names = list(rom.input_names)
    outs = list(rom.output_names)
    i_gpu = names.index("gpu") if "gpu" in names else None
    i_hbm = names.index("hbm") if "hbm" in names else None
    w_idle = hbf_layer_weights(names, dynamic=False)
    w_dyn = hbf_layer_weights(names, dynamic=True)
    o_hbf = np.array([i for i, o in enumerate(outs) if o.startswith("hbf")])
    o_layers = np.array([i for i, o in enumerate(outs) if o.startswith("hbf_l")])
    every = max(1, int(round(sc.sample_period_s / dt_s)))
    rec = ThermalRecorder(outs, sc.thresholds, dt_ns, every, max_samples=100_000)
    modal = rom.modal()
    modal.reset()
    trace_t = _trace_changes(telemetry.source)
    constant = isinstance(telemetry.source, ConstantSource)
    hbm_w = sc.hbm.power_w(sc.hbm_traffic_bytes_per_s)
    e_per_byte = sc.j_per_byte + sc.read_j / sc.read_command_bytes
    e_per_refresh_byte = sc.j_per_byte + 0.5 * (sc.read_j / sc.read_command_bytes + sc.program_j / 4096)

    app_bytes = 0.0
    refresh_bytes = 0.0
    window_bytes = 0.0
    w0, w1 = (int(round(x / dt_s)) for x in sc.bandwidth_window_s)
    d: Decision = policy.decision()
    k = 0
    terminal = "clean"
    error = None
    chunks = 0
    evaluations = 0         # stretches computed (outputs_constant calls), used or not
    slow_ticks = 0
    last_temps = rom.d.copy()

    def power(gpu_board_w: float, served_app: float, served_refresh: float) -> np.ndarray:
        p = sc.idle_w * w_idle + (e_per_byte * served_app + e_per_refresh_byte * served_refresh) / dt_s * w_dyn
        if i_hbm is not None:
            p[i_hbm] += hbm_w
        if i_gpu is not None:
            p[i_gpu] += gpu_die_power_w(gpu_board_w, hbm_w)
        return p

    def budget(dec: Decision) -> float:
        return sc.media_bytes_per_s * dt_s * dec.q_ppm / 1e6 if dec.admission_open else 0.0

    def account_window(k0: int, n: int, app_per_tick: float) -> float:
        lo, hi = max(k0, w0), min(k0 + n, w1)
        return max(0, hi - lo) * app_per_tick

    chunk = sc.max_chunk_ticks
    # Ticks to take step by step before a stretch is tried again. A stretch that ended where the decision (or a
    # block's threshold) changes is followed by that tick (a stretch from there would end at once); a stretch
    # computed for nothing (h = 0: a policy whose output moves every tick, PI while it regulates) doubles the
    # wait, up to MAX_BACKOFF ticks. Only the cost changes: the step-by-step tick is the reference semantics.
    wait = 0
    backoff = 1
    while k < n_ticks:
        t_end = (k + 1) * dt_ns
        s = telemetry.read(t_end)
        in_refresh = refresh is not None and refresh.in_flight is not None
        if wait > 0:
            wait -= 1
        elif fast and not in_refresh and (constant or trace_t is not None):
            # a stretch with constant input
            n = min(chunk, n_ticks - k)
            if trace_t is not None:
                nxt = np.searchsorted(trace_t, t_end, side="right")
                if nxt < len(trace_t):
                    n = min(n, max(1, int((trace_t[nxt] - t_end) // dt_ns)))
            b = budget(d)
            app = min(b, sc.offered_read_bytes_per_s * dt_s)
            p = power(s.gpu_power_w, app, 0.0)
            Y = modal.outputs_constant(p, n)
            evaluations += 1
            hb = Y[:, o_hbf].max(axis=1)
            h = policy.scan(hb)                       # ticks before the decision changes
            if ledger is not None and ledger.n_blocks:
                # the first tick at which any block reaches its retention or read-disturb threshold
                L = lifetime_h(Y[:, o_layers], ea_ev=ledger.p.ea_retention_ev, l_ref_h=ledger.p.l_ref_h,
                               t_ref_c=ledger.p.t_ref_c)
                cum = ledger.integral[None, :] + np.cumsum(ledger.p.a_t * (dt_s / 3600.0) / L, axis=0)
                base_min = np.full(ledger.layers, np.inf)
                np.minimum.at(base_min, ledger.layer, ledger.base)
                reach = (cum - base_min[None, :] >= ledger.p.refresh_damage_threshold).any(axis=1)
                per_tick = app / sc.page_bytes / (ledger.n_blocks * ledger.blocks_per_entry)
                if per_tick > 0:
                    dist = ledger.disturb().max() + per_tick * np.arange(1, n + 1)
                    reach |= dist >= ledger.p.read_disturb_limit
                hit = np.flatnonzero(reach)
                if len(hit):
                    h = min(h, int(hit[0]))
            # adapt the stretch length: computing far past the next decision change is wasted work
            chunk = min(sc.max_chunk_ticks, chunk * 2) if h >= n else max(16, min(chunk, 4 * max(h, 1)))
            if h < 1:
                wait = backoff - 1                    # this tick now, step by step, then backoff - 1 more
                backoff = min(2 * backoff, MAX_BACKOFF)
            else:
                backoff = 1
                if h < n:
                    wait = 1
                n = min(n, h)
                modal.advance_constant(p, n)
                Yh, hbh = Y[:n], hb[:n]
                rec.account(policy.mode, Yh, hbh)
                policy.absorb(hbh)
                if ledger is not None:
                    ledger.accumulate_series(dt_s, Yh[:, o_layers])
                    ledger.add_uniform_reads(app * n / sc.page_bytes)
                if hazard is not None:
                    hazard.add_series(dt_s, hbh)
                for j in range(n):
                    if (k + j + 1) % every == 0:
                        rec.sample(k + j, Yh[j], hbh[j], s.gpu_power_w, d)
                app_bytes += app * n
                window_bytes += account_window(k, n, app)
                last_temps = Yh[-1]
                k += n
                chunks += 1
                if ledger is not None and refresh is not None:
                    refresh.update_eligibility()
                    refresh.plan()
                continue
        # one tick, step by step
        slow_ticks += 1
        b = budget(d)
        served_refresh = 0.0
        if refresh is not None and b > 0:
            # refresh first, block after block, out of its share of this tick's media budget
            rb = b * sc.refresh_max_share
            b -= rb
            while rb >= refresh.page_bytes:
                if refresh.in_flight is None and refresh.plan() is None:
                    break
                used = refresh.drain(int(rb))
                if used == 0:
                    break
                served_refresh += used
                rb -= used
            b += rb                                   # what refresh did not use goes to the application
        app = min(max(b, 0.0), sc.offered_read_bytes_per_s * dt_s)
        p = power(s.gpu_power_w, app, served_refresh)
        temps = modal.step(p)
        hbf_max = float(temps[o_hbf].max())
        rec.account(policy.mode, temps[None, :], np.array([hbf_max]))
        if ledger is not None:
            ledger.accumulate(dt_s, temps[o_layers])
            ledger.add_uniform_reads(app / sc.page_bytes)
        if hazard is not None:
            hazard.add(dt_s, hbf_max)
        n_tr = len(policy.transitions)
        d = policy.decide(k, hbf_max)
        for (tk, frm, to, tc) in policy.transitions[n_tr:]:
            rec.transition(tk, frm, to, tc)
        rec.sample(k, temps, hbf_max, s.gpu_power_w, d, force=len(policy.transitions) > n_tr)
        app_bytes += app
        refresh_bytes += served_refresh
        window_bytes += account_window(k, 1, app)
        last_temps = temps
        k += 1
        if ledger is not None and refresh is not None:
            refresh.update_eligibility()
            refresh.plan()
        if d.mode == SHUTDOWN:
            terminal = "thermal_shutdown"
            error = {"status": terminal, "message": f"HBF reached {hbf_max:.3f} C", "tick": k - 1}
            break

    sim_s = k * dt_s
    w_len = max(0.0, min(sc.bandwidth_window_s[1], sim_s) - sc.bandwidth_window_s[0])
    out = {
        "horizon_s": sc.horizon_s, "simulated_s": sim_s, "ticks": k, "chunks": chunks, "slow_ticks": slow_ticks,
        "stretch_evaluations": evaluations,
        "policy": {**policy.cfg.as_dict(), "final": policy.state_dict()},
        "telemetry": {**telemetry.source.identity(), "reads": telemetry.reads},
        "application_bytes": app_bytes, "refresh_bytes": refresh_bytes,
        "application_bytes_per_s_mean": app_bytes / sim_s if sim_s else 0.0,
        "application_bytes_per_s_window": (window_bytes / w_len) if w_len > 0 else None,
        "bandwidth_window_s": list(sc.bandwidth_window_s),
        "final_temps_c": {n: float(t) for n, t in zip(outs, last_temps)},
        "mode": MODE_NAMES[d.mode], "q_ppm": d.q_ppm,
        **rec.section(), "terminal_status": terminal, "error": error,
    }
    if ledger is not None:
        out["reliability"] = ledger.summary()
    if refresh is not None:
        out["refresh"] = refresh.summary()
        out["refresh"]["refresh_served_bytes"] = refresh_bytes
    if hazard is not None:
        out["hazard_sweep"] = hazard.rows()
    return out


def make_guard(source, max_age_ns: int) -> TelemetryGuard:
    return TelemetryGuard(source, max_age_ns)

