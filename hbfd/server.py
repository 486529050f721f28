"""hbfd's server layer: the only part of hbfd with threads, clocks, sockets and gRPC.

Start-up order (DESIGN.md §3.4): profile -> control region (header, no heartbeat) -> models
(engine, thermal, refresh: built by the composition root, :func:`hbfd.services.compose`; what this
module calls on them is declared in hbfd/contracts.py) -> thermal snapshot, refresh debt, empty range snapshot -> ring
service -> gRPC -> first heartbeat (readiness) -> the heartbeat helper process (hbfd/heartbeat.py) keeps
it fresh (every 2 ms by default) while hbfd's control loop makes progress.

Shutdown order (SIGTERM, SIGINT, the Shutdown RPC, an engine failure, thermal shutdown):
admission closed -> a terminal completion posted to every outstanding ticket -> the global
failure word -> the canonical JSON summary by atomic replace -> gRPC stopped.
"""
from __future__ import annotations

import collections
import json
import logging
import math
import os
import platform
import secrets
import socket
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np

from hbfcommon import ctl, rpc
from hbfcommon.errors import ControlRegionError, DaemonError, ErrorCode, HbfError, TelemetryError
from hbfcommon.status import RequestStatus
from hbfd import knobs, services
from hbfd.contracts import (REQUEST_BATCH_DTYPE, RefreshingEngine, RefreshService, ServiceEngine, ThermalService,
                            ThermalState)
from hbfd.capacity.dispatch import CAP_FLAGS, CapacityDispatch, CapacitySpec
from hbfd.heartbeat import HeartbeatProcess
from hbfd.media import MediaGeometry, hist
from hbfcommon.profile import Profile, load_profile
from hbfd.ranges import Range, RangeTable
from hbfd.memtune import tune_malloc
from hbfd.region import ControlRegion
from hbfcommon.fsutil import remove_stale_tmp
from hbfcommon.version import package_version
from hbfd.summary import SUMMARY_SCHEMA, write_json_atomic
from hbfd.thermal.horizon import HorizonConfig, HorizonGate, publish_with_horizon, service_hint_ns
from hbfd.timeline import RunTimeline

log = logging.getLogger(__name__)
N = ctl.HBF_RING_SLOTS
RETAINED_MAX = 1000                          # reports / attaches kept for the summary (the latest; older dropped, counted)
_MAX_ARRIVAL_NS = 1 << 62                    # the engines' time domain (arrival_ns beyond it: IO_ERROR)
assert N & (N - 1) == 0, "the ring size is a power of two"


