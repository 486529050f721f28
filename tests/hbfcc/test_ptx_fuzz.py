"""Property test: random mutations of fixture PTX never crash the front end. Each mutant either
parses (and then round-trips: parse(print(m)) == m, and its CFGs build or raise PtxError) or raises
PtxError carrying a line number. Any other exception is a bug. (Byte-level mutations -- invalid
UTF-8, NUL, CRLF, huge numbers -- and the rewrite + ptxas properties: test_ptx_hostile_fuzz.py.)

The examples are derandomized so CI is reproducible; for exploration run with random seeds, e.g.
``HBF_FUZZ_RANDOM=1 pytest tests/hbfcc/test_ptx_fuzz.py`` (more examples, new seed each run)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import os

from hypothesis import HealthCheck, given, settings, strategies as st

_RANDOM = bool(os.environ.get("HBF_FUZZ_RANDOM"))
_N = 5000 if _RANDOM else 400

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import ptx_corpus  # noqa: E402

from hbfcc.ptx import parse_module, print_module  # noqa: E402
from hbfcc.ptx.cfg import build_cfg  # noqa: E402
from hbfcommon.errors import PtxError  # noqa: E402

_TRITON = ptx_corpus.triton_corpus()
# small, feature-dense seeds (inline asm blocks, TMA, atomics, spin loops, debug sections)
_SEED_NAMES = ["spin_wait_inline_asm", "tma_host_desc_copy", "atomic_variety_scopes", "inline_asm_blocks",
               "vector_add_f32", "spin_wait_flag_cas", "tma_device_desc_copy"]
_HAND = """//
.version 9.0
.target sm_90a
.address_size 64
.extern .shared .align 16 .b8 global_smem[];
.global .align 1 .b8 msg[3] = {1, 2, 3};
.weak .func (.param .b32 rv) f(.param .b64 a) { .reg .b32 %r<2>; ld.param.b32 %r1, [a]; st.param.b32 [rv], %r1; ret; }
.visible .entry k(.param .align 64 .b8 tm[128], .param .u64 .ptr .global .align 1 p) .maxntid 128, 1, 1
{
\t.reg .pred %p<3>; .reg .b32 %r<9>; .reg .b64 %rd<4>;
\t/* c */ mov.b64 %rd1, tm; ld.param.u64 %rd2, [p];
$L__BB0_1:
\t@%p1 ld.global.nc.v4.b32 { %r1, %r2, _, %r4 }, [ %rd2 + -16 ];
\tsetp.lt.s32 %p1|%p2, %r1, 0f3F800000; @!%p2 bra.uni $L__BB0_1;
\t{ .reg .pred c; w: mbarrier.try_wait.parity.shared::cta.b64 c, [%r5], %r6; @!c bra.uni w; }
\t{ .param .b64 a0; .param .b32 r0; st.param.b64 [a0], %rd2; call.uni (r0), f, (a0); }
\t.pragma "nounroll";
\tret;
}
"""
SEEDS = [_HAND] + [_TRITON[n].read_text() for n in _SEED_NAMES if n in _TRITON]
_VOCAB = [";", "{", "}", "[", "]", "(", ")", ",", "@", "!", "%r1", ".reg", '"', "/*", "*/", "//", ":",
          "|", "_", "0f3F800000", "-", "+", "\n", ".entry", ".func", "<", ">", "=", ".b32", "bra", "L:",
          "0x", "$L__BB0_1", ".section", ".version 9.0", "::", ".", "\\", "#", "\x00", "1e999", "99999999999999999999",
          "099", "010", "0x", "0b2", "1.", "-"]
_TOK = re.compile(r"\s+|[\w$%.]+|.", re.S)


def _mutate(text: str, ops) -> str:
    toks = _TOK.findall(text)
    for kind, a, b, w in ops:
        if not toks:
            break
        i = a % len(toks)
        if kind == 0:
            del toks[i]
        elif kind == 1:
            toks.insert(i, toks[i])
        elif kind == 2:
            toks[i] = w
        elif kind == 3:
            toks.insert(i, w)
        elif kind == 4:   # truncate the line containing token i
            j = i
            while j < len(toks) and "\n" not in toks[j]:
                j += 1
            del toks[i:j]
        elif kind == 5:   # delete a span
            del toks[i:i + 1 + b % 8]
        elif kind == 6:   # truncate the whole text
            del toks[i:]
    return "".join(toks)


_op = st.tuples(st.integers(0, 6), st.integers(0, 10**6), st.integers(0, 100), st.sampled_from(_VOCAB))


def _check(text: str | bytes) -> None:
    """The parser's properties for one input (str, or bytes: test_ptx_hostile_fuzz.py mutates bytes)."""
    try:
        m = parse_module(text, "mut.ptx")
    except PtxError as e:
        assert isinstance(e.fields.get("line"), int) and e.fields["line"] >= 0
        assert e.fields["line"] <= text.count(b"\n" if isinstance(text, bytes) else "\n") + 2
        return
    printed = print_module(m)
    assert parse_module(printed, "mut.printed") == m
    for f in m.functions():
        if f.body is not None:
            try:
                build_cfg(f)
            except PtxError as e:
                assert isinstance(e.fields.get("line"), int)


@settings(max_examples=_N, deadline=None, derandomize=not _RANDOM, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, len(SEEDS) - 1), ops=st.lists(_op, min_size=1, max_size=6))
def test_mutations_never_crash(seed, ops):
    _check(_mutate(SEEDS[seed], ops))


def test_seeds_parse():
    for s in SEEDS:
        _check(s)
        parse_module(s, "seed.ptx")


@settings(max_examples=_N // 2, deadline=None, derandomize=not _RANDOM, database=None)
@given(st.lists(st.sampled_from(list("{}[]();,.@!%_|:\"/*-+ \n\tabr0123") + _VOCAB), max_size=60))
def test_garbage_never_crashes(parts):
    s = "".join(parts)
    _check(".version 9.0\n.target sm_90a\n.address_size 64\n.entry k()\n{\n" + s + "\n}\n")
    _check(s)


def test_deep_nesting_is_an_error_not_a_crash():
    body = "{" * 5000 + "ret;" + "}" * 5000
    _check(".version 9.0\n.target sm_90a\n.address_size 64\n.entry k()\n{\n" + body + "\n}\n")
    ok = "{" * 200 + "ret;" + "}" * 200
    _check(".version 9.0\n.target sm_90a\n.address_size 64\n.entry k()\n{\n" + ok + "\n}\n")


def test_bad_integer_literals_are_ptx_errors():
    hdr = ".version 9.0\n.target sm_90a\n.address_size 64\n"
    for bad in (".global .align 09 .b8 a[4];", ".global .b8 a[099];", ".reg .b32 %r<08>;"):
        _check(hdr + bad + "\n")
    body = hdr + ".entry k()\n{\n\t.reg .b32 %r<2>;\n\tld.global.u32 %r1, [099];\n\tmov.u32 %r1, 09;\n}\n"
    _check(body)
