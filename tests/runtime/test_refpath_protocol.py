"""Reference-path protocol pieces changed for throughput and fail-fast (CPU, real hbfd):
- the device's request check tag (hb_req_tag in runtime_cuda/src/hbf_helpers.cu, compiled here as host
  C++ from the very source text) equals hbfd's request_tag for random records;
- with HBFD_RING_TAGS=1 hbfd takes a tagged ring slot only once its tag matches (a payload store not
  yet visible is retried) and serves untagged slots as before; by default the tag bits are ignored;
- a device failure recorded by the GPU (header.device_failure) is raised by the session as
  DeviceFailure with the status code, at the next launch (gate) and reported to hbfd once.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import runtime_cuda
from hbfcommon import ctl as C
from hbfcommon.errors import ErrorCode
from hbfd.runner import start_daemon
from hbfcommon.ctl import request_tag
from runtime_cuda.session import DeviceFailure

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "runtime_cuda" / "src" / "hbf_helpers.cu"
N = C.HBF_RING_SLOTS


def _device_tag_source() -> str:
    text = HELPERS.read_text()
    m = re.search(r"#define HB_TAG_K (\S+)\n(HB_DEV uint32_t hb_req_tag\(.*?\n\})", text, re.S)
    assert m, "hb_req_tag not found in hbf_helpers.cu"
    return f"#include <cstdint>\n#define HB_DEV static inline\n#define HB_TAG_K {m.group(1)}\n{m.group(2)}\n"


KEY = 0x1234_5678_9ABC_DEF1


def test_device_tag_equals_hbfd_tag(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    rng = np.random.default_rng(7)
    rows = rng.integers(0, 2**63, size=(64, 8), dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size=(64, 8), dtype=np.uint64)
    rows[:, 7] &= np.uint64(0xFFFFFFFF)          # q in the low half, no tag yet
    src = tmp_path / "tag.cpp"
    body = "".join(
        "printf(\"%u\\n\", hb_req_tag(" + ", ".join(f"{int(v)}ull" for v in [KEY, *r]) + "));\n" for r in rows)
    src.write_text(_device_tag_source() + "#include <cstdio>\nint main() {\n" + body + "return 0;\n}\n")
    exe = tmp_path / "tag"
    subprocess.run([cxx, "-O1", "-std=c++17", str(src), "-o", str(exe)], check=True)
    dev = np.array([int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True,
                                                   check=True).stdout.split()], np.uint64)
    assert (dev == request_tag(rows, KEY)).all()
    for i in range(0, 64, 7):                    # one and two rows: the Python-integer path, the same tags
        assert (request_tag(rows[i:i + 1], KEY) == dev[i:i + 1]).all()
        assert (request_tag(rows[i:i + 2], KEY) == dev[i:i + 2]).all()
    assert (dev & np.uint64(1)).all()            # never 0
    bad = rows.copy()
    bad[:, 2] ^= np.uint64(1 << 12)              # one payload word differs: the tag differs
    assert (request_tag(bad, KEY) != dev).all()
    assert (request_tag(rows, KEY ^ 1) != dev).sum() >= 60   # another key: (almost) every tag differs


@pytest.fixture(scope="module")
def tagged_hbfd(tmp_path_factory):
    """A real hbfd that validates request check tags (HBFD_RING_TAGS=1)."""
    with start_daemon("nominal", workdir=tmp_path_factory.mktemp("hbfd_tags"), pythonpath=[ROOT],
                      env={"HBFD_THERMAL": "none", "HBFD_RING_TAGS": "1"}, timeout_s=90.0) as d:
        yield str(d.socket)


@pytest.fixture()
def region(hbfd_daemon):
    sock, _, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, cuda=False)
    yield s
    s.close()


@pytest.fixture()
def tagged_region(tagged_hbfd):
    s = runtime_cuda.attach(socket=tagged_hbfd, cuda=False)
    yield s
    s.close()


def _publish(m, t: int, *, tag_ok: bool | None, key: int, media: int = 0) -> None:
    """Publish ticket t: with its tag under ``key`` (tag_ok True), a wrong tag (False), none (None)."""
    s = t % N
    raw = m.ring.view(np.uint64).reshape(N, 8)
    row = np.array([t + 1, 1000 + t, 0x7F0000000000 + 64 * t, media, 128 | (C.HBF_OP_LOAD << 32),
                    1 | (0 << 32), 7 | (4 << 32), 1_000_000], np.uint64)
    if tag_ok is not None:
        tag = int(request_tag(row[None, :], key)[0])
        row[7] |= np.uint64((tag if tag_ok else tag ^ 0x10) << 32)
    raw[s, 1:] = row[1:]
    raw[s, 0] = row[0]


def _wait_completion(m, t: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if int(m.completions["seq"][t % N]) == t + 1:
            return True
        time.sleep(0.002)
    return False


def _fresh_tickets(m, n: int) -> int:
    h = m.ctl.header
    base = max(int(h.ring_head), int(m.ring["seq"].max()), int(m.completions["seq"].max()))
    h.ring_head = base + n
    return base


def _ring_summary(region) -> dict:
    import json
    summ = region.client.call("GetSummary", region.client.pb.GetSummaryRequest())
    return json.loads(summ.summary_json)


def test_a_record_without_the_runs_key_is_never_answered(region):
    """A second writer that maps the region publishes a slot's exact next ticket, untagged, with a wrong
    tag, and tagged under another key: hbfd answers none of them (counted as foreign_requests, once per
    (slot, seq)); the client's own record of that ticket is answered when it arrives, with its payload."""
    m = region.ctl
    assert region.ring_key != 0
    t = _fresh_tickets(m, 1)
    before = int(_ring_summary(region)["foreign_requests"])
    for kind in ("untagged", "wrong tag", "other key"):
        _publish(m, t, tag_ok=None if kind == "untagged" else kind == "other key",
                 key=region.ring_key ^ 0x5A5A, media=4096)
        assert not _wait_completion(m, t, 0.3), f"hbfd answered a record {kind}"
    _publish(m, t, tag_ok=True, key=region.ring_key)     # the client's own record of the same ticket
    assert _wait_completion(m, t, 10), "the client's record was never answered"
    assert int(m.completions["status"][t % N]) == C.HBF_ST_READY
    assert int(m.completions["arrival_ns"][t % N]) == 1000 + t
    assert int(_ring_summary(region)["foreign_requests"]) == before + 1   # once per (slot, seq)


