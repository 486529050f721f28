"""hbfd's composition root: the one place that builds the services the daemon drives.

The model packages are imported explicitly (no discovery, no fallback): ``hbfd.media`` (the
reference-path engine), ``hbfd.thermal`` (package thermal model + throttle controller) and
``hbfd.reliability`` (retention, refresh debt). What the server calls on them is declared in
``hbfd/contracts.py``.

Each service is chosen by the operator (``--engine`` / ``HBFD_ENGINE``, ``HBFD_THERMAL``,
``HBFD_REFRESH``, read in hbfd/knobs.py):

* ``auto``: the model the package builds for this profile (engine: ``hbfd.media.make_engine`` — the
  NAND media model, or the calibrated curve when the profile's timing source is ``curve``; thermal:
  ``hbfd.thermal.make_service``; refresh: ``hbfd.reliability.make_refresh_service``);
* the default's name: ``fixed`` (:class:`~hbfd.contracts.FixedLatencyEngine`), ``none``
  (:class:`~hbfd.contracts.NoThermal`, :class:`~hbfd.contracts.NoRefresh`);
* ``module:factory``: ``factory(profile)`` builds it (tests, experiments, operator plug-ins such as
  ``hbfd.thermal.override:make_service``).

Every product is checked against its protocol: one that lacks a declared member is a ConfigError
naming it. The summary names what ran.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from hbfcommon.errors import ConfigError
from hbfd import media, reliability, thermal
from hbfd.contracts import (FixedLatencyEngine, NoRefresh, NoThermal, RefreshingEngine, RefreshService,
                            ServiceEngine, ThermalService, check_service)

if TYPE_CHECKING:
    from hbfcommon.profile import Profile


@dataclass(frozen=True)
class Services:
    """What :func:`compose` built. ``refresh_engine`` is the engine the refresh plan runs through (the
    media model, when the refresh service attached to it), else None (background drain or no refresh)."""

    engine: ServiceEngine
    thermal: ThermalService
    refresh: RefreshService
    refresh_engine: RefreshingEngine | None = None


@dataclass(frozen=True)
class _Kind:
    name: str                  # the knob, for messages
    protocol: type
    auto: Callable[["Profile"], Any]
    default_name: str
    default: Callable[["Profile"], Any]


ENGINE = _Kind("HBFD_ENGINE", ServiceEngine, media.make_engine, "fixed", FixedLatencyEngine.from_profile)
THERMAL = _Kind("HBFD_THERMAL", ThermalService, thermal.make_service, "none", lambda _p: NoThermal())
REFRESH = _Kind("HBFD_REFRESH", RefreshService, reliability.make_refresh_service, "none", lambda _p: NoRefresh())


def load_factory(choice: str, *, knob: str) -> Callable[["Profile"], Any]:
    """The callable named by ``module:factory``; a ConfigError naming it when it cannot be loaded."""
    mod, _, fn = choice.partition(":")
    if not mod or not fn:
        raise ConfigError(f"{knob}={choice!r}: a plug-in is named module:factory", field=knob, value=choice)
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot load the service factory {choice!r} ({knob}): {e}", field=knob,
                          value=choice) from e
    if not callable(f):
        raise ConfigError(f"the service factory {choice!r} ({knob}) is not callable", field=knob, value=choice)
    return f


def _build(kind: _Kind, profile: "Profile", choice: str):
    if choice == "auto":
        return check_service(kind.auto(profile), kind.protocol, what=f"{kind.name}=auto")
    if choice == kind.default_name:
        return check_service(kind.default(profile), kind.protocol, what=f"{kind.name}={choice}")
    if ":" in choice:
        return check_service(load_factory(choice, knob=kind.name)(profile), kind.protocol,
                             what=f"the factory {choice!r} ({kind.name})")
    raise ConfigError(f"{kind.name}={choice!r}: choose auto, {kind.default_name} or module:factory",
                      field=kind.name, value=choice)


def build_engine(profile: "Profile", choice: str = "auto") -> ServiceEngine:
    return _build(ENGINE, profile, choice)


def build_thermal(profile: "Profile", choice: str = "auto", calibration: Any = None) -> ThermalService:
    """``calibration`` (:class:`hbfd.thermal.calibrate.CalibrationOptions`): a fitted package boundary for the
    package thermal model; only with ``choice`` auto (a plug-in or no model has no package to calibrate)."""
    if calibration is None:
        return _build(THERMAL, profile, choice)
    if choice != "auto":
        raise ConfigError(f"a thermal calibration ({calibration.path}) applies to the package thermal model "
                          f"(HBFD_THERMAL=auto), not HBFD_THERMAL={choice!r}", field="HBFD_THERMAL", value=choice)
    return check_service(thermal.make_service(profile, calibration), ThermalService,
                         what="HBFD_THERMAL=auto (calibrated)")


def build_refresh(profile: "Profile", choice: str = "auto") -> RefreshService:
    return _build(REFRESH, profile, choice)


def compose(profile: "Profile", *, engine: str = "auto", thermal: str = "auto", refresh: str = "auto",
            thermal_calibration: Any = None) -> Services:
    """Build and wire the daemon's services for ``profile`` (before readiness): the refresh service
    follows the range registrations, and its plan runs through the engine when the engine is the
    media model (:class:`hbfd.media.MediaEngine`)."""
    e = build_engine(profile, engine)
    t = build_thermal(profile, thermal, thermal_calibration)
    r = build_refresh(profile, refresh)
    r.use_range_registrations()        # the ledger holds the registered ranges' blocks only
    via = e if isinstance(e, media.MediaEngine) and r.attach_media() else None
    return Services(engine=e, thermal=t, refresh=r, refresh_engine=via)
