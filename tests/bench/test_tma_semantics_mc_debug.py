"""CPU test of bench/tma_semantics.py's --mc-debug decoding (issue 15, multicast): the debug buffer a
-DHBF_TMA_MC_DEBUG=1 helper writes (hbf_abi.h HBF_TMA_DBG_*; hbf_tma.cuh hb_dbg_event / hb_tw_mc_debug_exit) read
back into events and per-CTA tables, with the phase words split into deadline / WAITED / CLOSED."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import tma_semantics as TS  # noqa: E402
from hbfcommon import abi  # noqa: E402


def test_events_and_exit_tables_decode():
    w = [0] * abi.HBF_TMA_DBG_WORDS
    w[0], w[1] = abi.HBF_TMA_DBG_EVENTS + 3, 1          # three events did not fit; one table dumped
    ev = abi.HBF_TMA_DBG_HDR
    # a record by rank 0 into rank 1's table: word = deadline 1234, open
    w[ev:ev + abi.HBF_TMA_DBG_EV_WORDS] = [1, 0, 0, 0, 0x01002008, 0x400, 1, 0xfffffbf9, 1, 0x01002050,
                                           1234, 0]
    tb = abi.HBF_TMA_DBG_HDR + abi.HBF_TMA_DBG_EVENTS * abi.HBF_TMA_DBG_EV_WORDS
    tw = tb + 4
    w[tb:tw] = [1, 1, 0x01002008, 0]
    w[tw] = 128                                          # exited threads
    slot = 5
    e = tw + 2 + 6 * slot
    w[e] = 0xfffffbf9                                    # key: the barrier 0x408 below the table, + 1
    w[e + 2:e + 4] = [1234, 1 << 30]                     # parity 0: waited (bit 62)
    w[e + 4:e + 6] = [99, 1 << 31]                       # parity 1: closed (bit 63)
    d = TS.decode_mc_debug(w)
    assert d["events_seen"] == abi.HBF_TMA_DBG_EVENTS + 3 and d["events_dropped"] == 3
    assert len(d["events"]) == abi.HBF_TMA_DBG_EVENTS
    r = d["events"][0]
    assert r["kind"] == "record" and r["dst"] == 1 and r["table"] == "0x1002008" and r["entry"] == "0x1002050"
    assert r["word"] == {"deadline_ns": 1234, "waited": False, "closed": False}
    assert d["events"][1]["word"] is None               # an empty event slot
    (t,) = d["tables"]
    assert t["rank"] == 1 and t["exited"] == 128
    (ent,) = t["entries"]
    assert ent["slot"] == slot and ent["key"] == "0xfffffbf9"
    assert ent["parity0"] == {"deadline_ns": 1234, "waited": True, "closed": False}
    assert ent["parity1"] == {"deadline_ns": 99, "waited": False, "closed": True}


def test_a_buffer_of_another_size_is_refused():
    with pytest.raises(ValueError):
        TS.decode_mc_debug([0] * (abi.HBF_TMA_DBG_WORDS - 1))
