"""HBFCC_EARLY_CLOCK (default 0; issue 13 item 2, Little's law): an issue group reads %globaltimer -- its
requests' issue time, from which their futures are the modeled latency later -- first, before hbfcc's own setup code
(the sites' addresses, their band checks, the group's first vote), where the program would issue its loads. Before it
the read came after that setup, so the setup's time (simulator time) was added to every modeled round trip: a
latency-bound stream's round ran ~1.2 us over its 20 us on an H100 (stop 52-53). Measured with it (H100, stop 53): the
round 21.25 -> 21.09 us (Little x1.062 -> x1.055), but ptxas gave the unrolled reduce 212 registers instead of 168
(x1.77 -> x2.34), so it is opt-in."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_merge_loads import VEC, run_pass  # noqa: E402

from hbfcc.rewrite import rewrite_text  # noqa: E402


def group_start(out: str) -> tuple[int, int, int]:
    """(the group's clock read, its first band check, its first vote): positions in the entry's text."""
    body = out[out.index(".visible .entry"):]
    vote = body.index("vote.sync.any.pred \t%__hb_ipb, %__hb_gany")
    band = body.index("sub.u64 \t%__hb_b, ")
    clock = body.rindex("mov.u64 \t%__hb_it, %globaltimer;", 0, vote + 400)
    return clock, band, vote


def test_the_group_reads_its_clock_before_its_setup():
    on, f_on = run_pass(VEC, early_clock=True)
    off, f_off = run_pass(VEC, early_clock=False)
    assert f_on["issue_groups"] == f_off["issue_groups"] == 1
    c, b, v = group_start(on)
    assert c < b < v                       # first, then the band checks and the vote
    c, b, v = group_start(off)
    assert b < v < c                       # as before: after the group's first vote
    # the same statements, only the clock read moved
    assert sorted(on.splitlines()) == sorted(off.splitlines())
    assert on.count("%globaltimer") == off.count("%globaltimer")


def test_the_knob_reaches_the_pass(monkeypatch):
    monkeypatch.delenv("HBFCC_EARLY_CLOCK", raising=False)
    assert rewrite_text(VEC, filename="v.ptx", link=False).meta["timing"]["early_clock"] is False
    monkeypatch.setenv("HBFCC_EARLY_CLOCK", "1")
    assert rewrite_text(VEC, filename="v.ptx", link=False).meta["timing"]["early_clock"] is True
    from hbfcc import knobs
    from hbfcc.cli import marker_line
    assert knobs.load().early_clock == "1" and "early-clock 1" in marker_line()
    monkeypatch.setenv("HBFCC_EARLY_CLOCK", "auto")      # auto: only in HBFCC_FULL_WARP=auto's variant build
    r = rewrite_text(VEC, filename="v.ptx", link=False)
    assert r.meta["timing"]["early_clock"] is False and "early-clock auto" in marker_line()
    name = r.meta["timing"]["kernels"][0]
    r = rewrite_text(VEC, filename="v.ptx", link=False, early_clock_in=(name,))
    assert r.meta["timing"]["early_clock_in"] == [name]
    monkeypatch.setenv("HBFCC_EARLY_CLOCK", "1")           # per function: the same code as the knob at 1
    assert r.text == rewrite_text(VEC, filename="v.ptx", link=False).text
    monkeypatch.setenv("HBFCC_EARLY_CLOCK", "yes")         # a bad value: an error naming the variable
    from hbfcommon.errors import ConfigError
    with pytest.raises(ConfigError, match="HBFCC_EARLY_CLOCK"):
        knobs.load()
