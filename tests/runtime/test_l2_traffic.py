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
