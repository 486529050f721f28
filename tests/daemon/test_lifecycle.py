"""hbfd lifecycle in a temp dir: readiness, heartbeat, attach, ranges, ring, shutdown ordering."""
from __future__ import annotations
from hbfcommon.profile import PROFILE_DIR

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.errors import DaemonError, ErrorCode, HbfError
from hbfd.hostring import RingDriver

from hbfd_harness import ROOT, attach, start_hbfd, wait_ready


def _find_region_fd(pid: int) -> str | None:
    d = f"/proc/{pid}/fd"
    try:
        for fd in os.listdir(d):
            try:
                if os.readlink(f"{d}/{fd}").startswith("/memfd:hbf-ctl"):
                    return f"{d}/{fd}"
            except OSError:
                pass
    except OSError:
        pass
    return None


def test_readiness_only_after_models_and_thermal_snapshot(tmp_path):
    marker = tmp_path / "engine-built"
    h = start_hbfd(tmp_path, env={"HBFD_ENGINE": "engines:slow", "HBFD_TEST_MARKER": str(marker)}, wait=False)
    try:
        deadline = time.monotonic() + 20
        path = None
        while path is None and time.monotonic() < deadline:
            path = _find_region_fd(h.proc.pid)
        assert path, "control region never appeared"
        # map as soon as the memfd exists: the header may not be filled yet
        import mmap
        fd = os.open(path, os.O_RDWR)
        while os.fstat(fd).st_size < ctl.CTL_BYTES and time.monotonic() < deadline:
            pass                                # memfd created, not yet sized
        mm = mmap.mmap(fd, ctl.CTL_BYTES, mmap.MAP_SHARED)
        os.close(fd)
        region = ctl.CtlMap.from_mmap(mm)
        hdr = region.ctl.header
        saw_zero = False
        while hdr.heartbeat == 0 and time.monotonic() < deadline:
            saw_zero = True
        ready_ns = time.monotonic_ns()
        th_seq = region.ctl.thermal.seq
        assert saw_zero, "heartbeat was nonzero before the engine (0.5 s to build) existed"
        assert hdr.heartbeat > 0 and hdr.magic == ctl.HBF_CTL_MAGIC
        assert marker.exists() and int(marker.read_text()) <= ready_ns, "readiness before the engine was built"
        assert th_seq >= 2 and th_seq % 2 == 0, "thermal snapshot not published before readiness"
        assert region.ctl.thermal.q_ppm == 1_000_000
        wait_ready(h)
        with h.client() as c:
            assert c.call("Status").engine == "fixed-latency"
    finally:
        h.stop()


def _heartbeat_window(hdr, seconds: float):
    """(beats, misses): misses are single increments that took more than 10 ms. If the observer
    itself was descheduled the value jumps by several, which is not the daemon's miss."""
    last_v, last_t = hdr.heartbeat, time.monotonic_ns()
    changes = []
    end = last_t + int(seconds * 1e9)
    while True:
        now = time.monotonic_ns()
        v = hdr.heartbeat
        if v != last_v:
            changes.append((now - last_t, v - last_v))
            last_v, last_t = v, now
        if now > end:
            break
    beats = sum(dv for _, dv in changes)
    return beats, [round(dt / 1e6, 2) for dt, dv in changes if dv == 1 and dt > 10_000_000]


def test_heartbeat_cadence_within_10ms(hbfd):
    """Sample the heartbeat for 0.5 s: no gap above 10 ms. A shared, overloaded host can stall any
    process for 10 ms once in a while, so a window with a miss is measured again once; two bad
    windows in a row fail (both are reported)."""
    att, m = attach(hbfd)
    hdr = m.ctl.header
    assert hdr.heartbeat_period_ns <= 10_000_000
    windows = []
    for _ in range(2):
        beats, misses = _heartbeat_window(hdr, 0.5)
        windows.append((beats, misses))
        assert beats >= 40, f"only {beats} heartbeats in 0.5 s"
        if not misses:
            break
    assert not windows[-1][1], f"heartbeat gaps > 10 ms (ms) in two consecutive 0.5 s windows: {windows}"


