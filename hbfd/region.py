"""The control region on the daemon side: a sealed memfd, the header, and the publishers.

Server layer (touches the OS). The layout comes from hbfcommon.ctl (the mirror of hbf_ctl.h).
"""
from __future__ import annotations

import fcntl
import math
import mmap
import os

from hbfcommon import ctl
from hbfcommon.errors import ControlRegionError

INT32_MIN = -(1 << 31)   # published temperature when no thermal model runs


class ControlRegion:
    """Owns the memfd and its mapping; publishes sections the way the device expects."""

    def __init__(self, *, name: str = "hbf-ctl") -> None:
        try:
            self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(self.fd, ctl.CTL_BYTES)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            mm = mmap.mmap(self.fd, ctl.CTL_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise ControlRegionError(f"cannot create the control region: {e.strerror}") from e
        self.map = ctl.CtlMap.from_mmap(mm)
        self.ctl = self.map.ctl

    @property
    def path(self) -> str:
        """What a workload opens to attach: no fd inheritance needed."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def init_header(self, *, media_params: dict, profile_sha256: str, heartbeat_period_ns: int) -> None:
        h = self.ctl.header
        h.abi_version = ctl.HBF_CTL_ABI_VERSION
        h.header_bytes = ctl.ctypes.sizeof(ctl.hbf_header)
        h.total_bytes = ctl.CTL_BYTES
        h.off_ranges, h.off_thermal, h.off_refresh = (ctl.OFFSETS[k] for k in ("ranges", "thermal", "refresh"))
        h.off_ring, h.off_completions, h.off_counters = (ctl.OFFSETS[k] for k in ("ring", "completions", "counters"))
        h.off_activity = ctl.OFFSETS["activity"]
        h.ring_slots = ctl.HBF_RING_SLOTS
        h.max_ranges = ctl.HBF_MAX_RANGES
        h.daemon_pid = os.getpid()
        h.generation = 1
        h.heartbeat = 0
        h.heartbeat_period_ns = heartbeat_period_ns
        h.failure = ctl.HBF_FAIL_NONE
        h.admission_closed = 0
        h.profile_sha256[:] = list(bytes.fromhex(profile_sha256)) if profile_sha256 else [0] * 32
        m = h.media
        for k, v in media_params.items():
            if isinstance(v, list):
                getattr(m, k)[:] = v
            else:
                setattr(m, k, v)
        h.magic = ctl.HBF_CTL_MAGIC    # last: a reader that sees the magic sees a filled header

    # ---- publishers ----------------------------------------------------------------------
    def publish_ranges(self, ranges, generation: int) -> None:
        snap = self.ctl.ranges

        def fill():
            for i, r in enumerate(ranges):
                s = snap.ranges[i]
                s.base, s.length, s.media_offset = r.base, r.length, r.media_offset
                s.range_id, s.mode, s.perms, s.page_bytes = r.range_id, r.mode, r.perms, r.page_bytes
                s.stream, s.flags, s.backing_offset = r.stream, r.flag_class, r.backing_offset
            snap.count = len(ranges)
            snap.generation = generation
        ctl.seqlock_write(snap, fill)

    def publish_thermal(self, state, tick: int, *, valid_until_gpu_ns: int = 0) -> None:
        """The thermal snapshot; ``valid_until_gpu_ns``: its validity horizon in the GPU's clock (0: none;
        hbfd/thermal/horizon.py decides it and holds changes until it has passed)."""
        th = self.ctl.thermal

        def millic(c: float) -> int:
            return INT32_MIN if c is None or math.isnan(c) else int(round(c * 1000))

        def fill():
            th.mode, th.q_ppm = state.mode, state.q_ppm
            th.admission_open = 1 if state.admission_open else 0
            th.hbf_max_millic, th.hbm_millic, th.gpu_millic = millic(state.hbf_max_c), millic(state.hbm_c), millic(state.gpu_c)
            th.tick = tick
            th.valid_until_gpu_ns = int(valid_until_gpu_ns)
        ctl.seqlock_write(th, fill)

    def publish_refresh(self, debt_total_bytes: int, quantum_bytes: int, *, background_drained_bytes: int = 0) -> None:
        rf = self.ctl.refresh

        def fill():
            rf.debt_total_bytes = debt_total_bytes
            rf.quantum_bytes = quantum_bytes
            rf.background_drained_bytes = background_drained_bytes
        ctl.seqlock_write(rf, fill)

    def beat(self) -> int:
        h = self.ctl.header
        h.heartbeat = h.heartbeat + 1
        return h.heartbeat

    def close(self) -> None:
        self.map.close()
        try:
            os.close(self.fd)
        except OSError:
            pass
