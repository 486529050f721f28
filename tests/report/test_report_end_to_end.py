"""A real run to a trace and a report, and the report in a real headless browser.

The run is the demo (hbfd + the workload process, CPU path); `hbfctl trace` and `hbfctl report` are the
installed console command's module (`python -m hbfd.ctl_cli`). The browser is Chromium driven by
Playwright for Python: `make test` installs Playwright (the dev extra) and Debian's chromium (the
Makefile's `browser` step); Playwright's own browser download is never used (it fetches from a CDN).
Without either, the browser test SKIPS saying which is missing; it never passes without a browser.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from report_inputs import kernel_counters

from hbfd.runreport.trace import check_trace

CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def chromium_path() -> str | None:
    """$HBFSIM_CHROMIUM, else Debian's chromium (what `make test` installs), else a Chrome on PATH."""
    env = os.environ.get("HBFSIM_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _ctl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hbfd.ctl_cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    """One real demo run and its trace and report (with kernel counters beside it)."""
    d = tmp_path_factory.mktemp("run")
    env = {k: v for k, v in os.environ.items() if k != "HBFD_DEMO"}
    env["HBFD_DEMO"] = "cpu"
    r = subprocess.run([sys.executable, "-m", "workloads.demo", "--summary", "summary.json"], cwd=d, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (d / "counters.json").write_text(json.dumps(kernel_counters()))
    for cmd, out in (("trace", "run.perfetto.json"), ("report", "report.html")):
        r = _ctl(cmd, "summary.json", "-o", out, "--counters", "counters.json", cwd=d)
        assert r.returncode == 0 and r.stdout.strip() == f"hbfctl {cmd}: wrote {out}", r.stdout + r.stderr
    return d


def test_a_real_run_gives_a_valid_trace_and_a_report(fresh_run):
    s = json.loads((fresh_run / "summary.json").read_text())
    tl = s["hbfd_summary"]["timeline"]
    assert tl["points"] >= 2 and len(s["numbers"]["cdf"]["wall_ns"]) == len(tl["latency"]["q"])
    assert tl["latency"]["n"] == 5000 and tl["columns"]["ref_requests"][-1] == 5000
    doc = json.loads((fresh_run / "run.perfetto.json").read_text())
    assert check_trace(doc) == []
    assert any(e["ph"] == "X" for e in doc["traceEvents"]) and any(e["ph"] == "C" for e in doc["traceEvents"])
    page = (fresh_run / "report.html").read_text()
    assert "latency CDF" in page and "gemv_instr" in page


def test_report_in_a_headless_browser(fresh_run):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (it is in the dev extra: pip install -e '.[dev]')")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium found (make test installs Debian's chromium; or set HBFSIM_CHROMIUM to a "
                    "Chrome/Chromium binary)")
    errors, failed = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("requestfailed", lambda req: failed.append(req.url))
            requests = []
            page.on("request", lambda req: requests.append(req.url))
            page.goto((fresh_run / "report.html").as_uri(), wait_until="load")
            assert page.title().startswith("hbfsim run report")
            plots = page.locator("svg.plot")
            assert plots.count() >= 4               # latency, bandwidth, temperatures, thermal state
            for i in range(plots.count()):
                box = plots.nth(i).bounding_box()
                assert box and box["width"] > 100 and box["height"] > 100, (i, box)
            series = page.locator("svg.plot polyline.series")
            assert series.count() >= 8
            for i in range(series.count()):
                s = series.nth(i)
                n = int(s.get_attribute("data-points"))
                pts = page.evaluate("(el) => el.points.numberOfItems", s.element_handle())
                box = s.bounding_box()
                assert n >= 2 and pts >= n, (s.get_attribute("data-series"), n, pts)
                assert box and (box["width"] > 0 or box["height"] > 0), (s.get_attribute("data-series"), box)
            # the kernel table rendered, the words of a section without data are visible
            assert page.locator("table td", has_text="rate_instr").count() == 1
            assert page.locator("p.missing").first.is_visible()
            # the trace loads as JSON in the same browser, with the structure the viewers need
            text = (fresh_run / "run.perfetto.json").read_text()
            got = page.evaluate("""(t) => { const d = JSON.parse(t); const ev = d.traceEvents;
                return {n: ev.length, bad: ev.filter(e => !(typeof e.ph === 'string' && typeof e.name === 'string'
                        && Number.isInteger(e.pid) && Number.isInteger(e.tid) && typeof e.ts === 'number')).length,
                        x: ev.filter(e => e.ph === 'X').length, c: ev.filter(e => e.ph === 'C').length}; }""", text)
            assert got["n"] > 100 and got["bad"] == 0 and got["x"] == 2 and got["c"] > 50, got
        finally:
            browser.close()
    assert errors == [], errors
    assert failed == [] and all(u.startswith("file://") for u in requests), (failed, requests)
