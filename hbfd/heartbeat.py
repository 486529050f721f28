"""The heartbeat, kept fresh by a small helper process so it does not wait on hbfd's GIL.

A Python thread inside hbfd shares the GIL with the ring service, the gRPC threads and the models;
on a loaded machine that thread missed the 10 ms promise (gaps of 10-27 ms were measured at load
average 7 on 2 cores). This helper is a separate single-threaded interpreter that does nothing else:

* hbfd starts it right after creating the control region (before the models), passing the region
  memfd and a private "liveness page" memfd;
* it waits for hbfd's GO flag (set right after hbfd's own first heartbeat, i.e. after readiness),
  then bumps ``header.heartbeat`` every period (default 2 ms, absolute deadlines, no drift);
* it stops beating, and exits, when hbfd says STOP, when the failure word is set, when hbfd dies
  (parent pid changes), or when hbfd's control loop has not ticked for ``stale_ns`` (hbfd hung):
  the heartbeat means "hbfd is alive and making progress", never "some process is alive".

Liveness page (u64 words): 0 parent_tick, 1 go, 2 stop, 3 beats, 4 max_gap_ns, 5 child_state,
6 last_beat_monotonic_ns (CLOCK_MONOTONIC is system-wide, so hbfd can compute the age).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time

LIVE_BYTES = 4096
W_TICK, W_GO, W_STOP, W_BEATS, W_MAXGAP, W_STATE, W_LAST_BEAT_NS = range(7)
STATE_STARTED, STATE_BEATING, STATE_DONE = 1, 2, 3


class LivePage:
    def __init__(self, mm: mmap.mmap) -> None:
        self.mm = mm
        self.w = (ctypes.c_uint64 * 8).from_buffer(mm)

    def __getitem__(self, i: int) -> int:
        return self.w[i]

    def __setitem__(self, i: int, v: int) -> None:
        self.w[i] = v


def _raise_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass


def child_main(argv: list[str]) -> int:
    ctl_fd, live_fd, hb_off, fail_off, period_ns, stale_ns, ppid = (int(x) for x in argv)
    assert max(hb_off, fail_off) + 8 <= 4096, "heartbeat and failure words live in the first page"
    ctl_mm = mmap.mmap(ctl_fd, 4096, mmap.MAP_SHARED)
    live = LivePage(mmap.mmap(live_fd, LIVE_BYTES, mmap.MAP_SHARED))
    heartbeat = ctypes.c_uint64.from_buffer(ctl_mm, hb_off)
    failure = ctypes.c_uint64.from_buffer(ctl_mm, fail_off)
    _raise_priority()
    live[W_STATE] = STATE_STARTED
    while not live[W_GO]:
        if live[W_STOP] or os.getppid() != ppid:
            live[W_STATE] = STATE_DONE
            return 0
        time.sleep(0.0005)
    live[W_STATE] = STATE_BEATING
    live[W_LAST_BEAT_NS] = time.monotonic_ns()
    last_tick, last_tick_change = live[W_TICK], time.monotonic_ns()
    last_beat = time.monotonic_ns()
    nxt = last_beat + period_ns
    max_gap = 0
    while True:
        now = time.monotonic_ns()
        if nxt > now:
            time.sleep((nxt - now) / 1e9)
        nxt += period_ns
        now = time.monotonic_ns()
        if nxt < now:                      # we were descheduled: resynchronize, do not burst
            nxt = now + period_ns
        if live[W_STOP] or failure.value or os.getppid() != ppid:
            break
        tick = live[W_TICK]
        if tick != last_tick:
            last_tick, last_tick_change = tick, now
        elif now - last_tick_change > stale_ns:
            print(f"hbfd-heartbeat: hbfd made no progress for {(now - last_tick_change) / 1e6:.0f} ms; "
                  "heartbeat stopped", file=sys.stderr)
            break
        heartbeat.value = heartbeat.value + 1     # the only writer after readiness
        max_gap = max(max_gap, now - last_beat)
        last_beat = now
        live[W_LAST_BEAT_NS] = now
        live[W_BEATS] = live[W_BEATS] + 1
        live[W_MAXGAP] = max_gap
    live[W_STATE] = STATE_DONE
    del heartbeat, failure
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))


class HeartbeatProcess:
    """hbfd's side: spawn the helper, release it at readiness, stop it at shutdown."""

    def __init__(self, ctl_fd: int, hb_off: int, fail_off: int, period_ns: int, stale_ns: int) -> None:
        import subprocess
        self.live_fd = os.memfd_create("hbfd-live", os.MFD_CLOEXEC)
        os.ftruncate(self.live_fd, LIVE_BYTES)
        self.live = LivePage(mmap.mmap(self.live_fd, LIVE_BYTES, mmap.MAP_SHARED))
        argv = [sys.executable, "-m", "hbfd.heartbeat", str(ctl_fd), str(self.live_fd), str(hb_off), str(fail_off),
                str(period_ns), str(stale_ns), str(os.getpid())]
        self.proc = subprocess.Popen(argv, pass_fds=(ctl_fd, self.live_fd), close_fds=True)
        self.argv = argv

    def wait_started(self, timeout_s: float = 30.0) -> None:
        from hbfcommon.errors import DaemonError
        deadline = time.monotonic() + timeout_s
        while self.live[W_STATE] < STATE_STARTED:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise DaemonError("the heartbeat helper did not start", argv=" ".join(self.argv),
                                  returncode=self.proc.returncode)
            time.sleep(0.001)

    def go(self) -> None:
        self.live[W_GO] = 1

    def tick(self) -> None:
        self.live[W_TICK] = self.live[W_TICK] + 1

    def alive(self) -> bool:
        return self.proc.poll() is None

    def age_ns(self) -> int:
        last = self.live[W_LAST_BEAT_NS]
        return time.monotonic_ns() - last if last else 0

    @property
    def max_gap_ns(self) -> int:
        return self.live[W_MAXGAP]

    def stop(self, timeout_s: float = 2.0) -> None:
        self.live[W_STOP] = 1
        try:
            self.proc.wait(timeout_s)
        except Exception:
            self.proc.kill()
            self.proc.wait()
