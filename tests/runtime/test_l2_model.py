"""The L2 in front of HBF (docs/design.md §3.12): the device algorithm (runtime_cuda/src/hbf_l2.cuh) compiled for
the host against its CPU twin (hbfd/media/l2twin.py) on identical streams; the twin's semantics; the runtime's
geometry, descriptor and counters; the profile section."""
from __future__ import annotations

import ctypes
import random
import subprocess
from pathlib import Path

import pytest

from hbfcommon import ctl as C
from hbfcommon import profile as P
from hbfcommon.errors import ConfigError, ProfileError
from hbfd.media.l2twin import EV_LOST, EV_MERGED, L2Twin, set_of
from runtime_cuda import devstate as D

ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def l2host(nvcc, tmp_path_factory):
    exe = tmp_path_factory.mktemp("l2host") / "l2host"
    subprocess.run([nvcc, "-std=c++17", "-O2", f"-I{ROOT}/runtime_cuda/include", f"-I{ROOT}/runtime_cuda/src",
                    "-x", "cu", str(ROOT / "tests/runtime/data/l2_host.cu"), "-o", str(exe)], check=True)
    return exe


def _run_host(exe, sets, ways, policy, accesses):
    inp = f"{sets} {ways} {policy}\n" + "".join(f"{ln} {need} {t} {race}\n" for ln, need, t, race in accesses)
    out = subprocess.run([str(exe)], input=inp, capture_output=True, text=True, check=True).stdout.split("\n")
    i = out.index("words")
    res = [tuple(map(int, s.split())) for s in out[:i]]
    words = [int(s, 16) for s in out[i + 1:] if s]
    return res, words


def _stream(rng, n, lines, gpl, race_p=0.0, t0=0):
    """Accesses with locality (a hot set, a sweep, random lines), time moving at 0..3000 ns a step, and now and
    then a racing word written between the read and the CAS (same line other granules, another line, garbage)."""
    t, acc, hot = t0, [], [rng.randrange(lines) for _ in range(8)]
    full = (1 << gpl) - 1
    for k in range(n):
        t += rng.randrange(0, 3000)
        r = rng.random()
        line = rng.choice(hot) if r < 0.3 else (k % lines if r < 0.6 else rng.randrange(lines))
        need = rng.randrange(1, full + 1)
        race = 0
        if rng.random() < race_p:
            c = rng.random()
            tag_like = (rng.randrange(1, 4) << 40) | (rng.randrange(1, full + 1) << 32) | rng.getrandbits(32)
            race = tag_like if c < 0.7 else rng.getrandbits(64) or 1
        acc.append((line, need, t, race))
    return acc


@pytest.mark.parametrize("ways,policy,gpl,race_p", [(4, 1, 2, 0.0), (16, 1, 2, 0.0), (16, 2, 2, 0.0),
                                                     (1, 1, 4, 0.0), (8, 1, 2, 0.15), (5, 2, 8, 0.15)])
def test_device_code_equals_twin(l2host, ways, policy, gpl, race_p):
    rng = random.Random(ways * 100 + policy * 10 + gpl)
    sets = 32
    gbits = {2: 1, 4: 2, 8: 3}[gpl]
    tw = L2Twin(sets * ways * (64 << gbits), line_bytes=64 << gbits, ways=ways, policy=policy, granule=64,
                page_bytes=4096 if gbits < 3 else 4096)
    acc = _stream(rng, 6000, lines=sets * ways * 3, gpl=gpl, race_p=race_p)
    # stamps across the 32-bit wrap of (ns >> 6) too
    acc += _stream(rng, 2000, lines=sets * ways * 3, gpl=gpl, race_p=race_p, t0=(1 << 38) - 1_000_000)
    host, words = _run_host(l2host, sets, ways, policy, acc)
    twin = [tw.access_line(ln, need, t, race) for ln, need, t, race in acc]
    assert host == twin
    assert words == tw.words
    hits = sum(1 for m, _ in twin if m == 0)
    assert 0 < hits < len(twin)                      # the stream exercises hits and misses
    # lines a multiple of sets apart (a tile's rows at a power-of-two stride) spread over the sets
    assert len({set_of(k * sets, sets) for k in range(64)}) > 16
    if race_p:
        evs = {e for _, e in twin}
        assert EV_LOST in evs or EV_LOST | EV_MERGED in evs
        assert any(e & EV_MERGED for e in evs)