def test_hbfd_takes_a_tagged_slot_only_when_its_tag_matches(tagged_region):
    region = tagged_region
    m = region.ctl
    h = m.ctl.header
    base = max(int(h.ring_head), int(m.ring["seq"].max()), int(m.completions["seq"].max()))
    t_untagged, t_tagged = base, base + 1
    h.ring_head = base + 2
    _publish(m, t_untagged, tag_ok=True, key=region.ring_key)
    assert _wait_completion(m, t_untagged, 10), "a tagged request was not served"
    _publish(m, t_tagged, tag_ok=False, key=region.ring_key)   # seq visible, payload (as far as the tag says) not yet
    assert not _wait_completion(m, t_tagged, 0.3), "hbfd served a slot whose check tag does not match"
    _publish(m, t_tagged, tag_ok=True, key=region.ring_key)    # the missing store arrives
    assert _wait_completion(m, t_tagged, 10), "the tagged request was never served after its tag matched"
    assert int(m.completions["status"][t_tagged % N]) == C.HBF_ST_READY
    assert int(m.completions["arrival_ns"][t_tagged % N]) == 1000 + t_tagged
    ring = _ring_summary(region)["ring_service"]
    assert ring["tag_retries"] >= 1 and ring["tagged_requests"] >= 1
    assert ring["requests"] >= 2 and sum(ring["batch_log2_hist"]) == ring["batches"]


def test_recorded_device_failure_is_raised_at_the_next_launch(region, hbfd_daemon):
    h = region.ctl.ctl.header
    assert region.device_failure() is None
    region.gate("k", None, [])                   # nothing recorded: the gate lets it through
    site = (3 << 16) | 5
    h.device_failure = (C.HBF_ST_DAEMON_LOST << 32) | site   # what hb_fail writes (GPU-only atomics)
    try:
        for _ in range(2):
            with pytest.raises(DeviceFailure) as ei:
                region.gate("k", None, [])
            e = ei.value
            assert e.code == ErrorCode.DAEMON_LOST and e.status == C.HBF_ST_DAEMON_LOST and e.site == site
            assert e.fields["kernel_index"] == 3 and e.fields["site_index"] == 5
        summ = region.client.call("GetSummary", region.client.pb.GetSummaryRequest())
        import json
        reps = [r for r in json.loads(summ.summary_json)["reports"] if r.get("kind") == "device_failure"]
        assert len(reps) == 1, reps              # reported once, raised every time
    finally:
        h.device_failure = 0
