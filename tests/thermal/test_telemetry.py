from __future__ import annotations

import hashlib

import pytest

from hbfcommon.errors import TelemetryError, TraceError
from hbfd.thermal.telemetry import ConstantSource, NvmlSource, TelemetryGuard, TraceSource

MS = 1_000_000


def write_trace(tmp_path, rows, header="t_ns,gpu_power_w,gpu_temp_c,hbm_temp_c"):
    p = tmp_path / "tele.csv"
    p.write_text(header + "\n" + "\n".join(",".join(str(x) for x in r) for r in rows) + "\n")
    return p, hashlib.sha256(p.read_bytes()).hexdigest()


def test_trace_is_hash_bound(tmp_path):
    p, sha = write_trace(tmp_path, [(0, 500, 50, 45), (100 * MS, 600, 52, 46)])
    src = TraceSource(p, sha)
    assert src.read(150 * MS).gpu_power_w == 600
    with pytest.raises(TraceError, match="does not match"):
        TraceSource(p, "0" * 64)


def test_trace_must_be_a_regular_utf8_file(tmp_path):
    """A FIFO (or a directory) at the trace path is refused at once, without blocking on it; bytes that are
    not UTF-8 are refused with a located message, never a traceback."""
    import os
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="a FIFO, not a regular file"):
        TraceSource(fifo, "0" * 64)
    with pytest.raises(TraceError, match="a directory, not a regular file"):
        TraceSource(tmp_path, "0" * 64)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"t_ns,gpu_power_w,gpu_temp_c\n0,\xff,50\n")
    with pytest.raises(TraceError, match="not UTF-8 text .byte 30: invalid start byte"):
        TraceSource(bad, hashlib.sha256(bad.read_bytes()).hexdigest())


def test_trace_must_increase(tmp_path):
    p, sha = write_trace(tmp_path, [(0, 500, 50, 45), (0, 600, 52, 46)])
    with pytest.raises(TraceError, match="does not increase"):
        TraceSource(p, sha)


def test_stale_telemetry_terminates(tmp_path):
    p, sha = write_trace(tmp_path, [(0, 500, 50, 45), (100 * MS, 600, 52, 46), (200 * MS, 600, 52, 46)])
    g = TelemetryGuard(TraceSource(p, sha), max_age_ns=150 * MS)
    assert g.read(250 * MS).gpu_power_w == 600
    with pytest.raises(TelemetryError, match="stale") as e:
        g.read(351 * MS)                  # past the end of the trace: the last value is not frozen
    assert e.value.fields["failure"] == "stale"
    with pytest.raises(TelemetryError):   # once failed, always failed
        g.read(260 * MS)


def test_missing_telemetry_terminates(tmp_path):
    p, sha = write_trace(tmp_path, [(50 * MS, 500, 50, 45)])
    g = TelemetryGuard(TraceSource(p, sha), max_age_ns=150 * MS)
    with pytest.raises(TelemetryError, match="missing"):
        g.read(10 * MS)


class _Regressing:
    kind = "test"

    def __init__(self):
        self.t = [100 * MS, 90 * MS]

    def read(self, now_ns):
        from hbfd.thermal.telemetry import TelemetrySample
        return TelemetrySample(self.t.pop(0), 100.0, 50.0)

    def identity(self):
        return {"identity": "regressing"}


def test_regressing_and_failed_telemetry_terminate():
    g = TelemetryGuard(_Regressing(), max_age_ns=1000 * MS)
    g.read(100 * MS)
    with pytest.raises(TelemetryError, match="regressing"):
        g.read(110 * MS)

    class Broken(_Regressing):
        def read(self, now_ns):
            raise OSError("sensor gone")
    g = TelemetryGuard(Broken(), max_age_ns=1000 * MS)
    with pytest.raises(TelemetryError, match="failed"):
        g.read(0)


def test_constant_source_is_declared_and_fresh():
    g = TelemetryGuard(ConstantSource(700.0, 55.0), max_age_ns=MS)
    assert g.read(10**12).gpu_power_w == 700.0
    assert g.source.identity()["identity"] == "constant:700W:55C"
    with pytest.raises(TelemetryError):
        ConstantSource(float("nan"), 55.0)


def test_nvml_source_only_where_nvml_exists():
    try:
        src = NvmlSource(0)
    except TelemetryError:
        pytest.skip("no NVML device here")
    g = TelemetryGuard(src, max_age_ns=2000 * MS)
    s = g.read(0)
    assert s.gpu_power_w > 0 and src.identity()["identity"].startswith("nvml:")
