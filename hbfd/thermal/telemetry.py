"""GPU telemetry sources and the guard that makes bad telemetry end the run.

Sources (each has an ``identity()`` for the summary):

* :class:`ConstantSource` — a declared constant (deterministic experiments);
* :class:`TraceSource` — a CSV trace ``t_ns,gpu_power_w,gpu_temp_c,hbm_temp_c`` bound to its SHA-256
  (a mismatch refuses the file); times are relative to the run start;
* :class:`NvmlSource` — live from NVML (nvidia-ml-py): GPU temperature, instantaneous power (field
  ``NVML_FI_DEV_POWER_INSTANT``) and HBM temperature (field ``NVML_FI_DEV_MEMORY_TEMP``; readings
  refresh about every 100 ms on the H200). This is the only module of hbfd.thermal that touches a
  device; it reads no clock: staleness is judged from NVML's own sample timestamps against the
  ``now_ns`` the server hands in.

:class:`TelemetryGuard` wraps a source and raises :class:`TelemetryError` when a reading is missing
(no sample, NaN), stale (older than ``max_age_ns``), regressing (a sample timestamp that goes
backwards) or failed (the source raised). It never returns the last good value instead.
"""
from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hbfcommon.errors import TelemetryError, TraceError
from hbfcommon.fsutil import read_regular_bytes

TRACE_MAX_BYTES = 256 << 20      # a telemetry trace of at most 256 MiB (millions of samples)


@dataclass(frozen=True)
class TelemetrySample:
    t_ns: int                     # when the source measured it, on the run's clock
    gpu_power_w: float
    gpu_temp_c: float
    hbm_temp_c: float | None = None


class TelemetrySource(Protocol):
    kind: str

    def read(self, now_ns: int) -> TelemetrySample | None: ...
    def identity(self) -> dict[str, Any]: ...


class ConstantSource:
    kind = "constant"

    def __init__(self, gpu_power_w: float, gpu_temp_c: float, hbm_temp_c: float | None = None):
        for name, v in (("gpu_power_w", gpu_power_w), ("gpu_temp_c", gpu_temp_c)):
            if not math.isfinite(v):
                raise TelemetryError(f"constant telemetry {name} must be finite", field=name)
        if gpu_power_w < 0:
            raise TelemetryError("constant telemetry gpu_power_w must be >= 0", field="gpu_power_w")
        self.gpu_power_w, self.gpu_temp_c, self.hbm_temp_c = float(gpu_power_w), float(gpu_temp_c), hbm_temp_c

    def read(self, now_ns: int) -> TelemetrySample:
        return TelemetrySample(now_ns, self.gpu_power_w, self.gpu_temp_c, self.hbm_temp_c)

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "identity": f"constant:{self.gpu_power_w:g}W:{self.gpu_temp_c:g}C",
                "gpu_power_w": self.gpu_power_w, "gpu_temp_c": self.gpu_temp_c, "sha256": None}


class TraceSource:
    """CSV with header ``t_ns,gpu_power_w,gpu_temp_c[,hbm_temp_c]``; strictly increasing t_ns."""

    kind = "trace"

    def __init__(self, path: str | Path, sha256: str):
        p = Path(path)
        raw = read_regular_bytes(p, what="telemetry trace", error=TraceError, max_bytes=TRACE_MAX_BYTES)
        got = hashlib.sha256(raw).hexdigest()
        if not sha256 or got != sha256.lower():
            raise TraceError(f"{p}: telemetry trace SHA-256 {got} does not match the declared {sha256 or '(none)'}",
                             file=str(p), declared=sha256, actual=got)
        self.path, self.sha256 = str(p), got
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceError(f"{p}: telemetry trace is not UTF-8 text (byte {e.start}: {e.reason})",
                             file=str(p)) from None
        self.t, self.power, self.temp, self.hbm = self._parse(text, str(p))
        self._i = 0

    @staticmethod
    def _parse(text: str, where: str):
        rd = csv.DictReader(io.StringIO(text))
        need = {"t_ns", "gpu_power_w", "gpu_temp_c"}
        if rd.fieldnames is None or not need <= set(rd.fieldnames):
            raise TraceError(f"{where}: header must contain t_ns,gpu_power_w,gpu_temp_c", file=where)
        t, pw, tc, hb = [], [], [], []
        for line, row in enumerate(rd, start=2):
            try:
                ti = int(row["t_ns"]); p = float(row["gpu_power_w"]); c = float(row["gpu_temp_c"])
                h = float(row["hbm_temp_c"]) if row.get("hbm_temp_c") not in (None, "") else None
            except (TypeError, ValueError) as e:
                raise TraceError(f"{where}:{line}: bad telemetry row: {e}", file=where, line=line) from e
            if not (math.isfinite(p) and math.isfinite(c)) or p < 0:
                raise TraceError(f"{where}:{line}: power must be finite and >= 0, temperature finite",
                                 file=where, line=line)
            if t and ti <= t[-1]:
                raise TraceError(f"{where}:{line}: t_ns {ti} does not increase (previous {t[-1]})",
                                 file=where, line=line)
            t.append(ti); pw.append(p); tc.append(c); hb.append(h)
        if not t:
            raise TraceError(f"{where}: telemetry trace has no samples", file=where)
        return t, pw, tc, hb

    def read(self, now_ns: int) -> TelemetrySample | None:
        """The latest sample at or before now (None before the first one)."""
        if now_ns < self.t[0]:
            return None
        i = self._i
        if now_ns < self.t[i]:            # the caller went back in time: search from the start
            i = 0
        while i + 1 < len(self.t) and self.t[i + 1] <= now_ns:
            i += 1
        self._i = i
        return TelemetrySample(self.t[i], self.power[i], self.temp[i], self.hbm[i])

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "identity": f"trace:{self.path}", "sha256": self.sha256,
                "samples": len(self.t), "span_ns": self.t[-1] - self.t[0]}


