"""hbfctl report: one self-contained page, each section with data or words; bad input is one line, exit 2."""
from __future__ import annotations

import json
import os
import re

import pytest
from report_inputs import old_summary

from hbfd import ctl_cli
from hbfd.runreport import load_run
from hbfd.runreport.html import build_report
from hbfd.runreport.load import DEMO_SCHEMA, HBFD_SCHEMA
from hbfd.summary import SUMMARY_SCHEMA


def _report(tmp_path, summary, *extra) -> str:
    out = tmp_path / "report.html"
    assert ctl_cli.main(["report", str(summary), "-o", str(out), *extra]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no temp file left
    return out.read_text()


def _section(page: str, title: str) -> str:
    m = re.search(rf"<h2>{re.escape(title)}</h2>(.*?)(?=<h2>|<p class=\"note\">Written by)", page, re.S)
    assert m, title
    return m.group(1)


def _series(block: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r'data-series="([^"]+)" data-points="(\d+)"', block)}


def test_schema_names_agree():
    assert HBFD_SCHEMA == SUMMARY_SCHEMA and DEMO_SCHEMA == "hbfsim.demo-summary"


def test_report_of_the_demo_run(tmp_path, demo_path, demo_doc):
    page = _report(tmp_path, demo_path)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # self-contained: no script, nothing fetched (the SVG namespace is a name, not a load)
    assert "<script" not in page.lower()
    assert not re.search(r"\b(src|href)\s*=", page, re.I)
    assert not re.search(r"url\(", page)
    s = demo_doc["hbfd_summary"]
    assert s["profile"]["name"] in page and "0.1.0" in page and "cpu-trace" in page
    lat = _series(_section(page, "Latency distribution (CDF)"))
    assert lat == {"workload wall": 202, "workload modeled": 202, "workload overhead": 202, "workload service": 202,
                   "hbfd modeled": 202, "hbfd service": 202}
    n = len(s["timeline"]["columns"]["t_ns"])
    assert _series(_section(page, "Bandwidth over time"))["reference path"] == n
    temps = _series(_section(page, "Temperatures and thermal state"))
    assert temps["hottest HBF layer"] == n and temps["GPU die"] == n
    # refresh debt stayed 0 in this run: said in words, no plot
    ref = _section(page, "Refresh")
    assert "No refresh debt accrued" in ref and "<svg" not in ref
    assert "No per-kernel counters" in _section(page, "Kernels")
    # the demo's own explanation lines are kept
    assert demo_doc["explanation"][0].split()[0] in _section(page, "What the demo's numbers mean")
    # every plot is followed by words
    assert page.count("<figure>") == page.count("<figcaption>") >= 4


def test_kernel_table(tmp_path, demo_path, counters_path):
    k = _section(_report(tmp_path, demo_path, "--counters", str(counters_path)), "Kernels")
    assert "gemv_instr" in k and "rate_instr" in k and "20,496" in k and "1.23 ms" in k
    for col in ("launches", "exposed wait", "helper time", "inline", "program bytes", "latest span"):
        assert f"<dt>{col}</dt>" in k
    assert "10,240 / 3.46 ms" in k and "7 / -" in k        # the inline path's requests / own time ('-': not timed)


def test_kernel_table_from_the_runtimes_report_in_the_summary(tmp_path, demo_doc):
    """Without --counters the page uses the kernel_counters Report the runtime sent when its session
    closed (Session._report_kernel_counters), kept in hbfd's summary."""
    from report_inputs import kernel_counters
    d = json.loads(json.dumps(demo_doc))
    d["hbfd_summary"].setdefault("reports", []).append({"kind": "kernel_counters", "data": kernel_counters(),
                                                        "at_ns": 1})
    p = tmp_path / "with-kernels.json"
    p.write_text(json.dumps(d))
    k = _section(_report(tmp_path, p), "Kernels")
    assert "gemv_instr" in k and "rate_instr" in k and "20,496" in k and "No per-kernel counters" not in k
    d["hbfd_summary"]["reports"][-1]["data"] = {"kernels": {"k": {"launches": -1}}}   # checked like a file
    p.write_text(json.dumps(d))
    assert ctl_cli.main(["report", str(p), "-o", str(tmp_path / "bad.html")]) == 2


def test_old_summary_says_what_is_missing(tmp_path, demo_doc):
    p = tmp_path / "old.json"
    p.write_text(json.dumps(old_summary(demo_doc)))
    page = _report(tmp_path, p)
    lat = _section(page, "Latency distribution (CDF)")
    assert "No latency distribution in this summary" in lat and "<svg" not in lat and "p99" in lat
    bw = _section(page, "Bandwidth over time")
    assert "No timeline in this summary" in bw and "<svg" not in bw
    th = _section(page, "Temperatures and thermal state")
    assert "thermal samples" in th and _series(th)            # the service's own samples instead
    assert "not recorded" in page


