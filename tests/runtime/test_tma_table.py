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


_EXE: list = []


def _table_exe() -> Path:
    if not _EXE:
        if CXX is None:
            pytest.fail("no C++ compiler (g++/c++/clang++) found: the table's host twin cannot be built")
        import tempfile
        exe = Path(tempfile.mkdtemp(prefix="tmat")) / "tmat"
        subprocess.run([CXX, "-std=c++17", "-O1", f"-I{ROOT / 'runtime_cuda' / 'include'}", "-o", str(exe),
                        str(HERE / "tma_table_host.cpp")], check=True, capture_output=True)
        _EXE.append(exe)
    return _EXE[0]


@pytest.fixture(scope="module")
def table():
    return _table_exe()


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

    # a cluster: rank r's shared::cta addresses are (r << 24) + offset, as ptxas materializes them on sm_90
    def cput(self, rank: int, mask: int, off: int, par: int, dl: int) -> tuple[int, int, int]:
        ph, co, st = map(int, self._ask(f"cput {rank} {mask} {off} {par} {dl}").split())
        self.tot["phases"] += ph
        self.tot["consumed"] += co
        self.tot["stale"] += st
        return ph, co, st

    def ctake(self, rank: int, off: int, par: int) -> int:
        return int(self._ask(f"ctake {rank} {off} {par}"))

    def cexit(self, rank: int) -> tuple[int, int]:
        co, lk = map(int, self._ask(f"cexit {rank}").split())
        self.tot["consumed"] += co
        self.tot["leaked"] += lk
        return co, lk

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


def test_a_multicast_record_is_found_by_every_destination_waiter(T):
    """bench/tma_semantics.py load_mc as the table sees it (stop 41 on an H100: 0/6 with a range registered, 4
    consumed, 3 stale, 1 leaked per check): rank 0 multicasts one box per iteration to ranks 0 and 1 (ctaMask 0b11)
    on the barrier at offset 0x400 of each CTA; each rank's waiter waits on its OWN barrier address, which carries
    its rank in bits 24..31. Keyed by the barrier's address, rank 1 never found rank 0's record."""
    for it in range(4):
        par = it & 1
        assert T.cput(0, 0b11, 0x400, par, 1000 + it) == (2, 2 if it else 0, 0)   # both previous phases: waited
        assert [T.ctake(r, 0x400, par) for r in (0, 1)] == [1000 + it, 1000 + it]
    assert T.cexit(0) == (1, 0) and T.cexit(1) == (1, 0)
    assert T.tot == {"phases": 8, "consumed": 8, "stale": 0, "leaked": 0}


def test_a_multicast_from_a_rank_not_in_its_mask_reaches_only_the_mask():
    """Rank 2 of a 4-CTA cluster multicasts to ranks 1 and 3 only (ctaMask 0b1010); rank 3 also loads alone on a
    second barrier: each waiter finds exactly its own phase objects, nothing lands in ranks 0 and 2."""
    exe = _table_exe()
    t = Table(exe)
    try:
        assert t.cput(2, 0b1010, 0x408, 0, 500) == (2, 0, 0)
        assert t.cput(3, 0, 0x410, 0, 700) == (1, 0, 0)
        assert [t.ctake(r, 0x408, 0) for r in range(4)] == [0, 500, 0, 500]
        assert [t.ctake(r, 0x410, 0) for r in range(4)] == [0, 0, 0, 700]
        assert [t.cexit(r) for r in range(4)] == [(0, 0), (1, 0), (0, 0), (2, 0)]
    finally:
        t.close()


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


def _cuobjdump() -> str | None:
    p = shutil.which("cuobjdump")
    if p:
        return p
    nv = shutil.which("nvcc")
    if nv and (Path(nv).resolve().parent / "cuobjdump").is_file():
        return str(Path(nv).resolve().parent / "cuobjdump")
    import importlib.util
    spec = importlib.util.find_spec("triton")          # Triton wheels bundle one (no import of triton itself)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        c = Path(loc) / "backends" / "nvidia" / "bin" / "cuobjdump"
        if c.is_file():
            return str(c)
    return None


def test_sm90_shared_addresses_carry_the_cluster_rank(tmp_path):
    """The layout the host twin models and the table's key rests on, read from ptxas's SASS for sm_90a: a .shared
    variable's shared::cta address is built as (SR_CgaCtaId << 24) + offset (so one barrier has a different address
    in each CTA of a cluster: the key is an offset, hb_tw_key), and mapa.shared::cluster puts the target rank in
    bits 24..31 of the address (PRMT selector 0x654: byte 3 from the rank, bytes 0-2 from the address)."""
    nvcc, cuobj = shutil.which("nvcc"), _cuobjdump()
    if nvcc is None or cuobj is None:
        pytest.skip("nvcc or cuobjdump not installed")
    src = tmp_path / "k.cu"
    src.write_text("#include <stdint.h>\n__shared__ uint64_t bar;\n"
                   "extern \"C\" __global__ void __cluster_dims__(2, 1, 1) k(uint32_t* o, uint32_t a, uint32_t r) {\n"
                   "    o[0] = (uint32_t)__cvta_generic_to_shared(&bar);\n"
                   "    uint32_t m; asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(m) : \"r\"(a), \"r\"(r));\n"
                   "    o[1] = m;\n}\n")
    cub = tmp_path / "k.cubin"
    subprocess.run([nvcc, "-arch=sm_90a", "-O3", "-cubin", str(src), "-o", str(cub)], check=True, capture_output=True)
    sass = subprocess.run([cuobj, "-sass", str(cub)], check=True, capture_output=True, text=True).stdout
    import re
    ins = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", sass)]
    rank = [i.split()[1].rstrip(",") for i in ins if re.fullmatch(r"U?S2U?R \S+, SR_CgaCtaId", i)]
    assert rank, ins
    # the address: LEA d, <rank>, <offset>, 0x18 (d = (rank << 24) + offset)
    assert any(re.fullmatch(rf"U?LEA \S+, {re.escape(r)}, \S+, 0x18", i) for r in rank for i in ins), ins
    # mapa: PRMT d, <address>, 0x654, <rank> with the rank in byte 3
    assert any(re.fullmatch(r"U?PRMT \S+, \S+, 0x654, \S+", i) for i in ins), ins
