"""The helper PTX builds, assembles for sm_90a, exports exactly the ABI of hbf_abi.h, and links
with a kernel that calls it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from runtime_cuda import linker

ROOT = Path(__file__).resolve().parents[2]
ABI = ROOT / "runtime_cuda" / "include" / "hbf_abi.h"


@pytest.fixture(scope="module", params=["direct", "lean", "l2"])
def helper(request, nvcc, tmp_path_factory):
    """The builds of the helpers (`make helpers-ptx`): direct (default), lean (-DHBF_OOL_OPAQUE=1) and l2
    (-DHBF_L2_MODEL=1: the L2 model's hooks, docs/design.md §3.12)."""
    out = tmp_path_factory.mktemp("ptx") / f"hbf_helpers_{request.param}.ptx"
    var = {"direct": "HELPER_PTX", "lean": "HELPER_LEAN_PTX", "l2": "HELPER_L2_PTX"}[request.param]
    r = subprocess.run(["make", "-s", f"{var}={out}", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout
    assert out.exists(), f"make built no {request.param} helper PTX: {r.stdout}"
    return out


def _decls(text: str) -> dict[str, tuple[str, str, list[str], list[str]]]:
    """name -> (linkage, kind, return param types, param types) for every exported symbol."""
    out = {}
    for m in re.finditer(r"^\.(visible|weak) \.func\s*(\((.*?)\))?\s*(\w+)\s*\((.*?)\)", text, flags=re.M | re.S):
        rets = re.findall(r"\.param\s+\.(\w+)", m.group(3) or "")
        params = re.findall(r"\.param\s+\.(\w+)", m.group(5))
        out[m.group(4)] = (m.group(1), "func", rets, params)
    for m in re.finditer(r"^\.(visible|weak) \.(global|const)\s+(?:\.align \d+\s+)?\.(\w+)\s+(\w+)", text, flags=re.M):
        out[m.group(4)] = (m.group(1), m.group(2), [m.group(3)], [])
    return out


def _abi_decls(header: Path = ABI) -> dict[str, tuple[str, str, list[str], list[str]]]:
    """The prototypes and globals written in hbf_abi.h's comment (or another header's)."""
    text = header.read_text()
    out = {}
    for m in re.finditer(r"\.weak \.func\s*(\((.*?)\))?\s*(__hb_\w+)\((.*?)\);", text, flags=re.S):
        out[m.group(3)] = ("weak", "func", re.findall(r"\.param \.(\w+)", m.group(2) or ""),
                           re.findall(r"\.param \.(\w+)", m.group(4)))
    for m in re.finditer(r"\.visible \.(global|const) \.align \d+ \.(\w+) (__hb_\w+)(?:\[\d+\])?;", text):
        out[m.group(3)] = ("visible", m.group(1), [m.group(2)], [])
    return out


L2_ONLY = {"__hb_l2_hooks"}   # hbf_abi.h: only the L2 build exports it


def test_abi_header_lists_the_fourteen_helpers_and_three_globals():
    a = _abi_decls()
    assert set(a) == {"__hb_issue", "__hb_wait", "__hb_future_join", "__hb_kernel_enter", "__hb_kernel_exit",
                      "__hb_inline_until", "__hb_kernel_flush", "__hb_issue_group",
                      "__hb_inline_until_live",                                   # ABI 7 (inline_ns: ABI 8)
                      "__hb_tma", "__hb_mbar_note", "__hb_mbar_wait", "__hb_tma_enter", "__hb_tma_exit",   # ABI 5
                      "__hb_state", "__hb_kslot_base", "__hb_cdesc",
                      *L2_ONLY}
    assert a["__hb_cdesc"][1] == "const"   # the launch descriptor lives in the constant bank


def test_abi8_flushes_take_inline_ns(helper):
    """Helper ABI 8: both inline flushes take one more .b64, inline_ns, last (the inline path's own time,
    hbfcc HBFCC_INLINE_TIME), in the header, in hbfcommon.abi (what hbfcc declares) and in every helper build."""
    from hbfcommon import abi
    assert abi.HBF_HELPER_ABI_VERSION == 8
    assert re.search(r"#define HBF_HELPER_ABI_VERSION 8u", ABI.read_text())
    hdr, got = _abi_decls(), _decls(helper.read_text())
    for name in ("__hb_kernel_flush", "__hb_inline_until_live"):
        sig = abi.HELPERS[name]
        assert sig.params[-1] == (64, "inline_ns"), name
        assert [f"b{w}" for w, _ in sig.params] == hdr[name][3], name
        assert [t.replace("u64", "b64").replace("u32", "b32") for t in got[name][3]] == hdr[name][3], name
    assert len(abi.HELPERS["__hb_inline_until_live"].params) == len(abi.HELPERS["__hb_kernel_flush"].params) + 1


def test_helper_ptx_exports_exactly_the_abi(helper):
    got = _decls(helper.read_text())
    want = _abi_decls() | _abi_decls(ABI.parent / "hbf_capacity.h")   # + capacity mode's block
    if not helper.name.endswith("_l2.ptx"):
        want = {k: v for k, v in want.items() if k not in L2_ONLY}
    assert set(got) == set(want), f"exports differ: extra {set(got) - set(want)}, missing {set(want) - set(got)}"
    for name, (link, kind, rets, params) in want.items():
        g = got[name]
        assert g[0] == link and g[1] == kind, (name, g)
        norm = lambda ts: [t.replace("u64", "b64").replace("u32", "b32") for t in ts]  # noqa: E731
        assert norm(g[2]) == norm(rets), (name, g[2], rets)
        assert norm(g[3]) == norm(params), (name, g[3], params)


def test_helper_ptx_targets_sm90a_and_assembles(helper, tmp_path):
    text = helper.read_text()
    assert re.search(r"^\.target sm_90a", text, flags=re.M)
    r = subprocess.run([linker.tool("ptxas"), "-arch=sm_90a", "-c", "-v", str(helper), "-o", str(tmp_path / "h.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "__hb_issue" in r.stderr   # -v reports every function


def test_host_mapped_words_polled_with_acquire_or_volatile_only(helper):
    """The control-region rules: acquire/volatile loads, release stores (no plain polling)."""
    text = helper.read_text()
    assert "ld.acquire.sys.global.u64" in text
    assert "st.release.sys.global.u64" in text
    assert "%globaltimer" in text and "nanosleep" in text
    assert "exit;" in text   # terminal failures end the warp with exit (hbf_helpers.cu hb_end), not trap


def test_kernel_calling_helpers_links_into_a_cubin(nvcc, tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(
        'extern "C" __device__ unsigned long long __hb_issue(unsigned long long, unsigned, unsigned, unsigned);\n'
        'extern "C" __device__ void __hb_wait(unsigned long long, unsigned);\n'
        'extern "C" __global__ void k(float* a){ unsigned long long f = __hb_issue((unsigned long long)a, 4, 4, 0);'
        ' float v = *a; __hb_wait(f, 0); a[1] = v; }\n')
    ptx = linker.cu_to_ptx(src, tmp_path / "k.ptx")
    cubin = linker.link_cubin([ptx], tmp_path / "k.cubin")
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert b"__hb_state" in data and b"__hb_issue" in data
    with pytest.raises(Exception) as ei:   # without the helpers the link must fail
        linker.link_cubin([ptx], tmp_path / "bad.cubin", with_helpers=False)
    assert "__hb_issue" in str(ei.value)


def test_microbench_builds_and_links(nvcc, tmp_path):
    info = linker.build_microbench(tmp_path)
    assert info["cubin"].stat().st_size > 10_000
    text = info["ptx"].read_text()
    for k in ("stream_plain", "stream_instr", "probe_instr", "sem_instr", "rate_instr"):
        assert f".entry {k}(" in text
    plain = text.split(".entry stream_plain(")[1].split(".entry")[0]
    assert "__hb_" not in plain   # the plain twin calls no helper


def _def_of(lines: list[str], i: int, reg: str) -> str:
    """The nearest instruction before line i (same function) that writes register `reg`."""
    for j in range(i - 1, -1, -1):
        ln = lines[j].strip()
        if ln.startswith((".func", ".visible .func", ".weak .func", ".entry")):
            break
        if re.match(rf"^\S+\s+{re.escape(reg)},", ln):
            return ln
    raise AssertionError(f"no definition of {reg} before line {i}")


def test_reference_tickets_are_reserved_in_device_memory(helper):
    """hb_ref_issue reserves its ticket with an atomicAdd on hbf_device_state.ref_next_ticket (device
    memory), not on the host-mapped header.ring_head: the atomic whose result is masked to a ring slot
    adds at offsetof(ref_next_ticket) to the state pointer (__hb_state, or hb_ref_issue's first
    parameter in the lean build), never to the control-region pointer st->ctl."""
    from hbfcommon import ctl as C
    from runtime_cuda import devstate as D
    off = D.hbf_device_state.ref_next_ticket.offset
    lines = helper.read_text().splitlines()
    found = 0
    for i, ln in enumerate(lines):
        m = re.match(r"^\s*atom\.(?:global\.)?add\.u64\s+(%rd\d+),\s*\[(%rd\d+)(?:\+(\d+))?\],\s*1;", ln)
        if not m:
            continue
        # the ticket atomic: its result is truncated and masked with HBF_RING_SLOTS - 1 right after
        nxt = "\n".join(lines[i + 1:i + 4])
        cv = re.search(rf"cvt\.u32\.u64\s+(%r\d+),\s*{re.escape(m.group(1))};", nxt)
        if not (cv and re.search(rf"and\.b32\s+%r\d+,\s*{re.escape(cv.group(1))},\s*{C.HBF_RING_SLOTS - 1};", nxt)):
            continue
        found += 1
        addr, disp = m.group(2), int(m.group(3) or 0)
        d = _def_of(lines, i, addr)
        a = re.match(rf"add\.s64\s+{re.escape(addr)},\s*(%rd\d+),\s*(\d+);", d)
        if a:
            base, disp = a.group(1), disp + int(a.group(2))
        else:
            base = addr
        assert disp == off, f"ticket atomic at +{disp}, want ref_next_ticket at +{off} (line {i + 1}: {ln.strip()})"
        bdef = _def_of(lines, i, base)
        assert re.search(r"\[__hb_state\]|_param_0\]", bdef), \
            f"ticket atomic's base is not the device state pointer: {bdef} (line {i + 1})"
    assert found >= 1, "no ticket atomic (atom.add 1, masked to a ring slot) found in the helper PTX"


def test_helper_call_chains_fit_the_stack_bound(helper, tmp_path):
    """devstate.HELPER_STACK_BOUND (what the runtime adds to a kernel's frame for the helpers' calls)
    covers the sum of every helper function's stack frame, which bounds any call chain (the helpers'
    call graph is acyclic: no recursion)."""
    from runtime_cuda import devstate as D
    r = subprocess.run([linker.tool("ptxas"), "-arch=sm_90a", "-c", "-v", str(helper), "-o", str(tmp_path / "h.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    frames = [int(x) for x in re.findall(r"(\d+) bytes stack frame", r.stderr)]
    assert len(frames) >= 5, r.stderr
    assert sum(frames) <= D.HELPER_STACK_BOUND, (sum(frames), frames)


def test_reference_fast_path_cost(helper):
    """The reference path's owner (hb_ticket_deadline, the lean build's own function; the direct builds inline it)
    from its poll to its consumed store: the four 16-byte host loads of the self-contained completion (no read
    of the request slot), ONE device atomic (the claim, docs/runtime.md "ring") and no fence. Stealing, overflow
    lookups and the seqlock re-read are in other functions."""
    if "lean" not in helper.name:
        pytest.skip("the owner is a function of its own only in the lean build")
    text = helper.read_text()
    m = re.search(r"^\.func[^\n]*hb_ticket_deadlineEP16hbf_device_statemj\((.*?)^\}", text, re.S | re.M)
    assert m, "hb_ticket_deadline not found in the lean PTX"
    body = m.group(1)
    fast = body[:body.index("st.release.gpu.global.u64")]      # up to the (first) consumed store
    assert fast.count("ld.volatile.global.v2.u64") == 4, fast
    assert len(re.findall(r"\batom\.", fast)) == 1 and "atom.max.u64" in fast
    assert "membar" not in fast and "fence" not in fast
    assert body.count("ld.volatile.global.v2.u64") == 4         # the slow paths read elsewhere


def test_stealer_claims_by_cas_and_joins_elect_one_taker(helper):
    """The ring claim fix of stop 45 (docs/runtime.md "ring", claims): the stealer's claim is a compare-and-swap
    (an atomicMax raised the owner's claim to "stolen" after the owner had taken the completion, and a second take
    of the ticket then waited forever: the reference-source Qwen3 hang), and a join elects one taker per ticket
    (__match_any_sync) instead of every lane taking the shared ticket itself. Both are functions of their own only
    in the lean build."""
    if "lean" not in helper.name:
        pytest.skip("hb_ref_steal / hb_join_slow are functions of their own only in the lean build")
    text = helper.read_text()

    def body(name: str) -> str:
        m = re.search(r"^\.func[^\n]*" + name + r"[^\n]*\((.*?)^\}", text, re.S | re.M)
        assert m, f"{name} not found in the lean PTX"
        return m.group(1)
    steal = body("hb_ref_stealEP16hbf_device_state")
    assert "atom.max" not in steal and "atom.global.max" not in steal, "the stealer must not claim by atomicMax"
    assert len(re.findall(r"\batom(\.global)?\.cas\.b64", steal)) >= 2, steal   # the claim and the entry's BUSY
    join = body("hb_join_slowEP16hbf_device_state")
    assert join.count("match.any.sync") >= 2, "each of a join's two futures is taken once per warp"
