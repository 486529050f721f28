"""Every environment variable hbfd and hbfctl read, in one place."""
from __future__ import annotations

import os
from pathlib import Path

from hbfcommon import ctl, rpc
from hbfcommon.env import env_bool, env_int
from hbfcommon.errors import ConfigError


def default_socket() -> Path:
    """The one default shared with every client: :func:`hbfcommon.rpc.default_socket`."""
    return rpc.default_socket()


def default_summary() -> Path:
    """``$HBFD_SUMMARY``, else ``hbfd-summary.json`` in the current directory."""
    return Path(os.environ.get("HBFD_SUMMARY") or "hbfd-summary.json")


def engine_choice() -> str:
    """``$HBFD_ENGINE``: ``auto`` (the profile's model: the NAND media model, or the calibrated curve for
    timing source ``curve``), ``fixed``, or ``module:factory`` (factory(profile) -> ServiceEngine, e.g. for
    tests and experiments). Built and checked by :func:`hbfd.services.compose`."""
    return os.environ.get("HBFD_ENGINE", "auto")


def thermal_choice() -> str:
    """``$HBFD_THERMAL``: ``auto`` (the package thermal model), ``none``, or ``module:factory``."""
    return os.environ.get("HBFD_THERMAL", "auto")


def thermal_calibration() -> str | None:
    """``$HBFD_THERMAL_CALIBRATION``: a calibration fragment (bench/thermal_calibrate.py's JSON) for the package
    thermal model; unset or empty: the geometry's assumed boundary (``hbfd serve --thermal-calibration``)."""
    return os.environ.get("HBFD_THERMAL_CALIBRATION") or None


def thermal_calibration_allow_goal_miss() -> bool:
    """``$HBFD_THERMAL_CALIBRATION_ALLOW_GOAL_MISS=1``: use a calibration whose held-out error misses the goal
    (the summary says so); default off: such a fragment is refused."""
    return env_bool("HBFD_THERMAL_CALIBRATION_ALLOW_GOAL_MISS", False)


def refresh_choice() -> str:
    """``$HBFD_REFRESH``: ``auto`` (retention + refresh model), ``none``, or ``module:factory``."""
    return os.environ.get("HBFD_REFRESH", "auto")


def ring_tags() -> bool:
    """``$HBFD_RING_TAGS=1``: the device helpers' measurement variant ``HBF_REF_TAGGED`` publishes without a
    fence, so a record whose tag (bits 32..63 of ``thermal_q_ppm``) does not match yet is a payload store not
    visible yet: counted as a retry. Default off: the protocol is "payload, then release the seq word", and a
    record whose tag does not match the run's key is a foreign one (every record is checked either way)."""
    return env_bool("HBFD_RING_TAGS", False)


def heartbeat_period_ns() -> int:
    """``$HBFD_HEARTBEAT_NS`` (default 2 ms; capped at the 10 ms promise)."""
    return max(100_000, min(env_int("HBFD_HEARTBEAT_NS", 2_000_000, lo=1), 10_000_000))


def stale_ns() -> int:
    """``$HBFD_STALE_NS``: the heartbeat stops when hbfd's control loop made no progress this long
    (default 1 s: hbfd is hung)."""
    return env_int("HBFD_STALE_NS", 1_000_000_000, lo=1)


def thermal_tick_ns() -> int:
    """``$HBFD_THERMAL_TICK_NS`` (default 10 ms)."""
    return env_int("HBFD_THERMAL_TICK_NS", 10_000_000, lo=1)


def thermal_horizon() -> dict:
    """``$HBFD_THERMAL_HORIZON=1``: publish a validity horizon with the thermal snapshot (hbf_ctl.h
    valid_until_gpu_ns; hbfd/thermal/horizon.py): the device keeps its snapshot past thermal_max_age_ns until
    then, and hbfd holds any change of mode, q, admission or refresh debt until the horizon it published has
    passed. On by default since the GPU A/B of 2026-12-06 (H100, docs/RESULTS.md "Stop 43": the quick stress matrix
    at fixed 0 ns x5.64 -> x2.68 median); 0: the device re-reads after every max age, as before. ``$HBFD_THERMAL_HORIZON_NS``:
    the longest horizon, and so the longest a change can be held (default 50 ms, at most ~68.7 s);
    ``$HBFD_THERMAL_HORIZON_DRIFT_PPM`` (default 200) and ``$HBFD_THERMAL_HORIZON_MARGIN_NS`` (default 50 us):
    the clock margin subtracted from every horizon. The keyword arguments of hbfd.thermal.horizon.HorizonConfig."""
    return dict(enabled=env_bool("HBFD_THERMAL_HORIZON", True),
                max_ns=env_int("HBFD_THERMAL_HORIZON_NS", 50_000_000, lo=0, hi=ctl.HBF_THC_HORIZON_MAX_NS),
                drift_ppm=env_int("HBFD_THERMAL_HORIZON_DRIFT_PPM", 200, lo=0, hi=1_000_000),
                margin_ns=env_int("HBFD_THERMAL_HORIZON_MARGIN_NS", 50_000, lo=0))


def log_level() -> str:
    return os.environ.get("HBFD_LOG", "INFO").upper()


def demo_mode() -> str:
    """``$HBFD_DEMO``: ``auto`` (on a GPU: the LLM decode with its expert weights in HBF, workloads/qwen3moe,
    when torch and Triton are there, else the microbenchmark), ``microbench`` (on a GPU: the microbenchmark)
    or ``cpu``."""
    return os.environ.get("HBFD_DEMO", "auto")


def accel_mode() -> str:
    """``$HBFD_ACCEL``: ``auto`` (default: the compiled twins of the hot loops when numba is installed),
    ``on`` (compiled, or a ConfigError when numba is missing) or ``off`` (the numpy definitions).
    See hbfd/accel.py."""
    v = (os.environ.get("HBFD_ACCEL") or "auto").strip().lower()
    if v not in ("auto", "on", "off"):
        raise ConfigError("HBFD_ACCEL must be auto, on or off", variable="HBFD_ACCEL", value=v)
    return v


def capacity_workers() -> int:
    """``$HBFD_CAPACITY_WORKERS``: threads per capacity range filling a scan's pages (store read + checksum, copy
    into the frames, read-back compare; hbfd/capacity/service.py). Default: the host's cores (at most 64)."""
    return env_int("HBFD_CAPACITY_WORKERS", max(1, min(64, os.cpu_count() or 1)), lo=1, hi=64)


def malloc_tune() -> bool:
    """``$HBFD_MALLOC_TUNE`` (default on): hbfd keeps freed heap memory for reuse (glibc's trim threshold
    raised, its mmap threshold fixed at 256 MiB: :func:`hbfd.memtune.tune_malloc`), so the media engine's
    per-batch arrays do not fault fresh pages in every batch. Off: glibc's defaults."""
    return env_bool("HBFD_MALLOC_TUNE", True)
