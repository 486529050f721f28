"""EQ3 planner (hbfd/plan.py, `hbfctl plan`): the paper's Figure 5 / section 6.4 numbers from its parameters."""
import json

import pytest

from hbfcommon.errors import ConfigError
from hbfd import ctl_cli, plan


def _rows():
    return {r["layout"]: r for r in plan.plan(plan.load_params())["layouts"]}


def test_paper_numbers():
    r = _rows()
    assert r["A"]["area_mm2"] == pytest.approx(861.1, abs=0.05) and r["A"]["area_left_mm2"] == pytest.approx(0, abs=1e-6)
    assert r["B"]["area_mm2"] == pytest.approx(837.7, abs=0.05)
    assert r["B"]["area_left_mm2"] == pytest.approx(23.4, abs=0.05)
    assert r["C"]["area_mm2"] == pytest.approx(754.2, abs=0.05)
    assert all(x["fits_budget"] for x in r.values())
    assert [r[k]["installed_gib"] for k in "ABC"] == [216, 1132, 1572]
    assert round(r["A"]["kv_tokens_in_hbm"] / 1e6, 2) == 1.72          # ~1.72M tokens at A
    assert round(r["B"]["kv_tokens_in_hbm"] / 1e6, 2) == 0.54          # ~0.54M at B
    assert r["C"]["kv_tokens_in_hbm"] is None and not r["C"]["experts_fit_in_hbm"]
    assert r["C"]["hbm_available_gib"] == pytest.approx(30.9879, abs=1e-4)
    assert r["C"]["expert_fraction_in_hbm"] == pytest.approx(0.574, abs=5e-4)   # 57.4 % of the expert set
    assert plan.plan(plan.load_params())["expert_residency_threshold_gib"] == pytest.approx(59.012, abs=5e-4)
    assert r["A"]["kv_bytes_per_token"] == 2 * 48 * 4 * 128 * 2


def test_every_parameter_has_provenance():
    for k, v in plan.load_params()["parameters"].items():
        assert isinstance(v["value"], (int, float)) and v["provenance"].strip(), k


def test_layout_over_budget_and_custom():
    (d,) = plan.plan(plan.load_params(), [plan.parse_layout("D=2x3")])["layouts"]
    assert not d["fits_budget"] and d["installed_gib"] == 2 * 36 + 3 * 512


@pytest.mark.parametrize("spec", ["bad", "D=2", "D=ax3", "D=-1x2", "D=0x0"])
def test_bad_layout_is_one_line(spec, capsys):
    assert ctl_cli.main(["plan", "--layout", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hbfctl plan: INVALID_ARGUMENT: ") and "Traceback" not in err and err.count("\n") == 1


def test_bad_params_file(tmp_path, capsys):
    bad = tmp_path / "p.json"
    for text in ("{", "[]", json.dumps({"parameters": {"area_budget_mm2": {"value": "x"}}, "layouts": [{"name": "A"}]}),
                 json.dumps({"parameters": {}, "layouts": [{"name": "A", "hbm_stacks": 1, "hbf_units": 0}]})):
        bad.write_text(text)
        assert ctl_cli.main(["plan", "--params", str(bad)]) == 2
        assert "hbfctl plan: INVALID_ARGUMENT" in capsys.readouterr().err
    assert ctl_cli.main(["plan", "--params", str(tmp_path / "none.json")]) == 2
    with pytest.raises(ConfigError):
        plan.parse_layout("x")


def test_cli_table_and_json(capsys):
    assert ctl_cli.main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "1,572" in out and "59.012" in out and "infeasible" in out
    assert ctl_cli.main(["plan", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [x["layout"] for x in d["layouts"]] == ["A", "B", "C"] and "provenance" in d["parameters"]["hbm_stack_gib"]
