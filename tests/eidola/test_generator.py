import pytest

from hbfcommon.errors import ConfigError
from eidola.generator import GemvArLayout, LinkModel, generate, uniform_delay


def test_seeded_determinism():
    kw = dict(n_gpus=8, tiles=16, tile_rows=64, compute_ns=5000, link=LinkModel(jitter_ns=300))
    assert generate(seed=3, **kw) == generate(seed=3, **kw)
    assert generate(seed=3, **kw) != generate(seed=4, **kw)


def test_latency_and_bandwidth_respected():
    lk = LinkModel(latency_ns=1000, bandwidth_bytes_per_ns=2.0, jitter_ns=0)
    tr = generate(n_gpus=3, tiles=10, tile_rows=256, compute_ns=4000, link=lk, seed=1)
    lay = GemvArLayout(3, 10, 256)
    for p in (1, 2):
        data = sorted((w for w in tr.data_writes() if w.src == p), key=lambda w: w.wakeup_ns)
        flags = {w.offset: w for w in tr.flag_writes() if w.src == p}
        assert len(data) == 10 and len(flags) == 10
        for w in data:
            # no transfer arrives before release + serialization + latency
            assert w.wakeup_ns >= w.release_ns + lay.tile_bytes / 2.0 + 1000
        # the link serializes: n tiles need at least n * bytes / bw between first release and last arrival
        first = min(w.release_ns for w in data)
        last = max(w.wakeup_ns for w in data) - 1000
        assert last - first >= 10 * lay.tile_bytes / 2.0 - 1
        # flags arrive after the tile they guard
        for b in range(10):
            f = flags[lay.flag_offset(b, p)]
            d = next(w for w in data if w.offset == lay.recv_offset(p, b))
            assert f.wakeup_ns > d.wakeup_ns
            assert f.value == 1


def test_per_peer_links_and_jitter_spread():
    links = [LinkModel(), LinkModel(latency_ns=500), LinkModel(latency_ns=20000)]
    tr = generate(n_gpus=3, tiles=4, tile_rows=16, compute_ns=1000, link=links)
    slow = min(w.wakeup_ns for w in tr.flag_writes() if w.src == 2)
    fast = max(w.wakeup_ns for w in tr.flag_writes() if w.src == 1)
    assert slow > fast
    jt = generate(n_gpus=2, tiles=200, tile_rows=16, compute_ns=10000, link=LinkModel(jitter_ns=1000), seed=0)
    rel = [w.release_ns for w in jt.flag_writes()]
    assert 500 < (max(rel) - min(rel)) / 2 and len(set(rel)) > 50
    with pytest.raises(ConfigError):
        generate(n_gpus=3, tiles=1, tile_rows=1, compute_ns=0, link=[LinkModel()])
    with pytest.raises(ConfigError):
        LinkModel(bandwidth_bytes_per_ns=0)


def test_uniform_delay():
    tr = uniform_delay(n_gpus=256, tiles=2, tile_rows=4, delay_ns=7000)
    assert {w.wakeup_ns for w in tr.writes} == {7000}
    assert len(tr.flag_writes()) == 255 * 2


def test_per_tile_delay_offsets_each_tile_from_its_base():
    from eidola.generator import per_tile_delay
    base = [5000 + 37 * b for b in range(6)]
    tr = per_tile_delay(n_gpus=4, tiles=6, tile_rows=8, base_ns=base, delay_ns=2500)
    lay = GemvArLayout(4, 6, 8)
    flags = list(tr.flag_writes())
    assert len(flags) == 3 * 6 and len(list(tr.data_writes())) == 3 * 6
    for p in (1, 2, 3):
        for b in range(6):
            f = [w for w in flags if w.src == p and w.offset == lay.flag_offset(b, p)]
            assert len(f) == 1 and f[0].wakeup_ns == base[b] + 2500 and f[0].value == 1
    assert tr.header.meta["base"] == "tile_ready" and tr.header.meta["delay_ns"] == 2500
    # delay 0: the writes land exactly at the base times
    tr0 = per_tile_delay(n_gpus=2, tiles=6, tile_rows=8, base_ns=base, delay_ns=0)
    assert sorted(w.wakeup_ns for w in tr0.flag_writes()) == sorted(base)


def test_per_tile_delay_rejects_bad_input():
    from eidola.generator import per_tile_delay
    with pytest.raises(ConfigError):
        per_tile_delay(n_gpus=2, tiles=3, tile_rows=8, base_ns=[0, 1], delay_ns=0)
    with pytest.raises(ConfigError):
        per_tile_delay(n_gpus=2, tiles=2, tile_rows=8, base_ns=[0, 1], delay_ns=-5)
    with pytest.raises(ConfigError):
        per_tile_delay(n_gpus=2, tiles=2, tile_rows=8, base_ns=[-1, 1], delay_ns=0)