@pytest.mark.parametrize("sets", [32, 15360, 25600, 1000003 % (1 << 20), (1 << 20) - 1])
def test_device_locate_equals_exact_division(l2host, sets):
    """hb_l2_locate's multiply by the magic is the exact division for every line whose tag fits 24 bits."""
    rng = random.Random(sets)
    top = ((1 << 24) - 1) * sets
    lines = [0, 1, sets - 1, sets, top - 1] + [rng.randrange(top) for _ in range(3000)]
    out = subprocess.run([str(l2host), "locate"], input=f"{sets}\n" + "\n".join(map(str, lines)) + "\n",
                         capture_output=True, text=True, check=True).stdout.split("\n")
    got = [tuple(map(int, o.split())) for o in out if o]
    assert got == [(set_of(ln, sets), ln // sets + 1) for ln in lines]
    assert D.l2_magic(sets) == ((1 << 64) - 1) // sets + 1


@pytest.mark.parametrize("line_bytes,ways,policy", [(128, 4, "lru"), (256, 3, "fifo"), (512, 2, "lru")])
def test_device_group_lines_equal_twin_requests(l2host, line_bytes, ways, policy):
    """hb_l2_line (a page group's per-line step: the need from the group's granule mask, locate, access, the
    packed counts) for every line of a request, against L2Twin.request on the same warp-request stream."""
    rng = random.Random(line_bytes + ways)
    sets = 40
    tw = L2Twin(sets * ways * line_bytes, line_bytes=line_bytes, ways=ways, policy=policy)
    reqs, t = [], 0
    for _ in range(3000):
        t += rng.randrange(0, 4000)
        page = rng.randrange(0, 24) << 12
        g0 = rng.randrange(64)
        g1 = min(63, g0 + rng.choice((0, 1, 7, 15, 63)))
        gran = ((2 << g1) - (1 << g0)) & ((1 << 64) - 1)
        if rng.random() < 0.2:                       # a strided warp: every other granule
            gran &= 0x5555555555555555
        reqs.append((page, gran or 1, t))
    lshift, gsh, pshift = line_bytes.bit_length() - 1, 6, 12
    inp = f"{sets} {ways} {tw.policy} {lshift} {gsh} {pshift}\n" + "".join(f"{p} {g} {tt}\n" for p, g, tt in reqs)
    out = subprocess.run([str(l2host), "group"], input=inp, capture_output=True, text=True, check=True).stdout
    out = out.split("\n")
    i = out.index("words")
    host = [tuple(map(int, o.split())) for o in out[:i]]
    twin = []
    for p, g, tt in reqs:
        before = (tw.stats.lines, tw.stats.merged, tw.stats.lost)
        charged = tw.request(p, g, tt)
        twin.append((charged >> gsh, tw.stats.lines - before[0], tw.stats.merged - before[1], tw.stats.lost - before[2]))
    assert host == twin
    assert [int(w, 16) for w in out[i + 1:] if w] == tw.words
    assert 0 < sum(h[0] for h in host) < sum(bin(g).count("1") for _, g, _ in reqs)   # hits and misses


def test_twin_semantics():
    tw = L2Twin(32 * 4 * 128, line_bytes=128, ways=4, policy="lru")
    page = 1 << 20
    # one 512 B warp request: 8 granules, 4 lines: all miss, then all hit
    assert tw.request(page, 0xFF, 1000) == 512
    assert tw.request(page, 0xFF, 2000) == 0
    # a sector miss: the line is there, its other granule is not
    assert tw.request(page, 0x100, 3000) == 64 and tw.request(page, 0x300, 4000) == 64
    st = tw.stats
    assert st.requests == 4 and st.media_requests == 3 and st.miss_bytes == 640 and st.hit_bytes == 512 + 64
    # a stream twice the capacity, read twice in order: LRU keeps nothing (every byte charged twice)
    tw = L2Twin(32 * 4 * 128, line_bytes=128, ways=4, policy="lru")
    span = 2 * 32 * 4 * 128
    for rep in range(2):   # a 4 KiB page per 100 ns
        charged = tw.stream((a, 4096, 10_000 * (rep + 1) + 100 * (a >> 12)) for a in range(0, span, 4096))
        assert charged == span
    # ... half the capacity: the second pass is free
    tw = L2Twin(32 * 4 * 128, line_bytes=128, ways=4, policy="lru")
    assert tw.access(0, span // 4, 0) == span // 4 and tw.access(0, span // 4, 5000) == 0


def test_lru_keeps_a_hot_line_fifo_does_not():
    def run(policy):
        tw = L2Twin(32 * 2 * 128, line_bytes=128, ways=2, policy=policy)
        hot = 0
        same = [ln for ln in range(1, 200_000) if set_of(ln, tw.sets) == set_of(hot, tw.sets)][:49]
        assert len(same) == 49
        charged, t = 0, 0
        for ln in same:       # the hot line, then a streaming line of its set, ...
            t += 2048
            charged += tw.access_line(hot, 1, t)[0] != 0
            t += 2048
            tw.access_line(ln, 1, t)
        return charged
    assert run("lru") == 1      # the hot line's stamp is refreshed: the streaming lines evict each other
    assert run("fifo") > 20


def test_profile_l2_section_and_errors():
    p = P.load_profile("ocp-sg1")
    # the H200: 60 MiB (its l2CacheSize), two partitions: the tag store holds one partition's 30 MiB, 15360 sets
    assert (p.l2.capacity_bytes, p.l2.line_bytes, p.l2.ways, p.l2.policy, p.l2.partitions) == (60 << 20, 128, 16,
                                                                                               "lru", 2)
    assert (p.l2.model_bytes, p.l2.sets) == (30 << 20, 15360)
    assert p.provenance["l2.capacity_bytes"].kind == "measured"
    assert p.provenance["l2.partitions"].kind == "assumed"
    mp = p.to_media_params()
    assert (mp["l2_bytes"], mp["l2_line_bytes"], mp["l2_ways"], mp["l2_policy"], mp["l2_partitions"]) == (
        60 << 20, 128, 16, 1, 2)
    assert P.load_profile("nominal").l2 == P.L2()       # absent: the H200 defaults
    assert P.L2(partitions=1).sets == 2 * P.L2().sets   # one partition: the whole capacity (the model before)
    d = dict(P.read_json_document("ocp-sg1", what="profile", error=ProfileError, search_dir=P.PROFILE_DIR).data)
    for l2, field in (({"ways": {"value": 48, "provenance": "assumed", "source": "x"}}, "l2.ways"),
                      ({"capacity_bytes": {"value": 1000, "provenance": "assumed", "source": "x"}},
                       "l2.capacity_bytes"),
                      ({"line_bytes": {"value": 96, "provenance": "assumed", "source": "x"}}, "l2.line_bytes"),
                      ({"partitions": {"value": 9, "provenance": "assumed", "source": "x"}}, "l2.partitions"),
                      # 3 partitions of 60 MiB: not a whole number of 16-way sets of 128 B lines each
                      ({"partitions": {"value": 3, "provenance": "assumed", "source": "x"},
                        "capacity_bytes": {"value": (60 << 20) + 2048, "provenance": "assumed", "source": "x"}},
                       "l2.capacity_bytes"),
                      ({"policy": "random"}, "l2")):
        with pytest.raises(ProfileError) as ei:
            P.profile_from_dict(dict(d, l2=l2))
        assert ei.value.fields["field"].startswith(field)


def _media(**kw):
    m = C.hbf_media_params()
    for k, v in P.load_profile("ocp-sg1").to_media_params().items():
        if isinstance(v, list):
            getattr(m, k)[:] = v
        else:
            setattr(m, k, v)
    for k, v in kw.items():
        setattr(m, k, v)
    return m


def test_runtime_geometry_descriptor_and_counters():
    g = D.l2_geometry(_media())
    assert (g.sets, g.ways, g.line_bytes, g.partitions, g.tag_bytes) == (15360, 16, 128, 2, 15360 * 16 * 8)
    # a daemon that predates l2_partitions (the byte was reserved, 0): one partition, the whole capacity
    assert D.l2_geometry(_media(l2_partitions=0)).sets == 30720
    with pytest.raises(ConfigError, match="not one the device model covers"):
        D.l2_geometry(_media(l2_partitions=9))
    with pytest.raises(ConfigError, match="no L2 geometry"):
        D.l2_geometry(_media(l2_bytes=0))
    with pytest.raises(ConfigError, match="not one the device model covers"):
        D.l2_geometry(_media(l2_ways=33))
    m = _media(timing_source=C.HBF_SRC_FIXED)
    st = D.new_state(0, m, D.RunParams())
    D.fill_ranges(st, [D.DevRange(1 << 30, 1 << 24, 0, 1, C.HBF_MODE_TIMING, C.HBF_PERM_READ | C.HBF_PERM_WRITE)], 1)
    off = D.cdesc_for(st, 0x7000_0000, 0)
    assert off.inl_flags & D.HBF_CDI_READ and not off.flags & D.HBF_CD_L2
    D.set_l2(st, g, 0x9000_0000)
    assert (st.l2_tags, st.l2_sets, st.l2_ways, st.l2_line_shift, st.l2_policy) == (0x9000_0000, 15360, 16, 7, 1)
    on = D.cdesc_for(st, 0x7000_0000, 0)
    # on: loads leave the inline path (the lookups are in the helpers); stores stay inline (they bypass the model)
    assert on.flags & D.HBF_CD_L2 and not on.inl_flags & D.HBF_CDI_READ and on.inl_flags & D.HBF_CDI_WRITE
    st.timing_source = C.HBF_SRC_FAST
    assert not D.cdesc_for(st, 0x7000_0000, 0).inl_flags & D.HBF_CDI_GROUP
    D.set_l2(st, None, 0)
    assert D.cdesc_for(st, 0x7000_0000, 0).inl_flags & D.HBF_CDI_GROUP
    k = D.hbf_kernel_counters()
    k.l2_hit_bytes, k.l2_miss_bytes, k.l2_lines = 640, 128, 7
    d = D.kernel_counters_dict(k)
    assert (d["l2_hit_bytes"], d["l2_miss_bytes"], d["l2_lines"]) == (640, 128, 7)
    assert ctypes.sizeof(D.hbf_kernel_counters) % 64 == 0


def test_daemon_publishes_the_geometry_and_the_session_reports_it(hbfd_daemon, monkeypatch):
    """hbfd (nominal profile: no l2 section, the H200 defaults) fills hbf_media_params.l2_*; with HBF_L2_MODEL=1
    the session reads them and says so in its counters; without the knob the model is off."""
    import runtime_cuda
    monkeypatch.setenv("HBF_L2_MODEL", "1")
    s = runtime_cuda.attach(socket=hbfd_daemon[0], cuda=False)
    try:
        m = s.ctl.ctl.header.media
        assert (int(m.l2_bytes), int(m.l2_line_bytes), int(m.l2_ways), int(m.l2_policy), int(m.l2_partitions)) == (
            60 << 20, 128, 16, 1, 2)
        assert s.counters(publish=False)["l2_model"] == {"capacity_bytes": 60 << 20, "partitions": 2,
                                                         "model_bytes": 30 << 20, "line_bytes": 128, "ways": 16,
                                                         "sets": 15360, "policy": "lru"}
    finally:
        s.close()
    monkeypatch.setenv("HBF_L2_MODEL", "0")
    s = runtime_cuda.attach(socket=hbfd_daemon[0], cuda=False)
    try:
        assert s.counters(publish=False)["l2_model"] is None
    finally:
        s.close()
