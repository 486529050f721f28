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


def load_rom_for(geometry_name: str, *, ambient_c: float | None = None):
    """The committed ROM beside the geometry (``profiles/thermal/<name>.rom.npz``) when its geometry
    SHA-256 matches; otherwise fit one (tens of seconds) and save it there."""
    from .fom import build_model
    from .geometry import load_geometry
    from .rom import RomError, ThermalROM, fit_rom
    geom = load_geometry(geometry_name)
    path = ROM_DIR / f"{geom.name}.rom.npz"
    rom = None
    if path.exists():
        try:
            rom = ThermalROM.load(path, geometry_sha256=geom.sha256)
        except (RomError, OSError, KeyError, ValueError) as e:
            log.warning("refitting thermal ROM: %s", e)
    if rom is None:
        rom = fit_rom(build_model(geom))
        try:
            rom.save(path)
        except OSError as e:
            log.warning("could not cache the thermal ROM at %s: %s", path, e)
    if ambient_c is not None:
        rom.d = np.full(len(rom.output_names), float(ambient_c))
        rom.meta["ambient_c"] = float(ambient_c)
    return rom, geom


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


def make_service(profile):
    """The daemon's thermal service for a profile (ROM + policy + declared telemetry)."""
    from .controller import PolicyConfig, make_policy
    from .power import DEFAULT_HBM
    from .service import PackageThermalService
    th = profile.thermal
    guard = make_telemetry(th, profile_path=getattr(profile, "path", None))
    rom, geom = load_rom_for(th.geometry, ambient_c=th.ambient_c)
    cfg = PolicyConfig.from_profile(th, th.policy, dt_s=rom.dt_s)
    thresholds = {"rtt": th.rtt_c, "ltt": th.ltt_c, "stt": th.stt_c, "shutdown": th.shutdown_c}
    return PackageThermalService(rom, make_policy(cfg), guard, idle_w=profile.energy.idle_w, hbm=DEFAULT_HBM,
                                 hbm_traffic_bytes_per_s=th.hbm_traffic_bytes_per_s or 0.0,
                                 thresholds=thresholds,
                                 extra={"geometry": {"name": geom.name, "path": geom.path, "sha256": geom.sha256},
                                        "ambient_c": th.ambient_c,
                                        "limits_c": {"gpu": th.limit_gpu_c, "hbm": th.limit_hbm_c,
                                                     "hbf": th.limit_hbf_c}})
