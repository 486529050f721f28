"""Expected HBF traffic under the L2 model (CPU twin) for address streams generated from the kernels' tiling,
against an analytic DRAM-traffic estimate (bench/l2_traffic.py). Not the ncu validation (bench/l2_vs_ncu.py)."""
from __future__ import annotations

import pytest

from bench import l2_traffic as T

L2 = 256 * 1024    # a scaled-down L2: 16 ways x 128 sets of 128 B lines


@pytest.mark.parametrize("name,gen,exact", [
    ("matmul, A fits", lambda: T.matmul_stream(128, 256, 256, 64, 64, 64, 8, 16), True),
    ("matmul, A > L2, pid_m fastest", lambda: T.matmul_stream(512, 256, 512, 64, 64, 64, 8, 16), False),
    ("gemv", lambda: T.gemv_stream(256, 512, 16, 128, 16), True),
    ("softmax, 3 passes", lambda: T.softmax_stream(64, 1024, 256, 3, 16), True),
    ("attention", lambda: T.attention_stream(4, 256, 64, 64, 64, 16), True),
])
def test_twin_traffic_matches_the_tiling(name, gen, exact):
    acc, est = gen()
    r = T.run_case(name, acc, est, L2)
    assert r["within_estimate"], r
    if exact:                                   # the tensor (or a wave's share of it) fits: read once
        assert r["charged_on"] == r["compulsory"], r
    else:                                       # a wave's A panels exceed the L2: re-read per wave, not per load
        assert r["compulsory"] < r["charged_on"] < r["charged_off"], r
    # without the model every load is charged
    assert r["charged_off"] == r["program_bytes"] >= r["charged_on"]


def test_ncu_csv_parse_names_the_kernel():
    from bench import l2_vs_ncu as V
    head = ['"ID"', '"Kernel Name"', *[f'"{m}"' for m in V.METRICS]]
    rows = [",".join(head),
            ",".join(['"0"', '"distribution_elementwise_kernel"', '"1"', '"2"', '"3"', '"4"']),
            ",".join(['"1"', '"mm_plain"', '"1,234,567"', '"10"', '"20"', '"5"'])]
    text = "==PROF== Connected\n" + "\n".join(rows) + "\n==PROF== Disconnected\n"
    got = V.parse_ncu_csv(text, "mm_plain")
    assert got["dram__bytes_read.sum"] == 1234567.0 and got["lts__t_sectors_srcunit_tex_op_read.sum"] == 20.0
    with pytest.raises(ValueError, match="gemv_plain"):
        V.parse_ncu_csv(text, "gemv_plain")
    with pytest.raises(ValueError, match="no CSV"):
        V.parse_ncu_csv("==PROF== nothing\n", "mm_plain")


# ---- the device model's algorithm on bench/l2_vs_ncu.py's own streams vs the H200's DRAM bytes ------------------
@pytest.fixture(scope="module")
def stream_sim(tmp_path_factory):
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: bench/data/l2_stream_sim.cpp cannot be built")
    from bench import l2_partition as LP
    return LP.build_sim(tmp_path_factory.mktemp("l2sim"))


def test_stream_sim_is_the_twin(stream_sim):
    """l2_stream_sim.cpp (hb_l2_locate + hb_l2_access of hbf_l2.cuh, whole lines) charges what the CPU twin charges
    on the same records (one store)."""
    import numpy as np

    from bench import l2_partition as LP
    from hbfd.media.l2twin import L2Twin
    recs = np.concatenate(list(LP.matmul_stream(512, 256, 512, 128, 128, 64, 2, 6, False, "halves")))
    store = 32 * 16 * 128                                  # 32 sets: the matmul's 1 MiB does not fit
    r = LP.simulate(stream_sim, [recs], store, 1)
    tw = L2Twin(store, 128, 16, "lru")
    charged = sum(tw.access(int(ln) * 128, 128, i * 64) for i, ln in enumerate(recs & ((1 << 56) - 1)))
    assert r["charged_bytes"] == charged
    assert 512 * 512 * 2 + 512 * 256 * 2 < charged < r["read_bytes"]


@pytest.mark.parametrize("case", ["matmul_fits", "attention", "gemv"])
def test_profile_geometry_meets_the_card_on_the_recorded_cases(stream_sim, case):
    """bench/l2_vs_ncu.py's case at full scale (the instrumented kernel's concurrency: bench/l2_partition.py) under
    the profile's default geometry (60 MiB, 2 partitions: a 30 MiB tag store) charges within 15 % of the H200's
    dram__bytes_read.sum (bench/results/l2_vs_ncu.json). The one-store 50 MiB model the GPU ran charged 0.37 of
    it on matmul_fits (B, 32 MiB, stayed resident across GROUP_M groups; on the card it is re-read per group)."""
    from bench import l2_partition as LP
    from hbfcommon.profile import L2
    conc = LP.concurrency(case, "hbf")
    r = LP.simulate(stream_sim, LP.stream(case, conc, False), L2().model_bytes, 1)
    assert 0.85 <= LP.ratio_to_card(case, r["charged_bytes"]) <= 1.15, r
    if case == "matmul_fits":
        old = LP.simulate(stream_sim, LP.stream(case, conc, False), 50 << 20, 1)
        assert LP.ratio_to_card(case, old["charged_bytes"]) < 0.5, old


@pytest.mark.parametrize("case", ["gemv", "matmul_fits"])
def test_continuous_order_reads_and_writes_the_same_lines(case):
    """bench/l2_partition.py's two program orders (lockstep waves, slots back to back) are the same records in
    another order: the same lines read and written by the same programs."""
    import numpy as np

    from bench import l2_partition as LP
    conc = LP.concurrency(case, "hbf")
    a = np.concatenate(list(LP.stream(case, conc, True, order="lockstep")))
    b = np.concatenate(list(LP.stream(case, conc, True, order="continuous")))
    assert len(a) == len(b) and not np.array_equal(a, b)
    assert np.array_equal(np.sort(a & ((1 << 63) - 1 - (0x3F << 56))), np.sort(b & ((1 << 63) - 1 - (0x3F << 56))))
