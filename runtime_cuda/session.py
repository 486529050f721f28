"""The workload-side API: attach to hbfd, map + register the control region, keep the device state
block in sync with the published range snapshot, bind instrumented modules, gate launches, read
counters.

    import runtime_cuda as hbf
    with hbf.attach() as s:
        r = s.register_timing_range(ptr, nbytes)
        s.bind_module(cumodule, artifact="k.admission.json")
        s.launch(func, grid, block, [c_uint64(ptr), c_int32(n)], kernel="k")
        print(s.counters()["totals"])
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from hbfcommon import abi
from hbfcommon import abort
from hbfcommon import artifact as A
from hbfcommon import ctl as C
from hbfcommon import deferred as DF
from hbfcommon import resources
from hbfcommon.errors import ConfigError, ErrorCode, HbfError, RangeError
from hbfcommon.capacity import CAP_COUNTER_NAMES, CAP_COUNTERS_GLOBAL, CAP_TABLE_GLOBAL, HBF_FR_FREE, capacity_admitted
from hbfcommon.rpc import REPORT_MAX_BYTES

from . import capacity as CAP
from . import devstate as D
from . import knobs
from . import triton_load as TL

log = logging.getLogger(__name__)

# the UnregisterRange deadline of a capacity range grows by this for each dirty frame hbfd writes back in the call
# (hbfd/capacity/service.py flush: written, read back and checksummed a page at a time, the media model's programs
# in batches: ~155 us a frame on the 2-core CI-like box, 2026-12-06; 1 ms is a bound with ~6x margin)
CAPACITY_FLUSH_S_PER_FRAME = 0.001
HOT_WALK_MAX = 256          # allocations one registered range may span for Session._hot_allocations (more: per-launch lookups)
STATUS_CODE = {C.HBF_ST_UNSUPPORTED: ErrorCode.UNSUPPORTED, C.HBF_ST_DAEMON_LOST: ErrorCode.DAEMON_LOST,
               C.HBF_ST_TIMEOUT: ErrorCode.TIMEOUT, C.HBF_ST_THERMAL_SHUTDOWN: ErrorCode.THERMAL_SHUTDOWN}


class LaunchRefused(HbfError):
    code = ErrorCode.LAUNCH_REFUSED


class DeviceFailure(HbfError):
    """A request reached a terminal non-READY state on the GPU (the failing warps ended with `exit`,
    or the kernel trapped); status and site are the recorded failure word."""

    def __init__(self, message: str, *, status: int, site: int, **fields: Any) -> None:
        super().__init__(message, code=STATUS_CODE.get(status, ErrorCode.INTERNAL),
                         status=D.C_STATUS_NAMES[status] if status < len(D.C_STATUS_NAMES) else status,
                         site=site, kernel_index=site >> 16, site_index=site & 0xFFFF, **fields)
        self.status = status
        self.site = site


@dataclass
class KernelInfo:
    name: str
    index: int
    kslot: int
    admitted: bool
    reasons: list[str] = field(default_factory=list)
    address_source: str = "memory"   # hbfcc's provenance: "params" allows per-launch native selection
    capacity_admitted: bool = False  # hbfcc's capacity pass rewrote every access (may reach capacity ranges)
    native_entry: str | None = None  # hbfcc's HBFCC_NATIVE_ENTRY: the untouched kernel as its own entry (its name)


@dataclass
class ModuleBinding:
    module: int
    instrumented: bool
    kslot_base: int
    kernels: dict[str, KernelInfo]
    artifact_path: str | None = None
    # per-launch selection (Session._select): __hb_state currently points at the session (True) or is 0
    # (the module's kernels run their native version); where and in which epoch it was last launched
    attached: bool = True
    # a launch of the module was captured into a CUDA graph: its replays read __hb_state as they find it, so
    # while any range is registered the session never detaches the module again (state_word)
    captured: bool = False
    last_stream: int | None = None
    last_epoch: int = -1
    state_addr: int = 0
    # the module's attach switch in its constant bank (abi.DETACHED_GLOBAL: 1 while __hb_state is 0, written with it;
    # 0: a module built before it, which has only __hb_state)
    detached_addr: int = 0
    cdesc_addr: int = 0   # the module's __hb_cdesc (0: a helper build without one)
    cdesc_bytes: int = 0  # its size: CDESC_BYTES, or CDESC_BYTES_V5 (built before ABI 6: one range inline)
    # kernel name -> its native entry's CUfunction (KernelInfo.native_entry, looked up once at bind; HBF_NATIVE_ENTRY)
    native_fns: dict[str, Any] = field(default_factory=dict)
    # kernel names whose native entry got the instrumented entry's function attributes (Session._native_ready: at
    # its first launch, after Triton's loader set them), and the native launches that failed and ran instrumented
    native_ready: set[str] = field(default_factory=set)
    native_failures: dict[str, int] = field(default_factory=dict)
    # HBF_NATIVE_MODULE=plain: kernel name -> the kernel's CUfunction in the module's PLAIN cubin (the artifact's
    # native_module, Session._plain_functions: loaded once at bind into plain_modules, unloaded at close or rebind), and
    # the kernels whose plain function got the instrumented entry's attributes (Session._native_ready)
    plain_fns: dict[str, Any] = field(default_factory=dict)
    plain_modules: list[Any] = field(default_factory=list)
    plain_ready: set[str] = field(default_factory=set)
    plain_captured: bool = False      # a graph capture launched a plain function: its module is never unloaded

    def kernel(self, name: str) -> KernelInfo | None:
        return self.kernels.get(name)


def triton_artifact(metadata_group: Mapping[str, Any] | None) -> Any:
    """The admission artifact of a Triton kernel (:func:`triton_record`), None when there is none or
    it does not describe the kernel's cubin (then with a logged warning saying why)."""
    art, why = triton_record(metadata_group)
    if why:
        log.warning("Triton kernel %s: no admission record: %s", _group_name(metadata_group), why)
    return art


# what to do about a cubin whose record is missing or describes another build
STALE_ADVICE = ("remove this kernel's Triton cache entry ({where}) or give each hbfcc configuration its own "
                "TRITON_CACHE_DIR, and compile again through hbfcc-ptxas")


def _group_name(metadata_group: Mapping[str, Any] | None) -> str:
    for k in dict(metadata_group or {}):
        if str(k).endswith(".cubin"):
            return str(k)[:-len(".cubin")]
    return "?"


def triton_record(metadata_group: Mapping[str, Any] | None) -> tuple[Any, str | None]:
    """(artifact, why) of a Triton kernel from its cache group (Triton's ``kernel.metadata_group``).

    The artifact: one named in the group; else the store's record of the very cubin Triton hands over
    (``by-output/<sha256 of the cubin>``, whatever knobs built it); else the record hbfcc-ptxas stored
    under the sha256 of the kernel's ORIGINAL PTX (Triton caches the pre-rewrite PTX), when it
    describes this cubin. ``why`` (artifact None) says why an hbfcc-built cubin has no record it can
    be trusted with: the store has none (a warm Triton cache with an emptied or another artifact store),
    the store's record of its PTX is another build, or the cubin was built by another hbfcc configuration
    than the hbfcc-ptxas this process's Triton runs now (Triton 3.6 hashes ``ptxas --version`` into its
    cache key once per process, so a knob changed in the process, or a process that compiled with
    another ptxas first, reuses cubins of the old configuration). (None, None): no hbfcc build at all."""
    group = dict(metadata_group or {})
    for k, v in group.items():
        if str(k).endswith(A.ARTIFACT_SUFFIXES):
            return v, None
    cubin, cubin_path = TL.group_file(group, ".cubin")
    ptx, _ = TL.group_file(group, ".ptx")
    where = os.path.dirname(cubin_path) if cubin_path else "its directory in TRITON_CACHE_DIR"
    advice = STALE_ADVICE.format(where=where)
    rec = A.lookup_by_output(cubin) if cubin is not None else None
    if TL.is_load_record(rec):
        # HBF_TRITON_INSTRUMENT=load's record of a plain Triton kernel: the runtime's own, read by the load path
        # (runtime_cuda/triton_load.py) when the knob is on; without it the kernel is what Triton compiled
        return None, None
    if rec is None and ptx is not None:
        rec = A.lookup_by_ptx(ptx)
        built = ((rec or {}).get("build") or {}).get("output_sha256")
        if rec is not None and cubin is not None and built and built != _sha256(cubin):
            return None, (f"its cubin (sha256 {_sha256(cubin)[:12]}) is not the build the artifact store "
                          f"records for its PTX (cubin {built[:12]}, built by '{rec['build'].get('marker')}') "
                          f"and the store has no record of this cubin: {advice}")
    if rec is None:
        if cubin is not None and abi.STATE_GLOBAL.encode() in cubin:
            return None, (f"an instrumented cubin (built by hbfcc-ptxas) without an admission record in the "
                          f"artifact store {A.store_dir()} (a warm Triton cache with an emptied or another "
                          f"artifact store): {advice}")
        now = _hbfcc_marker_now(_group_target(group))
        if cubin is not None and DF.is_deferred_marker(now):
            # HBFCC_DEFER=1 hands Triton the plain cubin: without its record nothing says it was meant to be
            # instrumented, but the ptxas Triton runs now is hbfcc-ptxas deferring, which made it
            return None, (f"a plain cubin while Triton's ptxas is hbfcc-ptxas with HBFCC_DEFER=1 ('{now}'), and the "
                          f"artifact store {A.store_dir()} has no record of it: a deferred compile whose record "
                          f"(and rewritten PTX) is gone (a warm Triton cache with an emptied or another artifact "
                          f"store), or a kernel compiled by a plain ptxas: {advice}")
        return None, None
    if DF.is_pending(rec):       # HBFCC_DEFER=rewrite: no marker (nothing of hbfcc ran but the record): its knobs
        why = DF.knob_mismatch(rec, os.environ)
        return (None, f"{why}: {advice}") if why else (rec, None)
    was = (rec.get("build") or {}).get("marker")
    now = _hbfcc_marker_now(((rec.get("ptxas") or {}).get("target")) or "")
    if was and now and was != now:
        return None, (f"its cubin was built by '{was}' but the hbfcc-ptxas Triton runs now builds '{now}': "
                      f"Triton's cache key did not see the change (it hashes `ptxas --version` once per "
                      f"process); {advice}")
    return rec, None


def _sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _group_target(group: Mapping[str, Any]) -> str:
    """The ``sm_XX`` a Triton cache group was compiled for (its metadata JSON's target), '' when unknown."""
    raw, _ = TL.group_file(group, ".json")
    try:
        arch = json.loads(raw or b"{}").get("target", {}).get("arch")
    except (ValueError, AttributeError):
        return ""
    return f"sm_{arch}" if isinstance(arch, int) else ""


def triton_load_binary(name: str, cubin: bytes, shared: int) -> tuple[int, int, int, int, int]:
    """Load a cubin the way Triton loads a kernel's (its driver's ``load_binary`` on the current device):
    (module, function, registers, spills, max threads per block). The seam the CPU tests replace."""
    from triton.runtime.driver import driver  # noqa: PLC0415
    return driver.active.utils.load_binary(name, cubin, shared, driver.active.get_current_device())


def _loading_kernel(module: int, function: int, depth: int = 8) -> Any:
    """The Triton CompiledKernel whose ``_init_handles`` runs the load hook now (found in the caller frames:
    the hook receives handles only). None when no such frame is found."""
    try:
        f = sys._getframe(2)
    except ValueError:
        return None
    for _ in range(depth):
        if f is None:
            return None
        obj = f.f_locals.get("self")
        if obj is not None and hasattr(obj, "metadata_group") and getattr(obj, "module", None) == module \
                and getattr(obj, "function", None) == function:
            return obj
        f = f.f_back
    return None


def prebuild_triton(kernel: Any) -> DF.Built:
    """Build a deferred Triton kernel's instrumented cubin now (HBFCC_DEFER=1 / rewrite; with
    HBF_TRITON_INSTRUMENT=load a plain kernel, verified first; cached in the artifact store, so its first load in an
    attached session only reads it back). ``kernel``: a CompiledKernel (or its ``metadata_group``). Raises HbfError
    when the kernel has no deferred record or the build fails."""
    group = getattr(kernel, "metadata_group", kernel)
    rec, why = triton_record(group)
    if rec is None and knobs.triton_instrument() == "load" and _plain_cubin(group):
        return DF.build(TL.prepare_group(_group_name(group), group).record)
    if rec is None:
        raise ConfigError(f"Triton kernel {_group_name(group)}: no deferred build to make: "
                          f"{why or 'no admission record (not compiled through hbfcc-ptxas)'}")
    if DF.recipe(rec) is None:
        raise ConfigError(f"Triton kernel {_group_name(group)} was built eagerly (its cubin is instrumented already)")
    return DF.build(rec)


def _plain_cubin(group: Mapping[str, Any] | None) -> bytes | None:
    """The cubin of a Triton cache group when it is not instrumented (HBF_TRITON_INSTRUMENT=load's candidates)."""
    cubin, _ = TL.group_file(dict(group or {}), ".cubin")
    return cubin if cubin is not None and abi.STATE_GLOBAL.encode() not in cubin else None


def _hbfcc_marker_now(target: str) -> str | None:
    """The ``hbfcc ...`` marker line of the ptxas Triton would run now for ``target`` (sm_100+: its
    Blackwell ptxas), when that is hbfcc-ptxas; None otherwise (then nothing to compare)."""
    try:
        from triton import knobs as tk  # noqa: PLC0415
        m = re.match(r"(?:sm|compute)_(\d+)", target)
        tool = tk.nvidia.ptxas_blackwell if m and int(m.group(1)) >= 100 else tk.nvidia.ptxas
        path = tool.path
    except (ImportError, AttributeError, RuntimeError, OSError):   # no Triton, or no ptxas it can run:
        return None                                                   # nothing to compare with
    # the line depends on hbfcc's knobs (HBFCC_*, read by hbfcc-ptxas's own knobs.py): one run per set
    return _marker_of(path, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("HBFCC_"))))


@functools.lru_cache(maxsize=16)
def _marker_of(ptxas: str, _knobs: tuple) -> str | None:
    """The marker line ``ptxas --version`` prints (hbfcc-ptxas adds it), per ptxas and set of hbfcc
    knobs in the environment."""
    try:
        cp = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((ln.strip() for ln in cp.stdout.splitlines() if ln.startswith("hbfcc ")), None)


def _triton_launch_args(metadata: Any, start: int = 2, depth: int = 10, with_stream: bool = False):
    """The kernel arguments of the Triton launch in progress, found in the caller frames of the
    launch_enter_hook: Triton's launcher (CudaLauncher.__call__ / its wrappers) holds a tuple
    ``(..., launch_metadata, enter_hook, exit_hook, *kernel_args)`` whose launch_metadata is the very
    object the hook received. None when no such frame is found (then the arguments are unknown)."""
    try:
        f = sys._getframe(start)
    except ValueError:
        return None
    for _ in range(depth):
        if f is None:
            return None
        for v in f.f_locals.values():
            if isinstance(v, tuple) and len(v) >= 3:
                for i, x in enumerate(v):
                    if x is metadata:
                        if not with_stream:
                            return v[i + 3:]
                        st = f.f_locals.get("stream")   # CudaLauncher.__call__(gridX, gridY, gridZ, stream, ...)
                        return v[i + 3:], (int(st) if isinstance(st, int) else None)
        f = f.f_back
    return None