class NvmlSource:
    """Live GPU telemetry through NVML. Raises :class:`TelemetryError` where NVML is absent."""

    kind = "live_gpu"

    def __init__(self, index: int = 0):
        try:
            import pynvml
        except ImportError as e:
            raise TelemetryError("live telemetry needs nvidia-ml-py (import pynvml)") from e
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
            self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(self._h)
            uuid = pynvml.nvmlDeviceGetUUID(self._h)
            driver = pynvml.nvmlSystemGetDriverVersion()
        except pynvml.NVMLError as e:
            raise TelemetryError(f"NVML unavailable: {e}", index=index) from e
        dec = (lambda s: s.decode() if isinstance(s, bytes) else str(s))
        self.index, self.name, self.uuid, self.driver = index, dec(name), dec(uuid), dec(driver)
        self._fields = [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_MEMORY_TEMP]
        self._last_stamp_us: int | None = None
        self._stamp_changed_ns: int | None = None
        self._t_ns: int | None = None

    def read(self, now_ns: int) -> TelemetrySample | None:
        nv = self._nv
        try:
            vals = nv.nvmlDeviceGetFieldValues(self._h, self._fields)
            temp = float(nv.nvmlDeviceGetTemperature(self._h, nv.NVML_TEMPERATURE_GPU))
        except nv.NVMLError as e:
            raise TelemetryError(f"NVML read failed: {e}", uuid=self.uuid) from e
        pw, mem = vals
        if pw.nvmlReturn != nv.NVML_SUCCESS:
            raise TelemetryError("NVML instantaneous power unavailable", uuid=self.uuid, nvml_return=pw.nvmlReturn)
        power_w = _field_value(nv, pw) / 1000.0            # mW
        hbm = _field_value(nv, mem) if mem.nvmlReturn == nv.NVML_SUCCESS else None
        stamp = int(pw.timestamp)
        # NVML's sample time (µs, its own clock) mapped onto the run clock: a new stamp is "now";
        # an unchanged stamp keeps the time it was first seen, so the guard sees its age grow.
        if self._last_stamp_us is None or stamp != self._last_stamp_us:
            if self._last_stamp_us is not None and stamp < self._last_stamp_us:
                raise TelemetryError("NVML sample timestamp went backwards", uuid=self.uuid,
                                     previous_us=self._last_stamp_us, current_us=stamp)
            self._last_stamp_us = stamp
            self._t_ns = now_ns
        return TelemetrySample(int(self._t_ns), power_w, temp, hbm)

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "identity": f"nvml:{self.uuid}", "name": self.name, "index": self.index,
                "driver": self.driver, "sha256": None,
                "fields": ["NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_MEMORY_TEMP", "nvmlDeviceGetTemperature(GPU)"]}


def _field_value(nv, fv) -> float:
    t = fv.valueType
    v = fv.value
    if t == nv.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if t == nv.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(v.uiVal)
    if t == nv.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if t == nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(v.ullVal)
    if t == nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    if t == getattr(nv, "NVML_VALUE_TYPE_SIGNED_INT", -1):
        return float(v.siVal)
    raise TelemetryError(f"NVML field of unexpected value type {t}")


class TelemetryGuard:
    """Checks every reading; any violation raises TelemetryError (and is remembered for the summary)."""

    def __init__(self, source: TelemetrySource, max_age_ns: int):
        if max_age_ns <= 0:
            raise ValueError("max_age_ns must be > 0")
        self.source = source
        self.max_age_ns = int(max_age_ns)
        self.last: TelemetrySample | None = None
        self.reads = 0
        self.failure: dict[str, Any] | None = None

    def _fail(self, kind: str, msg: str, now_ns: int, **fields) -> TelemetryError:
        self.failure = {"kind": kind, "message": msg, "now_ns": now_ns, **fields}
        return TelemetryError(f"telemetry {kind}: {msg}", failure=kind, now_ns=now_ns,
                              source=self.source.identity().get("identity"), **fields)

    def read(self, now_ns: int) -> TelemetrySample:
        if self.failure is not None:
            raise self._fail(self.failure["kind"], "telemetry already failed; the run is over", now_ns)
        try:
            s = self.source.read(now_ns)
        except TelemetryError as e:
            raise self._fail("failed", str(e), now_ns) from e
        except Exception as e:  # a broken source is a failed source
            raise self._fail("failed", f"{type(e).__name__}: {e}", now_ns) from e
        if s is None:
            raise self._fail("missing", "no sample at or before now", now_ns)
        if not (math.isfinite(s.gpu_power_w) and math.isfinite(s.gpu_temp_c)) or s.gpu_power_w < 0:
            raise self._fail("missing", "sample has no finite power/temperature", now_ns,
                             gpu_power_w=s.gpu_power_w, gpu_temp_c=s.gpu_temp_c)
        if self.last is not None and s.t_ns < self.last.t_ns:
            raise self._fail("regressing", f"sample time {s.t_ns} is before the previous {self.last.t_ns}",
                             now_ns, sample_ns=s.t_ns, previous_ns=self.last.t_ns)
        if s.t_ns > now_ns:
            raise self._fail("regressing", f"sample time {s.t_ns} is after now", now_ns, sample_ns=s.t_ns)
        age = now_ns - s.t_ns
        if age > self.max_age_ns:
            raise self._fail("stale", f"newest sample is {age / 1e6:.1f} ms old (limit {self.max_age_ns / 1e6:.0f} ms)",
                             now_ns, age_ns=age)
        self.last = s
        self.reads += 1
        return s
