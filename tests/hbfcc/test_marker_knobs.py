"""Every hbfcc knob that changes what a build produces changes the --version marker line (issue 18
item 4): Triton puts `hbfcc-ptxas --version` into its cache key, and the runtime compares a cubin's
recorded marker with the one hbfcc-ptxas prints now, so a knob missing from the marker would let a
cubin of one configuration pass for another. A knob added to knobs.DOCS must be classified here."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import knobs  # noqa: E402
from hbfcc.cli import marker_line  # noqa: E402

# knob -> a value other than its default: each changes the rewritten PTX or how it is assembled
CHANGES_THE_BUILD = {
    "HBFCC_PASSES": "timing,flags",
    "HBFCC_CPASYNC_WINDOW": "4",
    "HBFCC_HOIST_ISSUES": "0",
    "HBFCC_INLINE_ISSUE": "0",
    "HBFCC_GROUP_ISSUES": "0",
    "HBFCC_HOIST_LOADS": "0",
    "HBFCC_FAST_GROUPS": "0",
    "HBFCC_MERGE_LOADS": "0",
    "HBFCC_INLINE_MULTI": "0",
    "HBFCC_INLINE_LIVE": "0",
    "HBFCC_INLINE_TIME": "1",
    "HBFCC_SHARE_UNTIL": "0",
    "HBFCC_LOADS_FIRST": "1",
    "HBFCC_FULL_WARP": "all",
    "HBFCC_EARLY_CLOCK": "1",
    "HBFCC_PREFETCH_NEXT": "0",
    "HBFCC_PREFETCH_GROUP": "1",
    "HBFCC_CALL_ISOLATION": "1",
    "HBFCC_LAUNCH_BOUND": "0",
    "HBFCC_NATIVE_SCOPE": "1",
    "HBFCC_NATIVE_ENTRY": "0",
    "HBFCC_OCCUPANCY_GUARD": "1",
    "HBFCC_LINK_PRUNE": "0",
    "HBFCC_LINK": "separate",
    "HBFCC_DEFER": "1",           # the output is the plain cubin (the instrumented one is built later)
}
# knob -> why it is not in the marker
NOT_IN_THE_MARKER = {
    "HBFCC_REAL_PTXAS": "hbfcc-ptxas --version prints that ptxas's own version text before the marker",
    "HBFCC_REAL_NVCC": "nvcc builds are not keyed by Triton",
    "HBFCC_HELPER_PTX": "the marker holds the helper's sha256 (tested below)",
    "HBFCC_EIDOLA_HELPER_PTX": "the marker holds its sha256 when the flags pass runs",
    "HBFCC_CACHE_DIR": "where files go, not what is built",
    "HBFCC_ARTIFACT_DIR": "where records go, not what is built",
    "HBFCC_SIDECAR": "where records go, not what is built",
    "HBFCC_DUMP_DIR": "debug dumps only",
    "HBFCC_BASELINE": "the plain build's facts in the record only",
    "HBFCC_LOG": "log level",
    "HBFCC_PTXAS_THREADS": "ptxas -split-compile: the same machine code (tests/hbfcc/test_ptxas_threads.py)",
    "HBFCC_SEPARATE_CAP": "builds differently only with HBFCC_LINK=separate, whose marker names the cap "
                          "(test_seplink.py::test_marker_names_the_mode_and_cap)",
    "HBFCC_JIT": "only the nvcc wrapper acts on it: it changes nvcc's target flags (sm_XX -> compute_XX), which "
                 "nvcc's own command line and the nvcc record's 'jit' field show; hbfcc-ptxas outside nvcc (Triton, "
                 "whose cache key holds the marker) never reads it, and in nvcc's PTX check step it only adds the "
                 "launch bound an SASS build of the same module decides (tests/hbfcc/test_jit.py)",
}


def test_every_knob_is_classified():
    documented = {v for v, _, _ in knobs.DOCS}
    assert documented == set(CHANGES_THE_BUILD) | set(NOT_IN_THE_MARKER), \
        documented ^ (set(CHANGES_THE_BUILD) | set(NOT_IN_THE_MARKER))


@pytest.mark.parametrize("var", sorted(CHANGES_THE_BUILD))
def test_a_build_knob_changes_the_marker(var, monkeypatch):
    for v in CHANGES_THE_BUILD:
        monkeypatch.delenv(v, raising=False)
    default = marker_line()
    monkeypatch.setenv(var, CHANGES_THE_BUILD[var])
    assert marker_line() != default


def test_the_helper_changes_the_marker(monkeypatch):
    helpers = U.helper_paths()
    if len(helpers) < 2:
        pytest.skip("one helper module only")
    monkeypatch.setenv("HBFCC_HELPER_PTX", helpers[0])
    a = marker_line()
    monkeypatch.setenv("HBFCC_HELPER_PTX", helpers[1])
    assert marker_line() != a