def triton_arg_spans(args: Iterable[Any]) -> list[tuple[int, int]]:
    """Address spans a Triton kernel's arguments can reach: for a tensor (anything with data_ptr(),
    also a TMA descriptor's .base) its whole storage and view; a Python int may be a raw pointer
    (Triton accepts ints for pointer parameters), so it counts as a 1-byte span at that address."""
    spans: list[tuple[int, int]] = []
    torch = sys.modules.get("torch")
    tensor = torch.Tensor if torch is not None else None
    for a in args:
        ta = type(a)
        if ta is int:              # the most common argument first (exactly int: no data_ptr, no base, not a bool)
            if a > 0:
                spans.append((a, 1))
            continue
        if a is None or ta is float or ta is bool:     # reach nothing
            continue
        if ta is tensor:           # exactly a torch tensor: the general case below without its attribute probes
            p = a.data_ptr()
            lo, hi = p, p + a.nbytes                   # torch: nbytes == numel() * element_size()
            try:
                st = a.untyped_storage()
                sp = st.data_ptr()
                e = sp + st.nbytes()
                lo, hi = (sp if sp < lo else lo), (e if e > hi else hi)
            except Exception:  # noqa: BLE001 - no storage (a sparse tensor): its view is what we know
                pass
            if p:
                spans.append((lo, max(1, hi - lo)))
            continue
        t = a if callable(getattr(a, "data_ptr", None)) else getattr(a, "base", None)
        if t is not None and callable(getattr(t, "data_ptr", None)):
            p = int(t.data_ptr())
            lo, hi = p, p + int(t.numel()) * int(t.element_size()) if hasattr(t, "numel") else p + 1
            try:
                st = t.untyped_storage()
                sp = int(st.data_ptr())
                lo, hi = min(lo, sp), max(hi, sp + int(st.nbytes()))
            except Exception:  # noqa: BLE001 - not a torch tensor: its view is what we know
                pass
            if p:
                spans.append((lo, max(1, hi - lo)))
        elif isinstance(a, int) and not isinstance(a, bool) and a > 0:
            spans.append((a, 1))
    return spans


class StallWatch:
    """Whether launched work stopped making progress: launches since the last synchronization, and what host memory
    shows of the device's work -- the reference ring (requests published, answered by hbfd, consumed:
    hbfcommon.ctl.read_ring_state) and the GPU's published HBF activity (requests and bytes per op). Both are
    host-mapped: reading them needs no CUDA call, so a thread can watch while the main thread is blocked inside the
    driver (a module load, or a blocking launch, that waits for a kernel that does not end). The live activity alone
    is no measure of the ring: the GPU publishes it only at a thermal-snapshot refresh or a due activity flush, which
    under a validity horizon (no thermal model) only the general issue path reaches often (the compact and inline
    paths rarely), and a publication that never finishes leaves it unreadable (issue 13).

    ``poll(now, activity, ring)`` (``activity``: the (requests, bytes) per-op tuples, None when unreadable;
    ``ring``: a hbfcommon.ctl.RingState) returns a warning event once per stall: ``warn_s`` seconds after the latest
    of the last launch, the last change of the activity and the last change of the ring, with launches outstanding.
    The event says how long each of the two stood still, the ring's state and a verdict (:func:`stall_verdict`).
    ``abort_s`` (HBF_STALL_ABORT_S, 0: off): :meth:`abort_due` says when the stall has lasted that long (the session's
    watch then ends the process). Times are seconds of one monotonic clock (the caller's)."""

    def __init__(self, warn_s: float, keep: int = 8, *, abort_s: float = 0) -> None:
        if abort_s > 0 and 0 < warn_s > abort_s:
            raise ConfigError(f"HBF_STALL_ABORT_S ({abort_s:g} s) is below HBF_STALL_WARN_S ({warn_s:g} s): the "
                              f"process would end before its stall is named", abort_s=abort_s, warn_s=warn_s)
        self.abort_s = float(abort_s)
        self.warn_s = float(warn_s) if warn_s > 0 else self.abort_s      # abort alone: the warning comes with it
        self.launches: list[tuple[float, str, str]] = []     # (time, kernel, what) of the latest `keep`
        self.keep = keep
        self.outstanding = 0
        self.last_launch = 0.0
        self.last_activity = 0.0               # the live activity's last change
        self.last_ring = 0.0                   # the ring's last change (published, answered or consumed)
        self.activity: Any = None
        self.ring: C.RingState | None = None
        self.warned = False
        self._lock = threading.Lock()

    @property
    def last_progress(self) -> float:
        return max(self.last_activity, self.last_ring)

    def abort_due(self, now: float) -> bool:
        """HBF_STALL_ABORT_S: launches outstanding and ``abort_s`` seconds without progress (after a poll at ``now``,
        which took the latest activity and ring)."""
        with self._lock:
            return self.abort_s > 0 and self.outstanding > 0 \
                and now - max(self.last_launch, self.last_progress) >= self.abort_s

    def launched(self, now: float, kernel: str, what: str = "") -> None:
        with self._lock:
            self.launches = (self.launches + [(now, kernel, what)])[-self.keep:]
            self.outstanding += 1
            self.last_launch = now
            self.warned = False

    def synchronized(self) -> None:
        with self._lock:
            self.outstanding = 0
            self.warned = False

    def poll(self, now: float, activity: Any, ring: "C.RingState | None" = None) -> dict | None:
        with self._lock:
            if activity is not None and activity != self.activity:
                self.activity = activity
                self.last_activity = now
                self.warned = False
            if ring is not None:
                if self.ring is None or ring.progress_key() != self.ring.progress_key():
                    self.last_ring = now
                    self.warned = False
                self.ring = ring
            if not self.outstanding or self.warned or self.warn_s <= 0:
                return None
            idle = now - max(self.last_launch, self.last_progress)
            if idle < self.warn_s:
                return None
            self.warned = True
            since = lambda t: round(now - max(t, self.last_launch), 1)   # noqa: E731 - unchanged since (or the launch)
            ev = {"seconds_without_progress": round(idle, 1),
                  "seconds_since_last_launch": round(now - self.last_launch, 1),
                  "launches_since_sync": self.outstanding,
                  "last_launches": [{"seconds_ago": round(now - t, 1), "kernel": k, "what": w}
                                    for t, k, w in reversed(self.launches)],
                  "activity": {"readable": activity is not None, "seconds_unchanged": since(self.last_activity)}}
            if self.ring is not None:
                ev["ring"] = {**self.ring.as_dict(), "seconds_unchanged": since(self.last_ring)}
            ev["verdict"] = stall_verdict(self.ring)
            return ev


def stall_verdict(ring: "C.RingState | None") -> str:
    """What the ring's state says about a stall (StallWatch's event): whose move it is."""
    if ring is None:
        return "the reference ring was not read"
    if ring.device_failure:
        return (f"a device failure is recorded (status {ring.device_failure >> 32}, site "
                f"{ring.device_failure & 0xFFFFFFFF:#x}): the warps end at their next helper step; a kernel that "
                "still does not end waits outside the helpers (a barrier or a flag a failed warp never reaches, "
                "docs/runtime.md 'Hang risk')")
    if ring.failure:
        return f"hbfd published a terminal failure ({ring.failure:#x})"
    if ring.unanswered:
        return (f"hbfd has not answered {ring.unanswered} published reference request(s): the daemon's side (its ring "
                "thread, or requests it does not take: hbfctl summary, ring_service / foreign_requests)")
    if ring.unconsumed:
        return (f"hbfd answered every published request; {ring.unconsumed} completion(s) wait for their warps: the "
                "device's side (warps that do not poll, or are stuck before their waits)")
    return ("the reference ring is idle (nothing published unanswered or answered unconsumed): the kernel makes no "
            "reference requests now (a device-path timing source, or warps stuck before they publish)")


def stall_message(ev: dict) -> str:
    """The stall watch's warning (one line) for an event of StallWatch.poll."""
    last = ev["last_launches"][0] if ev["last_launches"] else {"kernel": "?"}
    act = ev["activity"]
    parts = [f"no synchronization and no progress for {ev['seconds_without_progress']:.0f} s since the last launch "
             f"({ev['launches_since_sync']} launches outstanding, the last {last['kernel']})"]
    r = ev.get("ring")
    if r is not None:
        parts.append(f"reference ring unchanged for {r['seconds_unchanged']:.0f} s (published up to ticket "
                     f"{r['published'] - 1 if r['published'] else '-'}, {r['answered']} answered by hbfd, "
                     f"{r['unanswered']} published not answered, {r['unconsumed']} answered not consumed)")
    parts.append(("device live activity unchanged" if act["readable"] else "device live activity unreadable (its "
                  "seqlock odd: a publication that did not finish)") + f" for {act['seconds_unchanged']:.0f} s (the "
                 "GPU publishes it only at a thermal-snapshot refresh or a due activity flush: it can lag the "
                 "requests)")
    parts.append(ev["verdict"])
    parts.append("last launches: " + ", ".join(f"{x['kernel']} ({x['seconds_ago']} s ago)"
                                                for x in ev["last_launches"]))
    return "; ".join(parts) + " (HBF_STALL_WARN_S)"


def stale_ranges(ranges: Sequence[D.DevRange], allocs: Mapping[int, tuple[int, int]],
                 address_range) -> list[dict]:
    """The registered ranges whose device allocation is gone: ``allocs`` holds, per range id, the allocation
    (base, size) that contained the range's base when it was registered (cuMemGetAddressRange); a range whose
    base now lies in no allocation, or in another one, was freed (and perhaps reallocated) without being
    unregistered, and its accesses since hit whatever memory is there now. Only the driver's allocations are seen:
    memory a caching allocator (torch's) keeps for reuse is still allocated, and an allocation freed and made again
    with the same base and size looks live."""
    out = []
    for r in ranges:
        want = allocs.get(int(r.range_id))
        if want is None:
            continue
        now = address_range(int(r.base))
        if now is None or tuple(now) != tuple(want):
            out.append({"range_id": int(r.range_id), "base": hex(int(r.base)), "length": int(r.length),
                        "allocation_at_registration": [hex(int(want[0])), int(want[1])],
                        "allocation_now": None if now is None else [hex(int(now[0])), int(now[1])]})
    return out


def allocations_holding(ask: Callable[[int], tuple[int, int] | None], base: int, end: int,
                        limit: int = HOT_WALK_MAX) -> list[tuple[int, int]] | None:
    """The allocations (base, size) that hold [base, end), asking ``ask`` (cuMemGetAddressRange) from ``base`` on, each
    next one at the previous one's end; None where one cannot be named (an address the driver does not know, an
    extent that does not move past the address asked, more than ``limit``). Session._hot_allocations' walk; its
    assumption (every address in one extent, the same whichever of its addresses is asked) is checked on a card by
    bench/alloc_partition.py."""
    out: list[tuple[int, int]] = []
    p = int(base)
    while p < end:
        ext = ask(p)
        if ext is None or len(out) >= limit or int(ext[0]) + int(ext[1]) <= p or int(ext[0]) > p:
            return None
        out.append((int(ext[0]), int(ext[1])))
        p = int(ext[0]) + int(ext[1])
    return out


def spans_reach(ranges: Sequence[D.DevRange], spans: Iterable[tuple[int, int]]) -> bool:
    """Whether any span (address, bytes) overlaps a range of ``ranges``: what a launch's arguments reach."""
    return any(r.base < a + n and a < r.end for a, n in spans for r in ranges)


def selection(ranges: Sequence[D.DevRange], info: KernelInfo | None, spans: list[tuple[int, int]] | None,
              rule: str) -> tuple[bool | None, str]:
    """The per-launch decision (Session._select): (True = native version, False = instrumented, None =
    nothing registered: the native version runs anyway), and why."""
    if not ranges:
        return None, "nothing registered"
    if info is None or info.address_source != "params":
        return False, "addresses from memory"
    if spans is None:
        return False, "arguments unknown"
    if spans_reach(ranges, spans):
        return False, f"reaches a range ({rule})"
    return True, f"reaches no range ({rule})"


def module_words(state_addr: int, detached_addr: int, state_dptr: int, attach: bool) -> list[tuple[int, int]]:
    """The (address, value) writes that attach a module to the session's state (``__hb_state`` = state_dptr) or
    detach it (0), in this order: its attach switch in the constant bank too (``__hb_detached``: 0 attached, 1
    detached) where the module has one (``detached_addr``; a module built before it has none). Every writer of the
    word (bind, per-launch selection and its captured attach, table changes, close) writes these, in one stream
    order (the same capture rules: a captured attach captures both)."""
    w = [(state_addr, state_dptr if attach else 0)]
    if detached_addr:
        w.append((detached_addr, 0 if attach else 1))
    return w


def state_word(native: bool | None, *, captured: bool, capturing: bool) -> tuple[bool | None, str]:
    """The module's ``__hb_state`` a launch needs, given its selection (:func:`selection`): True = attached (the
    session's state: the kernel's prologue reads the band and runs the instrumented body while any range is
    registered, the native one when none is), False = 0 (detached: the prologue's first read, the module's
    ``__hb_detached`` in its constant bank, written with the word by :func:`module_words`, branches to the native
    body without a global load; a module built before that switch loads the word and branches on its 0), None =
    leave it as it is; and the rule that decided.

    A CUDA graph replays a captured launch later without the launch path, reading the word as it finds it then;
    the session keeps three rules so that a replay never runs the native body while a range it may reach is
    registered (docs/design.md "Per-launch selection and CUDA graphs"):
      - never capture a detach: while ``capturing``, nothing registered leaves the word as it is and a registered
        range asks for the word attached (captured as a write, so every replay attaches it first);
      - a module with a captured launch (``captured``) is never detached while a range is registered;
      - every registration attaches every module (Session._write_ranges_to_device, the context idle), so a launch
        captured detached (nothing registered then) replays attached once anything is registered."""
    if native is None:
        if capturing:
            return None, "capture, nothing registered: left as is (a registration attaches it)"
        return False, "nothing registered: detached"
    if capturing:
        return True, "capture, a range registered: attached (the replay's first write)"
    if native is False:
        return True, "runs instrumented: attached"
    if captured:
        return True, "captured module, a range registered: attached"
    return False, "reaches no range: detached"


def graph_native_reach(mode: str, native: bool | None, info: KernelInfo,
                       spans: list[tuple[int, int]] | None,
                       extents: Callable[[], list[tuple[int, int]] | None] | None) -> tuple[bool, list | None, str]:
    """Whether a launch on a capturing stream, decided ``native`` by :func:`selection`, may capture the kernel's native
    entry under HBF_GRAPH_NATIVE ``mode``, and what its replays can reach: (ok, reach, why). ``reach``: the argument
    extents (address, bytes) the record keeps (a later registration overlapping one is refused), or None for
    everything (the unbounded record: every later registration is refused). ``spans``: the extents selection used
    (rule "storage" or "allocation"; None while nothing is registered, when the launch path computes none);
    ``extents``: computes them then (None: unknown). Bounded (``bounded`` and ``all``): a kernel whose addresses come
    from its parameters, its extents known, reaching no registered range. Unbounded (``all`` only): nothing
    registered, any other kernel (addresses from memory: every TMA kernel; arguments unknown)."""
    if mode == "off" or native is False:
        return False, None, "off" if mode == "off" else "instrumented"
    if info.address_source == "params":
        sp = spans if native else (extents() if extents is not None else None)
        if sp is not None:
            return True, [(int(a), int(n)) for a, n in sp if n > 0], "argument extents"
        why = "arguments unknown"
    else:
        why = "addresses from memory"
    if native is None and mode == "all":
        return True, None, f"{why}, nothing registered: unbounded"
    return False, None, why


@dataclass
class GraphCaptures:
    """The launches captured into CUDA graphs on their native entry (HBF_GRAPH_NATIVE): per extent (address, bytes),
    or None for the unbounded record, the kernels and how many of their captures reach it; per kernel its captures.
    A replay of such a launch runs the untouched kernel whatever is registered then, so no registration may overlap a
    record (Session._refuse_over_captures) until the user releases them (Session.release_graph_captures) once the
    graphs holding them are destroyed: the session cannot see a graph's end."""
    extents: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)
    released: int = 0                                   # records released so far (extents, the unbounded one counted)
    refused: list = field(default_factory=list)         # registrations refused over a record (events)
    outside: list = field(default_factory=list)         # ranges registered past this session over a record (events)

    def record(self, name: str, reach: list[tuple[int, int]] | None) -> None:
        for key in ([None] if reach is None else reach):
            k = self.extents.setdefault(key, {})
            k[name] = k.get(name, 0) + 1
        self.kernels[name] = self.kernels.get(name, 0) + 1

    def hits(self, base: int, nbytes: int) -> list[tuple[tuple[int, int] | None, dict]]:
        """The records a range [base, base+nbytes) overlaps (the unbounded one overlaps every range)."""
        e = base + nbytes
        return [(k, v) for k, v in self.extents.items() if k is None or (k[0] < e and base < k[0] + k[1])]

    def release(self) -> dict:
        out = {"extents": sum(k is not None for k in self.extents), "unbounded": None in self.extents,
               "kernels": dict(self.kernels)}
        self.released += len(self.extents)
        self.extents, self.kernels = {}, {}
        return out

    def summary(self, mode: str) -> dict:
        return {"mode": mode, "extents": sum(k is not None for k in self.extents), "unbounded": None in self.extents,
                "kernels": dict(self.kernels), "released": self.released,
                "refused_registrations": len(self.refused), "outside_registrations": list(self.outside)}


