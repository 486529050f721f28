"""`hbfd thermal validate` reports progress (issue 18, item 5): a line on the log when each phase starts and
ends and, while it runs, one every --progress-s seconds with the steps done and the time left; stdout keeps
only the result. The models report steps through a callback and keep no clock."""
from __future__ import annotations

import json
import logging
import re
import sys
import time

import numpy as np
import pytest

LOGGER = "hbfd.thermal.validate"


def test_stepping_loops_report_every_step_and_compute_the_same(small_model):
    st = small_model.stepper(0.01)
    seen = []
    a = st.unit_step_responses(7, on_step=lambda d, n: seen.append((d, n)))
    assert seen == [(k, 7) for k in range(1, 8)]
    assert np.array_equal(a, small_model.stepper(0.01).unit_step_responses(7))
    P = np.ones((2, 5, len(small_model.input_names)))
    seen.clear()
    b = st.run_many(P, on_step=lambda d, n: seen.append((d, n)))
    assert seen == [(k, 5) for k in range(1, 6)]
    assert np.array_equal(b, small_model.stepper(0.01).run_many(P))


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_progress_line_counts_steps_and_time_left():
    from hbfd.thermal.validate import Progress
    clk = _Clock()
    lines: list[str] = []

    class L:
        def info(self, fmt, *a):
            lines.append(fmt % a)
    p = Progress(3, every_s=0, logger=L(), clock=clk)
    with p.phase("stepping") as on_step:
        assert p.line("stepping") == "[1/3] stepping: running, 0 s"
        clk.t += 10
        on_step(25, 100)
        assert p.line("stepping") == "[1/3] stepping: step 25/100 (25 %), 10 s, ~30 s left"
        clk.t += 30
        on_step(100, 100)
    assert lines == ["[1/3] stepping ...", "[1/3] stepping: done in 40.0 s (40 s in all)"]
    with p.phase("solve"):
        clk.t += 2
    assert lines[-1] == "[2/3] solve: done in 2.0 s (42 s in all)"
    with pytest.raises(ValueError):
        Progress(1, every_s=-1)


def test_ticker_reports_while_a_phase_runs(caplog):
    from hbfd.thermal.validate import Progress
    caplog.set_level(logging.INFO, logger=LOGGER)
    p = Progress(1, every_s=0.02)
    with p.phase("long call") as on_step:
        on_step(1, 4)
        time.sleep(0.3)                  # one long call: the ticker keeps reporting
    msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    ticks = [m for m in msgs if m.startswith("[1/1] long call: step 1/4 (25 %)")]
    assert len(ticks) >= 3, msgs
    assert msgs[0] == "[1/1] long call ..." and msgs[-1].startswith("[1/1] long call: done in")


def test_validate_cli_shows_every_phase_and_keeps_stdout_for_the_result(monkeypatch, tmp_path, capsys, caplog,
                                                                         small_geometry_dict):
    from hbfd.thermal.validate import main
    monkeypatch.setitem(sys.modules, "control", None)     # the comparison phase still runs (and says skipped)
    caplog.set_level(logging.INFO, logger=LOGGER)
    g = tmp_path / "g.json"
    g.write_text(json.dumps(small_geometry_dict))
    assert main(["--geometry", str(g), "--seconds", "3", "--hankel-blocks", "40", "--json",
                 "--progress-s", "0.001"]) == 0
    res = json.loads(capsys.readouterr().out)              # stdout: the JSON alone
    assert res["pass"]
    msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    starts = [m for m in msgs if m.endswith(" ...")]
    assert [m[:5] for m in starts] == ["[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"], msgs
    assert "unit-step samples" in starts[0] and "ERA" in starts[1] and "full-order model" in starts[2]
    assert "python-control" in starts[4]
    assert len([m for m in msgs if re.search(r": done in \d+\.\d s", m)]) == 5
    assert all(m.startswith("[") for m in msgs)


def test_progress_off_keeps_the_phase_lines(monkeypatch, tmp_path, capsys, caplog, small_geometry_dict):
    from hbfd.thermal.validate import main
    caplog.set_level(logging.INFO, logger=LOGGER)
    g = tmp_path / "g.json"
    g.write_text(json.dumps(small_geometry_dict))
    assert main(["--geometry", str(g), "--seconds", "2", "--hankel-blocks", "40", "--no-python-control",
                 "--progress-s", "0"]) == 0
    msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(msgs) == 8 and msgs[0].startswith("[1/4]"), msgs     # 4 phases: start + done each
    assert capsys.readouterr().out.rstrip().endswith("PASS")


def test_negative_progress_interval_is_a_usage_error(capsys):
    from hbfd.thermal.validate import main
    with pytest.raises(SystemExit) as ei:
        main(["--progress-s", "-1"])
    assert ei.value.code == 2 and "--progress-s must be >= 0" in capsys.readouterr().err


def test_a_terminal_gets_a_progress_bar():
    """On a terminal (bar=True here, drawn into a buffer) the phase shows a tqdm bar with its steps."""
    import io

    from hbfd.thermal.validate import Progress
    buf = io.StringIO()
    lines: list[str] = []

    class L:
        def info(self, fmt, *a):
            lines.append(fmt % a)
    p = Progress(2, every_s=0.02, logger=L(), bar=True, bar_file=buf)
    with p.phase("stepping") as on_step:
        on_step(30, 120)
        time.sleep(0.3)
    drawn = buf.getvalue()
    assert "[1/2] stepping" in drawn and "30/120" in drawn and "25%" in drawn, drawn
    # the bar replaces the periodic lines; the start and end lines stay on the log
    assert lines[0] == "[1/2] stepping ..." and lines[-1].startswith("[1/2] stepping: done in") and len(lines) == 2
    assert Progress(1, bar_file=io.StringIO()).bar is False      # not a terminal: lines