def test_no_thermal_model_and_no_refresh_model(tmp_path, demo_doc):
    d = demo_doc["hbfd_summary"]
    d["services"] = {"thermal": {"service": "none", "thermal": "none"}, "refresh": {"service": "none"}}
    for c in ("hbf_max_c", "hbm_c", "gpu_c"):
        d["timeline"]["columns"][c] = [None] * len(d["timeline"]["columns"]["t_ns"])
    page = build_report(load_run(_write(tmp_path, demo_doc)))
    assert "No thermal model in this run" in _section(page, "Temperatures and thermal state")
    assert "No retention/refresh model" in _section(page, "Refresh")


def _write(tmp_path, doc, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


@pytest.mark.parametrize("command", ["report", "trace"])
@pytest.mark.parametrize("case, code, words", [
    ("missing", "INVALID_ARGUMENT", "No such file"),
    ("not-json", "INVALID_ARGUMENT", "not valid JSON"),
    ("nan", "INVALID_ARGUMENT", "not a finite number"),
    ("list", "INVALID_ARGUMENT", "a JSON object, not list"),
    ("other-schema", "INVALID_ARGUMENT", "not a run summary"),
    ("summary-v2", "UNSUPPORTED", "'hbfsim.summary/2' is not supported"),
    ("demo-v2", "UNSUPPORTED", "schema_version 2 is not supported"),
    ("no-profile", "INVALID_ARGUMENT", "field 'profile' is missing"),
    ("fifo", "INVALID_ARGUMENT", "a FIFO, not a regular file"),
    ("directory", "INVALID_ARGUMENT", "not a regular file"),
    ("bad-counters", "INVALID_ARGUMENT", "not the runtime's counters"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, demo_doc, command, case, code, words):
    good = _write(tmp_path, demo_doc, "good.json")
    extra = []
    if case == "missing":
        p = tmp_path / "nope.json"
    elif case == "not-json":
        p = _write(tmp_path, '{"schema": "hbfsim.summary/1",')
    elif case == "nan":
        p = _write(tmp_path, '{"schema": "hbfsim.summary/1", "x": NaN}')
    elif case == "list":
        p = _write(tmp_path, [1, 2])
    elif case == "other-schema":
        p = _write(tmp_path, {"schema": "something-else", "traceEvents": []})
    elif case == "summary-v2":
        p = _write(tmp_path, dict(demo_doc["hbfd_summary"], schema="hbfsim.summary/2"))
    elif case == "demo-v2":
        p = _write(tmp_path, dict(demo_doc, schema_version=2))
    elif case == "no-profile":
        d = dict(demo_doc["hbfd_summary"])
        del d["profile"]
        p = _write(tmp_path, d)
    elif case == "fifo":
        p = tmp_path / "fifo.json"
        os.mkfifo(p)                     # refused without blocking (no writer ever opens it)
    elif case == "directory":
        p = tmp_path / "dir.json"
        p.mkdir()
    else:
        p, extra = good, ["--counters", str(_write(tmp_path, {"kernels": 3}, "c.json"))]
    out = tmp_path / "out.file"
    out.write_text("the previous output\n")
    rc = ctl_cli.main([command, str(p), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith(f"hbfctl {command}: {code}: ") and words in err, err
    assert "Traceback" not in err
    assert out.read_text() == "the previous output\n"            # untouched
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]   # no temp file left


@pytest.mark.parametrize("command", ["report", "trace"])
def test_bad_output_path(tmp_path, capsys, demo_path, command):
    d = tmp_path / "a-dir"
    d.mkdir()
    for out, words in ((d, "not a regular file"), (tmp_path / "no" / "such" / "x", "does not exist"),
                       (demo_path, "the output is the input file")):
        assert ctl_cli.main([command, str(demo_path), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert json.loads(demo_path.read_text())["schema"] == "hbfsim.demo-summary"


def test_default_output_is_beside_the_summary(tmp_path, demo_path, capsys):
    assert ctl_cli.main(["--json", "report", str(demo_path)]) == 0
    out = json.loads(capsys.readouterr().out)["output"]
    assert out == str(demo_path.with_suffix(".html")) and os.path.getsize(out) > 10_000
    assert ctl_cli.main(["trace", str(demo_path)]) == 0
    assert demo_path.with_suffix(".perfetto.json").exists()


@pytest.mark.parametrize("command", ["report", "trace"])
def test_command_line_mistakes_are_one_line(capsys, command):
    with pytest.raises(SystemExit) as ex:
        ctl_cli.main([command])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1 and "SUMMARY.json" in err and "Traceback" not in err, err
    with pytest.raises(SystemExit):
        ctl_cli.main([command, "s.json", "--countres", "c.json"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean '--counters'" in err, err
