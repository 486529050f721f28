"""The TMA completion table (runtime_cuda/src/hbf_tma_table.cuh, issue 15) run on the CPU: the same header the
device helpers use, compiled into a small command interpreter (tests/runtime/tma_table_host.cpp). It checks the
phase-object rules of docs/design.md §3.3 "TMA and bulk async copies": copies of one phase join (latest deadline),
a waiter gets its phase's deadline, a reused parity opens a new object, the other parity's object closes at the
next phase's first copy (keeping its deadline for late waiters), and every opened object ends exactly once --
consumed, stale or leaked -- under the pipelined reuse Triton / FA3 loops make of 2-4 barriers."""
from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CXX = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    if CXX is None:
        pytest.fail("no C++ compiler (g++/c++/clang++) found: the table's host twin cannot be built")
    exe = tmp_path_factory.mktemp("tmat") / "tmat"
    subprocess.run([CXX, "-std=c++17", "-O1", f"-I{ROOT / 'runtime_cuda' / 'include'}", "-o", str(exe),
                    str(HERE / "tma_table_host.cpp")], check=True, capture_output=True)
    return exe


class Table:
    """One interpreter process (a fresh table per instance)."""

    def __init__(self, exe: Path):
        self.p = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.tot = {"phases": 0, "consumed": 0, "stale": 0, "leaked": 0}

    def _ask(self, line: str) -> str:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def put(self, mbar: int, par: int, dl: int, cta: int = 0) -> tuple[int, int, int]:
        r = self._ask(f"put {cta} {mbar} {par} {dl}")
        if r == "full":
            return None
        ph, co, st = map(int, r.split())
        self.tot["phases"] += ph
        self.tot["consumed"] += co
        self.tot["stale"] += st
        return ph, co, st

    def take(self, mbar: int, par: int, cta: int = 0) -> int:
        return int(self._ask(f"take {cta} {mbar} {par}"))

    def exit(self, cta: int = 0) -> tuple[int, int]:
        co, lk = map(int, self._ask(f"exit {cta}").split())
        self.tot["consumed"] += co
        self.tot["leaked"] += lk
        return co, lk

    def word(self, mbar: int, par: int, cta: int = 0) -> int:
        return int(self._ask(f"word {cta} {mbar} {par}"), 16)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


@pytest.fixture
def T(table):
    t = Table(table)
    yield t
    t.close()


def test_copies_of_one_phase_join_and_the_waiter_gets_the_latest(T):
    assert T.put(64, 0, 1000) == (1, 0, 0)
    assert T.put(64, 0, 900) == (0, 0, 0)         # a second copy of the same phase (e.g. the B tile)
    assert T.put(64, 0, 1500) == (0, 0, 0)
    assert T.take(64, 0) == 1500
    assert T.take(64, 0) == 1500                   # every waiter of the phase waits for it
    assert T.take(64, 1) == 0                      # the other parity: nothing issued
    assert T.take(72, 0) == 0                      # another barrier: no tracked copy


def test_the_next_phase_closes_the_previous_and_a_late_waiter_still_waits(T):
    T.put(64, 0, 1000)
    assert T.take(64, 0) == 1000
    assert T.put(64, 1, 2000) == (1, 1, 0)          # phase 1 opens; phase 0 (waited) ends consumed
    assert T.take(64, 0) == 1000                   # a late waiter of phase 0 still waits for its deadline
    assert T.word(64, 0) >> 63 == 1                # closed


def test_a_phase_nobody_waited_is_stale_when_the_next_one_opens(T):
    T.put(64, 0, 1000)
    assert T.put(64, 1, 2000) == (1, 0, 1)
    assert T.tot == {"phases": 2, "consumed": 0, "stale": 1, "leaked": 0}


def test_a_reused_parity_opens_a_new_object_not_the_old_deadline(T):
    """Phase 2 reuses parity 0 while phase 1 had no tracked copy (only arrivals): the waited phase-0 object ends
    consumed and phase 2's waiters wait for phase 2's deadline, not the max with phase 0's."""
    T.put(64, 0, 5000)
    assert T.take(64, 0) == 5000
    assert T.put(64, 0, 3000) == (1, 1, 0)
    assert T.take(64, 0) == 3000


def test_open_objects_at_exit_are_consumed_or_leaked(T):
    T.put(64, 0, 1000)
    T.take(64, 0)
    T.put(80, 1, 1000)                              # never waited
    assert T.exit() == (1, 1)


def test_multicast_tables_are_per_cta(T):
    for cta in (0, 1, 2):
        T.put(64, 0, 700 + cta, cta=cta)
    assert [T.take(64, 0, cta=c) for c in (0, 1, 2, 3)] == [700, 701, 702, 0]


def test_the_table_holds_its_entries_and_then_refuses(T):
    for k in range(16):
        assert T.put(64 + 8 * k, 0, 10) is not None
    assert T.put(64 + 8 * 16, 0, 10) is None        # full: the helper fails closed (UNSUPPORTED)
    assert T.put(64 + 8 * 3, 0, 10) is not None     # known barriers still work


@pytest.mark.parametrize("stages, seed", [(2, 1), (3, 2), (4, 3)])
def test_pipelined_reuse_ends_every_object_exactly_once(T, stages, seed):
    """A software pipeline as Triton / FA3 emit it: `stages` full barriers, the producer refills stage s only
    after the consumers released it; per fill 1-2 copies; the consumers wait on the phase's parity. Every waiter
    gets its own phase's deadline, and phases == consumed + stale + leaked after the exit."""
    rng = random.Random(seed)
    iters = 40
    phase = [0] * stages
    deadlines = {}
    for it in range(iters + stages):
        if it < iters:                              # producer: fill stage it % stages
            s = it % stages
            par = phase[s] & 1
            dls = [1000 * it + rng.randrange(500) for _ in range(rng.choice((1, 2)))]
            for d in dls:
                T.put(64 + 8 * s, par, d)
            deadlines[it] = max(dls)
        c = it - (stages - 1)                       # consumer: the fill made stages - 1 iterations ago
        if 0 <= c < iters:
            s = c % stages
            got = T.take(64 + 8 * s, phase[s] & 1)
            assert got == deadlines[c], (c, got, deadlines[c])
            phase[s] += 1
    T.exit()
    t = T.tot
    assert t["phases"] == iters
    assert t["phases"] == t["consumed"] + t["stale"] + t["leaked"] and t["stale"] == 0 and t["leaked"] == 0


def test_the_phase_counters_reach_the_kernel_report():
    """tma_* are kernel counters (hbf_device.h): the runtime's per-kernel report carries them, so stale and
    leaked objects are in the summary, not dropped."""
    from runtime_cuda import devstate as D
    k = D.hbf_kernel_counters()
    names = ("tma_copies", "tma_hbf_bytes", "tma_hbm_bytes", "tma_oob_bytes", "tma_phases", "tma_consumed",
             "tma_stale", "tma_leaked")
    for i, n in enumerate(names):
        setattr(k, n, i + 1)
    d = D.kernel_counters_dict(k)
    assert [d[n] for n in names] == list(range(1, len(names) + 1))
