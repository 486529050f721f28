"""`hbfd thermal validate` runs without python-control (a dev-only dependency): the comparison is skipped
and the report says so (issue 12). The comparison itself is checked in test_rom.py with python-control."""
from __future__ import annotations

import json
import sys

import numpy as np


def test_compare_is_skipped_with_a_note_without_python_control(monkeypatch):
    from hbfd.thermal.rom import compare_with_python_control
    monkeypatch.setitem(sys.modules, "control", None)        # `import control` raises ImportError
    res = compare_with_python_control(np.zeros((10, 2, 2)), m=4, r=2, dt_s=0.01)
    assert set(res) == {"skipped"} and "python-control" in res["skipped"] and "not installed" in res["skipped"]


def test_validate_cli_reports_the_skip(monkeypatch, tmp_path, capsys, small_geometry_dict):
    from hbfd.thermal.validate import main
    monkeypatch.setitem(sys.modules, "control", None)
    g = tmp_path / "g.json"
    g.write_text(json.dumps(small_geometry_dict))
    assert main(["--geometry", str(g), "--seconds", "3", "--hankel-blocks", "40"]) == 0
    out = capsys.readouterr().out
    assert "python-control comparison skipped: python-control (the `control` package" in out
    assert out.rstrip().endswith("PASS")
    assert main(["--geometry", str(g), "--seconds", "3", "--hankel-blocks", "40", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["pass"] and "skipped" in res["python_control"]