class Daemon:
    def __init__(self, profile_path: str | os.PathLike, *, socket_path: str | os.PathLike | None = None,
                 summary_path: str | os.PathLike | None = None, engine: str | None = None,
                 thermal: str | None = None, refresh: str | None = None,
                 heartbeat_period_ns: int | None = None, thermal_calibration: str | None = None,
                 thermal_calibration_allow_goal_miss: bool | None = None) -> None:
        self.profile_path = str(profile_path)
        # the package thermal model's fitted boundary (hbfd.thermal.calibrate), if one is asked for
        cal_path = thermal_calibration or knobs.thermal_calibration()
        from hbfd.thermal.calibrate import CalibrationOptions
        allow_miss = (knobs.thermal_calibration_allow_goal_miss() if thermal_calibration_allow_goal_miss is None
                      else bool(thermal_calibration_allow_goal_miss))
        self.thermal_calibration = (CalibrationOptions(os.path.abspath(cal_path), allow_miss) if cal_path else None)
        self.socket_path = Path(socket_path) if socket_path else knobs.default_socket()
        self.summary_path = Path(summary_path) if summary_path else knobs.default_summary()
        self.engine_choice = engine or knobs.engine_choice()
        self.thermal_choice = thermal or knobs.thermal_choice()
        self.refresh_choice = refresh or knobs.refresh_choice()
        self.heartbeat_period_ns = heartbeat_period_ns or knobs.heartbeat_period_ns()
        self.profile: Profile | None = None
        self.region: ControlRegion | None = None
        self.engine: ServiceEngine | None = None
        self.thermal: ThermalService | None = None
        self.refresh: RefreshService | None = None
        self._refresh_engine: RefreshingEngine | None = None   # the refresh plan runs through it (media model)
        self.thermal_state = ThermalState()
        self.ranges: RangeTable | None = None
        self._ranges_lock = threading.Lock()
        # capacity ranges hbfd serves (hbfd/capacity/dispatch.py): the ring thread serves their requests, the
        # RPC threads add and remove them; _cap_lock orders the two (taken after _ranges_lock)
        self.capacity: CapacityDispatch | None = None
        self._cap_lock = threading.Lock()
        self._post_lock = threading.RLock()
        # the engine and the refresh service/ledger are driven from the ring thread (requests,
        # per-block reads, refresh hand-off), the control thread (refresh tick, idle refresh) and
        # the RPC threads (range registrations). Lock order: _engine_lock, then _ledger_lock. The
        # control thread never waits for the engine (a hung engine must not stop the thermal tick)
        self._engine_lock = threading.Lock()
        self._ledger_lock = threading.Lock()
        self._count_reads = False
        self._last_tick_ns: int | None = None
        self._energy_counted = 0.0
        # run totals of the device's two sections: a second attach starts its counters over (_RunTotal)
        self._dev_req, self._dev_bytes = _RunTotal(), _RunTotal()
        self._live_req, self._live_bytes = _RunTotal(), _RunTotal()
        self._activity: ctl.Activity | None = None          # the latest live activity read (summary)
        self._activity_torn = 0                             # control ticks that found its seqlock odd
        # the thermal snapshot's validity horizon (issue 13; hbfd/thermal/horizon.py): on unless HBFD_THERMAL_HORIZON=0
        self._horizon = HorizonGate(HorizonConfig(**knobs.thermal_horizon()))
        self._final_outstanding = 0
        self._gpu_anchor: tuple[int, int] | None = None    # (latest arrival_ns, host ns when seen)
        self._engine_t = 0                                  # latest time handed to the engine
        self._closing = False
        self._stop = threading.Event()           # stop the service threads
        self._shutdown_req = threading.Event()   # someone asked for shutdown
        self._done = threading.Event()           # summary written
        self._shutdown_reason = ("clean", "", ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_SHUTDOWN)
        self._threads: list[threading.Thread] = []
        self._served = np.zeros(N, np.uint64)    # last request seq served, per slot
        self._foreign_seq = np.zeros(N, np.uint64)   # last foreign seq counted, per slot (count once)
        self._foreign = 0                        # requests not belonging to their slot's next ticket
        self._rejected: dict[str, int] = {}      # answered IO_ERROR/UNSUPPORTED at validation, by kind
        # pending requests, per ring slot (a slot holds at most one outstanding ticket): the
        # request record as read from the ring (its seq = ticket + 1) and when hbfd first saw it
        self._quiet_collected = True
        self._p_valid = np.zeros(N, bool)
        self._p_req = np.zeros((N, ctl.REQUEST_DTYPE.itemsize // 8), np.uint64)   # raw 64 B records
        self._p_seen = np.zeros(N, np.int64)
        self._lost_unpublished = 0
        self._ring_tags = knobs.ring_tags()
        # the key of the ring's request tags (ctl.request_tag): handed to clients by Attach (the 0600
        # socket), never written into the region, so a writer that only maps it makes nothing hbfd takes
        self._ring_key = secrets.randbits(64)
        # ring-service statistics (summary "ring_service"): scans that found work, requests taken,
        # batch sizes (log2 buckets), tagged slots retried because their check did not match yet
        self._ring_stats = {"batches": 0, "requests": 0, "max_batch": 0, "tag_retries": 0, "reuse_holds": 0,
                            "tagged_requests": 0, "batch_log2_hist": [0] * 14}
        self._reports: collections.deque[dict] = collections.deque(maxlen=RETAINED_MAX)
        self._attaches: collections.deque[dict] = collections.deque(maxlen=RETAINED_MAX)
        self._reports_dropped = 0                # the oldest beyond RETAINED_MAX, not kept
        self._attaches_dropped = 0
        self._attached = False
        self._summary_written = False
        self._grpc = None
        self._t0 = time.monotonic_ns()
        self._started_wall = time.time()
        self._hb: HeartbeatProcess | None = None
        self._thermal_ticks = 0
        self._energy_j = 0.0
        # the run over time (summary "timeline"): one row per control tick, reference latencies
        self._timeline = RunTimeline(tick_ns=knobs.thermal_tick_ns())
        self._engine_error: str | None = None
        self.exit_code = 0

    # ---- start-up ------------------------------------------------------------------------
    def start(self) -> None:
        self.malloc = tune_malloc(knobs.malloc_tune())   # before the engine's first arrays (hbfd/memtune.py)
        self.profile = load_profile(self.profile_path)
        p = self.profile
        log.info("profile %s (%s) sha256 %s", p.name, p.path, p.sha256)
        self._timeline.refresh_quantum_bytes = int(p.media.refresh_quantum_bytes)
        self._claim_socket()
        for stale in remove_stale_tmp(self.summary_path):   # a writer killed mid-summary left it
            log.warning("removed a stale summary temp file %s", stale)
        self.region = ControlRegion()
        self.region.init_header(media_params=p.to_media_params(), profile_sha256=p.sha256,
                                heartbeat_period_ns=self.heartbeat_period_ns)
        self._ring_views()
        self.ranges = RangeTable(p.capacity_bytes)          # the usable capacity, after over-provisioning
        self.capacity = CapacityDispatch(MediaGeometry.from_profile(p), workers=knobs.capacity_workers())
        self._hb = HeartbeatProcess(self.region.fd, ctl.hbf_header.heartbeat.offset, ctl.hbf_header.failure.offset,
                                    self.heartbeat_period_ns, knobs.stale_ns())
        svc = services.compose(p, engine=self.engine_choice, thermal=self.thermal_choice,
                               refresh=self.refresh_choice, thermal_calibration=self.thermal_calibration)
        self.engine, self.thermal, self.refresh = svc.engine, svc.thermal, svc.refresh
        self._refresh_engine = svc.refresh_engine   # refresh plans run through the media model (ring thread)
        self._count_reads = svc.refresh.counts_reads
        log.info("engine %s, thermal %s, refresh %s", self.engine.name, self.thermal.name, self.refresh.name)
        hist.warm_twin()                            # the latency histograms' compiled twin, not in the ring thread
        # the run's clock (thermal model, refresh, timeline, uptime) starts here, after the start-up work whose
        # length depends on the machine (loading the compiled twins took seconds on a loaded box, and a constant
        # power integrated over them once reached a thermal limit before readiness): the first tick is at 0
        self._t0 = time.monotonic_ns()
        self._control_tick()                        # thermal snapshot + refresh debt before readiness
        self.region.publish_ranges([], 0)
        sys.setswitchinterval(0.001)                # short GIL hand-offs between ring, control and RPC threads
        self._spawn("hbfd-ring", self._ring_loop)
        self._spawn("hbfd-control", self._control_loop)
        self._start_grpc()
        self._hb.wait_started()
        self.region.beat()                          # readiness: the first heartbeat
        self._hb.go()                               # the helper keeps it fresh from here on
        log.info("ready: socket %s, control region %s (%d bytes)", self.socket_path, self.region.path, ctl.CTL_BYTES)

    def _spawn(self, name: str, fn) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _claim_socket(self) -> None:
        """Make the socket path ready to bind, or refuse with a one-line error naming it. hbfd removes
        only a stale socket of its own user (nobody listening: connect refused); anything else at the
        path (a regular file, a directory, a symlink, a live hbfd, another user's socket) stays."""
        import errno
        import stat as st_
        SUN_PATH_MAX = 108      # sizeof(sockaddr_un.sun_path) on Linux, the terminating NUL included
        path = self.socket_path

        def refuse(why: str) -> DaemonError:
            return DaemonError(f"socket {path}: {why}", code=ErrorCode.INVALID_ARGUMENT, socket=str(path))

        n = len(os.fsencode(os.fspath(path)))
        if n >= SUN_PATH_MAX:
            raise refuse(f"the path is {n} bytes; a unix socket path holds at most {SUN_PATH_MAX - 1} "
                         "(sun_path); choose a shorter --socket")
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise refuse(f"the parent {parent} exists and is not a directory") from None
        except OSError as e:
            raise refuse(f"cannot create the directory {parent}: {e.strerror}") from None
        if not parent.is_dir():
            raise refuse(f"the parent {parent} is not a directory")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._probe_bind(path, refuse)
            return
        except OSError as e:
            raise refuse(f"cannot inspect it: {e.strerror}") from None
        if not st_.S_ISSOCK(st.st_mode):
            kind = ("a directory" if st_.S_ISDIR(st.st_mode) else "a symlink" if st_.S_ISLNK(st.st_mode)
                    else "a regular file" if st_.S_ISREG(st.st_mode) else "not a socket")
            raise refuse(f"{kind} is in the way; hbfd removes only a stale socket of its own: "
                         "remove it yourself or choose another --socket")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2.0)
        try:
            s.connect(os.fspath(path))
        except OSError as e:
            if e.errno != errno.ECONNREFUSED:      # not provably stale (timeout: a listener that is busy)
                raise refuse(f"cannot tell whether it is stale: connect failed ({e.strerror or e})") from None
        else:
            raise refuse(f"another hbfd is running on {path} (already serving it); stop it or choose "
                         "another --socket")
        finally:
            s.close()
        if st.st_uid != os.geteuid():
            raise refuse(f"a stale socket of another user (uid {st.st_uid}); hbfd removes only its own")
        log.info("removing the stale socket %s (nobody listening)", path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise refuse(f"cannot remove the stale socket: {e.strerror}") from None
        self._probe_bind(path, refuse)

    @staticmethod
    def _probe_bind(path: Path, refuse) -> None:
        """Bind (and remove again) a plain unix socket at the free path: the real permission check
        (as root too, and on read-only or special filesystems), so gRPC's bind does not fail later
        with a traceback."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(os.fspath(path))
        except OSError as e:
            raise refuse(f"cannot create a socket in {path.parent}: {e.strerror or e}") from None
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        finally:
            s.close()

    def _start_grpc(self) -> None:
        import grpc

        from hbfproto import hbf_pb2_grpc
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="hbfd-rpc"),
                             options=[("grpc.so_reuseport", 0), *rpc.message_size_options()])
        hbf_pb2_grpc.add_HbfdServicer_to_server(_Servicer(self), server)
        old = os.umask(0o177)                       # the socket is born 0600
        try:
            if server.add_insecure_port(f"unix:{self.socket_path}") == 0:
                raise DaemonError("cannot bind the unix socket", socket=str(self.socket_path))
            server.start()
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        self._grpc = server

    # ---- threads -------------------------------------------------------------------------
    def _control_loop(self) -> None:
        tick = knobs.thermal_tick_ns() / 1e9
        while not self._stop.wait(tick):
            if not self._hb.alive() and not self._shutdown_req.is_set():
                log.error("the heartbeat helper died (exit %s)", self._hb.proc.returncode)
                self.request_shutdown("heartbeat_failure", "the heartbeat helper process died",
                                      ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_SHUTDOWN)
                return
            try:
                self._control_tick()
            except TelemetryError as e:  # the thermal model lost its input: a distinct, visible terminal
                log.error("telemetry failed: %s", e)
                self._engine_error = f"{type(e).__name__}: {e}"
                self.request_shutdown("telemetry_failure", f"telemetry source failed: {e}",
                                      ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_TELEMETRY)
                return
            except Exception as e:  # a model failure ends the run, loudly
                log.exception("thermal/refresh service failed")
                self._engine_error = f"{type(e).__name__}: {e}"
                self.request_shutdown("engine_failure", f"thermal/refresh service failed: {e}",
                                      ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_ENGINE)
                return
            if self.thermal_state.mode == ctl.HBF_TH_SHUTDOWN:
                self.request_shutdown("thermal_shutdown", "thermal controller reached Shutdown",
                                      ctl.HBF_ST_THERMAL_SHUTDOWN, ctl.HBF_FAIL_REASON_THERMAL)
                return

    def _energy_since_last(self, dt_s: float) -> float:
        """Media energy of the last interval from the profile's energy model and the counters.
        The device section (published by the runtime at sync points) counts every in-range access
        the device made, including those it sent through the ring; per op we take the larger of
        the device and reference counts so reference requests are not counted twice, and the device's
        live activity section (published by the GPU while kernels run) the same way."""
        e, m = self.profile.energy, self.region.map
        ref = m.daemon_counters.copy()
        dev = m.device_counters.copy()
        # the live section (hbf_ctl.h hbf_activity): the GPU publishes its running totals while kernels run
        # (counters.device only at sync), so a long kernel's HBF activity reaches the bins as it happens.
        # All three count the same accesses from below: per op the largest is the best lower bound.
        try:
            live = ctl.read_activity(m.ctl)
            self._activity = live
        except ControlRegionError:
            # a writer that stopped inside the seqlock (its context was killed mid-publication): the section
            # stays odd; its last consistent totals are still lower bounds of what the device did, so they
            # keep counting (never more than was published) and the summary says how often this happened
            self._activity_torn += 1
            if self._activity_torn == 1:
                log.warning("the live activity section's seqlock was odd through a whole read (a GPU publication "
                            "in flight, or a writer that died inside it): this tick uses the last consistent "
                            "totals, running totals catch up at the next (counted as live_activity.torn_reads)")
            live = self._activity or ctl.Activity.zero()
        # the device's sections restart at zero when another session attaches: their run totals never go back
        reqs = np.maximum(np.maximum(ref["requests"], self._dev_req(dev["requests"])),
                          self._live_req(live.requests)).astype(np.float64)
        nbytes = float(np.maximum(np.maximum(ref["bytes"], self._dev_bytes(dev["bytes"])),
                                  self._live_bytes(live.bytes)).sum())
        reads = reqs[ctl.HBF_OP_LOAD] + reqs[ctl.HBF_OP_CPASYNC] + reqs[ctl.HBF_OP_ATOMIC]
        writes = reqs[ctl.HBF_OP_STORE] + reqs[ctl.HBF_OP_ATOMIC]
        total = e.j_per_byte * nbytes + e.read_j * reads + e.program_j * writes
        prev, self._energy_counted = self._energy_counted, total
        return e.idle_w * dt_s + (total - prev)

    def _device_total(self, synced: np.ndarray, field: str) -> int:
        """The device's run total of ``field`` over the ops: per op the larger of the synced counters and the
        live activity section (the live one leads while a kernel runs), each as a run total (_RunTotal)."""
        a = self._activity
        live = np.asarray(getattr(a, field), np.uint64) if a is not None else np.zeros(len(synced), np.uint64)
        dev_t, live_t = (self._dev_req, self._live_req) if field == "requests" else (self._dev_bytes, self._live_bytes)
        return int(np.maximum(dev_t(synced), live_t(live)).sum())

    def _activity_summary(self) -> dict | None:
        """The last live activity the energy bins read (hbf_activity; None before the first tick)."""
        a = self._activity
        if a is None:
            return None
        return {"flushes": a.flushes, "slot_visits": a.slot_visits, "torn_reads": self._activity_torn,
                "requests": dict(zip(ctl.OP_NAMES, a.requests)), "bytes": dict(zip(ctl.OP_NAMES, a.bytes))}

    def _control_tick(self) -> None:
        now = time.monotonic_ns()
        dt = (now - (now if self._last_tick_ns is None else self._last_tick_ns)) / 1e9
        self._last_tick_ns = now
        ej = self._energy_since_last(dt)
        self._energy_j += ej
        self.thermal_state = self.thermal.tick(now - self._t0, ej)
        if self._hb is not None:
            self._hb.tick()                         # progress: the helper keeps beating
        self._thermal_ticks += 1
        horizon = self._horizon.cfg.enabled
        if not horizon:
            self.region.publish_thermal(self.thermal_state, self._thermal_ticks)
        with self._ledger_lock:
            debt = self.refresh.tick(now - self._t0, self.thermal_state)
        if self._refresh_engine is not None and not self._closing \
                and self._engine_lock.acquire(blocking=False):  # busy: the ring thread hands refresh out
            try:
                self._idle_refresh(now)
            finally:
                self._engine_lock.release()
        if horizon:
            self._publish_with_horizon(int(debt))
        else:
            self.region.publish_refresh(int(debt), self.profile.media.refresh_quantum_bytes,
                                        background_drained_bytes=int(self.refresh.background_drained_bytes))
        m = self.region.map
        ref, dev = m.daemon_counters, m.device_counters
        self._timeline.record(now - self._t0, self.thermal_state, refresh_debt_bytes=int(debt),
                              refresh_drained_bytes=int(self.refresh.background_drained_bytes),
                              ref_requests=int(ref["requests"].sum()), ref_bytes=int(ref["bytes"].sum()),
                              dev_requests=self._device_total(dev["requests"], "requests"),
                              dev_bytes=self._device_total(dev["bytes"], "bytes"))

    def _publish_with_horizon(self, debt: int) -> None:
        """Publish the refresh debt, then the thermal snapshot with its validity horizon; a change of a contract
        word before the deadline of a horizon already published waits for it (hbfd/thermal/horizon.py)."""
        publish_with_horizon(self._horizon, self.region, self.thermal_state, self._thermal_ticks, debt,
                             self.profile.media.refresh_quantum_bytes, int(self.refresh.background_drained_bytes),
                             service_hint_ns(self.thermal, self.refresh.name, self.thermal_state),
                             clock=time.monotonic_ns, sleep=lambda ns: time.sleep(ns / 1e9))

    def _engine_clock(self, now: int) -> int:
        """The engine's clock (the GPU's arrival clock) at host time ``now``: the latest arrival
        plus the host time since hbfd saw it (run clock before any traffic); never backwards."""
        a = self._gpu_anchor
        t = now - self._t0 if a is None else a[0] + (now - a[1])
        self._engine_t = max(self._engine_t, int(t))
        return self._engine_t

    def _idle_refresh(self, now: int) -> None:
        """Hand the due refresh block to the media model from the control tick (caller holds
        _engine_lock), so refresh debt drains while no ring traffic arrives; completions the
        advance decided are posted at once."""
        with self._ledger_lock:
            work = self.refresh.media_work(now - self._t0)
        if work is None:
            return
        at = self._engine_clock(now)
        self.engine.advance(at)
        end = self._refresh_engine.refresh(work[1], at)
        with self._ledger_lock:
            self.refresh.media_done(work[0], end - at, idle=True)
        done = self.engine.collect()
        if done.size:
            self._post(done["id"], done["modeled_ns"], done["status"])

    def _ring_views(self) -> None:
        """Plain-integer views of the ring for the vectorized hot path (same memory as the
        structured views in ``region.map``): the request seq words (strided), and the
        completions and daemon counters as uint64 matrices."""
        m = self.region.map
        self._ring_seq = m.ring["seq"]
        self._ring64 = m.ring.view(np.uint64).reshape(N, ctl.REQUEST_DTYPE.itemsize // 8)
        self._comp64 = m.completions.view(np.uint64).reshape(N, ctl.COMPLETION_WORDS)
        self._cnt64 = m.daemon_counters.view(np.uint64).reshape(ctl.HBF_N_OPS, ctl.OP_COUNTERS_DTYPE.itemsize // 8)
        c = self.region.ctl.counters
        self._status64 = np.ctypeslib.as_array(c.daemon_status)
        q = ctl.hbf_request
        assert (q.seq.offset, q.arrival_ns.offset, q.media_address.offset, q.bytes.offset, q.op.offset) == \
            (0, 8, 24, 32, 36), "the raw request views below follow hbf_request"
        f = ctl.hbf_completion
        assert (f.seq.offset, f.arrival_ns.offset, f.modeled_ns.offset, f.service_ns.offset, f.status.offset,
                f.consumed.offset, f.req_site_flags.offset, f.req_q_tag.offset) == (0, 8, 16, 24, 32, 40, 48, 56)
        if platform.machine().lower() not in ("x86_64", "amd64"):
            log.warning("hbfd's ring release ordering assumes x86-64 TSO; this host is %s", platform.machine())
        o = ctl.hbf_op_counters
        assert (o.requests.offset, o.bytes.offset, o.modeled_ns.offset) == (0, 8, 16)
        self._cnt_lo = slice(0, 3)                  # requests, bytes, modeled_ns
        self._cnt_svc = o.service_ns.offset // 8

    def _ring_loop(self) -> None:
        ring = self.region.map.ring
        idle = 0
        while not self._stop.is_set():
            try:
                got = self._serve_once(ring)
            except Exception as e:
                log.exception("engine %s failed", self.engine.name)
                self._engine_error = f"{type(e).__name__}: {e}"
                self.request_shutdown("engine_failure", f"engine failed: {e}", ctl.HBF_ST_DAEMON_LOST,
                                      ctl.HBF_FAIL_REASON_ENGINE)
                return
            if got:
                idle = 0
            else:
                idle += 1       # spin briefly, then poll every 20 us; after ~50 ms quiet every 100 us
                time.sleep(0 if idle < 100 else 20e-6 if idle < 2000 else 100e-6)

    def _take(self, slots: np.ndarray, seen: int) -> tuple[np.ndarray, np.ndarray]:
        """Record the published requests in ``slots`` as pending (caller holds _post_lock).
        A published slot's seq cannot change until its completion is posted and consumed, so
        the seq words re-read here are the ones the scan saw; the payloads are read after them
        (one gather of the raw 64 B records; acquire on x86). A record is taken only when its tag
        (thermal_q_ppm bits 32..63) is ``ctl.request_tag`` of its seq and payload under the run's key.
        With HBFD_RING_TAGS=1 (the unfenced publication variant) a mismatch means a payload store
        that is not visible yet (counted as a retry). Returns (slots taken,
        records as uint64 rows: 0 seq, 1 arrival_ns, 2 address, 3 media_address, 4 bytes | op << 32,
        5 range_id | kernel_slot << 32, 6 site | flags << 32, 7 thermal_q_ppm | tag << 32)."""
        req = self._ring64.take(slots, axis=0)
        # every record carries its tag under the run's key (ctl.request_tag): a record without the right
        # one was not written by a client of this run (or, with the unfenced publication variant,
        # HBFD_RING_TAGS=1, its payload is not visible yet): it is not taken, the slot stays for a
        # later scan (the client's own record of that ticket is taken when it arrives), and it is
        # counted once per (slot, seq) in foreign_requests (tag_retries in the unfenced variant)
        ok = (req[:, 7] >> np.uint64(32)) == ctl.request_tag(req, self._ring_key)
        self._ring_stats["tagged_requests"] += int(ok.sum())
        if not ok.all():
            bad = ~ok
            if self._ring_tags:
                self._ring_stats["tag_retries"] += int(bad.sum())
            else:
                self._count_foreign(slots[bad], req[bad, 0], None, "carry no tag of this run's key")
            slots, req = slots[ok], req[ok]
            if slots.size == 0:
                return slots, req
        # tickets are bound to their slot and to the slot's reservation order: the request in
        # slot s must carry ticket t with t % N == s and be exactly the next ticket of that slot
        # (t == s for its first, else the last served there + N), published only once the
        # previous completion there was consumed (the slot-reuse rule). Anything else is not
        # answered (it would overwrite an unread completion, or answer/skip a ticket nobody
        # reserved in that order): counted once per (slot, seq) in ``foreign_requests``; one
        # published before that completion was consumed is held until it is.
        seq = req[:, 0]
        served = self._served[slots]
        expect = np.where(served == 0, slots.astype(np.uint64) + np.uint64(1), served + np.uint64(N))
        ok = seq == expect
        if not ok.all():
            bad = ~ok
            self._count_foreign(slots[bad], seq[bad], expect[bad], "do not belong to their slot's next ticket")
            slots, req, seq, served = slots[ok], req[ok], seq[ok], served[ok]
            if slots.size == 0:
                return slots, req
        # the next ticket of a reused slot is taken once the previous completion there reads as
        # consumed (completion.consumed, word 5, >= its seq, the test the device issuer makes); until
        # then it is held, not counted as foreign (the consumed store may become visible to the host
        # after the seq: the GPU's waiter releases it at gpu scope)
        free = (served == 0) | (self._comp64[slots, 5] >= served)
        if not free.all():
            self._ring_stats["reuse_holds"] += int((~free).sum())
            slots, req, seq = slots[free], req[free], seq[free]
            if slots.size == 0:
                return slots, req
        self._served[slots] = seq
        self._p_valid[slots] = True
        self._p_req[slots] = req
        self._p_seen[slots] = seen
        return slots, req

    def _count_foreign(self, slots: np.ndarray, seq: np.ndarray, expect: np.ndarray | None, why: str) -> None:
        """Count records hbfd does not answer, once per (slot, seq); the first is logged."""
        new = self._foreign_seq[slots] != seq
        if not new.any():
            return
        k = int(new.sum())
        if self._foreign == 0:
            exp = f", expected {int(expect[new][0])}" if expect is not None else ""
            log.warning("ring: %d request(s) %s (first: slot %d seq %d%s); not answered, counted as "
                        "foreign_requests", k, why, int(slots[new][0]), int(seq[new][0]), exp)
        self._foreign += k
        self._foreign_seq[slots[new]] = seq[new]

    def _reject_invalid(self, slots: np.ndarray, req: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Validate the taken requests (rows as in :meth:`_take`) before any model sees them: an
        unknown op is answered UNSUPPORTED; a zero byte count, a media extent outside the usable
        capacity (any address >= 2^63 included) or an arrival >= 2^62 is answered IO_ERROR. Each
        is posted for its own ticket at once, counted by kind in ``rejected_requests`` and logged
        once per kind; the run goes on. Returns the valid (slots, req) rows."""
        w = req[:, 4]
        op = w >> np.uint64(32)
        nbytes = w & np.uint64(0xFFFFFFFF)
        addr = req[:, 3]
        bad_op = op >= np.uint64(ctl.HBF_N_OPS)
        bad_bytes = nbytes == 0
        cap = np.uint64(self.profile.capacity_bytes)
        bad_addr = (addr >= cap) | (nbytes > cap - np.minimum(addr, cap))
        bad_arr = req[:, 1] >= np.uint64(_MAX_ARRIVAL_NS)
        bad = bad_op | bad_bytes | bad_addr | bad_arr
        if not bad.any():
            return slots, req
        # one kind per request, first match: op, bytes, media_address, arrival_ns
        kinds = (("op", bad_op), ("bytes", bad_bytes & ~bad_op),
                 ("media_address", bad_addr & ~bad_op & ~bad_bytes),
                 ("arrival_ns", bad_arr & ~bad_op & ~bad_bytes & ~bad_addr))
        for kind, m in kinds:
            k = int(m.sum())
            if k:
                if kind not in self._rejected:
                    i = int(np.flatnonzero(m)[0])
                    log.warning("ring: rejected %s request(s) (first: ticket %d op %d bytes %d media_address %#x "
                                "arrival_ns %d); answered %s, counted in rejected_requests", kind,
                                int(req[i, 0]) - 1, int(op[i]), int(nbytes[i]), int(addr[i]), int(req[i, 1]),
                                "UNSUPPORTED" if kind == "op" else "IO_ERROR")
                self._rejected[kind] = self._rejected.get(kind, 0) + k
        st = np.where(bad_op, ctl.HBF_ST_UNSUPPORTED, ctl.HBF_ST_IO_ERROR).astype(np.uint8)[bad]
        self._post(req[bad, 0] - np.uint64(1), np.zeros(int(bad.sum()), np.uint64), st)
        return slots[~bad], req[~bad]

    def _published(self) -> np.ndarray:
        """Ring slots holding a request not yet taken (all at once, from the seq words)."""
        return np.flatnonzero(self._ring_seq > self._served)

    def _serve_once(self, ring: np.ndarray) -> int:
        slots = self._published()
        if slots.size == 0:
            if not self._quiet_collected:
                # the first quiet scan after a submit: the engine decides what it deferred
                # waiting for later arrivals (once: nothing new can change its mind)
                self._quiet_collected = True
                with self._engine_lock:
                    done = self.engine.collect()
                if done.size:
                    self._post(done["id"], done["modeled_ns"], done["status"])
            return 0
        seen = time.monotonic_ns()
        with self._post_lock:
            if self._closing:
                return 0
            slots, req = self._take(slots, seen)
            if slots.size:
                slots, req = self._reject_invalid(slots, req)
            cap_req = None
            if slots.size:
                cap = ((req[:, 6] >> np.uint64(32)) & CAP_FLAGS) != 0
                if cap.any():                       # served below, outside the post lock (store I/O)
                    cap_req = req[cap]
                    slots, req = slots[~cap], req[~cap]
        if cap_req is not None:
            self._serve_capacity(cap_req)
        n = slots.size
        if n == 0:
            if not self._quiet_collected:           # only foreign/rejected records: still collect once
                self._quiet_collected = True
                with self._engine_lock:
                    done = self.engine.collect()
                if done.size:
                    self._post(done["id"], done["modeled_ns"], done["status"])
            return 0
        rs = self._ring_stats
        rs["batches"] += 1
        rs["requests"] += n
        rs["max_batch"] = max(rs["max_batch"], n)
        rs["batch_log2_hist"][min(n.bit_length() - 1, 13)] += 1
        batch = np.empty(n, REQUEST_BATCH_DTYPE)
        batch["id"] = req[:, 0] - np.uint64(1)
        batch["arrival_ns"] = req[:, 1]
        batch["media_address"] = req[:, 3]
        w = req[:, 4]
        batch["bytes"] = w & np.uint64(0xFFFFFFFF)
        op = w >> np.uint64(32)
        batch["op"] = op if op.max() < 256 else np.minimum(op, 255)
        amax = int(batch["arrival_ns"].max())
        work = None
        if self._count_reads or self._refresh_engine is not None:
            # one ledger section: the reads of this batch are counted, and the refresh block planned
            # BEFORE them is taken (a plan the control tick makes in between waits for the next batch
            # or the idle tick, never lands mid-batch)
            with self._ledger_lock:
                if self._count_reads:               # application reads per block (read disturb)
                    rd = op != np.uint64(ctl.HBF_OP_STORE)
                    self.refresh.count_reads(req[:, 3] if rd.all() else req[rd, 3])
                if self._refresh_engine is not None:
                    work = self.refresh.media_work(time.monotonic_ns() - self._t0)
        with self._engine_lock:
            self.engine.submit(batch)
            self._quiet_collected = False
            self.engine.advance(amax)
            self._gpu_anchor = (amax, seen)
            self._engine_t = max(self._engine_t, amax)
            if work is not None:                    # a refresh block beside this batch: only its duration
                end = self._refresh_engine.refresh(work[1], amax)   # crosses clocks
                with self._ledger_lock:
                    self.refresh.media_done(work[0], end - amax)
            done = self.engine.collect()
        if done.size:
            self._post(done["id"], done["modeled_ns"], done["status"])
        return int(n)

    def _serve_capacity(self, req: np.ndarray) -> None:
        """Capacity requests of one scan (taken, not yet posted): served by their ranges' services (which
        publish frame then pte), then the completions (payload, then seq). A hint's completion is consumed here:
        the device never waits for it (docs/design.md §3.6)."""
        with self._cap_lock:
            tickets, modeled, status, hint = self.capacity.serve(req)
        self._post(tickets, modeled, status)
        if hint.any():
            t = tickets[hint]
            self._comp64[(t & np.uint64(N - 1)).astype(np.intp), 5] = t + np.uint64(1)

    def _post(self, tickets: np.ndarray, modeled: np.ndarray, status: np.ndarray, *, closing: bool = False) -> int:
        """Write completions (payload, then seq = ticket + 1) and account them."""
        with self._post_lock:
            if self._closing and not closing:
                return 0
            now = time.monotonic_ns()
            tickets = np.asarray(tickets, np.uint64)
            seq = tickets + np.uint64(1)
            slot = (tickets & np.uint64(N - 1)).astype(np.intp)
            pr = self._p_req.take(slot, axis=0)
            keep = self._p_valid[slot] & (pr[:, 0] == seq)
            mod = np.asarray(modeled, np.uint64)
            st = np.asarray(status, np.uint64)
            if not keep.all():
                log.warning("engine returned %d completion(s) for tickets that are not pending", int((~keep).sum()))
                slot, seq, pr, mod, st = slot[keep], seq[keep], pr[keep], mod[keep], st[keep]
            n = slot.size
            if n == 0:
                return 0
            svc = (now - self._p_seen[slot]).astype(np.uint64)
            self._p_valid[slot] = False
            # a seqlock per completion (hbf_ctl.h, ctl.post_completions): every slot's seq to 0 first (its
            # previous ticket no longer reads as posted), then the payload (arrival, modeled, service,
            # status | reserved0 << 32, and the request's own words 6 and 7: the record is self-contained),
            # then the seq words: on x86-64 (TSO) stores retire in program order and the three passes are
            # separate loops (fenced), so a reader that sees seq == t + 1 before and after its payload
            # loads read t's payload, never a mix with the slot's next one
            pay = np.empty((n, 4), np.uint64)
            pay[:, 0] = pr[:, 1]
            pay[:, 1] = mod
            pay[:, 2] = svc
            pay[:, 3] = st
            ctl.post_completions(self._comp64, slot, seq, pay, pr[:, 6:8])
            # counters, exact uint64 sums per op present in the batch (unknown ops count as loads)
            op = pr[:, 4] >> np.uint64(32)
            pay[:, 0] = 1
            pay[:, 1] = pr[:, 4] & np.uint64(0xFFFFFFFF)
            pay[:, 2] = mod
            pay[:, 3] = svc
            o0, o1 = int(op.min()), int(op.max())
            if o0 == o1:
                self._count(o0 if o0 < ctl.HBF_N_OPS else ctl.HBF_OP_LOAD, pay.sum(axis=0, dtype=np.uint64))
            else:
                opi = np.where(op < ctl.HBF_N_OPS, op, ctl.HBF_OP_LOAD)
                for o in range(ctl.HBF_N_OPS):
                    m = opi == o
                    if m.any():
                        self._count(o, pay[m].sum(axis=0, dtype=np.uint64))
            s0, s1 = int(st.min()), int(st.max())
            if s0 == s1 == ctl.HBF_ST_READY:                       # pay[:, 3] is service_ns here
                self._timeline.completed(mod, pay[:, 3])
            elif s0 <= ctl.HBF_ST_READY <= s1:
                ready = st == np.uint64(ctl.HBF_ST_READY)
                self._timeline.completed(mod[ready], pay[ready, 3])
            if s0 == s1:
                self._status64[s0] += np.uint64(n)
            else:
                np.add.at(self._status64, st.astype(np.intp), np.uint64(1))
            return int(n)

    def _count(self, op: int, sums: np.ndarray) -> None:
        """Add (requests, bytes, modeled_ns, service_ns) sums to the daemon counters of ``op``."""
        row = self._cnt64[op]
        row[self._cnt_lo] += sums[:3]
        row[self._cnt_svc] += sums[3]

    # ---- shutdown ------------------------------------------------------------------------
    def request_shutdown(self, status: str = "clean", reason: str = "", req_status: int = ctl.HBF_ST_DAEMON_LOST,
                         fail_reason: int = ctl.HBF_FAIL_REASON_SHUTDOWN) -> None:
        if not self._shutdown_req.is_set():
            self._shutdown_reason = (status, reason, req_status, fail_reason)
            self._shutdown_req.set()

    def _terminate_outstanding(self, req_status: int) -> int:
        """Post a terminal completion to every outstanding ticket (taken, published-but-not-taken,
        and reserved-but-unpublished where its slot is free). Returns the number posted."""
        m = self.region.map
        with self._post_lock:
            self._closing = True
            seen = time.monotonic_ns()
            seqs = m.ring["seq"].copy()
            slots = self._published()
            self._take(slots, seen)       # foreign records stay unanswered (counted)
            tickets = np.sort(self._p_req[self._p_valid, 0] - np.uint64(1))
            n = self._post(tickets, np.zeros(tickets.size, np.uint64),
                           np.full(tickets.size, req_status, np.uint8), closing=True)
            # ring_head is a lower bound of the reserved tickets (a runtime may reserve from a
            # device-memory counter, hbf_ctl.h): at least every published ticket was reserved.
            # Only seqs that belong to their slot count (a foreign seq such as s + N*2^40 must
            # not move the window), and ring_head at most N past them (reservations wait there)
            exp = np.where(self._served == 0, np.arange(1, N + 1, dtype=np.uint64), self._served + np.uint64(N))
            own = (seqs == exp) | (seqs == self._served)
            vmax = int(seqs[own].max()) if own.any() else 0
            head = max(vmax, min(int(self.region.ctl.header.ring_head), vmax + N))
            comp = m.completions
            lost = []
            for t in range(max(0, head - N), head):
                s = t % N
                if int(comp["seq"][s]) >= t + 1 or (int(seqs[s]) == t + 1 and int(self._served[s]) == t + 1):
                    continue   # posted, or taken (and posted above); a published slot whose check tag
                               # never matched is answered here like a reserved one
                if t >= N and int(comp["consumed"][s]) < t - N + 1:
                    continue   # the slot's previous completion is unread; the failure word covers t
                lost.append(t)
            if lost:           # the tickets (one per slot) under _post's seqlock: no request words (none published)
                lt = np.asarray(lost, np.uint64)
                pay = np.zeros((lt.size, 4), np.uint64)
                pay[:, 3] = req_status
                ctl.post_completions(self._comp64, (lt % np.uint64(N)).astype(np.intp), lt + np.uint64(1), pay,
                                     np.zeros((lt.size, 2), np.uint64))
                self._lost_unpublished += lt.size
            return n + self._lost_unpublished

    def shutdown(self) -> None:
        """Run the shutdown sequence once (from the main thread)."""
        status, reason, req_status, fail_reason = self._shutdown_reason
        log.info("shutting down (%s%s)", status, f": {reason}" if reason else "")
        h = self.region.ctl.header
        h.admission_closed = 1
        n = self._terminate_outstanding(req_status)
        if self.capacity is not None:
            with self._cap_lock:                    # every dirty frame back to its store (or salvaged)
                self.capacity.close(str(self.summary_path) + ".capacity")
        h.failure = ctl.failure_word(req_status, fail_reason)       # after every terminal completion
        self._stop.set()
        self._hb.stop()
        self._final_outstanding = n
        self.exit_code = 0 if status == "clean" else 1
        try:
            summ = self.summary(terminal=True)
        except Exception as e:   # a model's summary section failed: still write what is known
            log.exception("could not build the full summary")
            summ = {"schema": SUMMARY_SCHEMA, "terminal_status": status, "shutdown_reason": reason,
                    "failure_word": int(h.failure), "summary_error": f"{type(e).__name__}: {e}",
                    "outstanding_terminated": n, "rejected_requests": dict(self._rejected),
                    "foreign_requests": self._foreign, "engine_error": self._engine_error}
        try:
            try:
                write_json_atomic(self.summary_path, summ)
            except ValueError:   # a non-finite float somewhere: encoded as a string, counted
                enc, k = _encode_non_finite(summ)
                log.warning("summary held %d non-finite value(s); written as strings", k)
                enc["non_finite_encoded"] = k
                write_json_atomic(self.summary_path, enc)
            self._summary_written = True
            log.info("summary: %s", self.summary_path)
        except Exception:
            log.exception("could not write the summary to %s", self.summary_path)
            self.exit_code = 1
        self._done.set()

    def serve_forever(self) -> int:
        import signal

        def on_signal(signum, _frame):
            self.request_shutdown("clean", f"signal {signal.Signals(signum).name}")
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        while not self._shutdown_req.wait(0.1):
            pass
        self.shutdown()
        self.close()
        return self.exit_code

    def close(self) -> None:
        self._stop.set()
        if self._hb is not None and self._hb.alive():
            self._hb.stop()
        if self._grpc is not None:                  # only a daemon that bound the socket removes it
            self._grpc.stop(grace=2.0).wait(5)
            self._grpc = None
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                pass
        for t in self._threads:
            t.join(timeout=1.0)

    # ---- queries -------------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        m, c = self.region.map, self.region.ctl.counters

        def ops(arr):
            return {name: {f: int(arr[i][f]) for f in ("requests", "bytes", "modeled_ns", "wall_ns",
                                                        "service_ns", "overhead_ns")}
                    for i, name in enumerate(ctl.OP_NAMES)}

        def states(a):
            return {s.name: int(a[s.value]) for s in RequestStatus if s.terminal}
        return {"reference": ops(m.daemon_counters.copy()), "device": ops(m.device_counters.copy()),
                "reference_requests_by_state": states(c.daemon_status),
                "device_requests_by_state": states(c.device_status),
                "device_inline_ns": int(c.device_inline_ns),
                "device_sync_seq": int(c.device_sync_seq)}

    def ring_depth(self) -> int:
        with self._post_lock:
            return int(self._p_valid.sum())

    def summary(self, *, terminal: bool = False) -> dict[str, Any]:
        p, h = self.profile, self.region.ctl.header
        status, reason, req_status, fail_reason = self._shutdown_reason
        with self._ranges_lock:
            ranges = [r.as_dict() for r in self.ranges.ranges]
            history = list(self.ranges.history)
        return {
            "schema": SUMMARY_SCHEMA,
            "terminal_status": status if terminal else "running",
            "shutdown_reason": reason if terminal else "",
            "failure_word": int(h.failure),
            "profile": p.summary_section(),
            "engine": self.engine.name,
            "engine_stats": self.engine.stats(),
            "timing_source": p.timing_model.timing_source,
            "time_model": "modeled time is device time, 1:1 (no time multiplier)",
            "daemon": {"pid": os.getpid(), "started_unix_s": self._started_wall,
                       "uptime_ns": time.monotonic_ns() - self._t0,
                       "heartbeat_period_ns": self.heartbeat_period_ns, "heartbeats": int(h.heartbeat),
                       "heartbeat_max_gap_ns": self._hb.max_gap_ns, "heartbeat_pid": self._hb.proc.pid, "socket": str(self.socket_path),
                       "ctl_bytes": ctl.CTL_BYTES},
            "ranges": ranges,
            "range_events": history,
            "counters": self.counters(),
            "outstanding_terminated": self._final_outstanding,
            "lost_unpublished": self._lost_unpublished,
            "ring_service": dict(self._ring_stats, batch_log2_hist=list(self._ring_stats["batch_log2_hist"])),
            "device_failure": int(h.device_failure),
            "services": {"thermal": {"service": self.thermal.name, **self.thermal.summary_section(),
                                     "ticks": self._thermal_ticks, "media_energy_j": self._energy_j,
                                     "live_activity": self._activity_summary(),
                                     "horizon": self._horizon.summary()},
                         "refresh": {"service": self.refresh.name, **self.refresh.summary_section()}},
            "attaches": list(self._attaches),
            "attaches_dropped": self._attaches_dropped,
            "reports": list(self._reports),
            "reports_dropped": self._reports_dropped,
            "rejected_requests": dict(sorted(self._rejected.items())),
            "foreign_requests": self._foreign,
            "engine_error": self._engine_error,
            "timeline": self._timeline.section(),
            "capacity": self._capacity_section(),
            "hbfsim_version": package_version(),
        }

    def _capacity_section(self) -> dict | None:
        if self.capacity is None:
            return None
        with self._cap_lock:
            return self.capacity.section()

    # ---- RPC bodies (raise HbfError; the servicer turns them into reply Errors) ---------------
    def attach(self, workload_pid: int, abi_version: int, allow_unmodeled: bool) -> dict:
        if self._shutdown_req.is_set():
            raise DaemonError("hbfd is shutting down", code=ErrorCode.SHUTTING_DOWN)
        if abi_version != ctl.HBF_CTL_ABI_VERSION:
            raise HbfError("control-region ABI mismatch", code=ErrorCode.ABI_MISMATCH,
                           workload=abi_version, daemon=ctl.HBF_CTL_ABI_VERSION)
        if len(self._attaches) == self._attaches.maxlen:
            self._attaches_dropped += 1
        self._attached = True
        self._attaches.append({"workload_pid": workload_pid, "allow_unmodeled": allow_unmodeled,
                               "at_ns": time.monotonic_ns() - self._t0})
        return {"ctl_path": self.region.path, "ctl_bytes": ctl.CTL_BYTES,
                "generation": int(self.region.ctl.header.generation), "ring_key": self._ring_key}

    def register(self, *, capacity: CapacitySpec | None = None, **kw) -> tuple[Range, int, str]:
        """Register a range; a capacity range with a ``capacity`` spec is also served (its capacity region's
        path is returned; "" otherwise: a capacity range without a spec is in the table but not served, and
        requests for it are answered UNSUPPORTED)."""
        if self._shutdown_req.is_set():
            raise DaemonError("hbfd is shutting down", code=ErrorCode.SHUTTING_DOWN)
        if capacity is not None and kw.get("mode") != ctl.HBF_MODE_CAPACITY:
            raise HbfError("a capacity spec is only for a capacity range", code=ErrorCode.INVALID_ARGUMENT,
                           mode=kw.get("mode"))
        with self._ranges_lock:
            r = self.ranges.register(**kw)
            lo, hi = r.media_extent
            path = ""
            try:
                if hi > lo:
                    with self._ledger_lock:         # the range's blocks reach the reliability ledger
                        self.refresh.register_range(r.range_id, lo, hi)
                if capacity is not None:
                    try:
                        with self._cap_lock:
                            path = self.capacity.add(r, capacity)
                    except Exception:
                        if hi > lo:
                            with self._ledger_lock:
                                self.refresh.unregister_range(r.range_id)
                        raise
            except Exception:
                self.ranges.unregister(r.range_id)
                raise
            self.region.publish_ranges(self.ranges.ranges, self.ranges.generation)
            return r, self.ranges.generation, path

    def unregister(self, range_id: int) -> int:
        with self._ranges_lock:
            self.ranges.get(range_id)               # unknown: refused before anything changes
            with self._cap_lock:                    # its dirty frames written back first (a failure refuses)
                if range_id in self.capacity.served:
                    self.capacity.remove(range_id, str(self.summary_path) + f".capacity-{range_id}.salvage.npz")
            self.ranges.unregister(range_id)
            with self._ledger_lock:
                self.refresh.unregister_range(range_id)
            self.region.publish_ranges(self.ranges.ranges, self.ranges.generation)
            return self.ranges.generation

    def report(self, kind: str, text: str) -> None:
        if len(text) > rpc.REPORT_MAX_BYTES:
            raise HbfError(f"report is {len(text)} bytes, over the {rpc.REPORT_MAX_BYTES}-byte limit",
                           code=ErrorCode.INVALID_ARGUMENT, kind=kind)
        try:
            obj = json.loads(text, parse_constant=_refuse_constant) if text else None
        except json.JSONDecodeError as e:
            raise HbfError(f"report is not JSON: {e}", code=ErrorCode.INVALID_ARGUMENT, kind=kind) from e
        except ValueError as e:      # NaN / Infinity: not JSON, and the summary must stay strict JSON
            raise HbfError(f"report is not strict JSON: {e}", code=ErrorCode.INVALID_ARGUMENT, kind=kind) from e
        if kind == "thermal_override":   # operator/test path (hbfd/thermal/override.py), published next tick
            self.thermal.set_override(obj)          # a service that takes none says how to start one
        if len(self._reports) == self._reports.maxlen:
            self._reports_dropped += 1
        self._reports.append({"kind": kind, "data": obj, "at_ns": time.monotonic_ns() - self._t0})

    def heartbeat_age_ns(self) -> int:
        return self._hb.age_ns()


class _RunTotal:
    """Run totals of a counter array whose writer may start over from zero: the device counters and the live
    activity section belong to the attached session, and a second attach's session publishes its own
    counts from zero into the same control region. Per element, a value below the last one seen starts a new
    epoch on top of the last value, so the totals (and the energy derived from them) never go backwards. A
    lower bound: a restart that climbed past the previous value between two reads is not seen as one."""

    def __init__(self) -> None:
        self._last: np.ndarray | None = None
        self._base: np.ndarray | None = None

    def __call__(self, values) -> np.ndarray:
        a = np.array(values, dtype=np.uint64)
        if self._last is None or self._last.shape != a.shape:
            self._base = np.zeros_like(a)
        else:
            self._base = self._base + np.where(a < self._last, self._last, np.uint64(0))
        self._last = a
        return self._base + a


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _encode_non_finite(obj: Any) -> tuple[Any, int]:
    """A copy of ``obj`` with every NaN/Infinity float replaced by its name as a string ("NaN",
    "Infinity", "-Infinity"), and how many were replaced."""
    n = 0

    def enc(o):
        nonlocal n
        if isinstance(o, float) and not math.isfinite(o):
            n += 1
            return "NaN" if o != o else ("Infinity" if o > 0 else "-Infinity")
        if isinstance(o, dict):
            return {k: enc(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [enc(v) for v in o]
        return o
    return enc(obj), n


def _range_msg(pb, r: Range):
    return pb.Range(range_id=r.range_id, base=r.base, length=r.length, mode=r.mode, perms=r.perms,
                    page_bytes=r.page_bytes, stream=r.stream, media_offset=r.media_offset,
                    backing_offset=r.backing_offset, label=r.label, flag_class=r.flag_class)


def _error_msg(pb, e: HbfError):
    return pb.Error(code=int(e.code), message=e.message, fields={k: str(v) for k, v in e.fields.items()})


class _Servicer:
    """gRPC methods; errors travel as the reply's Error (never as free text only)."""

    def __init__(self, d: Daemon) -> None:
        from hbfproto import hbf_pb2
        self.d, self.pb = d, hbf_pb2

    def _guard(self, reply_cls, fn):
        try:
            return fn()
        except HbfError as e:
            return reply_cls(error=_error_msg(self.pb, e))
        except Exception as e:  # a bug: still a structured error, and logged
            log.exception("RPC failed")
            return reply_cls(error=self.pb.Error(code=int(ErrorCode.INTERNAL), message=f"{type(e).__name__}: {e}"))

    def Status(self, request, context):
        d, pb = self.d, self.pb

        def body():
            h, p, th = d.region.ctl.header, d.profile, d.thermal_state
            with d._ranges_lock:
                rs = [_range_msg(pb, r) for r in d.ranges.ranges]
            return pb.StatusReply(
                profile_name=p.name, profile_path=p.path, profile_sha256=p.sha256, daemon_pid=os.getpid(),
                heartbeat=int(h.heartbeat), heartbeat_age_ns=d.heartbeat_age_ns(),
                timing_source=p.timing_model.timing_source, engine=d.engine.name, ranges=rs,
                ring_depth=d.ring_depth(), thermal_mode=th.mode_name, thermal_q_ppm=th.q_ppm,
                hbf_max_c=th.hbf_max_c, counters_json=json.dumps(d.counters(), sort_keys=True),
                thermal_calibration=getattr(d.thermal, "calibration_line", "none (no package thermal model)"),
                uptime_ns=time.monotonic_ns() - d._t0, attached=d._attached, ctl_path=d.region.path)
        return self._guard(pb.StatusReply, body)

    def Attach(self, request, context):
        def body():
            a = self.d.attach(request.workload_pid, request.abi_version, request.allow_unmodeled)
            p = self.d.profile
            return self.pb.AttachReply(ctl_path=a["ctl_path"], ctl_bytes=a["ctl_bytes"],
                                       abi_version=ctl.HBF_CTL_ABI_VERSION, generation=a["generation"],
                                       profile_json=p.text, profile_sha256=p.sha256, ring_key=a["ring_key"])
        return self._guard(self.pb.AttachReply, body)

    def RegisterRange(self, request, context):
        def body():
            r = request.range
            spec = CapacitySpec.from_msg(request.capacity) if request.HasField("capacity") else None
            rng, gen, path = self.d.register(base=r.base, length=r.length, mode=int(r.mode), perms=r.perms,
                                             page_bytes=r.page_bytes, stream=r.stream,
                                             backing_offset=r.backing_offset, label=r.label,
                                             flag_class=r.flag_class, capacity=spec)
            return self.pb.RegisterRangeReply(range=_range_msg(self.pb, rng), snapshot_generation=gen,
                                              capacity_path=path)
        return self._guard(self.pb.RegisterRangeReply, body)

    def UnregisterRange(self, request, context):
        return self._guard(self.pb.UnregisterRangeReply, lambda: self.pb.UnregisterRangeReply(
            snapshot_generation=self.d.unregister(request.range_id)))

    def ListRanges(self, request, context):
        def body():
            with self.d._ranges_lock:
                rs = [_range_msg(self.pb, r) for r in self.d.ranges.ranges]
                gen = self.d.ranges.generation
            return self.pb.ListRangesReply(ranges=rs, snapshot_generation=gen)
        return self._guard(self.pb.ListRangesReply, body)

    def Report(self, request, context):
        def body():
            self.d.report(request.kind, request.json)
            return self.pb.ReportReply()
        return self._guard(self.pb.ReportReply, body)

    def GetSummary(self, request, context):
        def body():
            summ = self.d.summary()
            try:
                text = json.dumps(summ, sort_keys=True, allow_nan=False)
            except ValueError:
                text = json.dumps(_encode_non_finite(summ)[0], sort_keys=True)
            return self.pb.GetSummaryReply(summary_json=text)
        return self._guard(self.pb.GetSummaryReply, body)

    def Shutdown(self, request, context):
        def body():
            self.d.request_shutdown("clean", request.reason or "Shutdown RPC")
            if not self.d._done.wait(30):
                raise DaemonError("shutdown did not finish within 30 s", code=ErrorCode.TIMEOUT)
            if not self.d._summary_written:
                raise DaemonError("hbfd shut down but could not write the summary (see its log)",
                                  code=ErrorCode.INTERNAL, summary=str(self.d.summary_path))
            return self.pb.ShutdownReply(summary_path=str(self.d.summary_path.resolve()))
        return self._guard(self.pb.ShutdownReply, body)
