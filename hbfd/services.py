"""The plug-in interfaces the daemon drives, and their defaults.

Models are pure: they see arrays and integer nanoseconds handed to them by the server layer, never
sockets, threads or clocks. The daemon (hbfd/server.py) calls them from one thread.

* :class:`ServiceEngine` serves reference-path requests (the ring). Default until the media model
  lands: :class:`FixedLatencyEngine`. A media package plugs in by providing
  ``hbfd.media.make_engine(profile) -> ServiceEngine``.
* :class:`ThermalService` advances the package thermal model and the throttle controller every
  tick. Default :class:`NoThermal`. Plug-in: ``hbfd.thermal.make_service(profile)``.
* :class:`RefreshService` publishes refresh debt to the device. Default :class:`NoRefresh`.
  Plug-in: ``hbfd.reliability.make_refresh_service(profile)``.

The ``build_*`` functions pick the plug-in when its package provides the factory, else the default
(the summary names what ran, so a fallback is never silent).
"""
from __future__ import annotations

import importlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from hbfcommon import ctl

if TYPE_CHECKING:
    from hbfcommon.profile import Profile

log = logging.getLogger(__name__)

# One batch of requests handed to an engine (ids are ring tickets; arrival on the GPU clock).
REQUEST_BATCH_DTYPE = np.dtype([("id", "<u8"), ("arrival_ns", "<u8"), ("media_address", "<u8"),
                                ("bytes", "<u4"), ("op", "u1")])
# What an engine returns: modeled_ns = completion - arrival on the model's clock; status HBF_ST_*.
COMPLETION_BATCH_DTYPE = np.dtype([("id", "<u8"), ("modeled_ns", "<u8"), ("status", "u1")])


@runtime_checkable
class ServiceEngine(Protocol):
    """Serves reference requests.

    ``submit(batch)`` schedules requests from the arrivals seen so far (FCFS per resource is
    decided at submit); ``advance(now_ns)`` runs rare background events (GC, refresh) up to
    now_ns on the GPU clock; ``collect()`` returns every completion determined so far (each id
    exactly once); ``stats()`` is a JSON-able dict for the run summary.

    The daemon calls ``submit``, ``advance(max arrival of the batch)``, ``collect`` for every batch
    it finds in the ring, and one more ``collect`` on the first quiet scan after a submit (no new
    requests in the ring): an engine that defers a decision until it has seen later arrivals must
    decide everything it still holds on that call, or a waiting GPU thread never completes.
    """

    name: str

    def submit(self, batch: np.ndarray) -> None: ...
    def advance(self, now_ns: int) -> None: ...
    def collect(self) -> np.ndarray: ...
    def stats(self) -> dict[str, Any]: ...


class FixedLatencyEngine:
    """Every request costs the profile's fixed latency: loads/cp.async ``read_ns``, stores
    ``write_ns``, atomics (read-modify-write) ``read_ns + write_ns``. No queueing."""

    name = "fixed-latency"

    def __init__(self, read_ns: int, write_ns: int) -> None:
        if read_ns < 0 or write_ns < 0:
            raise ValueError("fixed latencies must be >= 0")
        self.read_ns, self.write_ns = int(read_ns), int(write_ns)
        self._by_op = np.array([self.read_ns, self.write_ns, self.read_ns + self.write_ns, self.read_ns],
                               dtype=np.uint64)
        self._pending: list[np.ndarray] = []
        self._served = 0
        self._unsupported = 0

    @classmethod
    def from_profile(cls, profile: "Profile") -> "FixedLatencyEngine":
        f = profile.timing_model.fixed
        return cls(f.read_ns, f.write_ns)

    def submit(self, batch: np.ndarray) -> None:
        out = np.zeros(len(batch), COMPLETION_BATCH_DTYPE)
        out["id"] = batch["id"]
        op = batch["op"].astype(np.int64)
        ok = op < ctl.HBF_N_OPS
        out["modeled_ns"][ok] = self._by_op[op[ok]]
        out["status"] = np.where(ok, ctl.HBF_ST_READY, ctl.HBF_ST_UNSUPPORTED)
        self._unsupported += int((~ok).sum())
        self._pending.append(out)

    def advance(self, now_ns: int) -> None:
        return None

    def collect(self) -> np.ndarray:
        if not self._pending:
            return np.zeros(0, COMPLETION_BATCH_DTYPE)
        out = np.concatenate(self._pending)
        self._pending.clear()
        self._served += len(out)
        return out

    def stats(self) -> dict[str, Any]:
        return {"engine": self.name, "read_ns": self.read_ns, "write_ns": self.write_ns,
                "atomic_ns": self.read_ns + self.write_ns, "served": self._served,
                "unsupported": self._unsupported}


@dataclass(frozen=True)
class ThermalState:
    mode: int = ctl.HBF_TH_NORMAL       # HBF_TH_*
    q_ppm: int = 1_000_000              # service fraction; Normal publishes 1e6
    admission_open: bool = True
    hbf_max_c: float = math.nan         # nan: no thermal model (published as INT32_MIN millic)
    hbm_c: float = math.nan
    gpu_c: float = math.nan

    @property
    def mode_name(self) -> str:
        return ctl.THERMAL_MODE_NAMES[self.mode]


@runtime_checkable
class ThermalService(Protocol):
    """``tick(now_ns, media_energy_j)``: advance to now_ns (host monotonic clock handed in by the
    server) given the media energy spent since the last tick; returns the state to publish."""

    name: str

    def tick(self, now_ns: int, media_energy_j: float) -> ThermalState: ...
    def summary_section(self) -> dict[str, Any]: ...


class NoThermal:
    """No thermal model: always Normal at full rate; the summary says so."""

    name = "none"

    def __init__(self) -> None:
        self._state = ThermalState()

    def tick(self, now_ns: int, media_energy_j: float) -> ThermalState:
        return self._state

    def summary_section(self) -> dict[str, Any]:
        return {"thermal": "none", "mode": "Normal", "q_ppm": 1_000_000,
                "note": "no thermal model ran: no throttling was applied"}


@runtime_checkable
class RefreshService(Protocol):
    """``tick(now_ns, thermal)`` returns the monotonic refresh debt (bytes) to publish."""

    name: str

    def tick(self, now_ns: int, thermal: ThermalState) -> int: ...
    def summary_section(self) -> dict[str, Any]: ...


class NoRefresh:
    name = "none"

    def tick(self, now_ns: int, thermal: ThermalState) -> int:
        return 0

    def summary_section(self) -> dict[str, Any]:
        return {"refresh": "none", "debt_total_bytes": 0}


def _plugin(module: str, factory: str):
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return None
        raise
    fn = getattr(mod, factory, None)
    if fn is None:
        log.warning("%s has no %s(); using the default service", module, factory)
    return fn


def build_engine(profile: "Profile", *, force: str | None = None) -> ServiceEngine:
    """The media model when ``hbfd.media.make_engine`` exists (unless force == 'fixed')."""
    if force != "fixed":
        fn = _plugin("hbfd.media", "make_engine")
        if fn is not None:
            return fn(profile)
    return FixedLatencyEngine.from_profile(profile)


def build_thermal(profile: "Profile", *, force: str | None = None) -> ThermalService:
    if force != "none":
        fn = _plugin("hbfd.thermal", "make_service")
        if fn is not None:
            return fn(profile)
    return NoThermal()


def build_refresh(profile: "Profile", *, force: str | None = None) -> RefreshService:
    if force != "none":
        fn = _plugin("hbfd.reliability", "make_refresh_service")
        if fn is not None:
            return fn(profile)
    return NoRefresh()