def test_attach_from_a_second_process_without_fd_inheritance(hbfd):
    code = f"""
import json, os
from hbfcommon import ctl
from hbfcommon.rpc import Client
with Client({str(hbfd.socket)!r}) as c:
    rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
m = ctl.map_region(rep.ctl_path)
h = m.ctl.header
print(json.dumps({{"path": rep.ctl_path, "magic": h.magic, "pid": h.daemon_pid,
                   "sha": bytes(h.profile_sha256).hex(), "rep_sha": rep.profile_sha256,
                   "bytes": rep.ctl_bytes, "channels": h.media.channels, "hb": h.heartbeat}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         env=hbfd.env, close_fds=True)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["path"] == f"/proc/{hbfd.proc.pid}/fd/{r['path'].rsplit('/', 1)[1]}"
    assert r["magic"] == ctl.HBF_CTL_MAGIC and r["pid"] == hbfd.proc.pid
    assert r["sha"] == r["rep_sha"] and len(r["sha"]) == 64
    assert r["bytes"] == ctl.CTL_BYTES and r["channels"] == 16 and r["hb"] > 0


def test_region_is_sealed_against_resize(hbfd):
    rep, _ = attach(hbfd)
    fd = os.open(rep.ctl_path, os.O_RDWR)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(fd, ctl.CTL_BYTES * 2)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 4096)
    finally:
        os.close(fd)


def test_attach_abi_mismatch(hbfd):
    with hbfd.client() as c:
        with pytest.raises(HbfError) as ei:
            c.call("Attach", workload_pid=1, abi_version=99)
    assert ei.value.code == ErrorCode.ABI_MISMATCH


def _rng(pb, **kw):
    return pb.RegisterRangeRequest(range=pb.Range(**kw))


def test_register_unregister_and_snapshot(hbfd):
    att, m = attach(hbfd)
    with hbfd.client() as c:
        pb = c.pb
        a = c.call("RegisterRange", _rng(pb, base=0x7000_0000_0000, length=1 << 20, mode=pb.TIMING, perms=3))
        b = c.call("RegisterRange", _rng(pb, base=0x1000_0000, length=8192, mode=pb.CAPACITY, perms=1))
        f = c.call("RegisterRange", _rng(pb, base=0x2000_0004, length=8, mode=pb.FLAG, perms=1))
        assert a.range.range_id and b.range.range_id and f.range.range_id
        assert a.range.media_offset % 4096 == 0 and b.range.media_offset % 4096 == 0
        assert not (a.range.media_offset < b.range.media_offset + 8192 and b.range.media_offset < a.range.media_offset + (1 << 20))
        snap = m.ctl.ranges
        assert snap.seq % 2 == 0 and snap.count == 3 and snap.generation == f.snapshot_generation
        bases = [snap.ranges[i].base for i in range(3)]
        assert bases == sorted(bases) == [0x1000_0000, 0x2000_0004, 0x7000_0000_0000]
        assert snap.ranges[2].media_offset == a.range.media_offset and snap.ranges[2].mode == ctl.HBF_MODE_TIMING
        assert len(c.call("ListRanges").ranges) == 3
        u = c.call("UnregisterRange", range_id=b.range.range_id)
        assert u.snapshot_generation > f.snapshot_generation
        assert snap.count == 2 and [snap.ranges[i].base for i in range(2)] == [0x2000_0004, 0x7000_0000_0000]
        # the freed media space is reused
        b2 = c.call("RegisterRange", _rng(pb, base=0x1000_0000, length=4096, mode=pb.TIMING, perms=1))
        assert b2.range.media_offset == b.range.media_offset


def test_unaligned_tensor_ranges_register(hbfd):
    """torch tensors (512 B aligned) and odd cuMemAlloc sub-buffers register as they are; the media
    offset keeps the device in-page offset and neighbours never share a media page."""
    att, m = attach(hbfd)
    with hbfd.client() as c:
        pb = c.pb
        a = c.call("RegisterRange", _rng(pb, base=0x7f00_0000_0200, length=0x300, mode=pb.TIMING, perms=3)).range
        b = c.call("RegisterRange", _rng(pb, base=0x7f00_0000_0500, length=100, mode=pb.TIMING, perms=1)).range
        k = c.call("RegisterRange", _rng(pb, base=0x7f00_0001_0010, length=5000, mode=pb.CAPACITY, perms=1)).range
        for r in (a, b, k):
            assert r.media_offset % 4096 == r.base % 4096
        assert a.media_offset // 4096 != b.media_offset // 4096      # same device page, own media pages
        # k touches two device pages -> two media pages, disjoint from a's and b's
        pages = {r.range_id: set(range(r.media_offset // 4096, (r.media_offset + r.length - 1) // 4096 + 1))
                 for r in (a, b, k)}
        assert len(pages[k.range_id]) == 2
        assert not (pages[a.range_id] & pages[b.range_id] or pages[a.range_id] & pages[k.range_id]
                    or pages[b.range_id] & pages[k.range_id])
        snap = m.ctl.ranges
        got = {snap.ranges[i].base: (snap.ranges[i].length, snap.ranges[i].media_offset) for i in range(snap.count)}
        assert got[0x7f00_0000_0200] == (0x300, a.media_offset) and got[0x7f00_0000_0500] == (100, b.media_offset)
        with pytest.raises(HbfError) as ei:      # byte-level overlap is still refused
            c.call("RegisterRange", _rng(pb, base=0x7f00_0000_04ff, length=2, mode=pb.TIMING, perms=1))
        assert ei.value.code == ErrorCode.RANGE_OVERLAP


@pytest.mark.parametrize("kw,code", [
    (dict(base=0x10000, length=0, mode=1, perms=1), ErrorCode.RANGE_ZERO_LENGTH),
    (dict(base=0x10002, length=8, mode=3, perms=1), ErrorCode.RANGE_MISALIGNED),
    (dict(base=0x10000, length=4096, mode=1, perms=1, page_bytes=65536), ErrorCode.RANGE_MISALIGNED),
    (dict(base=0x10000, length=4096, mode=1, perms=0), ErrorCode.RANGE_BAD_PERMISSIONS),
    (dict(base=0x10000, length=4096, mode=1, perms=8), ErrorCode.RANGE_BAD_PERMISSIONS),
    (dict(base=0x10000, length=4096, mode=2, perms=2), ErrorCode.RANGE_BAD_PERMISSIONS),
    (dict(base=0x10000, length=4096, mode=0, perms=1), ErrorCode.RANGE_BAD_MODE),
    (dict(base=0x10000, length=4096, mode=7, perms=1), ErrorCode.RANGE_BAD_MODE),
    (dict(base=0x10000, length=1 << 50, mode=1, perms=1), ErrorCode.RANGE_TABLE_FULL),   # > stack capacity
])
def test_range_errors(hbfd, kw, code):
    with hbfd.client() as c:
        with pytest.raises(HbfError) as ei:
            c.call("RegisterRange", _rng(c.pb, **kw))
        assert ei.value.code == code, str(ei.value)
        assert c.call("ListRanges").ranges == []


def test_overlap_not_found_and_table_full(hbfd):
    with hbfd.client() as c:
        pb = c.pb
        c.call("RegisterRange", _rng(pb, base=0x100000, length=0x10000, mode=1, perms=1))
        for base, length in ((0x100000, 4096), (0xFF000, 0x2000), (0x10F000, 0x2000), (0xF0000, 0x100000)):
            with pytest.raises(HbfError) as ei:
                c.call("RegisterRange", _rng(pb, base=base, length=length, mode=1, perms=1))
            assert ei.value.code == ErrorCode.RANGE_OVERLAP
            assert "other_id" in ei.value.fields
        with pytest.raises(HbfError) as ei:
            c.call("UnregisterRange", range_id=999)
        assert ei.value.code == ErrorCode.RANGE_NOT_FOUND
        for i in range(ctl.HBF_MAX_RANGES - 1):
            c.call("RegisterRange", _rng(pb, base=0x1_0000_0000 + 8 * i, length=4, mode=3, perms=1))
        with pytest.raises(HbfError) as ei:
            c.call("RegisterRange", _rng(pb, base=0x2_0000_0000, length=4, mode=3, perms=1))
        assert ei.value.code == ErrorCode.RANGE_TABLE_FULL


def test_ring_requests_are_served_with_fixed_latency(hbfd):
    from hbfcommon.profile import load_profile
    prof = load_profile(PROFILE_DIR / "nominal.json")
    att, m = attach(hbfd)
    drv = RingDriver(m, att.ring_key)
    ops = [ctl.HBF_OP_LOAD, ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC, ctl.HBF_OP_CPASYNC] * 50
    tickets = [drv.issue(arrival_ns=1000 + i, address=0x1000 * i, media_address=0x1000 * i, nbytes=4096, op=op)
               for i, op in enumerate(ops)]
    done = [drv.wait(t) for t in tickets]
    f = prof.timing_model.fixed
    want = {ctl.HBF_OP_LOAD: f.read_ns, ctl.HBF_OP_STORE: f.write_ns, ctl.HBF_OP_ATOMIC: f.read_ns + f.write_ns,
            ctl.HBF_OP_CPASYNC: f.read_ns}
    assert all(d.status == ctl.HBF_ST_READY for d in done)
    assert [d.modeled_ns for d in done] == [want[o] for o in ops]
    assert [d.arrival_ns for d in done] == [1000 + i for i in range(len(ops))]
    assert all(d.service_ns > 0 for d in done)
    with hbfd.client() as c:
        cnt = json.loads(c.call("Status").counters_json)
    assert cnt["reference"]["load"]["requests"] == 50 and cnt["reference"]["store"]["bytes"] == 50 * 4096
    assert cnt["reference"]["atomic"]["modeled_ns"] == 50 * (f.read_ns + f.write_ns)
    assert cnt["reference_requests_by_state"]["READY"] == 200


def test_ring_slot_reuse_beyond_ring_size(hbfd):
    att, m = attach(hbfd)
    drv = RingDriver(m, att.ring_key)
    n = ctl.HBF_RING_SLOTS + 500
    window = []
    for i in range(n):
        window.append(drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=64, op=ctl.HBF_OP_LOAD))
        if len(window) >= 256:
            for t in window:
                assert drv.wait(t).status == ctl.HBF_ST_READY
            window = []
    for t in window:
        assert drv.wait(t).status == ctl.HBF_ST_READY
    hbfd.stop()
    s = hbfd.read_summary()
    assert s["counters"]["reference"]["load"]["requests"] == n
    assert s["counters"]["reference_requests_by_state"]["READY"] == n


def test_shutdown_posts_terminal_completions_before_the_failure_word(tmp_path):
    h = start_hbfd(tmp_path, env={"HBFD_ENGINE": "engines:blocking"})
    try:
        att, m = attach(h)
        drv = RingDriver(m, att.ring_key)
        published = [drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=4096, op=i % 2) for i in range(300)]
        m.ctl.header.ring_head = 305        # 5 tickets reserved by "GPU threads" but not yet published
        time.sleep(0.2)                     # the blocking engine has taken some, the rest sit in the ring
        assert all(int(m.completions["seq"][t]) == 0 for t in published)
        seen = {}

        def watch():
            hdr = m.ctl.header
            while hdr.failure == 0:
                pass
            seen["seq"] = m.completions["seq"][:305].copy()      # at the instant the word is visible
            seen["status"] = m.completions["status"][:305].copy()
            seen["failure"] = int(hdr.failure)
        w = threading.Thread(target=watch)
        w.start()
        h.proc.send_signal(signal.SIGTERM)
        w.join(15)
        assert "seq" in seen, "failure word never set"
        assert (seen["seq"] == np.arange(1, 306)).all(), "a ticket had no completion when the failure word appeared"
        assert (seen["status"] == ctl.HBF_ST_DAEMON_LOST).all()
        assert seen["failure"] == ctl.failure_word(ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_SHUTDOWN)
        assert m.ctl.header.admission_closed == 1
        assert h.proc.wait(15) == 0
        s = h.read_summary()
        assert s["terminal_status"] == "clean" and s["engine"] == "blocking-test"
        assert s["counters"]["reference_requests_by_state"]["DAEMON_LOST"] == 300
        assert s["lost_unpublished"] == 5
        with pytest.raises(DaemonError):
            drv.wait(drv.issue(arrival_ns=0, address=0, media_address=0, nbytes=64, op=0), timeout_s=1)
    finally:
        h.kill()


def test_engine_failure_is_loud_and_ordered(tmp_path):
    h = start_hbfd(tmp_path, env={"HBFD_ENGINE": "engines:failing"})
    att, m = attach(h)
    drv = RingDriver(m, att.ring_key)
    t = drv.issue(arrival_ns=5, address=0, media_address=0, nbytes=64, op=0)
    c = drv.wait(t)
    assert c.status == ctl.HBF_ST_DAEMON_LOST
    assert h.proc.wait(15) == 1
    assert m.ctl.header.failure == ctl.failure_word(ctl.HBF_ST_DAEMON_LOST, ctl.HBF_FAIL_REASON_ENGINE)
    s = h.read_summary()
    assert s["terminal_status"] == "engine_failure" and "media model exploded" in s["engine_error"]


def test_shutdown_rpc_writes_the_summary(hbfd):
    att, m = attach(hbfd)
    drv = RingDriver(m, att.ring_key)
    for i in range(10):
        drv.wait(drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=4096, op=ctl.HBF_OP_LOAD))
    with hbfd.client() as c:
        c.call("RegisterRange", _rng(c.pb, base=0x4000, length=4096, mode=1, perms=1))
        c.call("Report", kind="admission", json='{"kernel": "k", "admitted": true}')
        with pytest.raises(HbfError) as ei:
            c.call("Report", kind="x", json="{nope")
        assert ei.value.code == ErrorCode.INVALID_ARGUMENT
        rep = c.call("Shutdown", reason="test over")
    assert rep.summary_path == str(hbfd.summary.resolve())
    assert hbfd.proc.wait(15) == 0
    s = hbfd.read_summary()
    from hbfcommon.profile import load_profile
    p = load_profile(PROFILE_DIR / "nominal.json")
    assert s["profile"]["sha256"] == p.sha256 and s["profile"]["path"].endswith("nominal.json")
    assert s["engine"] == "fixed-latency" and s["terminal_status"] == "clean"
    assert s["shutdown_reason"] == "test over"
    assert s["counters"]["reference"]["load"]["requests"] == 10
    assert s["counters"]["reference"]["load"]["modeled_ns"] == 10 * p.timing_model.fixed.read_ns
    assert set(s["counters"]["reference"]["load"]) >= {"modeled_ns", "wall_ns", "service_ns", "overhead_ns"}
    assert s["ranges"][0]["base"] == 0x4000 and s["reports"][0]["data"]["kernel"] == "k"
    assert s["services"]["thermal"]["thermal"] == "none"
    assert not hbfd.socket.exists()


def test_socket_mode_0600_and_one_daemon_per_socket(hbfd, tmp_path):
    st = os.stat(hbfd.socket)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    second = start_hbfd(tmp_path, wait=False, name="hbfd")  # same socket path
    assert second.proc.wait(20) == 2
    assert "already serving" in second.log.read_text()
    with hbfd.client() as c:
        assert c.call("Status").daemon_pid == hbfd.proc.pid


def test_sigint_also_shuts_down_cleanly(hbfd):
    assert hbfd.stop(signal.SIGINT) == 0
    assert hbfd.read_summary()["shutdown_reason"] == "signal SIGINT"


def test_bad_profile_exits_2_naming_the_field(tmp_path):
    bad = tmp_path / "bad.json"
    d = json.loads((PROFILE_DIR / "nominal.json").read_text())
    d["time_scale"] = 10
    bad.write_text(json.dumps(d))
    r = subprocess.run([sys.executable, "-m", "hbfd.cli", "--profile", str(bad), "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "time_scale" in r.stderr and str(bad) in r.stderr


def test_no_daemon_client_error(tmp_path):
    from hbfcommon.rpc import Client
    with pytest.raises(DaemonError) as ei:
        Client(tmp_path / "none.sock").call("Status")
    assert ei.value.code == ErrorCode.DAEMON_UNAVAILABLE


def _heartbeat_after(m, wait_s: float) -> tuple[int, int]:
    a = int(m.ctl.header.heartbeat)
    time.sleep(wait_s)
    return a, int(m.ctl.header.heartbeat)


def test_heartbeat_stops_when_hbfd_hangs_or_dies(tmp_path):
    h = start_hbfd(tmp_path, env={"HBFD_STALE_NS": "200000000"})
    try:
        att, m = attach(h)
        a, b = _heartbeat_after(m, 0.1)
        assert b > a
        os.kill(h.proc.pid, signal.SIGSTOP)           # hbfd hung: no progress
        time.sleep(0.5)
        a, b = _heartbeat_after(m, 0.3)
        assert a == b, "heartbeat kept beating for a hung hbfd"
        os.kill(h.proc.pid, signal.SIGCONT)
        h.proc.kill()
        h.proc.wait(10)
        a, b = _heartbeat_after(m, 0.3)
        assert a == b, "heartbeat kept beating after hbfd died"
    finally:
        if h.proc.poll() is None:
            os.kill(h.proc.pid, signal.SIGCONT)
            h.proc.kill()


def test_deferred_completions_are_collected_when_the_ring_goes_quiet(tmp_path):
    h = start_hbfd(tmp_path, env={"HBFD_ENGINE": "engines:deferring"})
    try:
        att, m = attach(h)
        drv = RingDriver(m, att.ring_key)
        c = drv.wait(drv.issue(arrival_ns=7, address=0, media_address=0, nbytes=64, op=0), timeout_s=5)
        assert c.status == ctl.HBF_ST_READY and c.arrival_ns == 7
        ts = [drv.issue(arrival_ns=i, address=0, media_address=0, nbytes=64, op=1) for i in range(100)]
        assert all(drv.wait(t, timeout_s=5).status == ctl.HBF_ST_READY for t in ts)
    finally:
        h.stop()


@pytest.mark.parametrize("env,words", [
    ({"HBFD_ENGINE": "engines:no_such_factory"}, ["no_such_factory"]),
    ({"HBFD_ENGINE": "engines:lacking_collect"}, ["engines:lacking_collect", "ServiceEngine", "collect"]),
    ({"HBFD_THERMAL": "engines:lacking_collect"}, ["HBFD_THERMAL", "set_override", "tick"]),
    ({"HBFD_REFRESH": "nothing"}, ["HBFD_REFRESH", "auto, none or module:factory"]),
])
def test_bad_engine_factory_exits_2_and_leaves_nothing_behind(tmp_path, env, words):
    h = start_hbfd(tmp_path, env=env, wait=False)
    assert h.proc.wait(30) == 2
    log = h.log.read_text()
    assert all(w in log for w in words), log
    assert not h.socket.exists()
    time.sleep(0.2)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            assert not (b"hbfd.heartbeat" in cmd and cmd[-2:-1] == [str(h.proc.pid).encode()]), \
                "the heartbeat helper outlived a failed start"


def test_ring_batch_published_at_once_is_served_exactly(hbfd):
    """A thousand requests published in one vector write (payloads, then seqs), mixed ops and an
    unknown op: every completion is exact and the counters add up per op and per state."""
    from hbfcommon.profile import load_profile
    f = load_profile(PROFILE_DIR / "nominal.json").timing_model.fixed
    att, m = attach(hbfd)
    n = 1000
    t = np.arange(n, dtype=np.uint64)
    ops = np.array([ctl.HBF_OP_LOAD, ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC, ctl.HBF_OP_CPASYNC, 9], np.uint32)[t % 5]
    r = m.ring
    r["arrival_ns"][:n] = 5000 + 3 * t
    r["media_address"][:n] = 64 * t
    r["bytes"][:n] = 64 + (t % 7)
    r["op"][:n] = ops
    r["thermal_q_ppm"][:n] = 0
    raw = m.ring.view(np.uint64).reshape(-1, 8)[:n].copy()
    raw[:, 0] = t + 1
    r["thermal_q_ppm"][:n] = ctl.request_tag(raw, att.ring_key) << np.uint64(32)   # the run's tags, vectorized
    m.ctl.header.ring_head = n
    r["seq"][:n] = t + 1                                   # release: after every payload
    c = m.completions
    deadline = time.monotonic() + 10
    while (c["seq"][:n] != t + 1).any():
        assert time.monotonic() < deadline, "completions missing"
        time.sleep(0.01)
    want = {0: f.read_ns, 1: f.write_ns, 2: f.read_ns + f.write_ns, 3: f.read_ns, 9: 0}
    assert (c["arrival_ns"][:n] == 5000 + 3 * t).all()
    assert c["modeled_ns"][:n].tolist() == [want[int(o)] for o in ops]
    assert c["status"][:n].tolist() == [ctl.HBF_ST_UNSUPPORTED if o == 9 else ctl.HBF_ST_READY for o in ops]
    assert (c["service_ns"][:n] > 0).all()
    c["consumed"][:n] = t + 1
    with hbfd.client() as cl:
        cnt = json.loads(cl.call("Status").counters_json)
    ref = cnt["reference"]
    nb = (64 + (t % 7)).astype(np.int64)
    for name, o in (("store", 1), ("atomic", 2), ("cpasync", 3)):
        assert ref[name]["requests"] == 200 and ref[name]["bytes"] == int(nb[ops == o].sum())
        assert ref[name]["modeled_ns"] == 200 * want[o]
    # unknown ops are counted as loads
    assert ref["load"]["requests"] == 400 and ref["load"]["bytes"] == int(nb[(ops == 0) | (ops == 9)].sum())
    assert ref["load"]["modeled_ns"] == 200 * f.read_ns
    assert cnt["reference_requests_by_state"]["READY"] == 800
    assert cnt["reference_requests_by_state"]["UNSUPPORTED"] == 200
    assert sum(ref[k]["service_ns"] for k in ref) == int(c["service_ns"][:n].astype(np.int64).sum())
