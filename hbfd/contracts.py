"""What hbfd's server drives, declared once: the service protocols, the batch and state types they
exchange, and the default services. Pure: the model packages (hbfd/media, hbfd/thermal,
hbfd/reliability) import this module, never the server shell (hbfd/server.py, hbfd/services.py, ...).

Models see arrays and integer nanoseconds handed to them by the server layer, never sockets, threads or
clocks. The daemon (hbfd/server.py) calls them; every method it calls is declared here, and the
composition root (:func:`hbfd.services.compose`) refuses a service that lacks one
(:func:`check_service`).

* :class:`ServiceEngine` serves reference-path requests (the ring). Default :class:`FixedLatencyEngine`;
  the media model (``hbfd.media.make_engine``) when the profile has one.
* :class:`RefreshingEngine` is an engine through which the refresh plan runs (``refresh(lpns, at_ns)``):
  the media model.
* :class:`ThermalService` advances the package thermal model and the throttle controller every tick.
  Default :class:`NoThermal`.
* :class:`RefreshService` ages the registered media and publishes refresh debt to the device. Default
  :class:`NoRefresh`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from hbfcommon import ctl
from hbfcommon.errors import ConfigError, ErrorCode, HbfError

if TYPE_CHECKING:
    from hbfcommon.profile import Profile

# One batch of requests handed to an engine (ids are ring tickets; arrival on the GPU clock).
REQUEST_BATCH_DTYPE = np.dtype([("id", "<u8"), ("arrival_ns", "<u8"), ("media_address", "<u8"),
                                ("bytes", "<u4"), ("op", "u1")])
# What an engine returns: modeled_ns = completion - arrival on the model's clock; status a RequestStatus.
COMPLETION_BATCH_DTYPE = np.dtype([("id", "<u8"), ("modeled_ns", "<u8"), ("status", "u1")])


@dataclass(frozen=True)
class ThermalState:
    """What the control loop publishes each tick (the thermal snapshot of the control region)."""

    mode: int = ctl.HBF_TH_NORMAL       # HBF_TH_*
    q_ppm: int = 1_000_000              # service fraction; Normal publishes 1e6
    admission_open: bool = True
    hbf_max_c: float = math.nan         # nan: no thermal model (published as INT32_MIN millic)
    hbm_c: float = math.nan
    gpu_c: float = math.nan

    @property
    def mode_name(self) -> str:
        return ctl.THERMAL_MODE_NAMES[self.mode]


# ---- protocols -------------------------------------------------------------------------------------

@runtime_checkable
class ServiceEngine(Protocol):
    """Serves reference requests.

    ``submit(batch)`` schedules requests from the arrivals seen so far (FCFS per resource is
    decided at submit); ``advance(now_ns)`` runs rare background events (GC, write flushes) up to
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


@runtime_checkable
class RefreshingEngine(ServiceEngine, Protocol):
    """An engine that models refresh on the media: ``refresh(lpns, at_ns)`` senses and rewrites the
    logical pages from ``at_ns`` (no completions are posted) and returns when the last finishes."""

    def refresh(self, lpns: np.ndarray, at_ns: int) -> int: ...


@runtime_checkable
class ThermalService(Protocol):
    """``tick(now_ns, media_energy_j)``: advance to now_ns (host monotonic clock handed in by the
    server) given the media energy spent since the last tick; returns the state to publish.
    ``set_override(obj)``: an operator override (Report kind ``thermal_override``, JSON already
    parsed), published at the next tick; a service that takes none raises :class:`HbfError`
    (INVALID_ARGUMENT) saying how to start hbfd with one."""

    name: str

    def tick(self, now_ns: int, media_energy_j: float) -> ThermalState: ...
    def summary_section(self) -> dict[str, Any]: ...
    def set_override(self, obj: Any) -> Any: ...


