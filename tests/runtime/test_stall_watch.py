"""The stall watch (runtime_cuda.session.StallWatch, HBF_STALL_WARN_S): launches outstanding and no HBF activity
published for warn_s seconds -> one warning event per stall, naming the last launches; progress or a
synchronization ends the stall. The session's watch thread reads only host memory (the control region's live
activity), so it speaks while the main thread is blocked in the driver (the Qwen3 run of 2026-12-06 sat two
minutes in a module load that waited for a kernel)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import runtime_cuda
from hbfd.runner import start_daemon
from runtime_cuda.session import StallWatch

ROOT = Path(__file__).resolve().parents[2]


def test_one_warning_per_stall_naming_the_last_launches():
    w = StallWatch(10.0, keep=3)
    assert w.poll(100.0, (1,)) is None                   # nothing launched: never a stall
    for i, t in enumerate((101.0, 102.0, 103.0, 104.0)):
        w.launched(t, f"k{i}", "grid")
    assert w.poll(113.9, (1,)) is None                   # 9.9 s after the last launch
    ev = w.poll(114.0, (1,))
    assert ev is not None and ev["launches_since_sync"] == 4 and ev["seconds_since_last_launch"] == 10.0
    assert [x["kernel"] for x in ev["last_launches"]] == ["k3", "k2", "k1"]          # newest first, `keep` of them
    assert w.poll(200.0, (1,)) is None                   # once per stall
    assert w.poll(201.0, (2,)) is None                   # progress: a new stall can begin
    assert w.poll(210.9, (2,)) is None
    assert w.poll(211.0, (2,))["seconds_without_progress"] == 10.0
    w.synchronized()
    assert w.poll(300.0, (2,)) is None                   # nothing outstanding after a synchronization
    w.launched(301.0, "k9")
    assert w.poll(305.0, None) is None and w.poll(311.0, None) is not None   # an unreadable activity is no progress


def test_off_never_warns():
    w = StallWatch(0)
    w.launched(1.0, "k")
    assert w.poll(1e9, (0,)) is None


def test_the_watch_thread_reports_a_stall_to_hbfd(tmp_path):
    with start_daemon("nominal", workdir=tmp_path, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
        try:
            s.stall = StallWatch(0.2)
            s.stall.launched(time.monotonic(), "never_ends", "grid (1,) block (32,)")
            t = threading.Thread(target=s._watch_stalls, daemon=True)
            t.start()
            deadline = time.monotonic() + 10
            while not s.stalls and time.monotonic() < deadline:
                time.sleep(0.05)
            assert s.stalls and s.stalls[0]["last_launches"][0]["kernel"] == "never_ends"
            assert s.counters(publish=False)["stalls"] == s.stalls

            def reported():                              # the watch appends, then reports: hbfd hears it a moment later
                summ = json.loads(s.client.call("GetSummary").summary_json)
                return [r["data"]["last_launches"][0]["kernel"] for r in summ["reports"] if r["kind"] == "stall"]
            assert _wait_for(lambda: reported() == ["never_ends"]), reported()
        finally:
            s.close()
        t.join(5)
        assert not t.is_alive()                          # close() ends the watch


def _wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)
    return pred()


def test_the_watch_reads_the_ring_not_only_the_live_activity(tmp_path):
    """Issue 13: the live activity is published only at a thermal-snapshot refresh (or a due flush), so under a
    validity horizon it can stand still while the reference ring moves; the stall watch of 2026-12-06 read only it and
    said "no HBF request published" about a ring it never looked at. Now: reference requests flowing through the ring
    (served by a real hbfd) are progress, with the activity frozen; a stall names whose move it is -- completions
    answered and not consumed (the device's), a published request hbfd does not answer (hbfd's)."""
    from hbfcommon import ctl
    from hbfd.hostring import RingDriver
    from runtime_cuda.session import stall_message
    with start_daemon("nominal", workdir=tmp_path, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
        try:
            drv = RingDriver(s.ctl, s.ring_key)
            s.stall = StallWatch(0.4)
            s.stall.launched(time.monotonic(), "moe_gate_up_hbf", "grid (128, 24)")
            t = threading.Thread(target=s._watch_stalls, daemon=True)
            t.start()
            # 1. the ring moves (requests published, answered, consumed) for 3 warn periods; the activity does not
            end = time.monotonic() + 1.5
            n = 0
            while time.monotonic() < end:
                tk = drv.issue(arrival_ns=time.monotonic_ns(), address=0x7f0000000000, media_address=4096 * (n % 64),
                               nbytes=64, op=ctl.HBF_OP_LOAD)
                drv.wait(tk)
                n += 1
                time.sleep(0.05)
            assert n > 10 and not s.stalls, s.stalls[:1]
            # 2. one request answered and never consumed: the device's move
            tk = drv.issue(arrival_ns=time.monotonic_ns(), address=0x7f0000000000, media_address=0, nbytes=64,
                           op=ctl.HBF_OP_LOAD)
            assert _wait_for(lambda: bool(s.stalls))
            ev = s.stalls[-1]
            assert ev["ring"]["unanswered"] == 0 and ev["ring"]["unconsumed"] == 1, ev["ring"]
            assert ev["ring"]["published"] == tk + 1 and ev["ring"]["answered"] == n + 1
            assert "wait for their warps" in ev["verdict"]
            msg = stall_message(ev)
            assert "1 answered not consumed" in msg and "no HBF request published" not in msg
            # consuming it is progress: the stall ends
            drv.wait(tk)
            k = len(s.stalls)
            time.sleep(0.2)
            assert len(s.stalls) == k
            # 3. a published request hbfd does not take (no tag of this run's key): hbfd's move
            slot = drv.reserve() % ctl.HBF_RING_SLOTS
            r = s.ctl.ring
            r["arrival_ns"][slot], r["media_address"][slot], r["bytes"][slot] = time.monotonic_ns(), 0, 64
            r["thermal_q_ppm"][slot] = 0
            r["seq"][slot] = tk + 2
            assert _wait_for(lambda: len(s.stalls) > k)
            ev = s.stalls[-1]
            assert ev["ring"]["unanswered"] == 1 and ev["ring"]["unconsumed"] == 0, ev["ring"]
            assert "hbfd has not answered 1 published" in ev["verdict"]
        finally:
            s.close()
        t.join(5)


def test_abort_after_abort_s_without_progress():
    w = StallWatch(0, abort_s=5.0)
    assert w.warn_s == 5.0                               # abort alone: the warning comes with it
    assert w.poll(100.0, (1,)) is None and not w.abort_due(100.0)     # nothing outstanding
    w.launched(100.0, "k")
    assert w.poll(104.9, (1,)) is None and not w.abort_due(104.9)
    assert w.poll(105.0, (1,)) is not None and w.abort_due(105.0)
    assert w.poll(106.0, (2,)) is None and not w.abort_due(106.0)     # progress restarts the count
    w.synchronized()
    assert not w.abort_due(1e9)
    assert not StallWatch(3.0).abort_due(1e9)            # off by default


def test_abort_below_warn_is_refused():
    from hbfcommon.errors import ConfigError
    with pytest.raises(ConfigError, match="HBF_STALL_ABORT_S"):
        StallWatch(10.0, abort_s=5.0)
    assert StallWatch(5.0, abort_s=5.0).abort_s == 5.0


ABORT_CHILD = r'''
import sys, time, threading
from pathlib import Path
import runtime_cuda
from hbfd.runner import start_daemon
from runtime_cuda.session import StallWatch
wd = Path(sys.argv[1])
d = start_daemon("nominal", workdir=wd, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"}, timeout_s=90.0)
(wd / "hbfd.pid").write_text(str(d.pid))
s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
s.stall = StallWatch(0, abort_s=0.5)
s.stall.launched(time.monotonic(), "never_ends", "grid (1,) block (32,)")
threading.Thread(target=s._watch_stalls, daemon=True).start()
time.sleep(60)                                   # the main thread "blocked in the driver"
print("NOT ABORTED")
'''


def test_the_watch_ends_the_process_and_stops_its_daemon(tmp_path):
    """HBF_STALL_ABORT_S: the watch thread ends a process whose main thread never returns (exit status 86), after
    reporting the stall to hbfd and stopping the daemon the process started, which writes its summary."""
    import os
    import subprocess
    import sys

    from hbfcommon.abort import EXIT_STALLED
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    cp = subprocess.run([sys.executable, "-c", ABORT_CHILD, str(tmp_path)], capture_output=True, text=True,
                        env=env, timeout=120)
    assert cp.returncode == EXIT_STALLED, (cp.returncode, cp.stdout[-2000:], cp.stderr[-3000:])
    assert "NOT ABORTED" not in cp.stdout and time.monotonic() - t0 < 60
    assert "ending the process (HBF_STALL_ABORT_S=0.5" in cp.stderr and "never_ends" in cp.stderr
    pid = int((tmp_path / "hbfd.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    summ = json.loads((tmp_path / "hbfd-summary.json").read_text())
    kinds = [r["kind"] for r in summ["reports"]]
    assert "stall" in kinds and "stall_abort" in kinds
    ab = next(r["data"] for r in summ["reports"] if r["kind"] == "stall_abort")
    assert ab["code"] == "TIMEOUT" and ab["exit_status"] == EXIT_STALLED
    assert ab["stall"]["last_launches"][0]["kernel"] == "never_ends"
