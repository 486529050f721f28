"""The workload API against a real hbfd on CPU: attach, map, register/unregister, errors, device-state
mirror, launch gate (refused / allowed-unmodeled, reported to the daemon), registration after an
admitted launch, counters section. CUDA calls are skipped (cuda=False) — the GPU half is test_runtime_gpu."""
from __future__ import annotations

import json

import pytest

import runtime_cuda
from hbfcommon import ctl as C
from hbfcommon.errors import ErrorCode, HbfError
from runtime_cuda import devstate as D
from runtime_cuda.session import KernelInfo, LaunchRefused

BASE = 0x7E0000000000


@pytest.fixture()
def sess(hbfd_daemon):
    sock, _, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, cuda=False)
    yield s
    for r in list(s.ranges):
        s.unregister(r.range_id)
    s.close()


def test_attach_maps_the_daemons_region(sess, hbfd_daemon):
    h = sess.ctl.ctl.header
    assert h.magic == C.HBF_CTL_MAGIC and h.total_bytes == C.CTL_BYTES
    assert h.daemon_pid == hbfd_daemon[2].pid
    assert h.heartbeat > 0                      # the daemon is ready
    assert sess.attach_reply.ctl_path.startswith("/proc/")


def test_register_mirrors_the_published_snapshot(sess):
    r = sess.register_timing_range(BASE, 1 << 20, C.HBF_PERM_READ)
    assert r.range_id > 0 and r.media_offset % 4096 == 0
    st = sess.state
    assert st.n_ranges == 1 and st.generation == sess.ctl.ctl.ranges.generation
    d = st.ranges[0]
    assert (d.base, d.end, d.range_id, d.perms, d.mode) == (BASE, BASE + (1 << 20), r.range_id,
                                                             C.HBF_PERM_READ, C.HBF_MODE_TIMING)
    assert st.lo == BASE - D.HBF_DEV_GUARD_BYTES and st.lo + st.span == BASE + (1 << 20)
    assert st.range_seq % 2 == 0
    sess.unregister(r)
    assert sess.state.n_ranges == 0 and sess.state.span == 0


def test_flag_ranges_are_eidolas_table(sess):
    """Session.register_flag_range adds to the attached eidola flag table (the device state eidola's
    loads are classified against) and records the range in hbfd's table; the timing helpers' device
    range table never holds it; a refusal by either side leaves both unchanged."""
    from eidola.replay import FlagTable, StateMirror
    r = sess.register_timing_range(BASE, 1 << 20, C.HBF_PERM_READ)
    with pytest.raises(HbfError) as ei:            # no eidola table attached: a clear error, nothing registered
        sess.register_flag_range(BASE + (4 << 20), 4096, flag_class=3)
    assert ei.value.code == ErrorCode.RANGE_BAD_MODE and "eidola" in str(ei.value) and len(sess.ranges) == 1
    table = FlagTable(StateMirror())
    sess.attach_flag_table(table)
    f = sess.register_flag_range(BASE + (4 << 20), 4096, flag_class=3, label="tile_flags")
    assert [x.mode for x in sess.ranges] == [C.HBF_MODE_TIMING, C.HBF_MODE_FLAG]      # hbfd records it
    st = sess.state
    assert st.n_ranges == 1 and st.ranges[0].mode == C.HBF_MODE_TIMING               # the helpers never see it
    assert st.lo + st.span == BASE + (1 << 20)
    h = table.host
    assert (h.n_flag_ranges, h.flag_ranges[0].base, h.flag_ranges[0].length, h.flag_ranges[0].klass) == \
        (1, BASE + (4 << 20), 4096, 3)
    with pytest.raises(HbfError):                  # eidola refuses (not 128-byte aligned): hbfd untouched
        sess.register_flag_range(BASE + (8 << 20) + 4, 128)
    with pytest.raises(HbfError) as ei:            # hbfd refuses (overlaps the timing range): table rolled back
        sess.register_flag_range(BASE + 4096, 128)
    assert ei.value.code == ErrorCode.RANGE_OVERLAP
    assert len(sess.ranges) == 2 and h.n_flag_ranges == 1
    with pytest.raises(HbfError):
        sess.attach_flag_table(FlagTable(StateMirror()))   # one table per session
    sess.unregister(f)
    assert h.n_flag_ranges == 0 and [x.mode for x in sess.ranges] == [C.HBF_MODE_TIMING]
    sess.unregister(r)


def test_registration_errors_carry_codes(sess):
    sess.register_timing_range(BASE, 1 << 20)
    with pytest.raises(HbfError) as ei:
        sess.register_timing_range(BASE + 4096, 4096)
    assert ei.value.code == ErrorCode.RANGE_OVERLAP
    with pytest.raises(HbfError) as ei:
        sess.register_timing_range(BASE + (8 << 20), 0)
    assert ei.value.code == ErrorCode.RANGE_ZERO_LENGTH
    with pytest.raises(HbfError) as ei:
        sess.unregister(999_999)
    assert ei.value.code == ErrorCode.RANGE_NOT_FOUND
    assert sess.state.n_ranges == 1             # nothing half-applied


