"""The daemon's thermal service: telemetry + binned media energy -> ROM -> controller -> snapshot.

Implements ``hbfd.contracts.ThermalService``. Each ``tick(now_ns, media_energy_j)`` (now on the run's
clock, handed in by the server) spreads the media energy of ``[previous now, now)`` over 10 ms bins
in proportion to time overlap, and for every bin completed by ``now``:

1. reads GPU telemetry at the bin's end through the guard (missing/stale/regressing/failed -> the
   run ends with :class:`TelemetryError`; the summary says ``source_failed``);
2. forms one package power vector: compute die = board power − modeled HBM power, HBM from traffic (assumed);
   or, with a calibration loaded, the fitted shares of the board power (``FittedSplit``); HBF idle on the base
   die, event energy over the NAND layers;
3. steps the ROM (one shared operator for all three media) and hands the hottest HBF layer to the
   policy, whose decision is what the next snapshot publishes.

Pure: time arrives as integers; telemetry comes through the source object the caller built.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hbfcommon.errors import TelemetryError
from hbfd.contracts import ThermalState, no_override

from .controller import MODE_NAMES, SHUTDOWN, Decision, Policy
from .horizon import policy_hint_ticks
from .power import EnergyBinner, FittedSplit, HbmPowerModel, ModeledHbmSplit, hbf_layer_weights
from .rom import ThermalROM
from .telemetry import TelemetryGuard


@dataclass(frozen=True)
class PackageThermalState(ThermalState):
    """ThermalState plus every HBF layer (the refresh ledger ages each layer at its own temperature)."""

    hbf_layers_c: tuple[float, ...] = ()


class ThermalRecorder:
    """Samples, transitions, residency and threshold time: the thermal part of the run summary."""

    def __init__(self, output_names, thresholds: dict[str, float], dt_ns: int, sample_every_ticks: int,
                 max_samples: int = 20000):
        self.names = list(output_names)
        self.thresholds = thresholds
        self.dt_ns = dt_ns
        self.every = max(1, sample_every_ticks)
        self.max_samples = max_samples
        self.samples: list[dict[str, Any]] = []
        self.samples_dropped = 0
        self.transitions: list[dict[str, Any]] = []
        self.residency_ticks = [0, 0, 0, 0]
        self.ticks_above = {k: 0 for k in thresholds}
        self.peak = np.full(len(self.names), -math.inf)
        self.peak_hbf_c = -math.inf

    def sample(self, tick: int, temps: np.ndarray, hbf_max: float, gpu_power_w: float, d: Decision,
               force: bool = False, measured: dict[str, float | None] | None = None) -> None:
        if not force and (tick + 1) % self.every:
            return
        if len(self.samples) >= self.max_samples:
            self.samples_dropped += 1
            return
        self.samples.append({"t_ns": (tick + 1) * self.dt_ns, "gpu_power_w": round(float(gpu_power_w), 3),
                             "hbf_max_c": round(float(hbf_max), 4), "mode": MODE_NAMES[d.mode], "q_ppm": d.q_ppm,
                             "temps_c": {n: round(float(t), 4) for n, t in zip(self.names, temps)},
                             **({"measured_c": measured} if measured else {})})

    def account(self, mode: int, temps: np.ndarray, hbf_max: np.ndarray) -> None:
        """Ticks spent in ``mode`` with these end temperatures (n×q) and hottest HBF (n)."""
        n = len(hbf_max)
        self.residency_ticks[mode] += n
        for k, thr in self.thresholds.items():
            self.ticks_above[k] += int((hbf_max >= thr).sum())
        if n:
            self.peak = np.maximum(self.peak, temps.max(axis=0))
            self.peak_hbf_c = max(self.peak_hbf_c, float(hbf_max.max()))

    def transition(self, tick: int, frm: int, to: int, t_c: float) -> None:
        self.transitions.append({"t_ns": (tick + 1) * self.dt_ns, "tick": tick, "from": MODE_NAMES[frm],
                                 "to": MODE_NAMES[to], "hbf_max_c": round(float(t_c), 4)})

    def section(self) -> dict[str, Any]:
        return {
            "samples": self.samples, "samples_dropped": self.samples_dropped,
            "sample_period_ns": self.every * self.dt_ns,
            "transitions": self.transitions,
            "residency_ns": {MODE_NAMES[i]: self.residency_ticks[i] * self.dt_ns for i in range(4)},
            "seconds_above": {k: v * self.dt_ns / 1e9 for k, v in self.ticks_above.items()},
            "thresholds_c": self.thresholds,
            "peak_c": {n: (float(p) if math.isfinite(p) else None) for n, p in zip(self.names, self.peak)},
            "peak_hbf_c": self.peak_hbf_c if math.isfinite(self.peak_hbf_c) else None,
        }


class SensorError:
    """Modeled minus measured temperature (°C) per output the card has a sensor for (compute die: the GPU sensor;
    HBM: the memory sensor), over the run: how far the package model's boundary (calibrated or assumed) is from
    the card, live. Only for telemetry that measures (a ``constant`` source's temperature is declared)."""

    OUTPUTS = ("gpu", "hbm")

    def __init__(self):
        self.n = dict.fromkeys(self.OUTPUTS, 0)
        self.sum = dict.fromkeys(self.OUTPUTS, 0.0)
        self.sumsq = dict.fromkeys(self.OUTPUTS, 0.0)
        self.max_abs = dict.fromkeys(self.OUTPUTS, 0.0)

    def add(self, name: str, modeled_c: float, measured_c: float | None) -> None:
        if measured_c is None or not math.isfinite(measured_c):
            return
        e = float(modeled_c) - float(measured_c)
        self.n[name] += 1
        self.sum[name] += e
        self.sumsq[name] += e * e
        self.max_abs[name] = max(self.max_abs[name], abs(e))

    def section(self) -> dict[str, Any]:
        return {o: ({"samples": self.n[o], "bias_k": self.sum[o] / self.n[o],
                     "rms_k": math.sqrt(self.sumsq[o] / self.n[o]), "max_abs_k": self.max_abs[o]}
                    if self.n[o] else None) for o in self.OUTPUTS}


class PackageThermalService:
    name = "package-rom"

    def __init__(self, rom: ThermalROM, policy: Policy, telemetry: TelemetryGuard, *, idle_w: float,
                 hbm: HbmPowerModel, hbm_traffic_bytes_per_s: float, thresholds: dict[str, float],
                 sample_every_ticks: int = 100, extra: dict[str, Any] | None = None,
                 split: FittedSplit | None = None, calibration_line: str = ""):
        self.rom = rom
        self.policy = policy
        self.telemetry = telemetry
        self.idle_w = idle_w
        self.hbm = hbm
        self.hbm_traffic = hbm_traffic_bytes_per_s
        # board power -> (compute die, HBM region): fitted by a calibration, else the HBM model's (assumed)
        self.split = split if split is not None else ModeledHbmSplit(hbm, hbm_traffic_bytes_per_s)
        self.calibration_line = calibration_line or "assumed (no calibration loaded)"
        self.sensor_error = SensorError()
        self._measures = getattr(telemetry.source, "kind", "constant") != "constant"
        names = list(rom.input_names)
        outs = list(rom.output_names)
        self.i_gpu = names.index("gpu") if "gpu" in names else None
        self.i_hbm = names.index("hbm") if "hbm" in names else None
        self.w_idle = hbf_layer_weights(names, dynamic=False)
        self.w_dyn = hbf_layer_weights(names, dynamic=True)
        self.o_hbf = [i for i, o in enumerate(outs) if o.startswith("hbf")]
        self.o_layers = [i for i, o in enumerate(outs) if o.startswith("hbf_l")] or self.o_hbf
        self.o_gpu = outs.index("gpu") if "gpu" in outs else None
        self.o_hbm = outs.index("hbm") if "hbm" in outs else None
        self.dt_ns = rom.dt_ns
        self.binner = EnergyBinner(self.dt_ns, len(names))
        self.rec = ThermalRecorder(outs, thresholds, self.dt_ns, sample_every_ticks)
        self.ticks = 0
        self.last_now: int | None = None
        self.media_energy_j = 0.0
        self.hbf_energy_j = 0.0
        self.terminal_status = "running"
        self.error: dict[str, Any] | None = None
        self.extra = extra or {}
        self._decision = policy.decision()
        self._state = self._make_state(rom.d.copy())
        self._hbf_prev: float | None = None    # the hottest HBF layer at the previous tick
        self._hbf_rate = 0.0                   # the largest |change| of it over one tick so far (K)

    def _make_state(self, temps: np.ndarray) -> PackageThermalState:
        d = self._decision
        hbf = float(temps[self.o_hbf].max()) if self.o_hbf else math.nan
        return PackageThermalState(mode=d.mode, q_ppm=d.q_ppm, admission_open=d.admission_open, hbf_max_c=hbf,
                                   hbm_c=float(temps[self.o_hbm]) if self.o_hbm is not None else math.nan,
                                   gpu_c=float(temps[self.o_gpu]) if self.o_gpu is not None else math.nan,
                                   hbf_layers_c=tuple(float(temps[i]) for i in self.o_layers))

    def tick(self, now_ns: int, media_energy_j: float) -> PackageThermalState:
        if self.terminal_status not in ("running",):
            return self._state
        now_ns = int(now_ns)
        if self.last_now is None:
            # first tick (before readiness): the telemetry must already be good
            self._read_telemetry(now_ns)
            self.last_now = now_ns
            self.binner = EnergyBinner(self.dt_ns, len(self.rom.input_names), t0_ns=now_ns)
            self._t0 = now_ns
            return self._state
        if now_ns < self.last_now:
            self._terminal("model_error", f"tick time went backwards ({now_ns} < {self.last_now})")
            raise ValueError(f"thermal tick time went backwards ({now_ns} < {self.last_now})")
        if not (math.isfinite(media_energy_j) and media_energy_j >= 0):
            self._terminal("model_error", f"bad media energy {media_energy_j!r}")
            raise ValueError(f"bad media energy {media_energy_j!r}")
        self.media_energy_j += media_energy_j
        span_s = (now_ns - self.last_now) / 1e9
        idle = min(media_energy_j, self.idle_w * span_s)
        if now_ns > self.last_now:
            self.binner.add(self.last_now, now_ns, idle, self.w_idle)
            self.binner.add(self.last_now, now_ns, media_energy_j - idle, self.w_dyn)
        elif media_energy_j > 0:
            self.binner.add(now_ns, now_ns, media_energy_j, self.w_dyn)
        self.last_now = now_ns
        bins = self.binner.pop_until(now_ns)
        dt_s = self.dt_ns / 1e9
        for e in bins:
            t_end = self._t0 + (self.ticks + 1) * self.dt_ns
            s = self._read_telemetry(t_end)
            p = e / dt_s
            self.hbf_energy_j += float(e.sum())
            die_w, hbm_w = self.split.powers_w(s.gpu_power_w)
            if self.i_hbm is not None:
                p[self.i_hbm] += hbm_w
            if self.i_gpu is not None:
                p[self.i_gpu] += die_w
            temps = self.rom.step(p)
            if not np.isfinite(temps).all():
                self._terminal("model_error", "ROM produced a non-finite temperature")
                raise ValueError("thermal ROM produced a non-finite temperature")
            hbf_max = float(temps[self.o_hbf].max())
            if self._hbf_prev is not None:
                self._hbf_rate = max(self._hbf_rate, abs(hbf_max - self._hbf_prev))
            self._hbf_prev = hbf_max
            mode_before = self.policy.mode
            self.rec.account(mode_before, temps[None, :], np.array([hbf_max]))
            n_tr = len(self.policy.transitions)
            self._decision = self.policy.decide(self.ticks, hbf_max)
            for (tk, frm, to, tc) in self.policy.transitions[n_tr:]:
                self.rec.transition(tk, frm, to, tc)
            if self._measures:
                if self.o_gpu is not None:
                    self.sensor_error.add("gpu", temps[self.o_gpu], s.gpu_temp_c)
                if self.o_hbm is not None:
                    self.sensor_error.add("hbm", temps[self.o_hbm], s.hbm_temp_c)
            self.rec.sample(self.ticks, temps, hbf_max, s.gpu_power_w, self._decision,
                            force=len(self.policy.transitions) > n_tr,
                            measured={"gpu": s.gpu_temp_c, "hbm": s.hbm_temp_c})
            self.ticks += 1
            self._state = self._make_state(temps)
            if self._decision.mode == SHUTDOWN:
                self._terminal("thermal_shutdown", f"HBF reached {hbf_max:.3f} C")
                break
        return self._state

    # the validity horizon's hint (hbfd/thermal/horizon.py): the gate holds any change that comes earlier, so this
    # estimate decides only how often a change waits, never whether the published words stay put
    HINT_RATE_FACTOR = 4.0         # times the fastest one-tick change of the hottest HBF layer seen so far
    HINT_RATE_FLOOR_K = 0.01       # K per tick, whatever was seen
    HINT_WARMUP_TICKS = 100        # no horizon before the model has run this long (the rate seen means little)

    def horizon_hint_ns(self) -> int:
        """How long the policy's decision cannot change if the hottest HBF layer moves at most
        HINT_RATE_FACTOR x the fastest one-tick change seen so far (+ a floor) per tick, either way: the policy's
        own scan along the extreme trajectories (0 in Severe/Shutdown, in the model's first HINT_WARMUP_TICKS, or
        once the run ended). A power step far beyond anything seen can still outrun it: the gate then holds the
        change (counted), never publishes it early."""
        if self.terminal_status != "running" or self.ticks < self.HINT_WARMUP_TICKS:
            return 0
        rate = self.HINT_RATE_FACTOR * self._hbf_rate + self.HINT_RATE_FLOOR_K
        return policy_hint_ticks(self.policy, self._state.hbf_max_c, rate) * self.dt_ns

    def _read_telemetry(self, t_ns: int):
        try:
            return self.telemetry.read(t_ns)
        except TelemetryError as e:
            self._terminal("source_failed", str(e))
            raise

    def _terminal(self, status: str, message: str) -> None:
        self.terminal_status = status
        self.error = {"status": status, "message": message, "tick": self.ticks}

    def finish(self) -> None:
        if self.terminal_status == "running":
            self.terminal_status = "clean"

    def set_override(self, obj: Any) -> Any:
        """The model alone takes no operator override (wrap it: hbfd.thermal.override:make_model_service)."""
        raise no_override(self.name)

    def summary_section(self) -> dict[str, Any]:
        status = "clean" if self.terminal_status == "running" else self.terminal_status
        return {
            "thermal": self.name,
            "model": {"kind": "era-rom", "states": self.rom.order, "dt_ns": self.dt_ns,
                      "geometry_sha256": self.rom.geometry_sha256, "inputs": list(self.rom.input_names),
                      "outputs": list(self.rom.output_names), **{k: v for k, v in self.rom.meta.items()
                                                                 if isinstance(v, (int, float, str))}},
            "policy": {**self.policy.cfg.as_dict(), "final": self.policy.state_dict()},
            "telemetry": {**self.telemetry.source.identity(), "reads": self.telemetry.reads,
                          "max_age_ns": self.telemetry.max_age_ns, "failure": self.telemetry.failure},
            "model_ticks": self.ticks, "model_dt_ns": self.dt_ns, "media_energy_j": self.media_energy_j,
            "hbf_energy_binned_j": self.hbf_energy_j,
            "sensor_error": ({**self.sensor_error.section(),
                              "what": "modeled block mean minus the card's sensor, every model tick"}
                             if self._measures else "not computed: the telemetry's temperature is declared, "
                                                    "not measured (constant source)"),
            "hbm_traffic_bytes_per_s": self.hbm_traffic,
            "mode": MODE_NAMES[self._decision.mode], "q_ppm": self._decision.q_ppm,
            **self.rec.section(),
            "terminal_status": status, "error": self.error, **self.extra,
        }