def captured_native_refusal(base: int, nbytes: int, what: str,
                            hits: list[tuple[tuple[int, int] | None, dict]]) -> RangeError:
    """The error of a registration that overlaps launches captured on their native entry (RANGE_ADMITTED: a kernel
    that could touch the range was admitted to run untouched, in a graph that may replay)."""
    kernels: dict[str, int] = {}
    for _, v in hits:
        for k, n in v.items():
            kernels[k] = kernels.get(k, 0) + n
    ext = ["everything (a kernel whose addresses come from memory or whose arguments were unknown, captured with "
           "nothing registered: HBF_GRAPH_NATIVE=all)" if k is None else f"[{k[0]:#x}, {k[0] + k[1]:#x})"
           for k, _ in hits[:4]] + ([f"{len(hits) - 4} more"] if len(hits) > 4 else [])
    names = ", ".join(f"{k} ({n} capture{'s' if n != 1 else ''})" for k, n in sorted(kernels.items())[:8])
    return RangeError(
        f"{what} range [{base:#x}, {base + nbytes:#x}) refused: it overlaps what launches captured into a CUDA graph "
        f"on their native entry can reach ({'; '.join(ext)}; kernels {names}): a replay of those graphs runs the "
        f"untouched kernel and would not model this range. Register before capturing (re-capture the graphs after "
        f"registering), or destroy those graphs and call Session.release_graph_captures(), or run with "
        f"HBF_GRAPH_NATIVE=0 (captures keep the instrumented entry)", code=ErrorCode.RANGE_ADMITTED,
        base=hex(base), nbytes=int(nbytes), mode=what, kernels=kernels,
        extents=[None if k is None else [hex(k[0]), k[1]] for k, _ in hits[:16]], knob="HBF_GRAPH_NATIVE")



def capacity_not_built(ptr: int, nbytes: int, why: str = "") -> RangeError:
    """The error of a capacity-range registration the GPU runtime refuses (docs/design.md §3.6, issue 16): the
    device path (page-table translation in capacity-rewritten kernels, the miss path) exists but has never run
    on a GPU, so it is used only on request (HBF_CAPACITY_DEVICE=1)."""
    return RangeError("capacity ranges are not registered through the GPU runtime by default: the device path "
                      "(page-table translation and the miss path in capacity-rewritten kernels) is NOT "
                      "GPU-verified" + (f"; {why}" if why else "") + "; the host service is hbfd.capacity "
                      "(docs/capacity.md)", code=ErrorCode.UNSUPPORTED,
                      base=hex(int(ptr)), nbytes=int(nbytes), mode="capacity")


class _TritonNativeRun:
    """A Triton kernel's launcher (``CompiledKernel._run``) wrapped for its native entry (Session._wrap_native_run).
    Triton 3.6 calls it as ``run(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
    enter_hook, exit_hook, *kernel_args)`` after reading ``function`` from the kernel, and the launcher runs the enter
    hook only after it has parsed that handle: so the launch is decided HERE (the gate and per-launch selection, the
    enter hook's work, with the arguments as given), the native entry's handle is passed for a host launch decided
    native, and the enter hook skips the launch_metadata decided here. A launch of another handle, without
    launch_metadata (no enter hook installed) or after the session closed passes through unchanged."""

    __slots__ = ("session", "run", "function", "native")

    def __init__(self, session: "Session", run: Any, function: int, native: Any) -> None:
        self.session, self.run, self.function, self.native = session, run, function, native

    def __call__(self, gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook,
                 exit_hook, *args):
        s = self.session
        if launch_metadata is not None and int(function or 0) == self.function and not s.closed \
                and s._triton_installed:
            name = _launch_name(launch_metadata, self.function)
            nfn = s._triton_decide(self.function, name, args, int(stream) if isinstance(stream, int) else None,
                                   switch=True)
            s._tl.handled = launch_metadata
            if nfn is not None:
                try:
                    return self.run(gridX, gridY, gridZ, stream, int(nfn), packed_metadata, launch_metadata,
                                    enter_hook, exit_hook, *args)
                except RuntimeError as e:       # Triton's launcher: "Triton Error [CUDA]: ..." before it ran
                    b = s.functions.get(self.function, _UNBOUND)[0]
                    if b is None:
                        raise
                    s._native_failed(b, name, e, nfn)
                    s._tl.handled = launch_metadata     # the enter hook (run again below) skips this launch
        return self.run(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook,
                        exit_hook, *args)


_UNBOUND = (None, None)      # Session.functions' answer for a function it does not know


def _launch_name(metadata: Any, fh: int) -> str:
    """The kernel name a Triton launch_metadata carries (a LazyDict; its "name" needs no evaluation)."""
    d = getattr(metadata, "data", None)
    if (type(d) is dict or isinstance(d, Mapping)) and "name" in d:
        return str(d["name"])
    try:
        return str(metadata["name"])
    except (KeyError, TypeError, IndexError):
        return f"function@{fh:#x}"


