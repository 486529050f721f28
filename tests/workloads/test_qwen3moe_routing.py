"""workloads/qwen3moe/routing.py: routing-trace files (round trip, every refusal a ConfigError naming the
problem), the deduplicated expert demand, the synthetic routers and the zipf calibration. CPU only."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hbfcommon.errors import ConfigError
from workloads.qwen3moe import routing as rt

E, K = 128, 8


def _doc(**over):
    d = {"schema": rt.SCHEMA, "version": 1, "source": "file", "num_experts": 6, "top_k": 2, "model": "m",
         "note": "n", "ids": [[[[0, 1], [2, 3]], [[4, 5], [0, 5]]]]}       # 1 step, 2 layers, batch 2
    d.update(over)
    return d


def _write(tmp_path, doc, name="t.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_round_trip(tmp_path):
    tr = rt.synthetic_zipf(3, 2, 4, 16, 4, 1.1, seed=7)
    w = np.random.default_rng(0).random(tr.ids.shape).astype(np.float32)
    tr = rt.RoutingTrace(ids=tr.ids, num_experts=16, top_k=4, source="captured", model="Qwen3-30B-A3B",
                         note="x", weights=w, params={"s": 1.1})
    p = tmp_path / "sub" / "trace.json"
    rt.save_trace(tr, p)
    back = rt.load_trace(p)
    assert back.ids.dtype == np.int32 and back.weights.dtype == np.float32
    assert np.array_equal(back.ids, tr.ids) and np.array_equal(back.weights, w)
    assert (back.num_experts, back.top_k, back.source, back.model, back.note, back.params) == \
        (16, 4, "captured", "Qwen3-30B-A3B", "x", {"s": 1.1})
    assert back.shape == (3, 2, 4, 4)
    assert json.loads(p.read_text())["schema"] == "hbfsim.routing-trace"
    # model/note may be left out; weights/params are optional
    d = _doc()
    del d["model"], d["note"]
    t2 = rt.load_trace(_write(tmp_path, d))
    assert t2.weights is None and t2.params == {} and t2.model == "" and t2.shape == (1, 2, 2, 2)


W_BAD = [[[[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5]]]]
W_SHAPE = [[[[0.5, 0.5], [0.5, 0.5]]]]


@pytest.mark.parametrize("over, needle", [
    ({"schema": "hbfsim.other"}, "schema is 'hbfsim.other'"),
    ({"version": 2}, "version 2 is not supported"),
    ({"version": True}, "version True is not supported"),
    ({"source": "guess"}, "source 'guess' is not one of"),
    ({"num_experts": 0}, "num_experts must be an integer"),
    ({"top_k": 2.0}, "top_k must be an integer"),
    ({"top_k": 7, "ids": [[[[0, 1, 2, 3, 4, 5, 0]]]]}, "top_k 7 > num_experts 6"),
    ({"ids": []}, "ids is empty"),
    ({"ids": [[[]]]}, "ids[0][0] is empty"),
    ({"ids": [[[[0, 1], [2, 3]], [[4, 5]]]]}, "ids[0][1] has 1 entries, ids[0][0] has 2 (ragged)"),
    ({"ids": [[[[0, 1], [2, 3]], [[4, 5], [0]]]]}, "ids[0][1][1] has 1 entries, ids[0][0][0] has 2 (ragged)"),
    ({"ids": [[[0, 1]]]}, "ids[0][0][0] is int, not a list"),
    ({"ids": [[[[0, 1.0]]]]}, "ids[0][0][0][1] is float"),
    ({"ids": [[[[0, True]]]]}, "ids[0][0][0][1] is bool"),
    ({"ids": [[[[0, 1, 2]]]]}, "ids has 3 experts per token, top_k is 2"),
    ({"ids": [[[[0, 1]], [[2, 6]]]]}, "ids[0][1][0][1] = 6 is out of range [0, 6)"),
    ({"ids": [[[[0, 1]], [[-1, 2]]]]}, "ids[0][1][0][0] = -1 is out of range"),
    ({"ids": [[[[0, 1], [3, 3]]]]}, "ids[0][0][1] repeats expert 3 within its top_k"),
    ({"weights": W_BAD}, "weights[0][1][1] has 1 entries"),
    ({"weights": W_SHAPE}, "weights has shape [1, 1, 2, 2], ids [1, 2, 2, 2]"),
    ({"weights": [[[["a", 1], [1, 1]], [[1, 1], [1, 1]]]]}, "weights[0][0][0][0] is str"),
    ({"params": [1]}, "params must be a dict"),
    ({"note": 3}, "note must be a str"),
    ({"extra": 1}, "unknown key(s) ['extra']"),
])
def test_load_errors(tmp_path, over, needle):
    with pytest.raises(ConfigError) as ei:
        rt.load_trace(_write(tmp_path, _doc(**over)))
    assert needle in str(ei.value)
    assert str(tmp_path) in str(ei.value)


def test_load_errors_file_level(tmp_path):
    d = _doc()
    del d["ids"]
    for doc, needle in ((d, "missing 'ids'"), ("[1, 2]", "a routing trace is a JSON object"),
                        ("{not json", "not valid JSON"),
                        ('{"schema": 1, "schema": 2}', "duplicate"),
                        (json.dumps(_doc()).replace('"model": "m"', '"weights": NaN'), "not a finite number")):
        with pytest.raises(ConfigError) as ei:
            rt.load_trace(_write(tmp_path, doc))
        assert needle in str(ei.value), str(ei.value)
    with pytest.raises(ConfigError, match="cannot read routing trace"):
        rt.load_trace(tmp_path / "absent.json")


def test_non_finite_weights_and_bad_construction():
    ids = np.array([[[[0, 1]]]])
    with pytest.raises(ConfigError, match=r"weights\[0\]\[0\]\[0\]\[1\] is not finite"):
        rt.RoutingTrace(ids=ids, num_experts=4, top_k=2, source="file", weights=np.array([[[[0.5, np.inf]]]]))
    with pytest.raises(ConfigError, match="must be a non-empty int"):
        rt.RoutingTrace(ids=ids.astype(float), num_experts=4, top_k=2, source="file")


def test_dedup_hand_made():
    # 2 steps, 1 layer, batch 3, top_k 2; distinct at b=1,2,3 per step: (2,3,3) and (2,4,6)
    ids = np.array([[[[0, 1], [1, 2], [2, 0]]], [[[0, 1], [2, 3], [4, 5]]]])
    assert rt.distinct_counts(ids).tolist() == [[3], [6]]
    d = rt.dedup_demand(ids, [1, 2, 3], num_experts=6)
    assert d[1]["mean"] == 2 and d[1]["ratio_vs_batch1"] == 1.0
    assert d[2]["mean"] == 3.5 and d[2]["min"] == 3 and d[2]["max"] == 4 and d[2]["median"] == 3.5
    assert d[3]["mean"] == 4.5 and d[3]["ratio_vs_batch1"] == 2.25 and d[3]["samples"] == 2
    assert d[3]["p10"] == pytest.approx(3.3) and d[3]["p90"] == pytest.approx(5.7)
    assert d[3]["uniform_mean"] == pytest.approx(6 * (1 - (2 / 3) ** 3))
    table = rt.format_demand(d)
    assert len(table.splitlines()) == 4 and "2.250x" in table and "uniform" in table
    with pytest.raises(ConfigError, match="batch size 4 is not in"):
        rt.dedup_demand(ids, [4])


def test_expected_uniform_distinct():
    assert rt.expected_uniform_distinct(E, K, 1) == pytest.approx(K)
    assert rt.expected_uniform_distinct(10, 10, 3) == pytest.approx(10)
    assert rt.expected_uniform_distinct(E, K, 8) == pytest.approx(E * (1 - (1 - K / E) ** 8))


def test_uniform_synthetic_matches_closed_form():
    tr = rt.synthetic_uniform(100, 10, 8, E, K, seed=3)
    assert tr.source == "synthetic-uniform" and tr.params == {"seed": 3}
    r = rt.dedup_demand(tr, [8])[8]["ratio_vs_batch1"]
    want = rt.expected_uniform_distinct(E, K, 8) / K
    assert r == pytest.approx(want, rel=0.03)
    # every expert is about equally popular
    counts = np.bincount(tr.ids.ravel(), minlength=E)
    assert counts.min() > 0.7 * counts.mean()


def test_zipf_monotone_and_skewed():
    ratios = [rt.dedup_demand(rt.synthetic_zipf(40, 10, 8, E, K, s, seed=1), [8])[8]["ratio_vs_batch1"]
              for s in (0.0, 0.8, 1.6, 2.4)]
    assert all(a > b for a, b in zip(ratios, ratios[1:])), ratios
    assert ratios[0] == pytest.approx(rt.expected_uniform_distinct(E, K, 8) / K, rel=0.03)
    tr = rt.synthetic_zipf(20, 2, 8, E, K, 1.5, seed=2)
    assert tr.params == {"s": 1.5, "seed": 2} and tr.source == "synthetic-zipf"
    # per-layer permutation: the layers' favourite experts differ
    fav = [np.bincount(tr.ids[:, li].ravel(), minlength=E).argmax() for li in range(2)]
    assert fav[0] != fav[1]


def test_sampler_matches_rng_choice():
    """The vectorized sampler draws like rng.choice(E, k, replace=False, p=p)."""
    e, k, s, n = 16, 4, 1.2, 4000
    p = 1.0 / np.arange(1, e + 1) ** s
    p /= p.sum()
    rng = np.random.default_rng(11)
    ref = np.bincount(np.concatenate([rng.choice(e, size=k, replace=False, p=p) for _ in range(n)]), minlength=e)
    ours = rt._draw(np.random.default_rng(12), np.log(p)[None, :], n, 1, k)
    got = np.bincount(ours.ravel(), minlength=e)
    assert np.abs(got - ref).max() < 0.05 * n
    first = np.bincount(ours[:, 0, 0, 0], minlength=e) / n       # the first draw follows p
    assert np.abs(first - p).max() < 0.03


def test_determinism():
    a = rt.synthetic_zipf(4, 3, 8, E, K, 1.2, seed=5)
    b = rt.synthetic_zipf(4, 3, 8, E, K, 1.2, seed=5)
    c = rt.synthetic_zipf(4, 3, 8, E, K, 1.2, seed=6)
    assert np.array_equal(a.ids, b.ids) and not np.array_equal(a.ids, c.ids)
    assert np.array_equal(rt.synthetic_uniform(2, 2, 4, E, K, 9).ids, rt.synthetic_uniform(2, 2, 4, E, K, 9).ids)
    assert rt.calibrate_zipf(E, K, 8, 2.487, seed=1) == rt.calibrate_zipf(E, K, 8, 2.487, seed=1)


def test_calibrate_zipf_hits_paper_ratio():
    s = rt.calibrate_zipf(E, K, 8, 2.487)
    assert 0.0 < s < 4.0
    tr = rt.synthetic_zipf(100, 10, 16, E, K, s, seed=123)      # an independent draw
    d = rt.dedup_demand(tr, [8, 16], num_experts=E)
    assert d[8]["ratio_vs_batch1"] == pytest.approx(2.487, rel=0.02)
    r16 = d[16]["ratio_vs_batch1"]
    print(f"zipf s={s:.3f} calibrated to x2.487 at batch 8 predicts x{r16:.3f} at batch 16 (paper: x3.584)")
    assert d[8]["ratio_vs_batch1"] < r16 < 8
    with pytest.raises(ConfigError, match="outside what zipf"):
        rt.calibrate_zipf(E, K, 8, 7.5)


def test_expert_bytes_per_step():
    ids = np.array([[[[0, 1], [1, 2]], [[3, 4], [3, 4]]],       # step 0: layer 0 3 distinct, layer 1 2
                    [[[0, 1], [2, 3]], [[0, 1], [1, 0]]]])      # step 1: 4 and 2
    out = rt.expert_bytes_per_step(ids, 1000)
    assert out.dtype == np.int64 and out.tolist() == [5000, 6000]
    assert rt.expert_bytes_per_step(ids, [10, 1]).tolist() == [32, 42]
    big = rt.expert_bytes_per_step(ids, 3 << 30)                 # no int32 overflow
    assert big.tolist() == [5 * (3 << 30), 6 * (3 << 30)]
    with pytest.raises(ConfigError):
        rt.expert_bytes_per_step(ids, [1, 2, 3])
