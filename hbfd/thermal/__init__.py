"""Package thermal model (full order + ERA reduced order), throttling controller, telemetry.

Daemon plug-in: :func:`make_service` (the composition root ``hbfd.services.compose`` calls it). Pure models live in
fom / rom / controller / power / limits / simulate; telemetry.py is the I/O edge (NVML).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from hbfcommon.profile import PROFILE_DIR
from hbfcommon.errors import ConfigError

log = logging.getLogger(__name__)

ROM_DIR = PROFILE_DIR / "thermal"


def _rom_cache_path(geom, suffix: str = "") -> Path:
    """Where a geometry's ROM is cached: beside the geometry file (the bundled ones: profiles/thermal/)."""
    d = Path(geom.path).parent if geom.path and geom.path != "<dict>" else ROM_DIR
    return d / f"{geom.name}{suffix}.rom.npz"


def _cached_rom(geom, path: Path):
    """The ROM at ``path`` when it was fit on ``geom`` (SHA-256); otherwise fit one and save it there."""
    from .fom import build_model
    from .rom import RomError, ThermalROM, fit_rom
    rom = None
    if path.exists():
        try:
            rom = ThermalROM.load(path, geometry_sha256=geom.sha256)
        except (RomError, OSError, KeyError, ValueError) as e:
            log.warning("refitting thermal ROM: %s", e)
    if rom is None:
        log.info("fitting the thermal ROM of %s (minutes for the bundled packages); cached at %s", geom.name, path)
        rom = fit_rom(build_model(geom))
        try:
            rom.save(path)
        except OSError as e:
            log.warning("could not cache the thermal ROM at %s: %s", path, e)
    return rom


def load_rom_for(geometry_name: str, *, ambient_c: float | None = None):
    """The committed ROM beside the geometry (``profiles/thermal/<name>.rom.npz``) when its geometry
    SHA-256 matches; otherwise fit one (tens of seconds) and save it there."""
    from .geometry import load_geometry
    geom = load_geometry(geometry_name)
    rom = _cached_rom(geom, _rom_cache_path(geom))
    if ambient_c is not None:
        rom.d = np.full(len(rom.output_names), float(ambient_c))
        rom.meta["ambient_c"] = float(ambient_c)
    return rom, geom


def load_pinned_rom(geom, cache_dir: str | Path | None = None):
    """The ROM of ``geom`` with its cold plate pinned (:func:`hbfd.thermal.calibrate.pinned_geometry`), the
    package part of the calibration model: the fit and the daemon use this one function, so they run the same
    ROM. Cached as ``<name>-pinned-sink.rom.npz`` beside the geometry (or in ``cache_dir``), checked by SHA-256."""
    from .calibrate import pinned_geometry
    pg = pinned_geometry(geom)
    path = _rom_cache_path(geom, "-pinned-sink")
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        path = Path(cache_dir) / path.name
    return _cached_rom(pg, path)


def make_telemetry(th, *, profile_path: str | None = None):
    from .telemetry import ConstantSource, NvmlSource, TelemetryGuard, TraceSource
    kind = th.telemetry
    if kind is None:
        raise ConfigError("the profile declares no thermal telemetry source (thermal.telemetry: constant | "
                          "trace | nvml); a thermal run never assumes one", field="thermal.telemetry")
    if kind == "constant":
        src: Any = ConstantSource(th.telemetry_gpu_power_w, th.telemetry_gpu_temp_c)
    elif kind == "trace":
        p = Path(th.telemetry_trace)
        if not p.is_absolute() and profile_path and not p.exists():
            p = Path(profile_path).resolve().parent / p
        src = TraceSource(p, th.telemetry_trace_sha256)
    else:
        src = NvmlSource(0)
    max_age_ns = int((th.telemetry_max_age_ms or 1000.0) * 1e6)
    return TelemetryGuard(src, max_age_ns)


def load_calibration(profile, options):
    """The calibrated package ROM and power split for ``profile`` from a fragment (``options``:
    :class:`hbfd.thermal.calibrate.CalibrationOptions`); refused with a CalibrationError naming the reason."""
    from .calibrate import calibrated_rom, load_fragment
    from .geometry import load_geometry
    from .power import FittedSplit
    geom = load_geometry(profile.thermal.geometry)
    cal = load_fragment(options.path, geom, allow_goal_miss=options.allow_goal_miss)
    if cal.kind != "measured":
        log.warning("thermal calibration %s is %s (not measured on a card): %s", cal.path, cal.kind, cal.line())
    if not cal.goal_met:
        log.warning("thermal calibration %s misses the held-out error goal (allowed explicitly): %s", cal.path,
                    cal.line())
    rom = calibrated_rom(load_pinned_rom(geom), cal.params,
                         provenance={"fragment_sha256": cal.sha256, "kind": cal.kind, **dict(cal.provenance)})
    return rom, geom, cal, FittedSplit(cal.params.die_fraction, cal.params.hbm_fraction)


def make_service(profile, calibration=None):
    """The daemon's thermal service for a profile (ROM + policy + declared telemetry). ``calibration``
    (:class:`hbfd.thermal.calibrate.CalibrationOptions`, from ``hbfd serve --thermal-calibration``): the package
    boundary and power split fitted against a card replace the geometry's assumed ones; the summary, ``hbfctl
    status`` and the run report say which is in force."""
    from .calibrate import assumed_boundary
    from .controller import PolicyConfig, make_policy
    from .power import DEFAULT_HBM
    from .service import PackageThermalService
    th = profile.thermal
    guard = make_telemetry(th, profile_path=getattr(profile, "path", None))
    traffic = th.hbm_traffic_bytes_per_s or 0.0
    if calibration is not None:
        rom, geom, cal, split = load_calibration(profile, calibration)
        ambient, cal_section, line = cal.params.coolant_c, cal.summary(), cal.line()
        cal_section["hbm_traffic_bytes_per_s_ignored"] = traffic      # the board power holds the memory's
    else:
        rom, geom = load_rom_for(th.geometry, ambient_c=th.ambient_c)
        split, ambient = None, th.ambient_c
        cal_section = assumed_boundary(geom, ambient_c=th.ambient_c, hbm_traffic_bytes_per_s=traffic)
        line = cal_section["line"]
    cfg = PolicyConfig.from_profile(th, th.policy, dt_s=rom.dt_s)
    thresholds = {"rtt": th.rtt_c, "ltt": th.ltt_c, "stt": th.stt_c, "shutdown": th.shutdown_c}
    return PackageThermalService(rom, make_policy(cfg), guard, idle_w=profile.energy.idle_w, hbm=DEFAULT_HBM,
                                 hbm_traffic_bytes_per_s=traffic, split=split, calibration_line=line,
                                 thresholds=thresholds,
                                 extra={"geometry": {"name": geom.name, "path": geom.path, "sha256": geom.sha256},
                                        "ambient_c": ambient, "profile_ambient_c": th.ambient_c,
                                        "calibration": cal_section,
                                        "limits_c": {"gpu": th.limit_gpu_c, "hbm": th.limit_hbm_c,
                                                     "hbf": th.limit_hbf_c}})