class Session:
    """One attachment of this process to hbfd (see attach())."""

    _caps_of: tuple[list, list] | None = None     # (the range list, its capacity ranges): _capacity_ranges
    _hot_cache: tuple[list, list | None] | None = None   # (the range list, its allocations): _hot_allocations
    # HBF_GRAPH_NATIVE and its records (set in __init__; these defaults are what a session made without it has)
    graph_native: str = "off"
    _gn: GraphCaptures | None = None
    native_module: str = "entry"      # HBF_NATIVE_MODULE (set in __init__)

    def __init__(self, client, ctlmap: C.CtlMap, *, allow_unmodeled: bool, use_cuda: bool,
                 params: D.RunParams, attach_reply=None) -> None:
        self.client = client
        self.ctl = ctlmap
        self.allow_unmodeled = allow_unmodeled
        self.params = params
        self.attach_reply = attach_reply
        self.use_cuda = use_cuda
        self._lock = threading.RLock()
        self.ranges: list[D.DevRange] = []
        self.generation = 0
        self.bindings: dict[int, ModuleBinding] = {}
        self.functions: dict[int, tuple[ModuleBinding, KernelInfo | None]] = {}
        self._next_kslot = 0
        self.unmodeled_launches: list[dict] = []
        self.refused_launches: list[dict] = []
        self._triton_installed: list[tuple[Any, str, Any]] = []
        self.deferred_builds: list[dict] = []   # HBFCC_DEFER=1 Triton kernels swapped in (or refused) at load
        self.closed = False
        self.calibration: dict | None = None   # the last calibrate() result (deadline_bias_ns)
        self._flag_table: Any = None            # eidola's flag-range table (attach_flag_table)
        self._flag_ids: dict[int, int] = {}     # hbfd range_id -> base of the flag ranges recorded
        self.ctl_dev = 0
        self.state_dptr = 0
        self.cap_table_dptr = 0                 # hbf_cap_range[HBF_MAX_RANGES] (runtime_cuda/capacity.py)
        self.capacity: dict[int, CAP.CapacityRange] = {}
        self.kshards_dptr = 0
        self._stack_limit = 0
        self._epoch = 0            # bumps at every full synchronization of the context by the session
        self.native_select = knobs.native_select()
        self.const_switch = knobs.const_switch()     # HBF_CONST_SWITCH: write __hb_detached (off: it stays 0)
        self.native_entry = knobs.native_entry()     # HBF_NATIVE_ENTRY: host launches decided native run <k>__hbnat
        self.graph_native = knobs.graph_native()     # HBF_GRAPH_NATIVE: captures decided native capture <k>__hbnat
        self.native_module = knobs.native_module()   # HBF_NATIVE_MODULE: <k>__hbnat ("entry") or <k> of the plain cubin
        self._gn = GraphCaptures()                   # what those captures reach (registrations over it are refused)
        self._triton_runs: list[tuple[Any, Any]] = []   # (CompiledKernel, its launcher) wrapped by _TritonNativeRun
        self._tl = threading.local()                 # .handled: the launch_metadata a _TritonNativeRun decided
        self.inline_issue = knobs.inline_issue()
        self.inline_multi = knobs.inline_multi()
        # HBF_TRITON_INSTRUMENT=load: plain Triton kernels instrumented at their load (runtime_cuda/triton_load.py)
        self.triton_instrument = knobs.triton_instrument()
        # the L2 in front of HBF (docs/design.md §3.12): geometry from the daemon's media parameters, checked here
        self.l2: D.L2Geometry | None = D.l2_geometry(ctlmap.ctl.header.media) if knobs.l2_model() else None
        self.l2_tags_dptr = 0
        self.ring_ovf_dptr = 0                  # the reference ring's overflow table (hbf_ref_ovf[], stealing)
        self.ring_ovf_entries = 0
        self.launch_selection: dict[str, dict] = {}
        self.stall = StallWatch(knobs.stall_warn_s(), abort_s=knobs.stall_abort_s())   # a kernel may not end
        self.stalls: list[dict] = []
        self._stall_stop = threading.Event()
        self._range_allocs: dict[int, tuple[int, int]] = {}   # range id -> its device allocation at registration
        self.stale_ranges: list[dict] = []                    # ranges found freed while registered (reported)
        self._stale_raised: set[int] = set()
        self.host_registered = False
        h = ctlmap.ctl.header
        self.state = D.new_state(0, h.media, params, int(ctlmap.ctl.refresh.quantum_bytes))
        self.state.ref_next_ticket = ticket_floor(ctlmap)   # published with the whole block below
        # the run's ring key (hbfd's AttachReply): the helpers tag every reference-path request with it
        self.ring_key = int(getattr(attach_reply, "ring_key", 0) or 0)
        self.state.ring_key = self.ring_key
        if use_cuda:
            self._cuda_setup()
        self._refresh_ranges()

    # ---------------------------------------------------------------------------- CUDA side
    def _cuda_setup(self) -> None:
        from . import cudrv  # noqa: PLC0415
        self._cu = cudrv
        self.device, self.context = cudrv.init_context(0)
        addr = self.ctl.address
        self.ctl_dev = cudrv.host_register(addr, C.CTL_BYTES)
        self.host_registered = True
        if self.ctl_dev != addr:
            log.info("control region: device pointer %#x differs from host pointer %#x; using the device "
                     "pointer", self.ctl_dev, addr)
        self._backstop = self._prepare_backstop()
        self.state.ctl = self.ctl_dev
        self.state_dptr = cudrv.mem_alloc(D.STATE_BYTES)
        # sharded per-kernel counters ([slot][shard], hbf_device.h): zeroed, pointed at by the block
        self.kshards_dptr = cudrv.mem_alloc(D.KSHARD_BYTES)
        cudrv.check(cudrv.drv().cuMemsetD8(self.kshards_dptr, 0, D.KSHARD_BYTES), "cuMemsetD8")
        self.state.kshards = self.kshards_dptr
        if self.l2 is not None:    # the L2 model's tag store (§3.12), zeroed: an empty L2
            self.l2_tags_dptr = cudrv.mem_alloc(self.l2.tag_bytes)
            cudrv.check(cudrv.drv().cuMemsetD8(self.l2_tags_dptr, 0, self.l2.tag_bytes), "cuMemsetD8")
            D.set_l2(self.state, self.l2, self.l2_tags_dptr)
        self.cap_table_dptr = cudrv.mem_alloc(CAP.TABLE_BYTES)          # zero: no capacity range served
        cudrv.check(cudrv.drv().cuMemsetD8(self.cap_table_dptr, 0, CAP.TABLE_BYTES), "cuMemsetD8")
        lg = knobs.ring_overflow_log2()          # the ring's overflow table (docs/runtime.md "ring"), zeroed
        if lg:
            self.ring_ovf_entries = 1 << lg
            nb = self.ring_ovf_entries * ctypes.sizeof(D.hbf_ref_ovf)
            self.ring_ovf_dptr = cudrv.mem_alloc(nb)
            cudrv.check(cudrv.drv().cuMemsetD8(self.ring_ovf_dptr, 0, nb), "cuMemsetD8")
            self.state.ref_ovf, self.state.ref_ovf_mask = self.ring_ovf_dptr, self.ring_ovf_entries - 1
        self.state.ref_next_ticket = ticket_floor(self.ctl)      # re-read right before publishing
        cudrv.htod(self.state_dptr, self.state, D.STATE_BYTES)   # whole block: zero tails and counters
        h = self.ctl.ctl.header
        h.workload_pid = os.getpid()
        h.device_state_ptr = self.state_dptr
        if self.stall.warn_s > 0:
            threading.Thread(target=self._watch_stalls, name="hbf-stall-watch", daemon=True).start()

    def _watch_stalls(self) -> None:
        """The stall watch's thread: host memory only (the live activity, the reference ring), never a CUDA call."""
        period = min(1.0, self.stall.warn_s / 4)
        while not self._stall_stop.wait(period):
            try:
                a = C.read_activity(self.ctl.ctl)
                act = (a.requests, a.bytes)
            except HbfError:             # the activity's writer is between its two stores: no reading this time
                act = None
            except Exception:  # noqa: BLE001 - the region is gone (closing): the watch ends
                return
            try:
                ring = C.read_ring_state(self.ctl)
            except Exception:  # noqa: BLE001 - the region is gone (closing): the watch ends
                return
            now = time.monotonic()
            ev = self.stall.poll(now, act, ring)
            if ev is not None:
                self.stalls.append(ev)
                log.warning("%s", stall_message(ev))
                self._report("stall", ev)
            if self.stall.abort_due(now):
                self._abort_stalled(now)
                return

    def _abort_stalled(self, now: float) -> None:
        """HBF_STALL_ABORT_S: the stall has lasted abort_s: say so at CRITICAL, report it to hbfd (kind
        ``stall_abort``), then end the process (hbfcommon.abort: the daemons this process started stop first and
        write their summaries; exit status EXIT_STALLED). Called from the watch thread: the main thread is blocked
        where nothing else would end it."""
        last = self.stalls[-1] if self.stalls else {}
        ev = {"abort_s": self.stall.abort_s, "code": ErrorCode.TIMEOUT.name, "exit_status": abort.EXIT_STALLED,
              "seconds_without_progress": round(now - max(self.stall.last_launch, self.stall.last_progress), 1),
              "stall": last}
        self.stalls.append(dict(ev, abort=True))
        log.critical("ending the process (HBF_STALL_ABORT_S=%g, exit status %d): %s", self.stall.abort_s,
                     abort.EXIT_STALLED, stall_message(last) if last else "no progress")
        self._report("stall_abort", ev)
        abort.end_process(f"stall: no progress for {ev['seconds_without_progress']} s (HBF_STALL_ABORT_S)")

    def _write_ranges_to_device(self) -> None:
        if not self.use_cuda or not self.state_dptr:
            return
        cu, st = self._cu, self.state
        # The helpers read the table through the read-only data cache without a seqlock: it must not
        # change while any kernel runs (on any stream), so the context is idle before it is rewritten
        # (_wait_idle: never forever after a recorded device failure; it counts the epoch).
        self._wait_idle()
        line0 = 64
        st.range_seq += 1                        # odd: readers retry
        cu.htod(self.state_dptr, st, line0)
        n = max(1, int(st.n_ranges))
        cu.htod(self.state_dptr + D.RANGES_OFF, ctypes.addressof(st) + D.RANGES_OFF,
                n * ctypes.sizeof(D.hbf_dev_range))
        st.range_seq += 1                        # even: stable
        cu.htod(self.state_dptr, st, line0)
        if self.cap_table_dptr and (self.capacity or any(r.mode == C.HBF_MODE_CAPACITY for r in self.ranges)):
            tab = CAP.capacity_table(st.ranges, st.n_ranges, self.capacity)   # indexed like st.ranges
            cu.htod(self.cap_table_dptr, tab.ctypes.data, CAP.TABLE_BYTES)
        self._publish_cdescs()                   # still idle: every module's descriptor follows the table
        self._set_module_words()                 # and every module's __hb_state (state_word's rules)

    def _refresh_ranges(self, want_generation: int = 0) -> None:
        """Mirror the control region's range snapshot (what hbfd published) into the device block."""
        gen, ranges = D.ranges_from_ctl(self.ctl.ctl.ranges)
        if gen < want_generation:   # daemon answered before publishing: ask it directly
            rep = self.client.call("ListRanges", self.client.pb.ListRangesRequest())
            gen = int(rep.snapshot_generation)
            ranges = [D.DevRange(r.base, r.length, r.media_offset, r.range_id, int(r.mode), r.perms,
                                 r.page_bytes or 4096) for r in rep.ranges]
        with self._lock:
            D.fill_ranges(self.state, ranges, gen)
            self._outside_registrations(self.ranges, ranges)
            self.ranges = sorted(ranges, key=lambda r: r.base)
            self.generation = gen
            self._write_ranges_to_device()

    def set_run_params(self, **kw: int) -> None:
        """Change run parameters (heartbeat_timeout_ns, thermal_max_age_ns, completion_timeout_ns,
        backoff_max_ns) between kernels; they live in the host-owned line 1 of the device block."""
        allowed = ("heartbeat_timeout_ns", "thermal_max_age_ns", "completion_timeout_ns", "backoff_max_ns")
        for k, v in kw.items():
            if k not in allowed:
                raise ConfigError(f"unknown run parameter {k!r}", field=k, allowed=list(allowed))
            if int(v) < 0:
                raise ConfigError(f"{k} must be >= 0", field=k, value=v)
            setattr(self.state, k, int(v))
        if self.use_cuda and self.state_dptr:
            self._cu.ctx_synchronize()
            self._cu.htod(self.state_dptr, self.state, 128)   # lines 0-1: host-owned
            self._publish_cdescs()

    # ---------------------------------------------------------------------------- calibration
    def calibrate(self, *, delay_ns: int = 20_000, n: int = 256, cubin: str | os.PathLike | None = None,
                  apply: bool = True) -> dict:
        """Measure the helpers' fixed cost (issue -> first use beyond the modeled delay) on this GPU with
        the microbench probe linked against the helper PTX (HBF_HELPER_PTX; `cubin` to use a prebuilt
        one), and store the median as deadline_bias_ns (apply=True): every modeled deadline created
        afterwards is that much earlier (clamped to its issue time). Call at a synchronization point
        (no kernel of this session running). The result is kept in self.calibration and reported to
        hbfd (Report kind "calibration")."""
        from . import calibrate as CAL, linker  # noqa: PLC0415
        self._ensure_open()
        if not self.use_cuda or not self.state_dptr:
            raise HbfError("calibration needs CUDA (this session has no device state)",
                           code=ErrorCode.INVALID_ARGUMENT)
        with self._lock:
            path = Path(cubin) if cubin is not None else Path(linker.build_microbench()["cubin"])
            helper = str(linker.helper_ptx(build=False)) if cubin is None else None
            mod = self._cu.module_load_data(path.read_bytes())
            try:
                # the probe's counters go to the last slot (the overflow bucket), restored afterwards
                cal = CAL.measure_on_device(mod, self.state_dptr, kslot_base=C.HBF_MAX_KERNEL_SLOTS - 1 - CAL.PROBE_KERNEL_INDEX,
                                            delay_ns=delay_ns, n=n)
            finally:
                self._cu.check(self._cu.drv().cuModuleUnload(mod), "cuModuleUnload")
            result = cal.as_dict() | {"cubin": str(path), "helper_ptx": helper, "applied": bool(apply)}
            if apply:
                CAL.set_bias(self.state_dptr, cal.bias_ns)
                self.state.deadline_bias_ns = cal.bias_ns
                self._publish_cdescs()
            self.calibration = result
        self._report("calibration", result)
        return result

    @property
    def deadline_bias_ns(self) -> int:
        return int(self.state.deadline_bias_ns)

    # ---------------------------------------------------------------------------- ranges
    def range_containing(self, addr: int) -> D.DevRange | None:
        for r in self.ranges:
            if r.base <= addr < r.end:
                return r
        return None

    def _register(self, ptr: int, nbytes: int, mode: int, perms: int, page_bytes: int, stream: int,
                  label: str, flag_class: int = 0):
        self._ensure_open()
        if int(mode) == C.HBF_MODE_CAPACITY:
            raise capacity_not_built(ptr, nbytes, "use register_capacity_range")
        if nbytes <= 0:
            raise RangeError("zero-length range", code=ErrorCode.RANGE_ZERO_LENGTH, base=hex(ptr))
        pb = self.client.pb
        r = pb.Range(base=int(ptr), length=int(nbytes), mode=mode, perms=int(perms), page_bytes=int(page_bytes),
                     stream=int(stream), label=label, flag_class=int(flag_class))
        with self._lock:           # from the check to the table: no capture records a native launch in between
            self._refuse_over_captures(int(ptr), int(nbytes), C.MODE_NAMES.get(int(mode), str(mode)))
            rep = self.client.call("RegisterRange", pb.RegisterRangeRequest(range=r))
            self._refresh_ranges(int(rep.snapshot_generation))
        if self.use_cuda:          # its allocation, to see at synchronize whether it was freed while registered
            ext = self._cu.address_range(int(ptr))
            if ext is not None:
                self._range_allocs[int(rep.range.range_id)] = (int(ext[0]), int(ext[1]))
        return rep.range

    def _captures(self) -> GraphCaptures:
        if self._gn is None:
            self._gn = GraphCaptures()
        return self._gn

    def _refuse_over_captures(self, ptr: int, nbytes: int, what: str) -> None:
        """Refuse (RANGE_ADMITTED, before hbfd or eidola's table hears of it) a registration of [ptr, ptr+nbytes) that
        launches captured on their native entry (HBF_GRAPH_NATIVE) may reach: their replays run the untouched
        kernel. Logged, reported to hbfd (``registration_refused``) and counted. The caller holds the session's lock
        from this check until the range is in the table, so no capture records a launch over it in between."""
        gn = self._gn
        if gn is None or not gn.extents:
            return
        hits = gn.hits(int(ptr), int(nbytes))
        if not hits:
            return
        err = captured_native_refusal(int(ptr), int(nbytes), what, hits)
        event = {"base": hex(int(ptr)), "nbytes": int(nbytes), "mode": what, "kernels": err.fields.get("kernels"),
                 "extents": err.fields.get("extents"), "code": ErrorCode.RANGE_ADMITTED.name}
        gn.refused.append(event)
        log.error("%s", err)
        self._report("registration_refused", event)
        raise err

    def release_graph_captures(self) -> dict:
        """Forget the launches captured on their native entry (HBF_GRAPH_NATIVE): registrations over what they reach
        are accepted again. Call it only once every CUDA graph (and executable graph) holding those captures is
        destroyed: the session cannot see a graph's end, and a replay after this call runs the untouched kernel on
        whatever is registered then. Returns what was released: ``extents`` (how many), ``unbounded`` (the record of
        HBF_GRAPH_NATIVE=all, which refused every registration) and the captures per kernel."""
        with self._lock:
            out = self._captures().release()
        log.info("released the records of %d native-entry graph capture(s): %d extent(s)%s", sum(out["kernels"].values()),
                 out["extents"], " and the unbounded record" if out["unbounded"] else "")
        return out

    def _outside_registrations(self, old: Sequence[D.DevRange], new: Sequence[D.DevRange]) -> None:
        """A range in hbfd's table that overlaps a native-entry capture's record without having passed this session's
        check (registered by another client of hbfd, which the session cannot refuse): logged as an error, reported
        and kept (counters()["graph_native"]["outside_registrations"]). The replays of those graphs do not model it."""
        gn = self._gn
        if gn is None or not gn.extents:
            return
        known = {int(r.range_id) for r in old}
        for r in new:
            if int(r.range_id) in known:
                continue
            hits = gn.hits(int(r.base), int(r.length))
            if hits:
                err = captured_native_refusal(int(r.base), int(r.length), C.MODE_NAMES.get(int(r.mode), "?"), hits)
                ev = {"range_id": int(r.range_id), "base": hex(int(r.base)), "length": int(r.length),
                      "kernels": err.fields.get("kernels"), "extents": err.fields.get("extents")}
                gn.outside.append(ev)
                log.error("range %d was registered past this session (another client of hbfd) over launches captured "
                          "on their native entry: their replays do not model it: %s", int(r.range_id), err)
                self._report("graph_native_overlap", ev)

    def register_timing_range(self, ptr: int, nbytes: int, perms: int = C.HBF_PERM_ALL, *,
                              page_bytes: int = 4096, stream: int = 0, label: str = ""):
        """Charge every access to [ptr, ptr+nbytes) the modeled HBF service. Returns the Range
        hbfd assigned (range_id, media_offset)."""
        return self._register(ptr, nbytes, C.HBF_MODE_TIMING, perms, page_bytes, stream, label)

    def register_capacity_range(self, ptr: int | None, nbytes: int, perms: int = C.HBF_PERM_READ, *,
                                n_frames: int = 0, store: str = "sparse", path: str = "", seed: int = 0,
                                policy: str = "next", verify: bool = True, label: str = "") -> CAP.CapacityRange:
        """A capacity range of ``nbytes`` logical bytes (docs/capacity.md, runtime_cuda/capacity.py): the span
        reserved on the GPU (``ptr`` None; a CPU-only session names its span with ``ptr``), served by hbfd with
        ``n_frames`` frames from the store (``"sparse"``: the file ``path``; ``"generated"``: read-only, from
        ``seed``) and the prefetch ``policy``. Only kernels hbfcc rewrote with the capacity pass
        (HBFCC_PASSES=timing,capacity) may be launched with arguments that reach it (:meth:`gate`).

        NOT GPU-VERIFIED: refused with UNSUPPORTED unless HBF_CAPACITY_DEVICE=1 opts in."""
        self._ensure_open()
        if not knobs.capacity_device():
            raise capacity_not_built(ptr or 0, nbytes, "set HBF_CAPACITY_DEVICE=1 to use the unverified one")
        if nbytes <= 0:
            raise RangeError("zero-length range", code=ErrorCode.RANGE_ZERO_LENGTH, base=hex(ptr or 0))
        if self.use_cuda == (ptr is not None):
            raise ConfigError("a capacity range's span is reserved by a CUDA session (ptr None) and named by a "
                              "CPU-only one (ptr given)", field="ptr", value=ptr)
        with self._lock:       # from the check to the table: no capture records a native launch in between
            return self._register_capacity(ptr, nbytes, perms, n_frames, store, path, seed, policy, verify, label)

    def _register_capacity(self, ptr: int | None, nbytes: int, perms: int, n_frames: int, store: str, path: str,
                           seed: int, policy: str, verify: bool, label: str) -> CAP.CapacityRange:
        reserved = 0
        if ptr is None:
            ptr, reserved = self._cu.address_reserve(nbytes)
        pb = self.client.pb
        try:
            self._refuse_over_captures(int(ptr), int(nbytes), "capacity")    # before hbfd hears of it
            r = pb.Range(base=int(ptr), length=int(nbytes), mode=C.HBF_MODE_CAPACITY, perms=int(perms),
                         page_bytes=4096, label=label)
            spec = pb.CapacitySpec(n_frames=int(n_frames), store=store, path=str(path), seed=int(seed),
                                   policy=policy, no_verify=not verify)
            rep = self.client.call("RegisterRange", pb.RegisterRangeRequest(range=r, capacity=spec))
        except BaseException:
            if reserved:
                self._cu.address_free(ptr, reserved)
            raise
        from hbfcommon.capacity import map_cap_region  # noqa: PLC0415
        region = map_cap_region(rep.capacity_path)
        cr = CAP.CapacityRange(int(rep.range.range_id), int(ptr), int(nbytes), reserved, region, 0)
        try:
            if self.use_cuda:
                cr.region_dev = self._cu.host_register(cr.region_addr, len(region.buf))
        except BaseException:
            self._drop_capacity(cr, unregister_rpc=True)
            raise
        self.capacity[cr.range_id] = cr
        self._refresh_ranges(int(rep.snapshot_generation))      # the table follows the snapshot
        return cr

    def _capacity_unregister_deadline(self, cr: CAP.CapacityRange) -> float:
        """The UnregisterRange deadline of a capacity range: hbfd writes every dirty frame back inside the call,
        so its time grows with them (an 8 GiB read-write range through 1 GiB of frames on the H100, 2026-12-06:
        past the client's 10 s, the run then failed though hbfd was still writing). The client's deadline plus
        CAPACITY_FLUSH_S_PER_FRAME for each frame the region shows dirty now (a bound, not an estimate)."""
        fr = cr.region.frames
        dirty = int(((fr["dirty"] != 0) & (fr["state"] != HBF_FR_FREE)).sum())
        t = self.client.timeout_s + dirty * CAPACITY_FLUSH_S_PER_FRAME
        if dirty:
            log.info("capacity range %d: hbfd writes %d dirty frames back (deadline %.0f s)", cr.range_id, dirty, t)
        return t

    def _drop_capacity(self, cr: CAP.CapacityRange, *, unregister_rpc: bool) -> None:
        """Release what the session holds of a capacity range (hbfd wrote its dirty frames back already)."""
        if unregister_rpc:
            try:
                self.client.call("UnregisterRange", self.client.pb.UnregisterRangeRequest(range_id=cr.range_id),
                                 timeout_s=self._capacity_unregister_deadline(cr))
            except HbfError as e:
                log.error("capacity range %d: unregister failed: %s", cr.range_id, e)
        if self.use_cuda:
            try:
                if cr.region_dev:
                    self._cu.host_unregister(cr.region_addr)
                if cr.reserved:
                    self._cu.address_free(cr.base, cr.reserved)
            except HbfError as e:
                log.warning("capacity range %d: CUDA cleanup: %s", cr.range_id, e)
        try:
            cr.region.buf.close()
        except BufferError:        # numpy views still alive: the mapping goes with them
            pass

    # Flag ranges are eidola's: they live in an eidola Replay's device state (hbf_eidola_state
    # flag_ranges, the table the flags pass's loads are classified against). A session reaches
    # them only through the table attached here (eidola.replay.Replay.attach(session)); hbfd's
    # range table records each one (mode "flag", for the run summary) and the timing helpers never
    # see them (devstate.fill_ranges keeps them out of the device range table).
    def attach_flag_table(self, table: Any) -> None:
        """Attach the table that holds this session's flag ranges: an eidola ``FlagTable``
        (``eidola.replay.Replay.attach(session)`` passes its own), which provides ``flag_ranges()``,
        ``add_flag_range(base, length, klass, name)`` and ``remove_flag_range(base)``. The ranges it
        already holds are recorded in hbfd's range table."""
        self._ensure_open()
        for name in ("flag_ranges", "add_flag_range", "remove_flag_range"):
            if not callable(getattr(table, name, None)):
                raise ConfigError(f"a flag table needs {name}() (eidola.replay.FlagTable)",
                                  table=type(table).__name__)
        if self._flag_table is not None and self._flag_table is not table:
            raise ConfigError("another flag table (eidola Replay) is already attached to this session")
        with self._lock:           # its ranges are in eidola's table already: refused before any is recorded
            new = [f for f in table.flag_ranges() if int(f.base) not in self._flag_ids.values()]
            for f in new:
                self._refuse_over_captures(int(f.base), int(f.length), "flag")
            self._flag_table = table
            for f in new:
                self._record_flag_range(int(f.base), int(f.length), int(f.klass), f.name)

    def register_flag_range(self, ptr: int, nbytes: int, flag_class: int = 1, *, label: str = ""):
        """Add a flag range to the attached eidola table (see :meth:`attach_flag_table`; it checks
        the range: 128-byte aligned, class in [1, MAX_CLASSES), at most 8) and record it in hbfd's
        range table. Returns the Range hbfd assigned; :meth:`unregister` removes both."""
        self._ensure_open()
        table = self._flag_table
        if table is None:
            raise RangeError("flag ranges live in eidola's state: attach an eidola Replay first "
                             "(eidola.replay.Replay(...).attach(session)), or pass the ranges to "
                             "eidola.replay.Replay(rt, flags=[FlagRange(...)])",
                             code=ErrorCode.RANGE_BAD_MODE, base=hex(int(ptr)), nbytes=int(nbytes))
        with self._lock:           # refused before eidola's table or hbfd hears of it
            self._refuse_over_captures(int(ptr), int(nbytes), "flag")
            table.add_flag_range(int(ptr), int(nbytes), int(flag_class), label)
            try:
                return self._record_flag_range(int(ptr), int(nbytes), int(flag_class), label)
            except BaseException:
                table.remove_flag_range(int(ptr))
                raise

    def _record_flag_range(self, ptr: int, nbytes: int, flag_class: int, label: str):
        rng = self._register(ptr, nbytes, C.HBF_MODE_FLAG, C.HBF_PERM_READ | C.HBF_PERM_WRITE | C.HBF_PERM_ATOMIC,
                             4096, 0, label, flag_class)
        self._flag_ids[int(rng.range_id)] = ptr
        return rng

    def unregister(self, rng) -> None:
        self._ensure_open()
        rid = rng if isinstance(rng, int) else int(rng.range_id)
        pb = self.client.pb
        cr = self.capacity.get(rid)
        if cr is not None and self.use_cuda:
            self._wait_idle()                   # no kernel uses its frames while hbfd writes them back
        self._range_allocs.pop(rid, None)
        rep = self.client.call("UnregisterRange", pb.UnregisterRangeRequest(range_id=rid),
                               timeout_s=None if cr is None else self._capacity_unregister_deadline(cr))
        if cr is not None:
            with self._lock:
                del self.capacity[rid]
        self._refresh_ranges(int(rep.snapshot_generation))
        if cr is not None:
            self._drop_capacity(cr, unregister_rpc=False)
        base = self._flag_ids.pop(rid, None)
        if base is not None and self._flag_table is not None:
            self._flag_table.remove_flag_range(base)

    # ---------------------------------------------------------------------------- modules
    def bind_module(self, module, artifact: Any = None, *, kernels: Sequence[str] | None = None,
                    slots: int | None = None, missing_reason: str | None = None,
                    deferred_built: bool = False) -> ModuleBinding:
        """Point an instrumented module's __hb_state (0 while nothing is registered: the native body, see
        state_word)/__hb_kslot_base at this session. `module` is a
        CUmodule (or its int handle). A module without __hb_state is recorded as uninstrumented.
        Without an artifact its `kernels` are not admitted, for `missing_reason` when given.
        The record of a deferred compile (HBFCC_DEFER=1) describes the plain cubin Triton loaded: its kernels
        are admitted only in the instrumented build the Triton hooks swap in (``deferred_built``)."""
        self._ensure_open()
        art = A.load(artifact)
        if art is not None and DF.recipe(art) is not None and not deferred_built:
            missing_reason = ("the plain build of a deferred kernel (HBFCC_DEFER=1): its instrumented build is "
                              "swapped in by the session's Triton hooks (install_triton_hooks / bind_triton_kernel)")
            art = None
        ak = A.kernels(art)
        names = [k[0] for k in ak] or list(kernels or [])
        nslots = slots or max(1, len(names) or 1)
        handle = int(module)   # the handle's value (cuda.bindings' getPtr() is the address of the wrapper's copy)
        with self._lock:
            instrumented = False
            attach = True
            cdesc_addr = cdesc_bytes = detached_addr = 0
            kslot_base = self._next_kslot
            if self.use_cuda:
                g = self._cu.module_global(module, abi.STATE_GLOBAL)
                if g is not None and self.l2 is not None and self._cu.module_global(module, abi.L2_HOOKS_GLOBAL) is None:
                    # HBF_L2_MODEL=1 with a module built against helpers without the L2 model's hooks (§3.12): its
                    # loads would all be charged to HBF, silently. Loud instead.
                    raise ConfigError("HBF_L2_MODEL=1 but this module's helpers have no L2 model: build it with the "
                                      "L2 helper build (HBFCC_HELPER_PTX=" + str(resources.helper_ptx_path("l2")) + ")",
                                      knob="HBF_L2_MODEL", module=hex(handle))
                if g is not None:
                    instrumented = True
                    if kslot_base + nslots > C.HBF_MAX_KERNEL_SLOTS:
                        raise HbfError("out of per-kernel counter slots", code=ErrorCode.RANGE_TABLE_FULL,
                                       slots=C.HBF_MAX_KERNEL_SLOTS)
                    # attached while a range is registered, else 0 (_set_module_words keeps it so at table changes)
                    attach = bool(self.ranges) or not self.native_select
                    dw = self._cu.module_global(module, abi.DETACHED_GLOBAL) if self.const_switch else None
                    detached_addr = dw[0] if dw is not None else 0      # 0: the switch is never written
                    for addr, value in module_words(g[0], detached_addr, self.state_dptr, attach):
                        self._cu.htod(addr, ctypes.c_uint64(value), 8)
                    kb = self._cu.module_global(module, abi.KSLOT_BASE_GLOBAL)
                    if kb is not None:
                        self._cu.htod(kb[0], ctypes.c_uint32(kslot_base), 4)
                    ct = self._cu.module_global(module, CAP_TABLE_GLOBAL)
                    if ct is not None:
                        self._cu.htod(ct[0], ctypes.c_uint64(self.cap_table_dptr), 8)
                    cd = self._cu.module_global(module, abi.CDESC_GLOBAL)
                    if cd is not None and cd[1] >= D.CDESC_BYTES_V5:   # a module before ABI 6: the 128-B form
                        cdesc_addr, cdesc_bytes = cd[0], D.CDESC_BYTES if cd[1] >= D.CDESC_BYTES else D.CDESC_BYTES_V5
                    self._next_kslot += nslots
            if instrumented:
                self._fit_stack(module, names)
            infos = {}
            # an uninstrumented module has no counter slots (-1): its kernels count nothing, and the
            # slot number must not alias the next instrumented module's
            def slot(i: int) -> int:
                return kslot_base + i if instrumented else -1
            sources = A.address_sources(art)
            cap_ok = capacity_admitted(art)
            nat = A.native_entries(art)
            for i, (name, adm, reasons) in enumerate(ak):
                infos[name] = KernelInfo(name, i, slot(i), adm, reasons, sources.get(name, "memory"),
                                         cap_ok.get(name, False), nat.get(name))
            if not ak:
                for i, name in enumerate(names):
                    infos[name] = KernelInfo(name, i, slot(i), False, [missing_reason or "no admission artifact"])
            b = ModuleBinding(handle, instrumented, kslot_base, infos,
                              str(artifact) if isinstance(artifact, (str, os.PathLike)) else None,
                              state_addr=g[0] if instrumented else 0, detached_addr=detached_addr, cdesc_addr=cdesc_addr,
                              cdesc_bytes=cdesc_bytes, attached=attach)
            if instrumented:
                b.native_fns = self._native_functions(module, infos)
                if b.native_fns and self.native_module == "plain":
                    self._plain_functions(b, art)
            old = self.bindings.get(handle)
            if old is not None and old is not b:
                self._unload_plain(old)
            self.bindings[handle] = b
            self._write_cdesc(b)   # a module just loaded: none of its kernels runs yet
            return b

    def _native_functions(self, module, infos: Mapping[str, KernelInfo]) -> dict[str, Any]:
        """The native entries of a module's kernels (KernelInfo.native_entry), each looked up (and loaded: lazy
        loading would load it at its first launch) once, here. A name the module lacks is logged and left out (the
        kernel's launches keep the instrumented entry). Empty with HBF_NATIVE_ENTRY=0 or per-launch selection off."""
        want = {k.name: k.native_entry for k in infos.values() if k.native_entry}
        if not want or not self.native_entry or not self.native_select or not self.use_cuda:
            return {}
        out = {}
        for name, ne in want.items():
            try:
                out[name] = self._cu.module_functions(module, [ne])[ne]
            except HbfError as e:
                log.warning("kernel %s: its native entry %s is not in the module (%s): its native launches run the "
                            "instrumented entry", name, ne, e)
        return out

    def _plain_functions(self, b: ModuleBinding, art: dict | None) -> None:
        """HBF_NATIVE_MODULE=plain: the kernels of ``b`` that have a native entry, looked up (and loaded) once in the
        module's PLAIN cubin -- the artifact's ``native_module``, read from the artifact store and verified against
        its recorded sha256 and size (hbfcommon.artifact.read_native_module), loaded with the driver
        (cudrv.module_load_data; unloaded by _unload_plain) -- into ``b.plain_fns``. Whatever is missing (no file,
        other bytes, a driver refusal, a kernel not in it): a warning naming the kernel and the file, and that
        kernel's native launches keep its native entry (``b.native_fns``); no record at all (nvcc and deferred builds,
        artifacts from before): the same, said at info."""
        names = sorted(b.native_fns)
        rec, why = A.native_module(art)
        where = "no file recorded"
        data = None
        if rec is not None:
            store = A.store_dir()
            where = str(A.native_module_path(store, rec["sha256"]))
            try:
                data = A.read_native_module(store, rec)
            except ConfigError as e:
                why = str(e)
        mod = None
        if data is not None:
            try:
                mod = self._cu.module_load_data(data)
            except HbfError as e:
                why = f"the driver did not load it ({e})"
        if mod is None:
            # no record is what nvcc and deferred builds (and artifacts from before) give: their native entries serve;
            # a record whose cubin is missing, damaged or refused is a fault worth a warning
            say = log.warning if rec is not None else log.info
            for name in names:
                say("kernel %s: HBF_NATIVE_MODULE=plain, but its plain cubin cannot be used (%s; %s): its native "
                    "launches run its native entry %s", name, why, where,
                    b.kernels[name].native_entry if name in b.kernels else "")
            return
        for name in names:
            try:
                b.plain_fns[name] = self._cu.module_functions(mod, [name])[name]
            except HbfError as e:
                log.warning("kernel %s: HBF_NATIVE_MODULE=plain, but it is not in its plain cubin %s (%s): its native "
                            "launches run its native entry", name, where, e)
        if b.plain_fns:
            b.plain_modules.append(mod)
            log.info("module %#x: plain cubin %s loaded for %s", b.module, where, ", ".join(sorted(b.plain_fns)))
        else:
            try:
                self._cu.module_unload(mod)
            except HbfError as e:
                log.warning("cannot unload the plain cubin %s: %s", where, e)

    def _unload_plain(self, b: ModuleBinding) -> None:
        """The plain cubins _plain_functions loaded for ``b``, unloaded (at close, or when its module is bound
        again); its kernels' native launches run their native entries from then on."""
        mods, b.plain_modules = b.plain_modules, []
        b.plain_fns.clear()
        b.plain_ready.clear()
        if b.plain_captured:
            # a CUDA graph captured one of these functions (HBF_GRAPH_NATIVE): the graph may outlive this session and
            # replay it, so its module stays loaded (freed with the context) -- never a replay of an unloaded function
            log.info("module %#x: its plain cubin stays loaded: a CUDA graph captured a kernel of it", b.module)
            return
        for m in mods:
            try:
                self._cu.module_unload(m)
            except HbfError as e:
                log.warning("module %#x: cannot unload its plain cubin: %s", b.module, e)

    def _native_function(self, b: ModuleBinding, name: str) -> tuple[Any, str]:
        """The function a launch of kernel ``name`` decided native runs, readied (_native_ready), and which
        (HBF_NATIVE_MODULE): with ``plain`` the kernel in the module's plain cubin where it is loaded ("plain"), else
        the native entry ("entry"); (None, "") when there is none ready (the instrumented entry runs)."""
        if self.native_module == "plain":
            pfn = b.plain_fns.get(name)
            if pfn is not None and self._native_ready(b, name, pfn, plain=True) is not None:
                return pfn, "plain"
        nfn = b.native_fns.get(name)
        if nfn is not None and self._native_ready(b, name, nfn) is not None:
            return nfn, "entry"
        return None, ""

    def _native_ready(self, b: ModuleBinding, name: str, nfn: Any, *, plain: bool = False) -> Any:
        """The native entry ``nfn`` of kernel ``name`` (``plain``: its function in the module's plain cubin) ready to
        launch, or None: at its first launch it gets the function attributes the loader set on the instrumented entry
        after loading it (Triton's loadBinary: the dynamic shared memory above 48 KiB, which a TMA kernel uses;
        cudrv.copy_function_attributes). A failure drops that function (Session._native_failed: the native entry's
        launches then run instrumented, the plain function's the native entry)."""
        ready = b.plain_ready if plain else b.native_ready
        if name in ready:
            return nfn
        ifn = self._instrumented_function(b, name)
        try:
            if ifn is None:
                raise HbfError("the instrumented entry's CUfunction is not known", code=ErrorCode.UNSUPPORTED)
            done = self._cu.copy_function_attributes(ifn, nfn)
        except HbfError as e:
            self._native_failed(b, name, e, nfn)
            return None
        ready.add(name)
        log.info("kernel %s: %s ready (attributes copied from the instrumented entry: %s)", name,
                 "its function in the plain cubin" if plain else "native entry", done or "none differed")
        return nfn

    def _instrumented_function(self, b: ModuleBinding, name: str) -> Any:
        """The instrumented entry's CUfunction handle of kernel ``name`` of binding ``b`` (Session.functions)."""
        for fh, (fb, info) in self.functions.items():
            if fb is b and info is not None and info.name == name:
                return fh
        return None

    def _native_failed(self, b: ModuleBinding, name: str, err: BaseException, fn: Any = None) -> None:
        """A native entry that could not be readied or launched: dropped (b.native_fns), counted
        (b.native_failures), logged as a warning naming the kernel and the error; its launches run instrumented.
        ``fn`` the kernel's function in the plain cubin (HBF_NATIVE_MODULE=plain): that one dropped (b.plain_fns),
        counted and logged the same way, and the kernel's next native launches run its native entry."""
        b.native_failures[name] = b.native_failures.get(name, 0) + 1
        if fn is not None and name in b.plain_fns and b.plain_fns[name] == fn:
            del b.plain_fns[name]
            log.warning("kernel %s: its function in the plain cubin failed (%s): this launch runs the instrumented "
                        "entry, the next ones its native entry", name, err)
            return
        b.native_fns.pop(name, None)
        log.warning("kernel %s: its native entry failed (%s): this launch and the next run the instrumented entry",
                    name, err)

    def _write_cdesc(self, b: ModuleBinding, *, clear: bool = False) -> None:
        """The module's launch descriptor (devstate.cdesc_for) for the current device state; zero
        (no compact path) when clear. Only while none of the module's kernels runs."""
        if not self.use_cuda or not b.instrumented or not b.cdesc_addr:
            return
        self._cu.htod(b.cdesc_addr, self._cdesc_of(b, clear=clear), b.cdesc_bytes)

    def _cdesc_of(self, b: ModuleBinding, *, clear: bool = False) -> D.hbf_cdesc:
        """What _write_cdesc writes (its first b.cdesc_bytes bytes): a module built before ABI 6 (a 128-byte
        descriptor, sites that check r0 only) gets the one-range descriptor it was built for."""
        if clear:
            return D.hbf_cdesc()
        return D.cdesc_for_module(self.state, self.state_dptr, b.kslot_base, b.cdesc_bytes, self.inline_issue,
                                  self.inline_multi)

    def _publish_cdescs(self) -> None:
        """Rewrite every bound module's descriptor after the state block's host-owned words changed
        (callers hold the context idle, as they do for those words)."""
        for b in self.bindings.values():
            self._write_cdesc(b)

    def _fit_stack(self, module, names: Sequence[str]) -> None:
        """Give the module's kernels room for the helpers' calls on their stack (devstate.HELPER_STACK_BOUND)."""
        frame = 0
        for n in names:
            try:
                frame = max(frame, self._cu.function_local_bytes(self._cu.module_function(module, n)))
            except HbfError:   # a name the module lacks: nothing to fit
                continue
        need = frame + D.HELPER_STACK_BOUND
        if need > self._stack_limit:
            self._stack_limit = self._cu.ensure_stack_limit(need)
            log.info("per-thread stack limit raised to %d B (kernel frame %d B + helper bound %d B)",
                     self._stack_limit, frame, D.HELPER_STACK_BOUND)

    def note_function(self, function, binding: ModuleBinding, name: str) -> None:
        handle = int(function)   # the handle's value, as for modules
        self.functions[handle] = (binding, binding.kernel(name) or KernelInfo(name, -1, -1, False,
                                                                                ["kernel not in artifact"]))

    # ---------------------------------------------------------------------------- per-launch selection
    def _allocation_spans(self, ptrs: Iterable[int], exact: bool = True) -> list[tuple[int, int]]:
        """The driver's allocation extent (cuMemGetAddressRange) of every value that is a device pointer:
        a kernel given a pointer into an allocation may reach the whole allocation. Values that are not
        device pointers (scalars) reach nothing. ``exact`` False (a selection's reach, not a record that outlives the
        launch): a value outside every allocation that holds part of a registered range (_hot_allocations) is left
        out without asking the driver -- its allocation, whatever it is, overlaps no range, so the decision is the
        same -- and one inside such an allocation gets that allocation's extent, also without asking."""
        out = []
        if not self.use_cuda:
            return [(int(p), 1) for p in ptrs if p]
        caps = self.capacity
        hot = None if exact else self._hot_allocations()
        for p in ptrs:
            if p:
                cap = next((c for c in caps.values() if c.base <= int(p) < c.base + c.nbytes), None) if caps else None
                if cap is not None:        # a reserved span has no allocation the driver can name
                    out.append((cap.base, cap.nbytes))
                    continue
                if hot is not None:
                    i = bisect.bisect_right(hot, (int(p), 1 << 64)) - 1
                    if i >= 0 and int(p) < hot[i][0] + hot[i][1]:
                        out.append(hot[i])
                    continue
                ext = self._cu.address_range(int(p))
                if ext is not None:
                    out.append(ext)
        return out

    def _hot_allocations(self) -> list[tuple[int, int]] | None:
        """The device allocations (base, size), sorted, that hold part of a registered timing or flag range: asked of
        the driver once per range table (each range's allocations walked from its base to its end), not per launch.
        None where one cannot be named (the range covers memory the driver does not know, or more than
        HOT_WALK_MAX allocations): the per-launch lookups then. This session's capacity ranges are reserved spans,
        not allocations (_allocation_spans names them itself). Valid while the registered memory stays allocated: freeing a range's
        memory while it is registered is the stale range that synchronize reports (check_stale_ranges); until then
        a new allocation over the freed range would not be seen here, as the range itself no longer describes it."""
        rs = self.ranges
        cached = self._hot_cache
        if cached is not None and cached[0] is rs:
            return cached[1]
        hot: set[tuple[int, int]] | None = set()
        caps = {(int(c.base), int(c.nbytes)) for c in self.capacity.values()}
        for r in rs:
            if (int(r.base), int(r.length)) in caps:      # this session's reserved span: _allocation_spans names it
                continue
            exts = allocations_holding(self._cu.address_range, int(r.base), int(r.end))
            if exts is None:
                hot = None
                break
            hot.update(exts)
        out = None if hot is None else sorted(hot)
        self._hot_cache = (rs, out)
        return out

    def _select(self, b: ModuleBinding, info: KernelInfo | None, spans: list[tuple[int, int]] | None,
                stream: int | None, rule: str, switch: bool = False,
                extents: Callable[[], list[tuple[int, int]] | None] | None = None) -> Any:
        """Per-launch selection: a launch whose pointer arguments cannot reach any registered range runs
        the module's untouched native version (its __hb_state is 0 for that launch: every helper returns at
        once and the prologue takes the native body). Sound only for kernels whose access addresses come
        from their parameters (hbfcc's address_source "params"); a kernel that takes addresses from memory,
        a launch whose arguments are unknown, or one that reaches a range runs instrumented. `rule` names
        what gave the extents: "storage" (the framework's tensor storage), "allocation" (the driver's
        allocation of a raw pointer). With nothing registered the word is 0 too (the native body after one
        constant-bank read: module_words). A launch captured into a CUDA graph follows state_word's capture rules. The
        decision is counted per kernel (counters()["launch_selection"]: "native"/"instrumented" by the body
        that runs, "rules" by selection's reason, "word" by state_word's, "captured", "native_entry").

        The native entry (hbfcc's HBFCC_NATIVE_ENTRY, HBF_NATIVE_ENTRY): when the caller can launch another function
        (``switch``: Session.launch, a Triton launch through _TritonNativeRun), the kernel has one and the launch is
        decided native on a stream that is not capturing, the result is the native entry's CUfunction: the caller
        launches it instead, and no word is written (the instrumented entry, the only reader of the words, is not
        entered; a captured module's words stay as its replays need them). None otherwise (the instrumented
        entry, with the words as state_word wants them).

        Native entries in graphs (HBF_GRAPH_NATIVE, :meth:`_capture_native`): a launch decided native on a stream that is
        certainly capturing captures the native entry when :func:`graph_native_reach` allows it, and the session
        records what its replays can reach (``extents``: the launch's argument extents, computed only then, when
        ``spans`` is None because nothing is registered); counted as ``captured_native`` (and ``captured``,
        ``native``, ``native_entry``)."""
        if not self.use_cuda or not b.instrumented or not b.state_addr or not self.native_select:
            return None
        name = info.name if info else "?"
        native, why = selection(self.ranges, info, spans, rule)
        st = int(stream or 0)
        capturing = self._cu.stream_capturing(st)
        sel = self.launch_selection.get(name)
        if sel is None:
            sel = self.launch_selection[name] = {"native": 0, "instrumented": 0, "captured": 0, "native_entry": 0,
                                                 "captured_native": 0, "rules": {}, "word": {},
                                                 "native_module": {"entry": 0, "plain": 0}}
        sel["rules"][why] = sel["rules"].get(why, 0) + 1
        nfn, which = None, ""
        if switch and info is not None and native is not False:
            if not capturing:
                nfn, which = self._native_function(b, name)
            elif self.graph_native != "off" and (name in b.native_fns or
                                                 (self.native_module == "plain" and name in b.plain_fns)):
                nfn, which = self._capture_native(b, info, native, spans, extents, st)
        if nfn is not None:
            sel["native"] += 1
            sel["native_entry"] += 1
            # HBF_NATIVE_MODULE: which function ran native (the native entry, or the kernel in the plain cubin)
            sel["native_module"][which] += 1
            if capturing and which == "plain":
                b.plain_captured = True
            if capturing:
                sel["captured"] += 1
                sel["captured_native"] += 1
                w = "captured native entry: not written"
            else:
                w = "native entry: not written"
            sel["word"][w] = sel["word"].get(w, 0) + 1
            return nfn
        if capturing:
            b.captured = True
        want, word_why = state_word(native, captured=b.captured, capturing=capturing)
        if want is not None and want != b.attached:
            if capturing:
                # an attach (a capture never detaches), captured as the graph's writes before this launch: the words
                # change only when the graph replays, so b.attached keeps what the device holds now
                for addr, value in module_words(b.state_addr, b.detached_addr, self.state_dptr, True):
                    self._cu.memset_u64_async(addr, value, st)
            else:
                # the other state is wanted: change __hb_state in stream order. A launch of this module still
                # in flight on another stream would see the change mid-run; wait for it first (rare), so no
                # kernel ever reads the word while it changes.
                if b.last_stream is not None and b.last_stream != st and b.last_epoch == self._epoch:
                    self._cu.stream_synchronize(b.last_stream)
                for addr, value in module_words(b.state_addr, b.detached_addr, self.state_dptr, want):
                    self._cu.memset_u64_async(addr, value, st)
                b.attached = want
        b.last_stream, b.last_epoch = st, self._epoch
        runs_native = native is None or (native is True and want is False)
        sel["native" if runs_native else "instrumented"] += 1
        sel["captured"] += int(capturing)
        sel["word"][word_why] = sel["word"].get(word_why, 0) + 1
        return None

    def _capture_native(self, b: ModuleBinding, info: KernelInfo, native: bool | None,
                        spans: list[tuple[int, int]] | None, extents: Callable[[], list[tuple[int, int]] | None] | None,
                        stream: int) -> tuple[Any, str]:
        """HBF_GRAPH_NATIVE: the native entry's CUfunction for a launch on a capturing stream decided native (and which:
        _native_function, HBF_NATIVE_MODULE), with what
        its replays can reach recorded (GraphCaptures: every later registration over it is refused), or None (the
        instrumented entry and state_word's capture rules, as with the knob off). Only where :func:`graph_native_reach`
        allows it, the stream is certainly capturing (cuStreamIsCapturing answered ACTIVE: an error, which counts as
        capturing, never captures native) and the native entry is ready. The reach is checked again against the range
        table under the session's lock, which a registration holds from its check until its range is in the table:
        either the registration sees this record and is refused, or this launch sees the range and stays
        instrumented."""
        ok, reach, _ = graph_native_reach(self.graph_native, native, info, spans, extents)
        if not ok or not self._cu.stream_capture_active(stream):
            return None, ""
        nfn, which = self._native_function(b, info.name)
        if nfn is None:
            return None, ""
        with self._lock:
            if reach is None:
                if self.ranges:
                    return None, ""
            elif spans_reach(self.ranges, reach):
                return None, ""
            self._captures().record(info.name, reach)
        return nfn, which

    def _set_module_words(self) -> None:
        """After the range table changed (the context idle, no kernel reads a word): every instrumented module
        attached while any range is registered (a launch captured into a graph with its module detached replays
        attached from now on, state_word), detached while none is (its kernels take the native body after one
        constant-bank read, module_words). A module with per-launch selection off keeps the session's state."""
        if not self.native_select:
            return
        want = bool(self.ranges)
        for b in self.bindings.values():
            if b.instrumented and b.state_addr:
                for addr, value in module_words(b.state_addr, b.detached_addr, self.state_dptr, want):
                    self._cu.htod(addr, ctypes.c_uint64(value), 8)
                b.attached = want

    # ---------------------------------------------------------------------------- launch gate
    def gate(self, name: str, info: KernelInfo | None, pointer_args: Iterable[int] | None,
             spans: Iterable[tuple[int, int]] | None = None) -> None:
        """Refuse the launch of a non-admitted kernel whose arguments can reach a registered range.
        pointer_args: pointer values (reach = the pointer lies in a range); spans: (address, bytes)
        an argument covers (reach = overlap, e.g. a tensor's storage). Both None means the arguments
        are unknown (then any registered range counts)."""
        self.raise_device_failure()   # the run already ended with a device failure: no further launch
        if info is not None and info.admitted and not self._capacity_ranges():
            return                    # admitted, and no capacity range to keep it from: nothing to refuse
        ptrs = None if pointer_args is None else [int(p) for p in pointer_args]
        sp = None if spans is None else [(int(a), int(n)) for a, n in spans]
        self._gate_capacity(name, info, ptrs, sp)
        admitted = bool(info and info.admitted)
        if admitted:
            return
        if not self.ranges:
            return
        if ptrs is None and sp is None:
            reach = [{"range_id": r.range_id, "base": hex(r.base)} for r in self.ranges]
        else:
            reach = []
            for p in ptrs or []:
                r = self.range_containing(p)
                if r is not None:
                    reach.append({"pointer": hex(p), "range_id": r.range_id, "base": hex(r.base)})
            for a, n in sp or []:
                for r in self.ranges:
                    if a < r.end and r.base < a + n:
                        reach.append({"span": [hex(a), n], "range_id": r.range_id, "base": hex(r.base)})
        if not reach:
            return
        reason = ("not admitted: " + "; ".join(info.reasons)) if info and info.reasons else \
            ("not admitted" if info else "no admission artifact for this kernel")
        event = {"kernel": name, "reason": reason, "reaches": reach,
                 "arguments_known": ptrs is not None or sp is not None, "allow_unmodeled": self.allow_unmodeled}
        if self.allow_unmodeled:
            self.unmodeled_launches.append(event)
            self._report("unmodeled_launch", event)
            log.warning("launch of non-admitted kernel %s allowed (allow_unmodeled): %s", name, reason)
            return
        self.refused_launches.append(event)
        self._report("launch_refused", event)
        raise LaunchRefused(f"launch of {name} refused: {reason}", kernel=name, reason=reason,
                            reaches=reach)

    def _gate_capacity(self, name: str, info: KernelInfo | None, ptrs: list[int] | None,
                       sp: list[tuple[int, int]] | None) -> None:
        """A kernel hbfcc's capacity pass did not rewrite (or did not rewrite completely) is never launched with
        arguments that may reach a capacity range (unknown arguments reach every range): its accesses would go
        to the unbacked span. HBF_ALLOW_UNMODELED does not change this (nothing could serve those accesses)."""
        caps = self._capacity_ranges()
        if not caps or (info is not None and info.capacity_admitted):
            return
        if ptrs is None and sp is None:
            reach = [{"range_id": r.range_id, "base": hex(r.base)} for r in caps]
        else:
            reach = [{"pointer": hex(p), "range_id": r.range_id} for p in ptrs or [] for r in caps
                     if r.base <= p < r.end]
            reach += [{"span": [hex(a), n], "range_id": r.range_id} for a, n in sp or [] for r in caps
                      if a < r.end and r.base < a + n]
        if not reach:
            return
        reason = ("not rewritten for capacity ranges (hbfcc's capacity pass: HBFCC_PASSES=timing,capacity)"
                  if info is None or not info.capacity_admitted else "")
        event = {"kernel": name, "reason": reason, "reaches": reach, "capacity": True,
                 "arguments_known": ptrs is not None or sp is not None}
        self.refused_launches.append(event)
        self._report("launch_refused", event)
        raise LaunchRefused(f"launch of {name} refused: {reason}", kernel=name, reason=reason, reaches=reach)

    def _capacity_ranges(self) -> list[D.DevRange]:
        """The registered capacity ranges, computed once per range table: the session replaces ``self.ranges`` (a new
        list) at every table change and never changes the list in place, so the list object names the table."""
        c = self._caps_of
        if c is None or c[0] is not self.ranges:
            c = self._caps_of = (self.ranges, [r for r in self.ranges if r.mode == C.HBF_MODE_CAPACITY])
        return c[1]

    def capacity_counters(self) -> dict[str, int]:
        """The device side's capacity counters (hbf_helpers.cu __hb_cap_counters), summed over the bound
        modules: accesses, no_wait, demand_waits, late_prefetch_waits, failed, misses_posted, hints_posted,
        pending."""
        tot = dict.fromkeys(CAP_COUNTER_NAMES, 0)
        if not self.use_cuda:
            return tot
        for b in self.bindings.values():
            if not b.instrumented:
                continue
            g = self._cu.module_global(b.module, CAP_COUNTERS_GLOBAL)
            if g is None:
                continue
            buf = (ctypes.c_uint64 * len(CAP_COUNTER_NAMES))()
            self._cu.dtoh(buf, g[0], ctypes.sizeof(buf))
            for k, v in zip(CAP_COUNTER_NAMES, buf):
                tot[k] += int(v)
        return tot

    def launch(self, function, grid, block, args: Sequence[ctypes._SimpleCData], *, kernel: str | None = None,
               binding: ModuleBinding | None = None, shared: int = 0, stream: int = 0) -> None:
        """cuLaunchKernel through the launch gate. Pointer arguments are the c_uint64/c_void_p args."""
        self._ensure_open()
        fh = int(function)
        b, info = self.functions.get(fh, (binding, None))
        if info is None and binding is not None and kernel is not None:
            info = binding.kernel(kernel)
        name = kernel or (info.name if info else f"function@{fh:#x}")
        ptrs = [a.value or 0 for a in args if isinstance(a, (ctypes.c_uint64, ctypes.c_void_p))]
        self.gate(name, info, ptrs)
        nfn = None
        if b is not None:
            # nothing registered: the selection is "nothing registered" whatever the pointers reach (no lookup)
            spans = self._allocation_spans(dict.fromkeys(ptrs), exact=self.graph_native != "off") \
                if self.ranges else None
            # HBF_GRAPH_NATIVE: a capture needs the extents even then (computed only for one that may go native)
            ext = (lambda: self._allocation_spans(dict.fromkeys(ptrs))) \
                if spans is None and self.graph_native != "off" else None
            nfn = self._select(b, info, spans, int(stream), "allocation", switch=True, extents=ext)
        if nfn is None:
            self._cu.launch(function, grid, block, args, shared, stream)
        else:
            try:
                self._cu.launch(nfn, grid, block, args, shared, stream)
            except HbfError as e:           # refused before it ran (a launch error): the instrumented entry instead
                self._native_failed(b, name, e, nfn)
                self._cu.launch(function, grid, block, args, shared, stream)
        if self.stall.warn_s > 0:
            self.stall.launched(time.monotonic(), name, f"grid {tuple(grid)} block {tuple(block)}")

    # ---------------------------------------------------------------------------- Triton
    def install_triton_hooks(self) -> None:
        """Bind every Triton kernel as it loads (kernel_load_end_hook) and gate its launches
        (launch_enter_hook). The gate finds the launch's arguments in Triton's launcher frame
        (tensors: their storage spans; ints: possible raw pointers); when it cannot, the arguments
        count as unknown and a non-admitted kernel is refused whenever any range is registered.
        Install before the first launch of a kernel: Triton runs the load hook once per process and
        kernel; a kernel loaded earlier can be bound with bind_triton_kernel()."""
        if self._triton_installed:
            return
        from triton import knobs as tk  # noqa: PLC0415
        for attr, fn in (("kernel_load_end_hook", self._triton_loaded), ("launch_enter_hook", self._triton_launch)):
            hook = getattr(tk.runtime, attr)
            if hasattr(hook, "add"):
                hook.add(fn)
                self._triton_installed.append((hook, "chain", fn))
            else:
                prev = hook
                def chained(*a, _fn=fn, _prev=prev):
                    if _prev is not None:
                        _prev(*a)
                    return _fn(*a)
                setattr(tk.runtime, attr, chained)
                self._triton_installed.append((tk.runtime, attr, prev))

    def uninstall_triton_hooks(self) -> None:
        for kernel, run in reversed(self._triton_runs):      # the launchers _wrap_native_run replaced
            if getattr(kernel, "_run", None) is not None and isinstance(kernel._run, _TritonNativeRun) \
                    and kernel._run.session is self:
                kernel._run = run
        self._triton_runs.clear()
        for obj, kind, fn in reversed(self._triton_installed):
            if kind == "chain":
                obj.remove(fn)
            else:
                setattr(obj, kind, fn)
        self._triton_installed.clear()

    def bind_triton_kernel(self, kernel) -> ModuleBinding:
        """Bind a Triton CompiledKernel loaded before the hooks were installed (or in an earlier
        session of this process): what the load hook would have done (a deferred kernel's instrumented
        build swapped in included)."""
        if getattr(kernel, "module", None) is None:
            kernel._init_handles()
        return self._triton_loaded(kernel.module, kernel.function, kernel.name, kernel.metadata_group,
                                   getattr(kernel, "hash", None), kernel=kernel)

    def _triton_loaded(self, module, function, name, metadata_group, hash_=None, *rest, kernel=None) -> ModuleBinding:
        art, why = triton_record(metadata_group)
        if art is not None and DF.recipe(art) is not None:
            return self._triton_deferred(module, function, name, art,
                                         kernel if kernel is not None else _loading_kernel(module, function))
        if art is None and self.triton_instrument == "load" and _plain_cubin(metadata_group) is not None:
            # a plain Triton kernel (whatever the store said about its PTX): verified and built at this load
            return self._triton_deferred(module, function, name, None,
                                         kernel if kernel is not None else _loading_kernel(module, function),
                                         group=metadata_group)
        b = self.bind_module(int(module), artifact=art, kernels=[name], missing_reason=why)
        if art is not None and not b.kernels:
            log.warning("Triton kernel %s: its admission artifact lists no kernel", name)
        self.note_function(int(function), b, name)
        self._wrap_native_run(kernel if kernel is not None else _loading_kernel(module, function), b, name, function)
        info = b.kernel(name)
        if why or (art is not None and info is not None and not info.admitted):
            # loud: a launch that would be modeled is refused (LaunchRefused names the same reason)
            log.warning("Triton kernel %s is NOT admitted: %s", name,
                        why or "; ".join(info.reasons if info else []) or "no reason recorded")
        if not b.instrumented and art is None:
            log.info("Triton kernel %s was not built through hbfcc-ptxas (no __hb_state, no artifact): "
                     "not admitted", name)
        return b

    def _triton_deferred(self, module, function, name: str, art: dict | None, kernel: Any,
                         group: Mapping[str, Any] | None = None) -> ModuleBinding:
        """A Triton kernel compiled with HBFCC_DEFER=1 or =rewrite (its cubin is the plain build), or, with
        ``art`` None and HBF_TRITON_INSTRUMENT=load, a plain Triton kernel of cache group ``group`` (its ptxas run
        reconstructed and verified first: runtime_cuda/triton_load.py): assemble its
        instrumented build (hbfcommon.deferred: cached in the artifact store, built once; with =rewrite the
        rewrite and its admission record too), load it as Triton loads a kernel
        and swap it into the CompiledKernel (module, function, register facts), which Triton's launches read.
        Any failure leaves the plain kernel bound as NOT admitted with the reason (a coded error naming the
        kernel, logged at ERROR): a launch of it that would be modeled is refused, never run unmodeled."""
        plain_sha = (DF.recipe(art) or {}).get("plain_output_sha256") if art is not None \
            else _sha256(TL.group_file(dict(group or {}), ".cubin")[0] or b"")
        mode = "load" if art is None or TL.is_load_record(art) else "defer"
        if kernel is not None and getattr(kernel, "module", None) == module \
                and abi.STATE_GLOBAL.encode() in bytes(getattr(kernel, "kernel", b"") or b"") \
                and _sha256(bytes(kernel.kernel)) != plain_sha:
            # swapped already (bind_triton_kernel in a later session of this process): bind what it runs
            b = self.bind_module(int(module), artifact=A.lookup_by_output(bytes(kernel.kernel)) or art,
                                 kernels=[name], deferred_built=True)
            self.note_function(int(function), b, name)
            self._wrap_native_run(kernel, b, name, function)
            return b
        try:
            if kernel is None:
                raise HbfError(f"Triton kernel {name}: the CompiledKernel being loaded was not found in the load "
                               f"hook's caller frames (bind it with Session.bind_triton_kernel(kernel))",
                               code=ErrorCode.INTERNAL, kernel=name)
            verify_ns = None
            if art is None:
                prep = TL.prepare_group(name, group)
                art, verify_ns = prep.record, prep.verify_ns
            built = DF.build(art)
            mod, fn, n_regs, n_spills, n_max = triton_load_binary(name, built.cubin, int(kernel.metadata.shared))
            need = int(kernel.metadata.num_warps) * int(getattr(kernel.metadata.target, "warp_size", 32) or 32)
            if n_max < need:
                raise HbfError(f"Triton kernel {name}: its instrumented build launches at most {n_max} threads "
                               f"per block ({n_regs} registers), the kernel needs {need}",
                               code=ErrorCode.UNSUPPORTED, kernel=name)
        except HbfError as e:
            what = "instrumentation at load (HBF_TRITON_INSTRUMENT=load)" if mode == "load" \
                else "deferred instrumented build (HBFCC_DEFER)"
            reason = f"its {what} failed [{e.code.name}]: {e}"
            log.error("Triton kernel %s is NOT admitted: %s", name, reason)
            self.deferred_builds.append({"kernel": name, "ok": False, "code": e.code.name, "error": str(e),
                                         "mode": mode})
            self._report("deferred_build_failed", {"kernel": name, "code": e.code.name, "error": str(e)})
            b = self.bind_module(int(module), artifact=None, kernels=[name], missing_reason=reason)
            self.note_function(int(function), b, name)
            return b
        plain = self.bind_module(int(module), artifact=art, kernels=[name])    # not admitted (bind_module)
        self.note_function(int(function), plain, name)      # a launcher that kept the old handle: refused
        kernel.module, kernel.function, kernel.n_regs, kernel.n_spills, kernel.n_max_threads = \
            mod, fn, n_regs, n_spills, n_max
        kernel.kernel = built.cubin
        # the admission record of what runs: HBFCC_DEFER=rewrite's build wrote it (the compile had none)
        b = self.bind_module(int(mod), artifact=built.record or art, kernels=[name], deferred_built=True)
        self.note_function(int(fn), b, name)
        self._wrap_native_run(kernel, b, name, fn)
        self.deferred_builds.append({"kernel": name, "ok": True, "cached": built.cached, "build_ns": built.build_ns,
                                     "cubin": str(built.path), "mode": mode,
                                     "verify_ns": verify_ns})
        log.info("Triton kernel %s: deferred instrumented build %s (%.2f s), swapped in", name,
                 "read back" if built.cached else "assembled", built.build_ns / 1e9)
        info = b.kernel(name)
        if info is not None and not info.admitted:
            log.warning("Triton kernel %s is NOT admitted: %s", name,
                        "; ".join(info.reasons) or "no reason recorded")
        return b

    def _wrap_native_run(self, kernel: Any, b: ModuleBinding, name: str, function) -> None:
        """A Triton kernel with a native entry (ModuleBinding.native_fns): its launcher (``CompiledKernel._run``,
        which Triton 3.6 calls with the function handle it read from the kernel) is wrapped by a _TritonNativeRun,
        which decides each launch before the launcher takes the handle and passes the native entry's for a host
        launch decided native. Without the kernel object or a ``_run`` to wrap, the launches keep the instrumented
        entry (logged)."""
        nfn = b.native_fns.get(name)
        if nfn is None:
            return
        run = getattr(kernel, "_run", None) if kernel is not None else None
        if run is None or not callable(run):
            log.info("Triton kernel %s: no launcher to wrap (%s): its native entry is not used", name,
                     "the CompiledKernel was not found" if kernel is None else "no CompiledKernel._run")
            return
        if isinstance(run, _TritonNativeRun):      # wrapped by an earlier session of this process
            run = run.run
        kernel._run = _TritonNativeRun(self, run, int(function), nfn)
        self._triton_runs.append((kernel, run))

    def _triton_decide(self, fh: int, name: str, args: Sequence[Any] | None, stream: int | None,
                       switch: bool) -> Any:
        """One Triton launch through the gate and per-launch selection (the enter hook's work): ``args`` the
        kernel's arguments (None: unknown). With ``switch`` (a _TritonNativeRun decides before the launcher takes
        the handle) the result is the native entry to launch instead, or None (_select)."""
        if self.stall.warn_s > 0:
            self.stall.launched(time.monotonic(), name, "triton")
        b, info = self.functions.get(fh, _UNBOUND)
        if info is None:
            info = KernelInfo(name, -1, -1, False, ["kernel loaded before the session's Triton hooks were "
                                                    "installed (bind_triton_kernel binds it)"])
        if not self.ranges:
            # nothing registered (the common case): the gate refuses nothing (no range to reach, no capacity range)
            # and the selection is "nothing registered" whatever the arguments reach: no argument walk, no lookup
            if not info.admitted:
                return None
            self.gate(name, info, None, None)     # a recorded device failure still ends the run here
            if b is None:
                return None
            # HBF_GRAPH_NATIVE: a capture needs the extents even then (computed only for one that may go native)
            ext = (lambda: self._triton_reach(b, info, triton_arg_spans(args), args)) \
                if switch and args is not None and self.graph_native != "off" else None
            return self._select(b, info, None, stream, "storage", switch=switch, extents=ext)
        spans = None if args is None else triton_arg_spans(args)
        self.gate(name, info, None, spans)
        if b is None:
            return None
        reach = None if spans is None else self._triton_reach(b, info, spans, args)
        return self._select(b, info, reach, stream, "storage", switch=switch)

    def _triton_reach(self, b: ModuleBinding, info: KernelInfo, spans: list[tuple[int, int]],
                      args: Sequence[Any]) -> list[tuple[int, int]]:
        """What a Triton launch's arguments reach for the selection (rule "storage"): the tensors' storage spans, and
        the driver's allocation of every positive int (a raw pointer is an int). Only as much as the decision needs:
        no lookup when the selection does not read the extents (selection off or not applicable, addresses from
        memory) or a tensor reaches a range already (no extent added can undo that); each distinct value asked once.
        A tensor's span is kept whatever its size: a 1-byte tensor (one int8 element) spans (address, 1) like an int,
        and is dropped only where an int argument has that very value (whose allocation, asked, holds it)."""
        big = [s for s in spans if s[1] > 1]
        if not (self.use_cuda and b.instrumented and b.state_addr and self.native_select) \
                or info.address_source != "params" \
                or spans_reach(self.ranges, big):
            return big              # the selection does not read the extents, or reaches a range already
        ints = dict.fromkeys(a for a in args if (type(a) is int or (isinstance(a, int) and not isinstance(a, bool)))
                             and a > 0)
        return big + [s for s in spans if s[1] == 1 and s[0] not in ints] \
            + self._allocation_spans(ints, exact=self.graph_native != "off")

    def _triton_launch(self, metadata) -> None:
        if getattr(self._tl, "handled", None) is metadata:      # decided by its _TritonNativeRun already
            self._tl.handled = None
            return
        md = metadata.get() if hasattr(metadata, "get") and callable(metadata.get) and not isinstance(metadata, Mapping) \
            else dict(metadata)
        fh = int(md.get("function", 0) or 0)
        name = str(md.get("name", f"function@{fh:#x}"))
        if not self.ranges and isinstance(md.get("stream"), int):
            # nothing registered: _triton_decide needs no arguments, only the stream (its capture check and word
            # writes), which Triton puts in the launch metadata (jit.py and CompiledKernel's runner pass the one value
            # to launch_metadata and to the launcher): no frame walk
            args, stream = None, int(md["stream"])
        else:
            found = _triton_launch_args(metadata, with_stream=True)
            args, stream = found if found is not None else (None, None)
        self._triton_decide(fh, name, args, stream, switch=False)

    # ---------------------------------------------------------------------------- ticket counter
    def _sync_ring_head(self) -> int:
        """After a synchronization point of ours (no kernel of this context running): read the device
        ticket counter (hbf_device_state.ref_next_ticket, where the reference path reserves tickets)
        and write it into header.ring_head for display and for hbfd's lower bound. ring_head is then
        host-written by the workload, which hbf_ctl.h allows because the GPU no longer does atomics
        on it. Never moves ring_head backwards. Returns the device counter."""
        v = ctypes.c_uint64(0)
        self._cu.dtoh(v, self.state_dptr + D.REF_NEXT_TICKET_OFF, 8)
        t = int(v.value)
        self.state.ref_next_ticket = t
        if self.ring_ovf_dptr and t > int(self.state.ref_floor):
            # no kernel runs: every ticket reserved so far belongs to a warp that is gone, so an overflow
            # entry it left untaken (a future nobody waited: hbfcc's overwrite rule) may be reused
            self.state.ref_floor = t
            self._cu.htod(self.state_dptr + D.REF_FLOOR_OFF, ctypes.c_uint64(t), 8)
        h = self.ctl.ctl.header
        if t > int(h.ring_head):
            h.ring_head = t
        return t

    # ---------------------------------------------------------------------------- counters
    def device_counters_raw(self) -> "ctypes.Array":
        """Every kernel slot's counters: the state block's kslots plus, for the slots bound so far, the
        sum of their shards (timestamps by max)."""
        arr = (D.hbf_kernel_counters * C.HBF_MAX_KERNEL_SLOTS)()
        if self.use_cuda and self.state_dptr:
            self._cu.dtoh(arr, self.state_dptr + D.KSLOTS_OFF, D.KSLOTS_BYTES)
            n = min(self._next_kslot, C.HBF_MAX_KERNEL_SLOTS)
            if self.kshards_dptr and n:
                sh = (D.hbf_kernel_counters * (n * D.HBF_KSHARDS))()
                self._cu.dtoh(sh, self.kshards_dptr, ctypes.sizeof(sh))
                D.sum_shards(arr, sh, n)
        return arr

    def l2_reset(self) -> None:
        """Empty the L2 model (§3.12) with the context idle: what a cold L2 starts from (ncu flushes the caches
        before each kernel it measures). A no-op with the model off."""
        self._ensure_open()
        if self.use_cuda and self.l2_tags_dptr and self.l2 is not None:
            self._wait_idle()
            self._cu.check(self._cu.drv().cuMemsetD8(self.l2_tags_dptr, 0, self.l2.tag_bytes), "cuMemsetD8")

    def counters(self, publish: bool = True) -> dict:
        """Per kernel and totals. Also publishes the totals into the control region (counters.device)."""
        self._ensure_open()
        if self.use_cuda:
            self._wait_idle()
            if self.state_dptr:
                self._sync_ring_head()
        self._check_live_ranges(raise_new=False)
        raw = self.device_counters_raw()
        names = {}
        for b in self.bindings.values():
            for k in b.kernels.values():
                if k.kslot >= 0:
                    names[k.kslot] = k.name
        kernels = {}
        totals = D.kernel_counters_dict(D.hbf_kernel_counters())
        for slot in range(min(self._next_kslot, C.HBF_MAX_KERNEL_SLOTS)):
            d = D.kernel_counters_dict(raw[slot])
            key = names.get(slot, f"slot{slot}")
            if key in kernels:   # one name, several modules (Triton specializations): summed
                _accumulate(kernels[key], d)
            else:
                kernels[key] = d
            _accumulate(totals, d)
        out = {"kernels": kernels, "totals": totals, "generation": self.generation,
               "unmodeled_launches": list(self.unmodeled_launches),
               "refused_launches": list(self.refused_launches),
               "l2_model": self.l2.summary() if self.l2 is not None else None,
               "ring": self._ring_counters(),
               "launch_selection": {k: dict(v, rules=dict(v["rules"]), word=dict(v["word"]),
                                            native_module=dict(v.get("native_module") or {}))
                                    for k, v in self.launch_selection.items()},
               "graph_native": self._captures().summary(self.graph_native),
               "stale_ranges": list(self.stale_ranges), "stalls": list(self.stalls)}
        if publish:
            self._publish(totals)
        return out

    def _ring_counters(self) -> dict:
        """The reference ring's stealing (docs/runtime.md "ring"): completions stolen into the overflow table and
        owners served from it (GPU counters), the table's entries (0: stealing off)."""
        v = (ctypes.c_uint64 * 2)()
        if self.use_cuda and self.state_dptr:
            self._cu.dtoh(v, self.state_dptr + D.REF_STEALS_OFF, 16)
        return {"overflow_entries": self.ring_ovf_entries, "steals": int(v[0]), "overflow_takes": int(v[1])}

    def _publish(self, totals: dict) -> None:
        cnt = self.ctl.ctl.counters
        for i, op in enumerate(C.OP_NAMES):
            o, src = cnt.device[i], totals["ops"][op]
            o.requests, o.bytes, o.modeled_ns = src["requests"], src["bytes"], src["modeled_ns"]
            o.program_bytes = src["program_bytes"]
            o.service_ns, o.overhead_ns = src["service_ns"], src["overhead_ns"]
            o.wall_ns = 0
        # the device does not know the op of a deadline future: waits are attributed to loads
        cnt.device[C.HBF_OP_LOAD].wall_ns = totals["wait_wall_ns"]
        cnt.device[C.HBF_OP_LOAD].overhead_ns += totals["wait_overhead_ns"]
        for i, n in enumerate(D.C_STATUS_NAMES):
            cnt.device_status[i] = totals["status"].get(n, 0)
        cnt.device_inline_ns = totals["inline_ns"]     # the inline path's own time (helper ABI 8)
        cnt.device_sync_seq += 1

    # ---------------------------------------------------------------------------- failures
    def device_failure(self) -> tuple[int, int] | None:
        """(status, site) of the first terminal failure the GPU recorded, from the control region."""
        w = int(self.ctl.ctl.header.device_failure)
        return None if w == 0 else (w >> 32, w & 0xFFFFFFFF)

    # Device failures end the failing warps with PTX `exit` (runtime_cuda/src/hbf_helpers.cu): the kernel
    # ends, the context survives, and the failure is only in the recorded failure word -- so it is
    # raised here, at every synchronization point and at the next launch (gate). A kernel that does not
    # end within FAIL_GRACE_S after the GPU recorded a failure (threads that never call the helpers
    # waiting for an exited warp: an mbarrier, a counted named barrier, a memory flag) is ended by a
    # one-thread `trap` kernel on a non-blocking stream: a trap ends every kernel of the context.
    FAIL_GRACE_S = 0.1
    _BACKSTOP_PTX = (b".version 7.0\n.target sm_70\n.address_size 64\n"
                     b".visible .entry __hb_backstop_trap()\n{\n\ttrap;\n\tret;\n}\n\0")

    def _wait_idle(self) -> None:
        """cuCtxSynchronize, but never forever after a recorded device failure: while the legacy stream
        is busy, poll it and the control region's device_failure word; FAIL_GRACE_S after a failure
        appears, end the context with the backstop trap (then cuCtxSynchronize raises CudaError)."""
        d = self._cu.drv()
        t_fail = None
        sleep = 20e-6
        while True:
            r = d.cuStreamQuery(d.CUstream(0))
            r = r[0] if isinstance(r, tuple) else r
            if int(r) != int(d.CUresult.CUDA_ERROR_NOT_READY):
                break                      # idle, or an error that cuCtxSynchronize reports below
            if t_fail is None and self.device_failure() is not None:
                t_fail = time.monotonic()
            if t_fail is not None and time.monotonic() - t_fail > self.FAIL_GRACE_S:
                self.failure_backstop = "trap"
                log.error("kernel still running %.0f ms after device failure %s: ending the context "
                          "(backstop trap)", 1e3 * self.FAIL_GRACE_S, self.device_failure())
                self._backstop_trap()
                break
            time.sleep(sleep)
            sleep = min(sleep * 2, 2e-4)
        self._cu.ctx_synchronize()
        self._epoch += 1
        self.stall.synchronized()

    def _prepare_backstop(self):
        """Load the backstop trap kernel (function finalized, cuFuncLoad) and create its non-blocking
        stream NOW, while no kernel of ours runs: loading a module while a kernel spins can wait for
        that kernel (module loading may synchronize the context; the first version, which loaded it at
        the moment of need, hung on the H200). None (logged) when that fails."""
        d = self._cu.drv()
        try:
            mod = self._cu.check(d.cuModuleLoadData(self._BACKSTOP_PTX), "cuModuleLoadData(backstop)")
            fn = self._cu.module_function(mod, "__hb_backstop_trap")
            if hasattr(d, "cuFuncLoad"):
                self._cu.check(d.cuFuncLoad(fn), "cuFuncLoad(backstop)")
            st = self._cu.check(d.cuStreamCreate(1), "cuStreamCreate(non-blocking)")   # CU_STREAM_NON_BLOCKING
            return (mod, fn, st)
        except HbfError as e:
            log.error("failure backstop unavailable (a kernel hung after a device failure cannot be ended): %s", e)
            return None

    def _backstop_trap(self) -> None:
        bs = getattr(self, "_backstop", None)
        if bs is None:
            log.error("no backstop trap kernel: the hung kernel keeps the context")
            return
        try:
            self._cu.launch(bs[1], (1,), (1,), [], 0, bs[2])
        except HbfError as e:
            log.error("backstop trap launch failed: %s", e)

    def synchronize(self) -> None:
        """Wait for the context's work (cuCtxSynchronize). A kernel that recorded a terminal failure
        (it ended its failing warps with `exit`, or trapped) raises DeviceFailure with the recorded
        status and site (reported to hbfd once); a CUDA error without a recorded failure re-raises."""
        from hbfcommon.errors import CudaError  # noqa: PLC0415
        try:
            self._wait_idle()
        except CudaError as e:
            self.raise_device_failure(cuda_error=e.fields.get("cu_name"))
            raise
        self.raise_device_failure()
        if self.state_dptr:
            self._sync_ring_head()
        self._check_live_ranges(raise_new=True)

    def _check_live_ranges(self, *, raise_new: bool) -> None:
        """Every registered range's allocation still live (``stale_ranges``)? A stale one is reported to hbfd
        once (Report kind ``stale_range``, in the summary) and logged as an error; with ``raise_new``
        (synchronize) RangeError RANGE_STALE is raised once for each: its accesses were charged to whatever
        memory is at its addresses now. Unregister a range before freeing its memory."""
        if not self.use_cuda or not self._range_allocs:
            return
        reported = {e["range_id"] for e in self.stale_ranges}
        for e in stale_ranges(self.ranges, self._range_allocs, self._cu.address_range):
            if e["range_id"] not in reported:
                self.stale_ranges.append(e)
                self._report("stale_range", e)
                log.error("range %d (%s, %d bytes) was freed while registered: its accesses since are charged to "
                          "whatever memory is there now; unregister a range before freeing its memory",
                          e["range_id"], e["base"], e["length"])
        new = [e for e in self.stale_ranges if e["range_id"] not in self._stale_raised
               and e["range_id"] in self._range_allocs]
        if raise_new and new:
            self._stale_raised.update(e["range_id"] for e in new)
            raise RangeError(f"{len(new)} registered range(s) freed without unregister: "
                             + ", ".join(f"range {e['range_id']} at {e['base']}" for e in new),
                             code=ErrorCode.RANGE_STALE, ranges=new)

    def raise_device_failure(self, **extra: Any) -> None:
        """Raise DeviceFailure if the GPU recorded a terminal failure (header.device_failure); the
        first call reports it to hbfd (Report kind device_failure)."""
        f = self.device_failure()
        if f is None:
            return
        status, site = f
        name = D.C_STATUS_NAMES[status] if status < len(D.C_STATUS_NAMES) else str(status)
        if getattr(self, "failure_backstop", None):
            extra.setdefault("backstop", self.failure_backstop)
        ev = {"status": name, "site": site, "kernel_index": site >> 16, "site_index": site & 0xFFFF, **extra}
        if not getattr(self, "_failure_reported", False):
            self._failure_reported = True
            self._report("device_failure", ev)
        raise DeviceFailure(f"kernel ended with {name}", status=status, site=site, **extra)

    def _report(self, kind: str, event: dict) -> None:
        try:
            self.client.call("Report", self.client.pb.ReportRequest(kind=kind, json=json.dumps(event)))
        except HbfError as e:   # the event is also kept locally; the daemon may be the thing that failed
            log.error("could not report %s to hbfd: %s", kind, e)

    def _report_kernel_counters(self, c: dict) -> None:
        """The per-kernel counters into hbfd's summary (Report kind ``kernel_counters``: what
        ``hbfctl report``/``trace`` draw per kernel). A Report is at most REPORT_MAX_BYTES: the kernels with
        the fewest requests are left out first, and how many is said (``kernels_dropped``)."""
        doc = dict(c)
        kernels = sorted(doc.get("kernels", {}).items(),
                         key=lambda kv: -sum(int(o.get("requests", 0)) for o in (kv[1].get("ops") or {}).values()))
        text = json.dumps(doc, allow_nan=False)
        while len(text) > REPORT_MAX_BYTES and kernels:
            kernels = kernels[: len(kernels) // 2]
            doc = dict(c, kernels=dict(kernels), kernels_dropped=len(c.get("kernels", {})) - len(kernels))
            text = json.dumps(doc, allow_nan=False)
        if len(text) <= REPORT_MAX_BYTES:
            self._report("kernel_counters", doc)

    # ---------------------------------------------------------------------------- lifetime
    def _ensure_open(self) -> None:
        if self.closed:
            raise HbfError("session is closed", code=ErrorCode.INVALID_ARGUMENT)

    def close(self) -> None:
        if self.closed:
            return
        if self.capacity and self.use_cuda:     # the device side's capacity counters, in hbfd's summary
            try:
                self._report("capacity_counters", self.capacity_counters())
            except HbfError as e:
                log.warning("capacity counters not reported: %s", e)
        for rid in list(self.capacity):         # hbfd writes their dirty frames back first
            try:
                self.unregister(rid)
            except HbfError as e:
                log.error("capacity range %d not released cleanly: %s", rid, e)
        try:
            self.uninstall_triton_hooks()
        except Exception:  # noqa: BLE001
            log.exception("uninstalling Triton hooks")
        if self.use_cuda:
            try:
                self._report_kernel_counters(self.counters(publish=True))
            except HbfError as e:
                log.warning("final counters not published: %s", e)
            for b in self.bindings.values():   # detach modules: their accesses become native again
                if b.instrumented:
                    try:
                        g = self._cu.module_global(b.module, abi.STATE_GLOBAL)
                        if g:
                            for addr, value in module_words(g[0], b.detached_addr, 0, False):
                                self._cu.htod(addr, ctypes.c_uint64(value), 8)
                        self._write_cdesc(b, clear=True)
                    except HbfError:
                        pass
                self._unload_plain(b)            # HBF_NATIVE_MODULE=plain's modules
            try:
                if self.state_dptr:
                    self._cu.mem_free(self.state_dptr)
                if self.kshards_dptr:
                    self._cu.mem_free(self.kshards_dptr)
                if self.l2_tags_dptr:
                    self._cu.mem_free(self.l2_tags_dptr)
                if self.cap_table_dptr:
                    self._cu.mem_free(self.cap_table_dptr)
                if self.ring_ovf_dptr:
                    self._cu.mem_free(self.ring_ovf_dptr)
                if self.host_registered:
                    self._cu.host_unregister(self.ctl.address)
            except HbfError as e:
                log.warning("CUDA cleanup: %s", e)
        self._stall_stop.set()
        self.closed = True
        self.ctl.close()
        self.client.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ticket_floor(m: C.CtlMap) -> int:
    """The first reference ticket a new session may reserve: max(header.ring_head, max ring[].seq,
    max completions[].seq) (seq = ticket + 1). ring_head is only a lower bound (an earlier session may
    have reserved tickets from its device counter and not written them back), so tickets continue
    monotonically across sessions and daemon state, and the slot-reuse rule (consumed) stays valid."""
    return max(int(m.ctl.header.ring_head), int(m.ring["seq"].max()), int(m.completions["seq"].max()))


def _accumulate(tot: dict, d: dict) -> None:
    for op, v in d["ops"].items():
        for k, x in v.items():
            tot["ops"][op][k] += x
    for k, x in d["status"].items():
        tot["status"][k] = tot["status"].get(k, 0) + x
    for k, x in d.items():
        if k not in ("ops", "status") and k not in D.COUNTER_MAX_FIELDS:
            tot[k] += x


def attach(socket: str | None = None, allow_unmodeled: bool | None = None, *, cuda: bool | None = None,
           params: D.RunParams | None = None) -> Session:
    """Attach this process to hbfd: Attach RPC, map the control region, register it with CUDA,
    allocate the device state block. cuda=None uses CUDA when a GPU is present."""
    from hbfcommon.rpc import Client  # noqa: PLC0415
    allow = knobs.allow_unmodeled() if allow_unmodeled is None else bool(allow_unmodeled)
    if params is None:
        params = D.RunParams(heartbeat_timeout_ns=knobs.heartbeat_timeout_ns(),
                             thermal_max_age_ns=knobs.thermal_max_age_ns(),
                             completion_timeout_ns=knobs.completion_timeout_ns(),
                             backoff_max_ns=knobs.backoff_max_ns(), allow_unmodeled=allow,
                             tma_device=knobs.tma_device())
    client = Client(socket)
    try:
        rep = client.call("Attach", client.pb.AttachRequest(workload_pid=os.getpid(),
                                                            abi_version=C.HBF_CTL_ABI_VERSION,
                                                            allow_unmodeled=allow))
        m = C.map_region(rep.ctl_path)
    except BaseException:
        client.close()
        raise
    if cuda is None:
        from .cudrv import gpu_available  # noqa: PLC0415
        cuda = gpu_available()
    try:
        return Session(client, m, allow_unmodeled=allow, use_cuda=bool(cuda), params=params, attach_reply=rep)
    except BaseException:
        m.close()
        client.close()
        raise