@runtime_checkable
class RefreshService(Protocol):
    """Retention/refresh bookkeeping the daemon drives.

    * ``tick(now_ns, thermal)`` returns the monotonic refresh debt (bytes) to publish;
      ``background_drained_bytes`` is published beside it.
    * ``use_range_registrations()`` (once, before readiness): only the registered ranges' media
      holds valid data from now on; ``register_range(range_id, media_lo, media_hi)`` /
      ``unregister_range(range_id)`` follow the range table.
    * ``counts_reads``: the daemon hands every application read's media address to
      ``count_reads(addresses)`` (read disturb) when True.
    * ``attach_media()`` (once, before readiness, only with a :class:`RefreshingEngine`): True when the
      plan runs through the engine from now on: ``media_work(now_ns)`` gives ``(token, logical
      pages)`` or None, the daemon runs ``engine.refresh`` and reports the duration with
      ``media_done``; False when the service has no plan to hand out.
    """

    name: str
    counts_reads: bool
    background_drained_bytes: int

    def tick(self, now_ns: int, thermal: ThermalState) -> int: ...
    def summary_section(self) -> dict[str, Any]: ...
    def use_range_registrations(self) -> None: ...
    def register_range(self, range_id: int, media_lo: int, media_hi: int) -> int: ...
    def unregister_range(self, range_id: int) -> int: ...
    def count_reads(self, media_addresses: np.ndarray) -> None: ...
    def attach_media(self) -> bool: ...
    def media_work(self, now_ns: int) -> tuple[int, np.ndarray] | None: ...
    def media_done(self, token: int, duration_ns: int, *, idle: bool = False) -> None: ...


def protocol_members(proto: type) -> list[str]:
    """The attributes and methods ``proto`` declares (its own and its protocol bases'), sorted."""
    names: set[str] = set()
    for cls in proto.__mro__:
        if cls is object or cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        names.update(k for k in vars(cls).get("__annotations__", {}) if not k.startswith("_"))
        names.update(k for k, v in vars(cls).items() if callable(v) and not k.startswith("_"))
    return sorted(names)


def check_service(obj: Any, proto: type, *, what: str) -> Any:
    """``obj`` if it provides every member of ``proto``; else a :class:`ConfigError` naming ``what``
    (the plug-in that built it) and the missing members."""
    missing = [m for m in protocol_members(proto) if not hasattr(obj, m)]
    if missing:
        raise ConfigError(f"{what} built a {type(obj).__name__} that lacks the {proto.__name__} "
                          f"member(s) {', '.join(missing)}", field="factory", value=what, missing=missing)
    return obj


# ---- defaults --------------------------------------------------------------------------------------

def drain_completions(pending: list[np.ndarray]) -> np.ndarray:
    """Every completion batch an engine holds, concatenated and handed out once (``collect``)."""
    if not pending:
        return np.zeros(0, COMPLETION_BATCH_DTYPE)
    out = np.concatenate(pending)
    pending.clear()
    return out


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
        out = drain_completions(self._pending)
        self._served += len(out)
        return out

    def stats(self) -> dict[str, Any]:
        return {"engine": self.name, "read_ns": self.read_ns, "write_ns": self.write_ns,
                "atomic_ns": self.read_ns + self.write_ns, "served": self._served,
                "unsupported": self._unsupported}


def no_override(service_name: str) -> HbfError:
    """The error of a thermal service that takes no operator override."""
    return HbfError("this hbfd's thermal service takes no operator override (start it with "
                    "HBFD_THERMAL=hbfd.thermal.override:make_service)", code=ErrorCode.INVALID_ARGUMENT,
                    thermal=service_name)


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

    def set_override(self, obj: Any) -> Any:
        raise no_override(self.name)

    def horizon_hint_ns(self) -> int:
        """The validity horizon's hint (hbfd/thermal/horizon.py): the state never changes."""
        return ctl.HBF_THC_HORIZON_MAX_NS


class NoRefresh:
    """No retention model: no debt, no ledger; range registrations and reads are not tracked."""

    name = "none"
    counts_reads = False
    background_drained_bytes = 0

    def tick(self, now_ns: int, thermal: ThermalState) -> int:
        return 0

    def summary_section(self) -> dict[str, Any]:
        return {"refresh": "none", "debt_total_bytes": 0}

    def use_range_registrations(self) -> None:
        return None

    def register_range(self, range_id: int, media_lo: int, media_hi: int) -> int:
        return 0

    def unregister_range(self, range_id: int) -> int:
        return 0

    def count_reads(self, media_addresses: np.ndarray) -> None:
        return None

    def attach_media(self) -> bool:
        return False          # no plan to run through the engine

    def media_work(self, now_ns: int) -> tuple[int, np.ndarray] | None:
        return None

    def media_done(self, token: int, duration_ns: int, *, idle: bool = False) -> None:
        raise ValueError(f"refresh token {token} was not handed out (no refresh service)")