def _summary(s) -> dict:
    return json.loads(s.client.call("GetSummary", s.client.pb.GetSummaryRequest()).summary_json)


def test_gate_refuses_non_admitted_kernel_reaching_a_range_and_reports_it(sess):
    sess.register_timing_range(BASE, 1 << 20)
    sess.gate("native_ok", None, [BASE + (2 << 20)])        # reaches nothing: allowed
    with pytest.raises(LaunchRefused) as ei:
        sess.gate("bad_kernel", KernelInfo("bad_kernel", 0, 0, False, ["ld.global.nc.v8 not modeled"]),
                  [BASE + 64])
    assert ei.value.code == ErrorCode.LAUNCH_REFUSED
    assert "ld.global.nc.v8 not modeled" in str(ei.value)
    with pytest.raises(LaunchRefused):
        sess.gate("unknown_args", None, None)                # arguments unknown (Triton): refused
    text = json.dumps(_summary(sess))
    assert "launch_refused" in text and "bad_kernel" in text


def test_allow_unmodeled_runs_and_says_so(hbfd_daemon):
    s = runtime_cuda.attach(socket=hbfd_daemon[0], allow_unmodeled=True, cuda=False)
    try:
        r = s.register_timing_range(BASE + (16 << 20), 4096)
        s.gate("k_unmodeled", None, [BASE + (16 << 20)])     # no exception
        assert s.unmodeled_launches and s.unmodeled_launches[0]["kernel"] == "k_unmodeled"
        assert s.counters()["unmodeled_launches"]
        assert "k_unmodeled" in json.dumps(_summary(s))
        s.unregister(r)
    finally:
        s.close()


def test_registration_after_an_admitted_launch_is_accepted(sess):
    """No refusal after address reuse (torch's caching allocator hands a freed block to a new tensor): a
    launch sees the range table as of its launch, because the runtime lets every launch issued before a
    registration finish before the device table changes (the context is synchronized first)."""
    sess.gate("admitted_k", KernelInfo("admitted_k", 0, 0, True), [BASE + (32 << 20) + 100])
    r = sess.register_timing_range(BASE + (32 << 20), 4096)
    assert sess.range_containing(BASE + (32 << 20) + 100) is not None
    sess.unregister(r)


def test_counters_published_into_the_region(sess):
    seq = sess.ctl.ctl.counters.device_sync_seq
    c = sess.counters()
    assert set(c["totals"]["ops"]) == set(C.OP_NAMES)
    assert sess.ctl.ctl.counters.device_sync_seq == seq + 1
    # the inline path's own time (helper ABI 8): per kernel and in the totals, published into a reserved word
    assert "inline_ns" in c["totals"] and all("inline_ns" in k for k in c["kernels"].values())
    assert sess.ctl.ctl.counters.device_inline_ns == c["totals"]["inline_ns"]


def test_closed_session_refuses_calls(hbfd_daemon):
    s = runtime_cuda.attach(socket=hbfd_daemon[0], cuda=False)
    s.close()
    with pytest.raises(HbfError):
        s.register_timing_range(BASE, 4096)


def test_no_daemon_is_a_clear_error(tmp_path):
    with pytest.raises(HbfError) as ei:
        runtime_cuda.attach(socket=str(tmp_path / "none.sock"), cuda=False)
    assert ei.value.code == ErrorCode.DAEMON_UNAVAILABLE


def test_artifact_parsing():
    from hbfcommon.artifact import kernels as artifact_kernels
    assert artifact_kernels({"kernels": [{"name": "a", "admitted": True},
                                         {"name": "b", "refused": ["tma multicast"]}]}) == \
        [("a", True, []), ("b", False, ["tma multicast"])]
    assert artifact_kernels({"kernels": {"c": {"admitted": False, "reasons": ["x"]}}}) == [("c", False, ["x"])]
    assert artifact_kernels(None) == []


def test_an_nvcc_build_document_binds_its_modules_kernels():
    """hbfcc as nvcc writes {"modules": [module docs]} beside the output (one per compiled PTX):
    its kernels are found, and a kernel is admitted only when every module admits it."""
    from hbfcommon.artifact import kernels as artifact_kernels
    m1 = {"kernels": [{"name": "saxpy", "admitted": True, "not_admitted_reasons": [], "refused": []},
                      {"name": "scale", "admitted": True, "not_admitted_reasons": [], "refused": []}]}
    m2 = {"kernels": [{"name": "saxpy", "admitted": False, "not_admitted_reasons": ["uses tma"], "refused": []},
                      {"name": "scale", "admitted": True, "not_admitted_reasons": [], "refused": []}]}
    doc = {"schema": "hbfcc.admission.nvcc", "modules": [m1, m2]}
    got = {n: (a, r) for n, a, r in artifact_kernels(doc)}
    assert got == {"saxpy": (False, ["uses tma"]), "scale": (True, [])}
