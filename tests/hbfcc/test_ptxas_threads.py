"""HBFCC_PTXAS_THREADS (issue 18 item 3): hbfcc-ptxas lets the real ptxas assemble a rewritten module's entries in
parallel (``-split-compile N``), with the same machine code; a module it did not rewrite is assembled exactly as the
caller asked, and a caller's own -split-compile stands."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402
from test_cli_ptxas import SIMPLE  # noqa: E402

from hbfcc import knobs  # noqa: E402
from hbfcc.ptxas_args import split_compile  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402


# test_cli_ptxas's one-kernel module, twice under two names: a module of two instrumented entries
_BODY = SIMPLE[SIMPLE.index(".visible .entry"):]
TWO = SIMPLE.replace("vadd", "ka") + _BODY.replace("vadd", "kb")
# below the helper's target: not instrumented, assembled unchanged
BELOW = TWO.replace(".target sm_90a", ".target sm_80")


@pytest.mark.parametrize("v,want", [(None, 0), ("", 0), ("auto", 0), (" AUTO ", 0), ("1", 1), ("4", 4),
                                    ("0x10", 16), ("256", 256)])
def test_knob_values(monkeypatch, v, want):
    if v is None:
        monkeypatch.delenv("HBFCC_PTXAS_THREADS", raising=False)
    else:
        monkeypatch.setenv("HBFCC_PTXAS_THREADS", v)
    assert knobs.load().ptxas_threads == want


@pytest.mark.parametrize("v", ["0", "257", "-2", "many", "2.5"])
def test_bad_knob_names_the_variable(monkeypatch, v):
    monkeypatch.setenv("HBFCC_PTXAS_THREADS", v)
    with pytest.raises(ConfigError) as e:
        knobs.load()
    assert e.value.fields.get("variable") == "HBFCC_PTXAS_THREADS" and "auto" in str(e.value)


def test_split_compile_rule(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    assert split_compile(["-arch=sm_90a", "a.ptx"], 0, 3) == ["-split-compile", "3"]      # auto: the entries
    assert split_compile(["-arch=sm_90a", "a.ptx"], 0, 9) == ["-split-compile", "4"]      # auto: the CPUs
    assert split_compile(["-arch=sm_90a", "a.ptx"], 0, 1) == []                           # one entry: nothing
    assert split_compile(["-arch=sm_90a", "a.ptx"], 6, 1) == ["-split-compile", "6"]      # given: as given
    assert split_compile(["-arch=sm_90a", "a.ptx"], 1, 8) == []                           # 1: off
    for own in (["-split-compile", "2"], ["--split-compile", "0"], ["--split-compile=2"], ["-split-compile=8"]):
        assert split_compile(["-arch=sm_90a", *own, "a.ptx"], 0, 8) == []                 # the caller's stands


def _texts(cubin: Path) -> dict[str, bytes]:
    """The cubin's code sections by name (.text.<function>)."""
    out = subprocess.run(["readelf", "-SW", str(cubin)], capture_output=True, text=True).stdout
    data = cubin.read_bytes()
    res = {}
    for ln in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\.text\.\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", ln)
        if m:
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            res[m.group(1)] = data[off:off + size]
    return res


def _spy(tmp_path: Path) -> Path:
    """A 'real ptxas' that appends its argv (JSON, one line) to argv.log and runs CUDA's ptxas."""
    log = tmp_path / "argv.log"
    spy = tmp_path / "ptxas_spy"
    spy.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                   f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                   f"os.execv({U.tool('ptxas')!r}, [{U.tool('ptxas')!r}] + sys.argv[1:])\n")
    spy.chmod(0o755)
    return spy


def _build(tmp_path: Path, text: str, name: str, threads: str, extra=(), arch="sm_90a") -> tuple[Path, list[list[str]]]:
    d = tmp_path / name
    d.mkdir()
    (d / "m.ptx").write_text(text)
    spy = _spy(d)
    e = U.env_with(HBFCC_ARTIFACT_DIR=d / "store", HBFCC_REAL_PTXAS=spy, HBFCC_PTXAS_THREADS=threads,
                   HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx())
    cp = subprocess.run([U.console("hbfcc-ptxas"), f"-arch={arch}", *extra, "m.ptx", "-o", "m.cubin"],
                        capture_output=True, text=True, env=e, cwd=d)
    assert cp.returncode == 0, cp.stderr[-2000:]
    calls = [json.loads(ln) for ln in (d / "argv.log").read_text().splitlines()]
    return d / "m.cubin", [c for c in calls if "--version" not in c]


def _assembled_rewrite(calls: list[list[str]]) -> list[str]:
    """The ptxas call that assembled the output (its -o is m.cubin)."""
    mine = [c for c in calls if "m.cubin" in c]
    assert len(mine) == 1, calls
    return mine[0]


def test_rewritten_module_is_split_and_the_code_is_the_same(tmp_path):
    U.tool("ptxas")
    on, calls_on = _build(tmp_path, TWO, "on", "2")
    off, calls_off = _build(tmp_path, TWO, "off", "1")
    a_on, a_off = _assembled_rewrite(calls_on), _assembled_rewrite(calls_off)
    assert a_on[a_on.index("-split-compile") + 1] == "2"
    assert "-split-compile" not in a_off
    # the baseline build of the original PTX (HBFCC_BASELINE) is assembled as the caller asked
    assert all("-split-compile" not in c for c in calls_on if c is not a_on)
    t_on, t_off = _texts(on), _texts(off)
    assert {"ka", "kb"} <= {n.split(".text.", 1)[1] for n in t_on}
    assert t_on == t_off and t_on


def test_auto_and_an_unrewritten_module(tmp_path):
    U.tool("ptxas")
    _c, calls = _build(tmp_path, TWO, "auto", "auto")
    a = _assembled_rewrite(calls)
    cpus = len(os.sched_getaffinity(0))
    if cpus >= 2:
        assert a[a.index("-split-compile") + 1] == "2"      # two instrumented entries, at most the CPUs
    else:
        assert "-split-compile" not in a
    _c, calls = _build(tmp_path, BELOW, "below", "4", arch="sm_80")
    assert calls
    assert all("-split-compile" not in c for c in calls)


def test_the_callers_split_compile_stands(tmp_path):
    U.tool("ptxas")
    _c, calls = _build(tmp_path, TWO, "own", "4", extra=("-split-compile", "1"))
    a = _assembled_rewrite(calls)
    assert a.count("-split-compile") == 1 and a[a.index("-split-compile") + 1] == "1"
