#!/usr/bin/env python3
"""Calibrate the package thermal model against the card (issue 17 item 1): record NVML board power, GPU
temperature, memory temperature and the total energy counter at >= 10 Hz over phases of different power, then fit
the package boundary (hbfd/thermal/calibrate.py) and report the error on held-out phases (goal <= 1 K RMS, <= 2 K max).

Recorder v2 (``phase_plan``; docs/thermal.md §8.2 says why each change): 12 phases of 60 s -- idle, HBM streaming
(256 MiB device-to-device copies) at 25 / 50 / 75 / 100 %, bf16 4096^3 GEMMs at 25 / 50 / 75 / 100 %, mixed, idle
cool-down -- each a steady intensity: the load runs in windows of random length 2-5 ms (``DutySchedule``), far
shorter than the 50 ms sampling and the die's fast response and commensurate with neither (v1's fixed 50 ms windows
at 20 Hz aliased). Every sample also reads ``nvmlDeviceGetTotalEnergyConsumption`` (mJ): the fit's power is the
energy counter's mean over each interval (``cal.energy_power``), not the instantaneous reading. A load switches
10 ms after a reading (``NvmlSampler.switch_time``). Before the first phase of a call its load runs until the GPU
temperature's slope over 60 s is within 1 K/min, at most 120 s (``settle``; recorded in the first phase's target).
Two calls (``--phases 0-5``, ``--phases 6-11``) of at most 9 minutes each; every finished phase is written at once
(phase CSV + recording.json, atomic), so a call that is cut short keeps what it finished. The fit needs no GPU:
run it here on the fetched recordings (``--fit-only DIR1 DIR2``).

    # on the GPU: a check of seconds, then two calls of at most 9 minutes (each call's $OUT starts empty)
    python3 bench/thermal_calibrate.py --preflight
    python3 bench/thermal_calibrate.py --record $OUT/rec --phases 0-5 --no-fit
    python3 bench/thermal_calibrate.py --record $OUT/rec --phases 6-11 --no-fit
    # on the CPU, the two calls' fetched recordings joined in order; writes the fragment hbfd loads as it is
    .venv/bin/python bench/thermal_calibrate.py --fit-only CALL1/rec CALL2/rec \\
        --out bench/results/thermal_calibration.json
    hbfd serve --profile ocp-sg1 --thermal-calibration bench/results/thermal_calibration.json

Arguments are checked before any GPU time is spent (rates, phase lengths, the settle, the phase range against the
plan and the 10-minute call limit, the output directory); ``--record`` first runs the preflight (torch + CUDA, NVML's
power, temperature and energy counter, the kernels timed) and fails within seconds, not after the settle.

v1 was recorded once, on an NVIDIA H100 80GB HBM3 (driver 580.159.04, 2026-12-05; fixed 50 ms duty windows, no
energy counter, 60 s idle settle): bench/results/thermal_calibration_rec_h100_r1/, fit in
bench/results/thermal_calibration_h100_r1.json (held-out goal missed; docs/thermal.md §8.2). v1 recordings still
load and fit as then (their aliased phases held at the phase mean: ``cal.aliased_duty_phases``). v2 is tested on
the CPU only (tests/thermal/test_calibrate_v2.py: NVML and the kernels stood in, a simulated v2 recording fitted;
``--synthetic`` simulates the v2 recorder on the real package).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfd.thermal import calibrate as cal  # noqa: E402

log = logging.getLogger("thermal_calibrate")

RECORDER = "v2: dithered 2-5 ms load windows, NVML energy counter, settle to a slope"
DUTY_WINDOW_S = (0.002, 0.005)    # v2: each load window's length, drawn uniformly (DutySchedule)
LEGACY_DUTY_WINDOW_S = 0.05       # v1 (the H100 recording of 2026-12-05): fixed 50 ms windows, aliased at 20 Hz
GEMM_N = 4096                     # bf16 GEMM of 4096^3: ~0.2 ms on an H100/H200, a fine grain within a window
COPY_CHUNK_BYTES = 256 << 20      # one copy kernel moves 256 MiB (read + write 512 MiB): ~0.2 ms, past the L2
CALL_LIMIT_S = 600.0              # one device call
CALL_OVERHEAD_S = 60.0            # CUDA/torch start, allocation, preflight, kernel timing, writing
SWITCH_AFTER_SAMPLE_S = 0.01     # a phase's load switches this long after a sampler grid instant (the read is done)
SETTLE_CAP_S = 120.0              # the settle's longest (6 x 60 s + 120 s + 60 s = 540 s: 9 minutes a call)
SETTLE_WINDOW_S = 60.0            # the GPU temperature's slope is fitted over this last stretch
# settled when |slope| <= this (K/min): the sensor reads whole degrees, so a slope is seen only once the window holds
# a degree's change (1 K over 60 s); what is left of the start's offset the fit takes up (free_start)
SETTLE_SLOPE_K_MIN = 1.0


@dataclass(frozen=True)
class PlannedPhase:
    name: str
    kind: str                     # idle | hbm | gemm | mixed
    gemm_duty: float              # share of each window spent in GEMMs
    hbm_duty: float               # share of each window spent streaming HBM
    seconds: float


def phase_plan(phase_s: float = 60.0) -> list[PlannedPhase]:
    """v2 (for the H200 run): 12 phases, two calls of six. The default hold-out (every third: 2, 5, 8, 11) holds out
    one phase of each kind -- gemm_25, mixed_50, hbm_75, cool -- and leaves each kind at least two training phases,
    so a split per load kind (``--split-kinds hbm``) is fitted on training phases only and judged on a held-out
    streaming phase; mixed (GEMM + copy) is held out only: it tests whether the shared split carries over."""
    P = PlannedPhase
    return [P("idle", "idle", 0, 0, phase_s), P("hbm_25", "hbm", 0, 0.25, phase_s),
            P("gemm_25", "gemm", 0.25, 0, phase_s), P("gemm_50", "gemm", 0.5, 0, phase_s),
            P("hbm_50", "hbm", 0, 0.5, phase_s), P("mixed_50", "mixed", 0.5, 0.5, phase_s),
            P("idle_2", "idle", 0, 0, phase_s), P("hbm_100", "hbm", 0, 1.0, phase_s),
            P("hbm_75", "hbm", 0, 0.75, phase_s), P("gemm_100", "gemm", 1.0, 0, phase_s),
            P("gemm_75", "gemm", 0.75, 0, phase_s), P("cool", "idle", 0, 0, phase_s)]


def parse_phases(spec: str, n: int) -> list[int]:
    """'0-5', '6-11', '0,2,4', 'all' -> sorted phase indices (each < n)."""
    if spec == "all":
        return list(range(n))
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if a > b:
                    raise ValueError
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise SystemExit(f"--phases: {part!r} is not an index or a range a-b (a <= b)") from None
    bad = sorted(i for i in out if not 0 <= i < n)
    if bad:
        raise SystemExit(f"--phases: {bad} outside the plan's 0..{n - 1}")
    return sorted(out)


def check_call_time(phases: list[PlannedPhase], settle_s: float) -> float:
    """Seconds one device call needs at most (``settle_s``: the settle's cap); refuse a call that cannot end within
    the device limit."""
    need = sum(p.seconds for p in phases) + settle_s + CALL_OVERHEAD_S
    if need > CALL_LIMIT_S:
        raise SystemExit(f"these phases need about {need:.0f} s in one call (limit {CALL_LIMIT_S:.0f} s): split them "
                         "over two calls (--phases 0-5, then --phases 6-11)")
    return need


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--record", metavar="DIR", help="record phases on the GPU into DIR (added to what is there)")
    g.add_argument("--fit-only", metavar="DIR", nargs="+",
                   help="fit a saved recording (no GPU); several DIRs (one per device call: each call's $OUT starts "
                        "empty) are joined in the order given")
    g.add_argument("--preflight", action="store_true",
                   help="on the GPU, seconds: check torch + CUDA, NVML (instantaneous power, GPU and memory "
                        "temperature) and one GEMM and one copy, print what was found, exit 0 only if --record can run")
    g.add_argument("--synthetic", metavar="DIR",
                   help="no GPU: write a recording of the plan generated by the calibration model on --geometry with "
                        "known parameters (H200-like powers, sensor noise, whole-degree quantization) into DIR, fit it, "
                        "and report how well the parameters are recovered (the method's check on the real package)")
    ap.add_argument("--seeds", type=int, default=1, help="--synthetic: recordings of this many noise seeds (7, 8, ...)")
    ap.add_argument("--phases", default="all", help="phase indices of the plan this call records: 0-5, 6-11, all")
    ap.add_argument("--phase-s", type=float, default=60.0, help="seconds per phase (>= 60 for a usable recording)")
    ap.add_argument("--sample-hz", type=float, default=20.0, help="NVML sampling rate (>= 10)")
    ap.add_argument("--settle-cap-s", type=float, default=SETTLE_CAP_S,
                    help="before the first phase of a call, its load runs (not recorded) until the GPU temperature's "
                         "slope is small (--settle-slope-k-min over --settle-window-s), at most this long: the fit "
                         "starts each segment from the steady state of its first power")
    ap.add_argument("--settle-window-s", type=float, default=SETTLE_WINDOW_S, help="the settle's slope window (s)")
    ap.add_argument("--settle-slope-k-min", type=float, default=SETTLE_SLOPE_K_MIN,
                    help="settled when the GPU temperature's |slope| is at most this (K/min)")
    ap.add_argument("--split-kinds", default="",
                    help="fit: phase kinds with a die/HBM split of their own, comma separated (hbm: streaming); "
                         "the fragment then says so and hbfd refuses it (its telemetry has no load kind)")
    ap.add_argument("--fixed-start", action="store_true",
                    help="fit: start each segment's cold plate at the steady state of its first power (v1's fit) "
                         "instead of at a fitted offset from it")
    ap.add_argument("--power-from-readings", action="store_true",
                    help="fit: take the board power from the instantaneous readings even where the energy counter "
                         "was recorded (a comparison; the counter is the default)")
    ap.add_argument("--skip-s", type=float, default=20.0,
                    help="seconds at the start of each segment left out of the fit's residuals")
    ap.add_argument("--no-fit", action="store_true", help="record only")
    ap.add_argument("--power-as-sampled", action="store_true",
                    help="hold every phase's power sample by sample, also for duty-cycled phases whose window the "
                         "sampling does not resolve (by default those are held at their phase mean: the readings "
                         "alias the window)")
    ap.add_argument("--geometry", default="hbf-package-8hi", help="package geometry (name or path)")
    ap.add_argument("--holdout", default=None, help="held-out phase indices (default: every third, 2, 5, 8, ...)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/thermal_calibration.json"),
                    help="fit report + profile fragment (JSON)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--rom-cache", default=None,
                    help="where the pinned-sink ROM is cached (default: beside the geometry, as the daemon looks for "
                         "it; the bundled packages' are committed)")
    return ap


# ------------------------------------------------------------------------------------------- GPU part
class DutySchedule:
    """Which kernels each load window launches: window lengths drawn uniformly from ``window_s`` (seeded), and per
    window ``duty * window / kernel_s`` kernels of each kind, rounded by error diffusion so the launched busy time
    follows the duty exactly over a few windows. Windows of 2-5 ms are far shorter than the sampling period
    (50 ms) and the die's fastest response seen on the card (tens of ms), and being random they are commensurate
    with neither: what ripple remains is noise to the sensors, not a slow beat (the v1 plan's fixed 50 ms windows
    at 20 Hz were). A duty of 1 launches back to back (one synchronization per window)."""

    def __init__(self, gemm_duty: float, hbm_duty: float, gemm_s: float, copy_s: float,
                 window_s: tuple[float, float] = DUTY_WINDOW_S, seed: int = 0):
        if not (0 <= gemm_duty <= 1 and 0 <= hbm_duty <= 1):
            raise ValueError(f"duties must be in [0, 1], got {gemm_duty}, {hbm_duty}")
        if not (gemm_s > 0 and copy_s > 0 and 0 < window_s[0] <= window_s[1]):
            raise ValueError(f"kernel times and windows must be > 0, got {gemm_s}, {copy_s}, {window_s}")
        self.duty = (gemm_duty, hbm_duty)
        self.kernel_s = (gemm_s, copy_s)
        self.window_s = window_s
        self.rng = np.random.default_rng(seed)
        self.acc = [0.0, 0.0]

    def next(self) -> tuple[float, int, int]:
        """(window seconds, GEMMs, copies) of the next window."""
        w = float(self.rng.uniform(*self.window_s))
        n = []
        for i in (0, 1):
            if self.duty[i] >= 1.0:
                n.append(max(1, math.ceil(w / self.kernel_s[i])))
                continue
            self.acc[i] += self.duty[i] * w / self.kernel_s[i]
            k = int(self.acc[i])
            self.acc[i] -= k
            n.append(k)
        return w, n[0], n[1]


class TorchKernels:
    """The load's kernels: bf16 GEMMs of GEMM_N^3 and device-to-device copies of COPY_CHUNK_BYTES taken round-robin
    from two 2 GiB buffers (far past the 50 MiB L2), each kind on its own stream; ``time()`` measures one of each
    with CUDA events (median of 10 after a warm-up)."""

    def __init__(self):
        import torch
        self.torch = torch
        self.a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
        self.b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
        n = 1 << 30                                   # int16 elements: 2 GiB per buffer
        self.src = torch.empty(n, device="cuda", dtype=torch.int16)
        self.dst = torch.empty_like(self.src)
        self.chunk = COPY_CHUNK_BYTES // 2
        self.n_chunks = n // self.chunk
        self.next_chunk = 0
        self.s_gemm = torch.cuda.Stream()
        self.s_copy = torch.cuda.Stream()

    def gemm(self, k: int) -> None:
        with self.torch.cuda.stream(self.s_gemm):
            for _ in range(k):
                self.a @ self.b

    def copy(self, k: int) -> None:
        with self.torch.cuda.stream(self.s_copy):
            for _ in range(k):
                o = self.next_chunk * self.chunk
                self.dst[o:o + self.chunk].copy_(self.src[o:o + self.chunk])
                self.next_chunk = (self.next_chunk + 1) % self.n_chunks

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def time(self) -> tuple[float, float]:
        torch = self.torch
        out = []
        for f in (self.gemm, self.copy):
            f(3)
            self.sync()
            ts = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                stream = self.s_gemm if f == self.gemm else self.s_copy
                e0.record(stream)
                f(1)
                e1.record(stream)
                self.sync()
                ts.append(e0.elapsed_time(e1) / 1e3)
            out.append(float(np.median(ts)))
        return out[0], out[1]


class Load:
    """GEMMs and HBM copies at a steady intensity: each window (``DutySchedule``) launches its kernels, waits for
    them, and idles out the rest of the window. ``kernels``: TorchKernels on the GPU, a stand-in in the CPU tests."""

    def __init__(self, kernels=None, window_s: tuple[float, float] = DUTY_WINDOW_S, seed: int = 0):
        self.k = kernels if kernels is not None else TorchKernels()
        self.gemm_s, self.copy_s = self.k.time()
        self.window_s = window_s
        self.seed = seed

    def run(self, ph: PlannedPhase, seconds: float | None = None, *, until_ns: int | None = None) -> dict:
        """Run ``ph``'s load for ``seconds``, or until ``until_ns`` (time.monotonic_ns; the last window is cut
        there); idle: sleep. What ran: kernels, bytes, windows, busy share."""
        end = until_ns / 1e9 if until_ns is not None else time.monotonic() + float(seconds)
        if ph.kind == "idle" or (ph.gemm_duty == 0 and ph.hbm_duty == 0):
            time.sleep(max(0.0, end - time.monotonic()))
            return {"windows": 0, "gemms": 0, "copies": 0, "copy_bytes": 0, "busy_share": 0.0}
        sched = DutySchedule(ph.gemm_duty, ph.hbm_duty, self.gemm_s, self.copy_s, self.window_s, self.seed)
        self.seed += 1
        windows = gemms = copies = 0
        busy = 0.0
        t_start = time.monotonic()
        while (w0 := time.monotonic()) < end - 5e-4:
            w, ng, nc = sched.next()
            if w0 + w > end:                          # the last window, cut at the switch: its kernels in proportion
                f = (end - w0) / w
                w, ng, nc = end - w0, int(round(ng * f)), int(round(nc * f))
            if ng:
                self.k.gemm(ng)
            if nc:
                self.k.copy(nc)
            self.k.sync()
            busy += time.monotonic() - w0
            windows, gemms, copies = windows + 1, gemms + ng, copies + nc
            rest = w0 + w - time.monotonic()
            if rest > 0:
                time.sleep(rest)
        tail = end - time.monotonic()                 # under half a millisecond left: no window, but not early
        if tail > 0:
            time.sleep(tail)
        span = time.monotonic() - t_start
        return {"windows": windows, "gemms": gemms, "copies": copies, "copy_bytes": 2 * copies * COPY_CHUNK_BYTES,
                "busy_share": busy / span if span > 0 else 0.0,
                "hbm_bytes_per_s": 2 * copies * COPY_CHUNK_BYTES / span if span > 0 else 0.0,
                "gemm_tflops": gemms * 2 * GEMM_N ** 3 / span / 1e12 if span > 0 else 0.0,
                "kernel_s": {"gemm": self.gemm_s, "copy": self.copy_s}}


class NvmlSampler(threading.Thread):
    """Samples NVML at a fixed rate (host monotonic ns): instantaneous board power, GPU temperature, memory
    temperature (NVML_FI_DEV_MEMORY_TEMP; NaN where the card does not give it) and the total energy counter
    (nvmlDeviceGetTotalEnergyConsumption, mJ: the fit's power is its difference over each interval).
    ``nvml``: the pynvml module (a stand-in in the CPU tests)."""

    def __init__(self, index: int, hz: float, nvml=None):
        super().__init__(daemon=True)
        if nvml is None:
            import pynvml as nvml
        self.nv = nvml
        nvml.nvmlInit()
        self.h = nvml.nvmlDeviceGetHandleByIndex(index)
        dec = (lambda s: s.decode() if isinstance(s, bytes) else str(s))
        self.card = dec(nvml.nvmlDeviceGetName(self.h))
        self.uuid = dec(nvml.nvmlDeviceGetUUID(self.h))
        self.driver = dec(nvml.nvmlSystemGetDriverVersion())
        self.period_ns = int(1e9 / hz)
        self.rows: list[tuple[int, float, float, float, float]] = []
        self.lock = threading.Lock()
        self.stop_evt = threading.Event()
        self.error: str | None = None
        self.grid0_ns: int | None = None

    def read(self) -> tuple[int, float, float, float, float]:
        from hbfd.thermal.telemetry import _field_value
        nv = self.nv
        pw, mem = nv.nvmlDeviceGetFieldValues(self.h, [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_MEMORY_TEMP])
        energy = float(nv.nvmlDeviceGetTotalEnergyConsumption(self.h))
        temp = float(nv.nvmlDeviceGetTemperature(self.h, nv.NVML_TEMPERATURE_GPU))
        if pw.nvmlReturn != nv.NVML_SUCCESS:
            raise RuntimeError(f"NVML instantaneous power unavailable (return {pw.nvmlReturn})")
        m = _field_value(nv, mem) if mem.nvmlReturn == nv.NVML_SUCCESS else math.nan
        return (time.monotonic_ns(), _field_value(nv, pw) / 1000.0, temp, float(m), energy)

    def switch_time(self, after_ns: int) -> int:
        """The first instant after ``after_ns`` that is SWITCH_AFTER_SAMPLE_S past one of the sampler's grid instants:
        a load switched there lands just after a reading, so the interval straddling the switch is almost all the
        new load's (the fit starts an energy span there)."""
        if self.grid0_ns is None:
            raise RuntimeError("the sampler has not started")
        lag = int(SWITCH_AFTER_SAMPLE_S * 1e9)
        k = -(-(after_ns - self.grid0_ns - lag) // self.period_ns)
        return self.grid0_ns + k * self.period_ns + lag

    def run(self) -> None:
        nxt = self.grid0_ns = time.monotonic_ns()
        while not self.stop_evt.is_set():
            try:
                row = self.read()
            except Exception as e:  # noqa: BLE001 -- a failed sampler fails the recording, loudly
                self.error = f"{type(e).__name__}: {e}"
                return
            with self.lock:
                self.rows.append(row)
            nxt += self.period_ns
            time.sleep(max(0.0, (nxt - time.monotonic_ns()) / 1e9))

    def take(self, t0: int, t1: int) -> np.ndarray:
        """Rows sampled in [t0, t1): columns t_ns, board W, GPU C, memory C, energy mJ."""
        with self.lock:
            a = np.array([r for r in self.rows if t0 <= r[0] < t1], float).reshape(-1, 5)
        return a


def settle(sampler, run_for, *, cap_s: float, window_s: float, max_slope_k_min: float, min_s: float,
           chunk_s: float = 5.0, clock=time.monotonic_ns) -> dict:
    """Run the first phase's load (``run_for(seconds)``) until the GPU temperature's least-squares slope over the
    last ``window_s`` is within ``max_slope_k_min`` K/min (after at least ``min_s``), or ``cap_s`` has passed: the fit
    starts each call from the steady state of its first phase's power, so the card should be there. Returns what was
    achieved (seconds, slope, converged, temperatures); ``sampler.take`` gives the rows, ``clock`` the same clock."""
    t0 = clock()
    slope = math.nan
    while True:
        run_for(chunk_s)
        if getattr(sampler, "error", None):
            raise SystemExit(f"NVML sampling failed while settling: {sampler.error}")
        now = clock()
        el = (now - t0) / 1e9
        a = sampler.take(now - int(window_s * 1e9), now + 1)
        if len(a) >= 10 and (a[-1, 0] - a[0, 0]) >= 0.8 * window_s * 1e9:
            slope = float(np.polyfit((a[:, 0] - a[0, 0]) / 60e9, a[:, 2], 1)[0])       # K per minute
        done = el >= min_s and math.isfinite(slope) and abs(slope) <= max_slope_k_min
        if done or el >= cap_s:
            first = sampler.take(t0, t0 + int(chunk_s * 1e9))
            # None, not NaN, where nothing was seen (recording.json is strict JSON)
            return {"seconds": el, "converged": bool(done),
                    "gpu_slope_k_min": slope if math.isfinite(slope) else None,
                    "max_slope_k_min": max_slope_k_min, "window_s": window_s, "cap_s": cap_s,
                    "gpu_temp_c_start": float(first[0, 2]) if len(first) else None,
                    "gpu_temp_c_end": float(a[-1, 2]) if len(a) else None,
                    "board_power_w_mean": float(np.mean(a[:, 1])) if len(a) else None}


def preflight(device: int, nvml=None, load_factory=None) -> dict:
    """What --record needs, checked in seconds (before the settle): torch with CUDA, NVML with the instantaneous
    power field and the total energy counter, a GPU temperature, the memory temperature field (optional: NaN when the
    card has none), and the load's kernels timed once. Raises SystemExit naming what is missing. ``nvml`` /
    ``load_factory``: stand-ins in the CPU tests."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as e:
            raise SystemExit(f"--record needs nvidia-ml-py (import pynvml): {e}") from None
    if load_factory is None:
        try:
            import torch
        except ImportError as e:
            raise SystemExit(f"--record needs torch with CUDA: {e}") from None
        if not torch.cuda.is_available():
            raise SystemExit("--record needs a CUDA GPU: torch.cuda.is_available() is False")
        load_factory = Load
    try:
        s = NvmlSampler(device, 20.0, nvml=nvml)
        t, pw, temp, mem, e0 = s.read()
        time.sleep(0.25)
        e1 = s.read()[4]
    except Exception as e:  # noqa: BLE001 -- named, then refused
        raise SystemExit(f"NVML cannot give what the recording needs (instantaneous power, GPU temperature, the "
                         f"total energy counter): {type(e).__name__}: {e}") from None
    found = {"card": s.card, "driver": s.driver, "board_power_w": pw, "gpu_temp_c": temp,
             "mem_temp_c": None if math.isnan(mem) else mem, "energy_mj": e0,
             "energy_power_w_over_0.25s": (e1 - e0) * 1e-3 / 0.25}
    if not e1 >= e0:
        raise SystemExit(f"NVML's energy counter went back ({e0} -> {e1} mJ)")
    t0 = time.monotonic()
    load = load_factory()
    got = load.run(PlannedPhase("preflight", "mixed", 0.5, 0.5, 0.2), 0.2)
    found.update({"load_s": round(time.monotonic() - t0, 3), "kernel_s": {"gemm": load.gemm_s, "copy": load.copy_s},
                  "gemms": got["gemms"], "copies": got["copies"], "windows": got["windows"]})
    if not got["gemms"] or not got["copies"]:
        raise SystemExit(f"the load ran no GEMM or no copy in 0.2 s: {found}")
    return found


def record(args, plan: list[PlannedPhase], idx: list[int], nvml=None, load=None) -> Path:
    """Record ``plan[idx]`` into ``args.record``: settle on the first phase's load, then each phase, written as it
    ends. ``nvml`` / ``load``: stand-ins in the CPU tests (the preflight is then skipped)."""
    d = Path(args.record)
    chosen = [plan[i] for i in idx]
    need = check_call_time(chosen, args.settle_cap_s)
    log.info("recording phases %s (at most %.0f s) into %s", idx, need, d)
    if load is None:
        log.info("preflight: %s", preflight(args.device))
        load = Load()
    sampler = NvmlSampler(args.device, args.sample_hz, nvml=nvml)
    sampler.start()
    first = chosen[0]
    try:
        st = settle(sampler, lambda s: load.run(first, s), cap_s=args.settle_cap_s, window_s=args.settle_window_s,
                    max_slope_k_min=args.settle_slope_k_min, min_s=min(args.settle_window_s, args.settle_cap_s),
                    chunk_s=min(5.0, args.settle_window_s / 6))
        log.info("settled on %s: %s", first.name, st)
        meta = {"card": sampler.card, "driver": sampler.driver, "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "nvml": {"uuid": sampler.uuid, "fields": ["NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_MEMORY_TEMP",
                                                          "nvmlDeviceGetTemperature(GPU)",
                                                          "nvmlDeviceGetTotalEnergyConsumption (mJ)"]},
                "sample_hz": args.sample_hz, "command": " ".join(sys.argv), "recorder": RECORDER}
        segment = idx[0]
        t0 = sampler.switch_time(time.monotonic_ns())
        load.run(first, until_ns=t0)                       # the settle's load, up to the first switch
        for n, i in enumerate(idx):
            ph = plan[i]
            # each phase ends at a switch time at least a sample period past its length: its samples cover it, and
            # the next load starts just after a reading
            t1 = sampler.switch_time(t0 + int((ph.seconds + 1.0 / args.sample_hz) * 1e9))
            got = load.run(ph, until_ns=t1)
            if sampler.error:
                raise SystemExit(f"NVML sampling failed during phase {ph.name}: {sampler.error}")
            a = sampler.take(t0, t1)
            nan = np.full(len(a), np.nan)
            target = {"gemm_duty": ph.gemm_duty, "hbm_duty": ph.hbm_duty, "duty_window_s": list(load.window_s),
                      "recorder": RECORDER, **got}
            if n == 0:
                target["settle"] = st
            phase = cal.Phase(ph.name, ph.kind, segment, a[:, 0].astype(np.int64), a[:, 1], a[:, 2], a[:, 3], nan,
                              target, a[:, 4])
            cal.write_phase(d, i, phase, meta)
            t0 = t1
            if len(a):
                log.info("phase %d %s: %d samples, board %.0f W (energy counter), GPU %.0f-%.0f C", i, ph.name,
                         len(a), (a[-1, 4] - a[0, 4]) * 1e-3 / max((a[-1, 0] - a[0, 0]) * 1e-9, 1e-9),
                         a[:, 2].min(), a[:, 2].max())
    finally:
        sampler.stop_evt.set()
    return d


# ------------------------------------------------------------------------------------------- CPU part
def pinned_rom(geometry: str, cache_dir: str | None):
    """The geometry's ROM with the cold plate pinned (calibrate.pinned_geometry): the same function and cache the
    daemon loads a fragment with (hbfd.thermal.load_pinned_rom: beside the geometry, ``<name>-pinned-sink.rom.npz``,
    committed for the bundled packages; a fresh fit of the 8-high package takes about 3 minutes on 2 cores)."""
    from hbfd.thermal import load_pinned_rom
    from hbfd.thermal.geometry import load_geometry
    geom = load_geometry(geometry)
    return load_pinned_rom(geom, cache_dir), geom


def load_joined(directories: list[str]) -> cal.Recording:
    """One recording from the directories of several device calls (same card and driver), phases in order."""
    recs = [cal.load_recording(d) for d in directories]
    for d, r in zip(directories[1:], recs[1:]):
        if (r.card, r.driver) != (recs[0].card, recs[0].driver):
            raise cal.CalibrationError(f"{d}: recorded on {r.card} / driver {r.driver}, not {recs[0].card} / "
                                       f"{recs[0].driver} like {directories[0]}")
    seen: set[str] = set()
    for r in recs:
        dup = seen & {p.name for p in r.phases}
        if dup:
            raise cal.CalibrationError(f"phase {sorted(dup)[0]!r} is in more than one of {directories}")
        seen |= {p.name for p in r.phases}
    if len({r.synthetic for r in recs}) > 1:
        raise cal.CalibrationError(f"{directories}: synthetic and recorded phases cannot be joined")
    return cal.Recording(recs[0].card, recs[0].driver, recs[0].date, [p for r in recs for p in r.phases],
                         {"directories": list(directories), "synthetic": recs[0].synthetic})


def split_kinds(spec: str) -> tuple[str, ...]:
    """'--split-kinds hbm,gemm' -> ('hbm', 'gemm'); only the plan's load kinds (idle never: it has no load)."""
    kinds = tuple(k.strip() for k in spec.split(",") if k.strip())
    bad = [k for k in kinds if k not in ("hbm", "gemm", "mixed")]
    if bad:
        raise SystemExit(f"--split-kinds: {bad} not among the plan's load kinds hbm, gemm, mixed")
    return kinds


def fit_recording(directory: str | list[str], geometry: str, holdout: str | None, out: str, settle_s: float,
                  rom_cache: str, power_as_sampled: bool = False, *, kinds: tuple[str, ...] = (),
                  use_energy: bool = True, free_start: bool = True, rom=None) -> dict:
    """Fit a recording (one directory per device call) and write the fragment ``out``. Power: NVML's energy counter
    where recorded (v2), else the readings, held at the phase mean in v1's aliased duty phases (unless
    ``power_as_sampled``); ``kinds``: load kinds with a split of their own; ``free_start``: each segment's cold plate
    starts at a fitted offset from the steady state of its first power. ``rom``: (pinned ROM, geometry)."""
    rec = load_joined([directory] if isinstance(directory, str) else list(directory))
    cal.validate_recording(rec)
    c0 = time.process_time()
    rom, geom = rom if rom is not None else pinned_rom(geometry, rom_cache)
    use_energy = use_energy and rec.has_energy
    # v1's duty windows (50 ms at 20 Hz: the phase's own duty_window_s) are not resolved by the readings (they
    # alias into a ~20 s sawtooth): without the energy counter those phases' power is held at its phase mean
    mean_phases = [] if power_as_sampled or use_energy else cal.aliased_duty_phases(rec, LEGACY_DUTY_WINDOW_S)
    if mean_phases:
        log.info("power held at the phase mean (duty window unresolved by the sampling): %s",
                 [rec.phases[i].name for i in mean_phases])
    model = cal.CalibratedModel(rom, rec, settle_s=settle_s, mean_power_phases=mean_phases, use_energy=use_energy,
                                split_kinds=kinds, free_start=free_start)
    held = parse_phases(holdout, len(rec.phases)) if holdout else None
    res = cal.fit(model, holdout=held)
    settles = {p.name: p.target["settle"] for p in rec.phases if isinstance(p.target.get("settle"), dict)}
    report = {"experiment": "thermal_calibrate",
              "command": "python bench/thermal_calibrate.py " + " ".join(sys.argv[1:]),
              "recording_dirs": [directory] if isinstance(directory, str) else list(directory),
              "fit_cpu_s": time.process_time() - c0, "pinned_rom_states": rom.order,
              "power_from": (f"NVML energy counter (mean over each sample interval, spans >= "
                             f"{cal.ENERGY_MIN_SPAN_S:g} s)" if use_energy else "instantaneous readings"),
              "power_held_at_phase_mean": {"phases": res["mean_power_phases"], "duty_window_s": LEGACY_DUTY_WINDOW_S,
                                           "why": "duty-cycled load in windows of fewer than 4 sample periods: the "
                                                  "instantaneous readings alias the window"},
              "split_kinds": list(kinds), "free_start": free_start, "sink_start_k": res["sink_start_k"],
              "settle": settles, "fast_steps": res["fast_steps"],
              "solver": res["solver"],
              "use": f"hbfd serve --profile PROFILE --thermal-calibration {out}"}
    frag = cal.fragment(res, rec, geom, fitted_on=time.strftime("%Y-%m-%d", time.gmtime()), report=report)
    cal.write_fragment(out, frag)
    # the daemon's own check of what was just written: a fragment hbfd would refuse (the goal missed, a split of
    # the memory rail hbfd's telemetry cannot feed) is still written, with the reason said here
    try:
        cal.load_fragment(out, geom)
        print(f"hbfd accepts it: hbfd serve --profile PROFILE --thermal-calibration {out}")
    except cal.CalibrationError as e:
        print(f"NOTE: hbfd refuses this fragment ({e.fields.get('reason')}): {e}")
    g = res["goal"]
    asked = [round(r["die_share_asked"], 3) for r in res["fast_steps"] if "die_share_asked" in r]
    if asked:
        print(f"fast response: die share asked by the steps' first 0.1 s {asked} (fitted {res['params'].die_fraction:.3f})")
    print(f"fitted on {len(res['trained'])} phases, held out {res['held_out']}: {res['params']}")
    print(f"held-out worst RMS {g['worst_rms_k']:.3f} K, max {g['worst_max_abs_k']:.3f} K -> goal "
          f"{'met' if g['met'] else 'NOT met'}; wrote {out}")
    return frag


# H200-like board power (W; notes §6: 79 W idle, ~693 W under bf16 GEMM): idle, plus the GEMMs' and the copies' own
# power while they run (a phase's mean is idle + duty x each); an assumed boundary, shares of the BOARD power (the H200
# reports no memory rail through NVML): ~8 % in the HBM region (notes §6: ~55 W memory power under ~690 W)
SYNTH_POWER_W = {"idle": 80.0, "gemm": 610.0, "copy": 300.0}
SYNTH_TRUE = cal.CalibrationParams(coolant_c=27.0, sink_to_ambient_k_w=0.02, sink_tau_s=30.0, die_fraction=0.8,
                                   hbm_fraction=0.08)
# the split of a load kind given --split-kinds (streaming puts more of the board power into the HBM: the H100's
# memory sensor read higher streaming at 390 W than in GEMMs at 691 W)
SYNTH_KIND_SHARES = {"hbm": (0.55, 0.25), "gemm": (0.85, 0.05), "mixed": (0.75, 0.12)}
# each call's cold plate at its start above the steady state of its first phase (K): the second call starts hot, as
# the H100's did (8 K) and a capped settle may leave it (the fit's free_start takes it up)
SYNTH_START_K = (0.0, 4.0)
SYNTH_KERNEL_S = (2.0e-4, 1.7e-4)          # GEMM 4096^3 bf16, one 256 MiB copy (H100/H200 order of magnitude)
SYNTH_ENERGY_UPDATE_S = 0.033              # the counter advances in steps not commensurate with 20 Hz reads


def simulate_recording(rom, prm: cal.CalibrationParams, plan: list[PlannedPhase], *, sample_hz: float, seed: int,
                       calls: tuple[tuple[int, ...], ...] = ((0, 1, 2, 3, 4, 5), (6, 7, 8, 9, 10, 11)),
                       power_w: dict = SYNTH_POWER_W, kernel_s: tuple[float, float] = SYNTH_KERNEL_S,
                       window_s: tuple[float, float] = DUTY_WINDOW_S, power_noise_w: float = 5.0,
                       temp_noise_k: float = 0.2, quantize_c: float = 1.0,
                       energy_update_s: float = SYNTH_ENERGY_UPDATE_S) -> cal.Recording:
    """What the v2 recorder would write on a card that IS the calibration model with ``prm``: the load of each phase
    as ``Load.run`` drives it (``DutySchedule`` windows; in each window the GEMMs' and copies' power while they run,
    on top of idle), the package fed with its exact mean power per 10 ms model step, one segment per device call
    starting from the steady state of its first phase (the settle); sampled at ``sample_hz``: the instantaneous
    power at the sample instant (+ noise: these readings alias the windows), the temperatures (+ noise, whole °C) and
    the energy counter (integer mJ, advancing every ``energy_update_s``). ``prm.sink_start_k`` (one per call): the
    call's cold plate starts that far above the steady state of its first phase."""
    if prm.sink_start_k and len(prm.sink_start_k) != len(calls):
        raise ValueError(f"sink_start_k {prm.sink_start_k}: one per call ({len(calls)})")
    rng = np.random.default_rng(seed)
    dt_ns = rom.dt_ns
    step = int(round(1e9 / sample_hz / dt_ns))
    if step < 1 or abs(step * dt_ns - 1e9 / sample_hz) > 1:
        raise SystemExit(f"--synthetic: {sample_hz:g} Hz is not a whole number of {dt_ns / 1e6:g} ms model steps")
    phases: list[cal.Phase] = []
    for ci, call in enumerate(calls):
        t_base = 1_000_000_000 + ci * 3_600_000_000_000          # another call: another clock origin
        # the windows of the whole call (seconds from its start): start, length, GEMM-on and copy-on time
        starts, lens, on_g, on_c, bounds = [], [], [], [], [0.0]
        t = 0.0
        period = 1.0 / sample_hz
        for i in call:
            ph = plan[i]
            # as record(): the load switches SWITCH_AFTER_SAMPLE_S after a sample (the grid below), a sample period
            # or more past the phase's length
            end = math.ceil((t + ph.seconds + period) / period - 1e-9) * period
            if ph.kind == "idle":
                starts.append(t), lens.append(end - t), on_g.append(0.0), on_c.append(0.0)
                t = end
            else:
                sched = DutySchedule(ph.gemm_duty, ph.hbm_duty, *kernel_s, window_s, seed=seed * 100 + i)
                while t < end - 5e-4:
                    w, ng, nc = sched.next()
                    if t + w > end:                   # as Load.run: the last window cut at the switch
                        f = (end - t) / w
                        w, ng, nc = end - t, int(round(ng * f)), int(round(nc * f))
                    g, c = ng * kernel_s[0], nc * kernel_s[1]
                    wl = max(w, g, c)
                    starts.append(t), lens.append(wl), on_g.append(g), on_c.append(c)
                    t += wl
            bounds.append(t)
        S, L, G, C = (np.array(v) for v in (starts, lens, on_g, on_c))
        e_start = np.concatenate([[0.0], np.cumsum(power_w["idle"] * L + power_w["gemm"] * G + power_w["copy"] * C)])

        def energy_j(x: np.ndarray) -> np.ndarray:
            k = np.clip(np.searchsorted(S, x, side="right") - 1, 0, len(S) - 1)
            u = np.clip(x - S[k], 0.0, None)
            return (e_start[k] + power_w["idle"] * u + power_w["gemm"] * np.minimum(u, G[k])
                    + power_w["copy"] * np.minimum(u, C[k]))

        def instant_w(x: np.ndarray) -> np.ndarray:
            k = np.clip(np.searchsorted(S, x, side="right") - 1, 0, len(S) - 1)
            u = x - S[k]
            return power_w["idle"] + power_w["gemm"] * (u < G[k]) + power_w["copy"] * (u < C[k])

        # the model's input: the exact mean power of each step; its outputs at the steps' ends
        n = int(t / (dt_ns / 1e9))
        tick_s = np.arange(n + 1) * (dt_ns / 1e9)
        p_tick = np.diff(energy_j(tick_s)) / (dt_ns / 1e9)
        tick_ns = t_base + np.arange(n, dtype=np.int64) * dt_ns
        edges_ns = t_base + (np.array(bounds) * 1e9).astype(np.int64)
        fine = []
        for j, i in enumerate(call):
            m = (tick_ns >= edges_ns[j]) & (tick_ns < edges_ns[j + 1])
            z = np.zeros(int(m.sum()))
            fine.append(cal.Phase(plan[i].name, plan[i].kind, 0, tick_ns[m], p_tick[m], z, z.copy(),
                                  np.full(len(z), np.nan)))
        fmodel = cal.CalibratedModel(rom, cal.Recording("synthetic", "model", "2026-12-05", fine), settle_s=0.0,
                                     use_energy=False, split_kinds=[k for k, _, _ in prm.kind_split],
                                     free_start=bool(prm.sink_start_k))
        y = fmodel.predict(replace(prm, sink_start_k=prm.sink_start_k[ci:ci + 1]))[0]
        # the samples: every `step` model steps, SWITCH_AFTER_SAMPLE_S before each switch instant
        ks = np.arange(step - int(round(SWITCH_AFTER_SAMPLE_S * 1e9 / dt_ns)), n, step)
        ts = tick_ns[ks]
        x = (ts - t_base) / 1e9
        # a reading at a step's start sees the package at that instant: the end of the step before it
        temps = y[ks - 1] + rng.normal(0.0, temp_noise_k, (len(ks), y.shape[1]))
        temps = np.round(temps / quantize_c) * quantize_c if quantize_c > 0 else temps
        off = rng.uniform(0.0, energy_update_s)                    # the counter's own update instants
        upd = np.floor((x - off) / energy_update_s) * energy_update_s + off
        counter = 7.0e8 + np.floor(energy_j(np.clip(upd, 0.0, None)) * 1e3)           # mJ, integer
        inst = np.maximum(instant_w(x) + rng.normal(0.0, power_noise_w, len(x)), 0.0)
        for j, i in enumerate(call):
            m = (ts >= edges_ns[j]) & (ts < edges_ns[j + 1])
            ph = plan[i]
            phases.append(cal.Phase(ph.name, ph.kind, call[0], ts[m], inst[m], temps[m, 0],
                                    temps[m, 1] if temps.shape[1] > 1 else np.full(int(m.sum()), np.nan),
                                    np.full(int(m.sum()), np.nan),
                                    {"gemm_duty": ph.gemm_duty, "hbm_duty": ph.hbm_duty,
                                     "duty_window_s": list(window_s), "recorder": RECORDER + " (simulated)",
                                     "board_w_mean": float(np.mean(p_tick[(tick_ns >= edges_ns[j])
                                                                          & (tick_ns < edges_ns[j + 1])]))},
                                    counter[m]))
    return cal.Recording("synthetic", "model", "2026-12-05", phases, {"synthetic": True})


def _fitted(frag: dict) -> dict:
    out = {"coolant_c": frag["thermal"]["ambient_c"]["value"],
           "sink_to_ambient_k_w": frag["heat_sink"]["sink_to_ambient_k_w"]["value"],
           "sink_tau_s": frag["heat_sink"]["sink_tau_s"]["value"],
           "die_fraction": frag["power_split"]["die_fraction"]["value"],
           "hbm_fraction": frag["power_split"]["hbm_fraction"]["value"]}
    for k, v in frag["power_split"].get("by_kind", {}).items():
        out[f"die_fraction@{k}"] = v["die_fraction"]["value"]
        out[f"hbm_fraction@{k}"] = v["hbm_fraction"]["value"]
    return out


def _synthetic_one(args, rom_geom, plan, true: cal.CalibrationParams, d: Path, out: str, seed: int,
                   compare: bool) -> dict:
    # as the H200 records it: the memory temperature (NVML field 82) but no memory-rail power (no NVML field known
    # to carry it), so the fitted shares are of the board power, what hbfd's telemetry gives the daemon
    rec = simulate_recording(rom_geom[0], true, plan, sample_hz=args.sample_hz, seed=seed)
    for i, p in enumerate(rec.phases):
        cal.write_phase(d, i, p, {"card": rec.card, "driver": rec.driver, "date": rec.date, "synthetic": True,
                                  "sample_hz": args.sample_hz, "command": " ".join(sys.argv), "recorder": RECORDER})
    kinds = tuple(k for k, _, _ in true.kind_split)
    frag = fit_recording(str(d), args.geometry, args.holdout, out, args.skip_s, args.rom_cache, kinds=kinds,
                         rom=rom_geom)
    got = _fitted(frag)
    want = {**dict(zip(cal.PARAMS, true.vector().tolist())),
            **{f"{s}@{k}": v for k, fd, fh in true.kind_split for s, v in (("die_fraction", fd), ("hbm_fraction", fh))}}
    g = frag["errors"]["goal"]
    starts = list(frag["report"]["sink_start_k"].values())
    row = {"frag": frag, "seed": seed, "fitted": got, "worst_rms_k": g["worst_rms_k"],
           "worst_max_abs_k": g["worst_max_abs_k"], "goal_met": g["met"],
           "relative_error": {k: (got[k] - want[k]) / want[k] for k in want},
           "sink_start_k": {"true": list(true.sink_start_k), "fitted": starts}}
    if compare:
        # the same recording fitted from the instantaneous readings (what the energy counter replaces), and, with a
        # split per kind in the truth, with one shared split (what hbfd can run)
        alt = {"readings": fit_recording(str(d), args.geometry, args.holdout, str(d / "fit_readings.json"),
                                         args.skip_s, args.rom_cache, kinds=kinds, use_energy=False, rom=rom_geom),
               "fixed_start": fit_recording(str(d), args.geometry, args.holdout, str(d / "fit_fixed_start.json"),
                                            args.skip_s, args.rom_cache, kinds=kinds, free_start=False,
                                            rom=rom_geom)}
        if kinds:
            alt["shared_split"] = fit_recording(str(d), args.geometry, args.holdout, str(d / "fit_shared_split.json"),
                                                args.skip_s, args.rom_cache, rom=rom_geom)
        row["compare"] = {k: {"worst_rms_k": f["errors"]["goal"]["worst_rms_k"],
                              "worst_max_abs_k": f["errors"]["goal"]["worst_max_abs_k"],
                              "goal_met": f["errors"]["goal"]["met"], "fitted": _fitted(f)} for k, f in alt.items()}
    return row


def synthetic(args, plan: list[PlannedPhase]) -> dict:
    """``--seeds N`` simulated v2 recordings (seeds 7, 8, ...; ``simulate_recording``): the first one's fragment is
    ``--out`` (its recording in DIR, with the comparison fits), the others are fitted alike (DIR/seed<k>) and their
    errors summarized in the fragment's report (median, range). ``--split-kinds``: the truth splits those kinds'
    power by SYNTH_KIND_SHARES and the fit has a split for each."""
    c0 = time.process_time()
    rom_geom = pinned_rom(args.geometry, args.rom_cache)
    t_rom = time.process_time() - c0
    true = replace(SYNTH_TRUE, kind_split=tuple((k, *SYNTH_KIND_SHARES[k]) for k in split_kinds(args.split_kinds)),
                   sink_start_k=SYNTH_START_K)
    d = Path(args.synthetic)
    runs = [_synthetic_one(args, rom_geom, plan, true, d, args.out, 7, True)]
    for seed in range(8, 7 + args.seeds):
        runs.append(_synthetic_one(args, rom_geom, plan, true, d / f"seed{seed}", str(d / f"seed{seed}.json"), seed,
                                   False))
    frag = runs[0]["frag"]

    def med(vals):
        return {"median": float(np.median(vals)), "min": float(np.min(vals)), "max": float(np.max(vals))}

    frag["report"]["synthetic"] = {
        "true": {**dict(zip(cal.PARAMS, true.vector().tolist())), "kind_split": [list(k) for k in true.kind_split],
                 "sink_start_k": list(true.sink_start_k)},
        "fitted": runs[0]["fitted"], "relative_error": runs[0]["relative_error"], "compare": runs[0]["compare"],
        "seeds": [{k: v for k, v in r.items() if k not in ("frag", "compare")} for r in runs],
        "over_seeds": {"worst_rms_k": med([r["worst_rms_k"] for r in runs]),
                       "worst_max_abs_k": med([r["worst_max_abs_k"] for r in runs]),
                       "goal_met": sum(r["goal_met"] for r in runs), "n": len(runs),
                       "abs_relative_error": {k: med([abs(r["relative_error"][k]) for r in runs])
                                              for k in runs[0]["relative_error"]}},
        "recorder": {"power_w": SYNTH_POWER_W, "kernel_s": SYNTH_KERNEL_S, "window_s": DUTY_WINDOW_S,
                     "energy_update_s": SYNTH_ENERGY_UPDATE_S},
        "noise": {"power_w": 5.0, "temp_k": 0.2, "quantize_c": 1.0},
        "pinned_rom_cpu_s": t_rom, "rom_states": rom_geom[0].order}
    frag["report"]["card"] = "CPU (synthetic recording, simulated time)"
    cal.write_fragment(args.out, frag)
    print(json.dumps({"over_seeds": frag["report"]["synthetic"]["over_seeds"],
                      "compare": {k: {kk: vv for kk, vv in v.items() if kk != "fitted"}
                                  for k, v in runs[0]["compare"].items()}}, indent=1))
    return frag


def check_args(args) -> None:
    """Refuse, before any GPU time is spent, what would make the run useless or lose its result."""
    if args.sample_hz < 10:
        raise SystemExit("--sample-hz must be >= 10 (the calibration refuses slower recordings)")
    if args.sample_hz > 100:
        raise SystemExit("--sample-hz above 100 only repeats NVML's readings (it refreshes about every 100 ms)")
    if args.phase_s < 60 and not args.synthetic:
        raise SystemExit(f"--phase-s {args.phase_s:g}: each phase must last at least 60 s (the fit refuses shorter)")
    if not 0 <= args.skip_s < args.phase_s:
        raise SystemExit(f"--skip-s must be in [0, --phase-s) (got {args.skip_s:g})")
    if not 1 <= args.seeds <= 50:
        raise SystemExit(f"--seeds must be in 1..50 (got {args.seeds})")
    if not 0 <= args.settle_cap_s <= 300:
        raise SystemExit(f"--settle-cap-s must be in [0, 300] (got {args.settle_cap_s:g})")
    if not 5 <= args.settle_window_s <= 120:
        raise SystemExit(f"--settle-window-s must be in [5, 120] (got {args.settle_window_s:g})")
    if not 0 < args.settle_slope_k_min <= 5:
        raise SystemExit(f"--settle-slope-k-min must be in (0, 5] K/min (got {args.settle_slope_k_min:g})")
    split_kinds(args.split_kinds)
    if args.record:
        plan = phase_plan(args.phase_s)
        check_call_time([plan[i] for i in parse_phases(args.phases, len(plan))], args.settle_cap_s)
        d = Path(args.record)
        if d.exists() and not d.is_dir():
            raise SystemExit(f"--record {d}: exists and is not a directory")
    if args.record and args.no_fit:
        return
    if not args.preflight:
        out = Path(args.out)
        if not out.parent.is_dir():
            raise SystemExit(f"--out {out}: its directory does not exist (the fragment would be lost at the end)")
        if args.fit_only:
            for d in args.fit_only:
                if not (Path(d) / "recording.json").is_file():
                    raise SystemExit(f"--fit-only {d}: no recording.json there (a --record directory of one device "
                                     "call: its $OUT/rec)")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    check_args(args)
    plan = phase_plan(args.phase_s)
    if args.preflight:
        print(json.dumps(preflight(args.device), indent=1))
        return 0
    if args.synthetic:
        synthetic(args, plan)
        return 0
    if args.fit_only:
        fit_recording(args.fit_only, args.geometry, args.holdout, args.out, args.skip_s, args.rom_cache,
                      args.power_as_sampled, kinds=split_kinds(args.split_kinds),
                      use_energy=not args.power_from_readings, free_start=not args.fixed_start)
        return 0
    idx = parse_phases(args.phases, len(plan))
    d = record(args, plan, idx)
    if args.no_fit:
        return 0
    have = {p.name for p in cal.load_recording(d).phases}
    if {p.name for p in plan} <= have:
        fit_recording(str(d), args.geometry, args.holdout, args.out, args.skip_s, args.rom_cache,
                      args.power_as_sampled, kinds=split_kinds(args.split_kinds),
                      use_energy=not args.power_from_readings, free_start=not args.fixed_start)
    else:
        print(f"recorded {sorted(have)}; the fit waits for the rest of the plan")
    return 0


def cli(argv=None) -> int:
    """main() with a refused recording or fragment said in one line (exit 2), not a traceback."""
    try:
        return main(argv)
    except cal.CalibrationError as e:
        log.error("calibration refused: %s", e)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
