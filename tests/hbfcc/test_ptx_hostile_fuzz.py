"""Hostile-input fuzzer for the hbfcc front end and rewrite (issue 19), bounded for CI (seeded, a few
seconds of rewriting plus at most ``_PTXAS_OUT`` ptxas runs of rewritten modules).

Byte-level mutations (invalid UTF-8, NUL, truncation also inside a UTF-8 sequence, braces / quotes /
comment starts, comments holding braces, huge numbers, CR/CRLF newlines, deleted spans) of small
corpus modules (the seeds of test_ptx_fuzz.py, which mutates at the token level, plus fixtures with
DWARF .section bodies). Properties:

* ``rewrite_text(bytes)`` (parse -> passes -> link -> print) raises nothing but
  :class:`hbfcommon.errors.HbfError` subclasses; a PtxError names a line (and, for bytes that are
  not UTF-8, the offset of the first bad byte);
* every mutant also passes test_ptx_fuzz's parser check (round trip, CFGs);
* the rewritten output assembles with ptxas whenever the mutant itself does.

``HBF_FUZZ_RANDOM=1`` runs more mutants with a new seed (prints it)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402
from test_ptx_fuzz import SEEDS as TOKEN_SEEDS, _check  # noqa: E402  (the token-level fuzzer's check)

from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcommon.errors import HbfError, PtxError  # noqa: E402

_RANDOM = bool(os.environ.get("HBF_FUZZ_RANDOM"))
_SEED = random.randrange(2**32) if _RANDOM else 19
_N = 3000 if _RANDOM else 500
_PTXAS_IN = 60      # mutants whose input is checked with ptxas (fast: small modules)
_PTXAS_OUT = 20     # of those that ptxas accepts, the rewritten output is assembled (slow: helper linked)

FIX = U.REPO / "tests" / "fixtures" / "triton"
# small modules with DWARF .section bodies (vector_add_f32, while_collatz) next to the token seeds
SEEDS: list[bytes] = [s.encode() for s in TOKEN_SEEDS] + \
    [(FIX / f"{n}.ptx").read_bytes() for n in ("vector_add_f32", "while_collatz") if (FIX / f"{n}.ptx").is_file()]

_BAD_UTF8 = [b"\xff", b"\xfe", b"\xc3", b"\xc3(", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80"]
_STRUCT = [b"{", b"}", b"//", b"/*", b"*/", b'"', b"// {", b"/* } */", b'// "}', b"{ }", b";", b"\\"]
_COMMENTS = [b"\t// { brace", b"\t// } brace", b" /* } { */", b' // "', b" // /* {", b"\t/* \" } */"]
_HUGE = [b"99999999999999999999999", b"18446744073709551616", b"0xFFFFFFFFFFFFFFFFFFFFFFFF", b"1e99999",
         b"-9223372036854775809", b"0f7FFFFFFFF", b"4294967296"]


def _mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """1-3 byte-level mutations; returns the mutant and what was done (for the failure report)."""
    done = []
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        n = len(b)
        i = rng.randrange(n + 1)
        k = rng.randrange(9)
        if k == 0:
            w = rng.choice(_BAD_UTF8)
            b[i:i] = w
            done.append(f"insert {w!r}@{i}")
        elif k == 1:
            b[i:i] = b"\x00"
            done.append(f"NUL@{i}")
        elif k == 2:
            if rng.random() < 0.5:          # truncate inside a UTF-8 sequence when there is one
                b[i:i] = "\u00e9\u20ac".encode()
                i += rng.randint(1, 4)
            del b[i:]
            done.append(f"truncate@{i}")
        elif k == 3:
            w = rng.choice(_STRUCT)
            b[i:i] = w
            done.append(f"insert {w!r}@{i}")
        elif k == 4:                        # a comment holding braces at the end of a line (ptxas-neutral)
            j = b.find(b"\n", i)
            j = n if j < 0 else j
            w = rng.choice(_COMMENTS)
            b[j:j] = w
            done.append(f"comment {w!r}@{j}")
        elif k == 5:                        # a number made huge
            starts = [m for m in range(max(0, i - 200), min(n, i + 200)) if chr(b[m]).isdigit()
                      and (m == 0 or not chr(b[m - 1]).isalnum())]
            if starts:
                s = rng.choice(starts)
                e = s
                while e < n and chr(b[e]).isalnum():
                    e += 1
                w = rng.choice(_HUGE)
                b[s:e] = w
                done.append(f"number {w!r}@{s}")
        elif k == 6:
            nl = rng.choice([b"\r\n", b"\r"])
            b = bytearray(bytes(b).replace(b"\n", nl))
            done.append(f"newlines {nl!r}")
        elif k == 7:
            del b[i:i + rng.randint(1, 16)]
            done.append(f"delete@{i}")
        else:                               # valid non-ASCII UTF-8 in a comment
            j = b.find(b"\n", i)
            j = n if j < 0 else j
            b[j:j] = " // caf\u00e9".encode()
            done.append(f"utf8 comment@{j}")
    return bytes(b), done


def _ptxas(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([U.tool("ptxas"), "-arch=sm_90a", "-c", str(path), "-o", str(path) + ".o"],
                          capture_output=True, text=True, errors="replace")


@pytest.fixture(scope="module")
def helper():
    from hbfcc import helpers as H
    return H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx())


def test_hostile_bytes_only_hbf_errors_and_output_assembles_when_input_does(helper):
    if _RANDOM:
        print(f"HBF_FUZZ seed {_SEED}")
    rng = random.Random(_SEED)
    failures: list[str] = []
    ok: list[tuple[int, bytes, str, list[str]]] = []       # (index, mutant, rewritten text, what was done)
    kinds = {"rewritten": 0, "ptx_error": 0, "other_hbf_error": 0}
    for idx in range(_N):
        seed = idx % len(SEEDS)
        data, done = _mutate(SEEDS[seed], rng)
        where = f"mutant {idx} (seed {seed}, {'; '.join(done)})"
        try:
            _check(data)                   # the parser-level properties of test_ptx_fuzz.py, on bytes
        except AssertionError as e:
            failures.append(f"{where}: parser check: {e}")
            continue
        except Exception as e:  # noqa: BLE001  (the property: nothing but HbfError)
            failures.append(f"{where}: parser check raised {type(e).__name__}: {e}")
            continue
        try:
            res = rewrite_text(data, filename="mut.ptx", helper=helper)
        except PtxError as e:
            kinds["ptx_error"] += 1
            if not isinstance(e.fields.get("line"), int):
                failures.append(f"{where}: PtxError without a line: {e}")
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as u:
                if e.fields.get("offset") != u.start:
                    failures.append(f"{where}: non-UTF-8 error names offset {e.fields.get('offset')}, "
                                    f"the first bad byte is at {u.start}: {e}")
            continue
        except HbfError:
            kinds["other_hbf_error"] += 1
            continue
        except Exception as e:  # noqa: BLE001
            failures.append(f"{where}: rewrite raised {type(e).__name__}: {e}")
            continue
        kinds["rewritten"] += 1
        if not res.already_instrumented:
            ok.append((idx, data, res.text, done))
    assert not failures, f"{len(failures)} of {_N} mutants broke a property:\n" + "\n".join(failures[:20])
    assert kinds["rewritten"] > 20 and kinds["ptx_error"] > 100, kinds     # the fuzzer exercises both sides

    # ptxas: the rewritten output must assemble whenever the mutant does. Check inputs spread over
    # the run (cheap), then assemble the outputs of those ptxas accepts (at most _PTXAS_OUT).
    U.tool("ptxas")
    pick = ok[:: max(1, len(ok) // _PTXAS_IN)][:_PTXAS_IN]
    with tempfile.TemporaryDirectory(prefix="hbf-fuzz.") as d, ThreadPoolExecutor(2) as pool:
        ins = []
        for idx, data, _, _ in pick:
            p = Path(d) / f"in{idx}.ptx"
            p.write_bytes(data)
            ins.append(p)
        accepted = [c for c, cp in zip(pick, pool.map(_ptxas, ins)) if cp.returncode == 0][:_PTXAS_OUT]
        assert len(accepted) >= 5, f"ptxas accepts only {len(accepted)} of {len(pick)} checked mutants: " \
            "the ptxas property is hardly exercised"
        outs = []
        for idx, _, text, _ in accepted:
            p = Path(d) / f"out{idx}.ptx"
            p.write_text(text)
            outs.append(p)
        for (idx, _, _, done), cp in zip(accepted, pool.map(_ptxas, outs)):
            if cp.returncode != 0:
                failures.append(f"mutant {idx} ({'; '.join(done)}): ptxas accepts the input but rejects the "
                                f"rewritten output:\n{cp.stderr[-800:]}")
    assert not failures, "\n".join(failures)


def test_comments_holding_braces_are_never_refused(helper):
    """A comment holding braces, quotes or comment starts at the end of a line changes nothing for
    ptxas (the seeds have no block comment over lines): hbfcc must rewrite every such mutant of a seed
    it rewrites -- the .section-body finding of issue 19 refused these."""
    rng = random.Random(_SEED + 1)
    refused = []
    for si, seed in enumerate(SEEDS):
        rewrite_text(seed, filename=f"seed{si}.ptx", helper=helper)       # the seed itself rewrites
        lines = seed.split(b"\n")
        for v in range(25):
            mut = list(lines)
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(mut))
                mut[j] = mut[j] + rng.choice(_COMMENTS)
            data = b"\n".join(mut)
            try:
                rewrite_text(data, filename=f"seed{si}.v{v}.ptx", helper=helper)
            except HbfError as e:
                refused.append(f"seed {si} variant {v}: {e}")
    assert not refused, "\n".join(refused[:10])


def test_byte_mutations_are_deterministic():
    a = [_mutate(SEEDS[0], random.Random(5)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
