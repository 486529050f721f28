"""The one-page HTML report of a run: one self-contained file (inline CSS and SVG, no JavaScript, nothing
loaded from anywhere), each number with one line saying what it is, and every section that has no data
saying so in words (never an empty plot)."""
from __future__ import annotations

import datetime as _dt
import html
from typing import Any, Iterable

from . import svg
from .load import Run
from .trace import MODE_NAMES, kernel_rows

e = html.escape
OPS = ("load", "store", "atomic", "cpasync")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1000px;color:#222;padding:0 12px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
table{border-collapse:collapse;margin:6px 0 4px} td,th{border:1px solid #ddd;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f4f4f4} td.l,th.l{text-align:left} td.what{color:#555;text-align:left;font-size:12.5px}
p.missing{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px}
p.note,figcaption{color:#555;font-size:12.5px} figure{margin:8px 0 16px}
ul.legend{list-style:none;padding:0;margin:2px 0;display:flex;flex-wrap:wrap;gap:4px 18px;font-size:12.5px}
span.swatch{display:inline-block;width:14px;height:4px;margin:0 6px 3px 0;vertical-align:middle}
span.n{color:#777} dl{margin:4px 0} dt{font-weight:600;float:left;clear:left;width:150px} dd{margin:0 0 3px 160px;color:#444}
code{background:#f4f4f4;padding:0 3px}
"""


def fmt_ns(v: float | None) -> str:
    if v is None:
        return "-"
    v = float(v)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} ns"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "-"
    v = float(v)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def fmt_int(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def missing(text: str) -> str:
    return f'<p class="missing">{e(text)}</p>'


def table(header: list[str], rows: Iterable[list[Any]], left: int = 1) -> str:
    out = ["<table><tr>" + "".join(f'<th class="{"l" if i < left else ""}">{e(h)}</th>'
                                   for i, h in enumerate(header)) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{e(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def explained(rows: list[tuple[str, str, str]]) -> str:
    """A name / value / what-it-is table."""
    return ('<table><tr><th class="l">number</th><th>value</th><th class="l">what it is</th></tr>'
            + "".join(f'<tr><td class="l">{e(n)}</td><td>{e(v)}</td><td class="what">{e(w)}</td></tr>'
                      for n, v, w in rows) + "</table>")


def columns_explained(items: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in items) + "</dl>"


def figure(p: svg.Plot, caption: str) -> str:
    return f'<figure>{svg.render(p)}{svg.legend(p)}<figcaption>{e(caption)}</figcaption></figure>'


# ---- sections ---------------------------------------------------------------------------------
def header(run: Run) -> str:
    s = run.hbfd
    prof, d = s.get("profile") or {}, s.get("daemon") or {}
    th = run.thermal
    tel = th.get("telemetry") or {}
    started = d.get("started_unix_s")
    when = (_dt.datetime.fromtimestamp(float(started), _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            if isinstance(started, (int, float)) else "not recorded")
    workload = (run.demo or {}).get("workload") or "not recorded (an hbfd summary names no workload)"
    rows = [
        ("run", f"{s.get('terminal_status')}" + (f" ({s['shutdown_reason']})" if s.get("shutdown_reason") else ""),
         "how hbfd ended: clean, or the terminal reason (thermal_shutdown, telemetry_failure, ...)"),
        ("workload", str(workload), "what drove the requests (the demo names itself; hbfd does not know its client)"),
        ("profile", f"{prof.get('name', '?')} (sha256 {str(prof.get('sha256', ''))[:16]}...)",
         f"the modeled HBF device: {prof.get('path', '?')}"),
        ("modeled bandwidth", f"{float(prof.get('aggregate_bytes_per_s', 0)) / 1e9:.1f} GB/s",
         "the profile's aggregate channel bandwidth (all channels at once)"),
        ("capacity", fmt_bytes(prof.get("capacity_bytes")), "usable capacity after over-provisioning"),
        ("engine", f"{s.get('engine')} (timing source {s.get('timing_source')})",
         "which model computed each request's time: media = the NAND media model"),
        ("time model", str(s.get("time_model", "?")), "how modeled time relates to device time"),
        ("started", when, "when hbfd started (host wall clock)"),
        ("duration", fmt_ns(d.get("uptime_ns")), "hbfd's uptime at the summary: the span of the run clock"),
        ("hbfsim version", str(s.get("hbfsim_version") or "not recorded (summary from before hbfd recorded it)"),
         "the package version hbfd ran"),
        ("commit", "not recorded", "a summary carries the package version only; the source commit is not in it"),
        ("GPU", str(tel.get("identity") or "not recorded"),
         "the GPU telemetry hbfd's thermal model read (constant:W:C = a declared constant; nvml = the real GPU); "
         "the GPU's model name is not in the summary"),
        ("thermal calibration", _calibration_text(th),
         "the package thermal model's boundary (heat sink, coolant, how board power splits over die and HBM): "
         "measured = fitted against a card (bench/thermal_calibrate.py, held-out error given); synthetic = fitted on "
         "a recording the model generated (a method check, not the card); assumed = the geometry's own values"),
        ("kernel counters", run.counters_path or "none given (--counters)",
         "the runtime's per-kernel counters, json.dump(session.counters())"),
    ]
    return (f"<h1>hbfsim run report</h1><p class=\"note\">{e(run.path)} ({e(run.schema)})</p>"
            + explained(rows))


def _calibration_text(th: dict) -> str:
    if th.get("service") in (None, "none") or th.get("thermal") == "none":
        return "none (no thermal model in this run)"
    cal = th.get("calibration")
    if not isinstance(cal, dict):
        return "not recorded (a summary from before hbfd recorded its calibration: the geometry's assumed boundary)"
    return str(cal.get("line") or cal.get("in_force") or "?")


def demo_section(run: Run) -> str:
    if not run.demo or not run.demo.get("explanation"):
        return ""
    return ("<h2>What the demo's numbers mean</h2><ul>"
            + "".join(f"<li>{e(str(ln))}</li>" for ln in run.demo["explanation"]) + "</ul>")


def counters_section(run: Run) -> str:
    c = run.hbfd.get("counters") or {}
    ref, dev = c.get("reference") or {}, c.get("device") or {}
    rows = []
    for op in OPS:
        r, d = ref.get(op) or {}, dev.get(op) or {}
        if not (r.get("requests") or d.get("requests")):
            continue
        rows.append([op, fmt_int(r.get("requests")), fmt_bytes(r.get("bytes")), fmt_ns(r.get("modeled_ns")),
                     fmt_ns(r.get("service_ns")), fmt_int(d.get("requests")), fmt_bytes(d.get("bytes")),
                     fmt_ns(d.get("modeled_ns")), fmt_ns(d.get("wall_ns")), fmt_ns(d.get("overhead_ns"))])
    out = ["<h2>Requests per operation</h2>"]
    if not rows:
        out.append(missing("No requests reached the modeled device in this run (every counter is 0)."))
        return "".join(out)
    out.append(table(["op", "ref requests", "ref bytes", "ref modeled", "ref service", "dev requests", "dev bytes",
                      "dev modeled", "dev wall", "dev overhead"], rows))
    states = {k: v for k, v in (c.get("reference_requests_by_state") or {}).items() if v}
    out.append(columns_explained([
        ("ref ...", "hbfd's reference path, which computed the timing of requests sent through the ring"),
        ("requests / bytes", "how many requests of this op, and the media bytes they moved"),
        ("modeled", "sum over requests of the device time the model charged (requests overlap: the sum exceeds "
                    "the run)"),
        ("service", "sum over requests of hbfd's host time from seeing each in the ring to posting it"),
        ("dev ...", "what the workload side booked for its requests (published at its sync points)"),
        ("wall", "sum of what the consumers waited (issue to consumed completion)"),
        ("overhead", "sum of lateness past arrival + modeled: time the simulation lost on this host"),
        ("by state", ", ".join(f"{k} {v:,}" for k, v in states.items()) or "no completions"),
    ]))
    return "".join(out)


KERNEL_COLUMNS = [
    ("launches", "launches counted (block 0 entering the kernel)"),
    ("requests", "requests the kernel issued to registered ranges (all ops)"),
    ("media bytes", "bytes those requests read or wrote on the modeled media"),
    ("program bytes", "bytes programmed (written) to NAND pages by its stores"),
    ("modeled", "sum over its requests of the modeled device time"),
    ("exposed wait", "sum over warps of the time consumers spent waiting for a value (the cost the program saw)"),
    ("lateness", "sum of waits past their deadline: simulation overhead, not device time"),
    ("helper time", "sum of the helpers' own time at issue (classify, queue model, ring publish)"),
    ("inline", "requests served by the inline issue path (no helper call), and the path's own time where the build "
               "timed it (HBFCC_INLINE_TIME=1; '-' otherwise)"),
    ("ready waits / slack", "waits whose value was already due, and the summed time it was ready before use"),
    ("thermal waits", "admissions withheld by the thermal controller (Severe), and their summed time"),
    ("refresh", "refresh-debt quanta claimed by its admissions, and their bytes"),
    ("latest span", "the latest launch's wall time on the GPU (kstart_ns..kend_ns, %globaltimer)"),
]


def kernels_section(run: Run) -> str:
    out = ["<h2>Kernels</h2>"]
    if run.counters is None:
        out.append(missing("No per-kernel counters: hbfd's summary has none (a GPU session reports them when it "
                           "closes; this run had none, or it did not close). Give them with --counters FILE, "
                           "written by json.dump(session.counters(), f)."))
        return "".join(out)
    rows = kernel_rows(run)
    if not rows:
        out.append(missing("The counters file lists no instrumented kernel (no kernel was bound or launched)."))
        return "".join(out)
    out.append(table(["kernel"] + [k for k, _ in KERNEL_COLUMNS], [[
        r["kernel"], fmt_int(r["launches"]), fmt_int(r["requests"]), fmt_bytes(r["bytes"]),
        fmt_bytes(r["program_bytes"]), fmt_ns(r["modeled_ns"]), fmt_ns(r["wait_wall_ns"]),
        fmt_ns(r["wait_overhead_ns"]), fmt_ns(r["helper_ns"]),
        f"{r['inline_requests']:,} / {fmt_ns(r['inline_ns']) if r['inline_ns'] else '-'}",
        f"{r['ready_waits']:,} / {fmt_ns(r['slack_ns'])}",
        f"{r['thermal_waits']:,} / {fmt_ns(r['thermal_wait_ns'])}",
        f"{r['refresh_claims']:,} / {fmt_bytes(r['refresh_bytes'])}",
        fmt_ns(r["kend_ns"] - r["kstart_ns"]) if r["kend_ns"] >= r["kstart_ns"] > 0 else "-"] for r in rows]))
    out.append(columns_explained(KERNEL_COLUMNS))
    return "".join(out)


def _cdf_series(q: list[float], vals: list[int] | None, name: str) -> svg.Series | None:
    if not vals or len(vals) != len(q):
        return None
    return svg.Series(name, [max(1, v) for v in vals], q)


def latency_section(run: Run) -> str:
    out = ["<h2>Latency distribution (CDF)</h2>"]
    series = []
    cdf = ((run.demo or {}).get("numbers") or {}).get("cdf") if run.demo else None
    if isinstance(cdf, dict) and isinstance(cdf.get("q"), list):
        for k, label in (("wall_ns", "workload wall"), ("modeled_ns", "workload modeled"),
                         ("overhead_ns", "workload overhead"), ("service_ns", "workload service")):
            s = _cdf_series(cdf["q"], cdf.get(k), label)
            if s:
                series.append(s)
    lat = (run.timeline or {}).get("latency") or {}
    if isinstance(lat.get("q"), list):
        for k, label in (("modeled_ns", "hbfd modeled"), ("service_ns", "hbfd service")):
            s = _cdf_series(lat["q"], lat.get(k), label)
            if s:
                series.append(s)
    if not series:
        nums = ((run.demo or {}).get("numbers") or {})
        pct = [(k, nums[k]) for k in ("modeled_ns", "wall_ns", "service_ns", "overhead_ns")
               if isinstance(nums.get(k), dict)]
        out.append(missing("No latency distribution in this summary (written before hbfd and the demo recorded "
                           "quantiles): nothing to plot." + (" Only these percentiles were recorded:" if pct else "")))
        if pct:
            out.append(table(["per request", "p50", "p99", "max"],
                             [[k, fmt_ns(v.get("p50")), fmt_ns(v.get("p99")), fmt_ns(v.get("max"))] for k, v in pct]))
        return "".join(out)
    p = svg.Plot("latency CDF", "time per request (log scale)", "fraction of requests <= x", tuple(series),
                 log_x=True, x_fmt=fmt_ns, y_fmt=lambda v: f"{v:.0%}", y_min=0.0, y_max=1.0)
    out.append(figure(p, "Each curve: the fraction of requests that took at most x. "
                         "modeled = the device time the model charged a request (what the modeled HBF would take); "
                         "wall = what the workload waited; service = hbfd's host time serving it; "
                         "overhead = lateness past arrival + modeled (simulation cost, not device time). "
                         "'workload' curves are the demo's per-request times (exact quantiles); 'hbfd' curves are every "
                         "READY reference completion (log histogram, at most 1.6 % high)."))
    rows = []
    for s in series:
        qv = dict(zip(s.ys, s.xs))
        rows.append([s.name, fmt_ns(qv.get(0.5)), fmt_ns(qv.get(0.99)), fmt_ns(qv.get(1.0))])
    out.append(table(["curve", "p50", "p99", "max"], rows))
    return "".join(out)


def _run_seconds(t_ns: list[int]) -> list[float]:
    return [t / 1e9 for t in t_ns]


def bandwidth_section(run: Run) -> str:
    out = ["<h2>Bandwidth over time</h2>"]
    tl = run.timeline
    if tl is None or len(tl["columns"].get("t_ns") or []) < 2:
        out.append(missing("No timeline in this summary (hbfd recorded none: a summary from before the timeline, "
                           "or a run shorter than two control ticks), so bandwidth over time cannot be drawn."))
        return "".join(out)
    c = tl["columns"]
    t = c["t_ns"]
    series = []
    for key, name in (("ref_bytes", "reference path"), ("dev_bytes", "device side (as published)")):
        v = c.get(key)
        if not v or not any(v):
            continue
        xs, ys = [], []
        for i in range(1, len(t)):
            if t[i] > t[i - 1]:
                xs.append(t[i] / 1e9)
                ys.append(max(0, v[i] - v[i - 1]) / (t[i] - t[i - 1]))   # bytes/ns = GB/s
        if xs:
            series.append(svg.Series(name, [t[0] / 1e9] + xs, [ys[0]] + ys, step=True))
    if not series:
        out.append(missing("No bytes were completed during the run (the cumulative byte counters stay 0): "
                           "bandwidth over time is zero throughout."))
        return "".join(out)
    prof = run.hbfd.get("profile") or {}
    agg = float(prof.get("aggregate_bytes_per_s") or 0) / 1e9
    p = svg.Plot("completed bandwidth", "run clock (s since hbfd started)", "GB/s", tuple(series),
                 x_fmt=lambda v: f"{v:g}", y_fmt=lambda v: f"{v:g}", y_min=0.0)
    tot = (c["ref_bytes"][-1] if c.get("ref_bytes") else 0)
    span = (t[-1] - t[0]) or 1
    out.append(figure(p, f"Bytes completed per interval between timeline rows, divided by the interval "
                         f"({tl['stride_ticks']} control tick(s) of {fmt_ns(tl['tick_ns'])}). reference path = "
                         f"requests hbfd served through the ring; device side = what the runtime published at its sync "
                         f"points (it moves in steps there). The profile's aggregate bandwidth is {agg:.0f} GB/s; this "
                         f"run moved {fmt_bytes(tot)} on the reference path in {fmt_ns(span)} "
                         f"({tot / span:.3g} GB/s on average)."))
    return "".join(out)


def thermal_section(run: Run) -> str:
    out = ["<h2>Temperatures and thermal state</h2>"]
    th = run.thermal
    if th.get("service") in (None, "none") or th.get("thermal") == "none":
        out.append(missing(f"No thermal model in this run (thermal service {th.get('service')!r}): no temperatures."))
        return "".join(out)
    tl = run.timeline
    thr = th.get("thresholds_c") or {}
    hl = tuple(svg.HLine(float(v), f"{k} {v:g} C") for k, v in sorted(thr.items(), key=lambda kv: kv[1])
               if isinstance(v, (int, float)))
    plotted = False
    if tl is not None and len(tl["columns"].get("t_ns") or []) >= 1:
        c = tl["columns"]
        xs = _run_seconds(c["t_ns"])
        series = tuple(svg.Series(name, xs, [v if v is not None else float("nan") for v in (c.get(k) or [])])
                       for k, name in (("hbf_max_c", "hottest HBF layer"), ("hbm_c", "HBM"), ("gpu_c", "GPU die")))
        series = tuple(s for s in series if any(isinstance(y, float) and y == y for y in s.ys))
        if series:
            p = svg.Plot("temperatures", "run clock (s since hbfd started)", "deg C", series, hlines=hl,
                         x_fmt=lambda v: f"{v:g}")
            out.append(figure(p, "The package thermal model's temperatures at each timeline row (the control loop's "
                                 "tick). Dashed: the HBF thresholds (rtt: Light throttling begins, ltt/stt: deeper, "
                                 "shutdown: the run ends). A peak between rows is in the table below."))
            plotted = True
            q = c.get("q_ppm") or []
            if q:
                p2 = svg.Plot("thermal state", "run clock (s since hbfd started)", "q (%) / mode",
                              (svg.Series("service fraction q (%)", xs, [v / 1e4 for v in q], step=True),
                               svg.Series("mode x 25 (0 Normal, 25 Light, 50 Severe, 75 Shutdown)", xs,
                                          [25.0 * m for m in c.get("mode") or []], step=True)),
                              y_min=0.0, y_max=100.0, x_fmt=lambda v: f"{v:g}")
                out.append(figure(p2, "The published thermal state: q = the fraction of full rate the device may "
                                      "issue at (100 % in Normal); mode as the controller published it."))
    if not plotted:
        samples = th.get("samples") or []
        if samples:
            names = sorted({n for s in samples for n in (s.get("temps_c") or {})})
            xs = [s["t_ns"] / 1e9 for s in samples]
            series = tuple(svg.Series(n, xs, [float((s.get("temps_c") or {}).get(n, float("nan"))) for s in samples])
                           for n in names)
            p = svg.Plot("temperatures (thermal samples)", "thermal clock (s)", "deg C", series, hlines=hl)
            out.append(figure(p, f"The thermal service's own samples (every {fmt_ns(th.get('sample_period_ns'))}); "
                                 "this summary has no per-tick timeline."))
        else:
            out.append(missing("No temperatures over time in this summary: no timeline, and no thermal sample "
                               f"(they are taken every {fmt_ns(th.get('sample_period_ns'))}; the run was shorter)."))
    peak = th.get("peak_c") or {}
    res = th.get("residency_ns") or {}
    rows = [("peak HBF", f"{th.get('peak_hbf_c'):.2f} C" if isinstance(th.get("peak_hbf_c"), (int, float)) else "-",
             "hottest HBF layer reached at any tick (not only at the plotted rows)"),
            ("peak GPU / HBM", " / ".join(f"{peak[k]:.2f} C" if isinstance(peak.get(k), (int, float)) else "-"
                                          for k in ("gpu", "hbm")), "hottest GPU die and HBM at any tick"),
            ("final mode", f"{th.get('mode')} (q {float(th.get('q_ppm', 0)) / 1e4:.1f} %)",
             "the thermal state published at the end")]
    for m in MODE_NAMES:
        if m in res:
            rows.append((f"time in {m}", fmt_ns(res[m]), f"model time the controller spent in {m}"))
    rows.append(("transitions", str(len(th.get("transitions") or [])), "mode changes the controller made"))
    out.append(explained(rows))
    trs = th.get("transitions") or []
    if trs:
        out.append(table(["thermal clock", "from", "to", "hottest HBF"],
                         [[fmt_ns(t.get("t_ns")), t.get("from"), t.get("to"),
                           f"{t.get('hbf_max_c', 0):.2f} C"] for t in trs[:200]]))
    return "".join(out)


def refresh_section(run: Run) -> str:
    out = ["<h2>Refresh</h2>"]
    r = run.refresh
    if r.get("service") in (None, "none"):
        out.append(missing("No retention/refresh model in this run (refresh service 'none'): no refresh debt."))
        return "".join(out)
    tl = run.timeline
    debt = (tl or {}).get("columns", {}).get("refresh_debt_bytes") if tl else None
    if debt and any(debt):
        c = tl["columns"]
        xs = _run_seconds(c["t_ns"])
        series = [svg.Series("refresh debt (published)", xs, debt, step=True)]
        if any(c.get("refresh_drained_bytes") or []):
            series.append(svg.Series("drained in the background", xs, c["refresh_drained_bytes"], step=True))
        p = svg.Plot("refresh debt", "run clock (s since hbfd started)", "bytes", tuple(series), y_min=0.0,
                     y_fmt=fmt_bytes, x_fmt=lambda v: f"{v:g}")
        out.append(figure(p, f"Refresh debt: the total bytes of aged data the device must rewrite, published to the "
                             f"device, which claims it in quanta of {fmt_bytes(tl.get('refresh_quantum_bytes'))} "
                             f"with its admissions."))
    elif tl is not None:
        out.append(missing("No refresh debt accrued during this run (0 bytes at every tick): the data stayed "
                           "within its retention limit, so there is nothing to plot."))
    else:
        out.append(missing("No timeline in this summary: refresh debt over time was not recorded; totals below."))
    rows = [("debt total", fmt_bytes(r.get("debt_total_bytes")), "refresh debt published over the run (monotonic)"),
            ("completed", fmt_bytes(r.get("refresh_completed_bytes")), "refresh bytes completed"),
            ("pending", fmt_bytes(r.get("refresh_pending_bytes")), "refresh bytes still owed at the end"),
            ("blocks refreshed", fmt_int(r.get("completed_refresh_blocks")), "blocks whose refresh completed"),
            ("media refresh", f"{fmt_int(r.get('media_refresh_pages'))} pages, {fmt_ns(r.get('media_refresh_ns'))}",
             "pages the media model rewrote for refresh, and the media time it took"),
            ("path", str(r.get("refresh_path", "-")), "who performs refresh: the media model or a background drain"),
            ("temperature source", str(r.get("temperature_source", "-")), "what temperature ages each block")]
    out.append(explained(rows))
    return "".join(out)


def build_report(run: Run) -> str:
    parts = [header(run), demo_section(run), counters_section(run), kernels_section(run), latency_section(run),
             bandwidth_section(run), thermal_section(run), refresh_section(run)]
    body = "".join(p for p in parts if p)
    foot = ('<p class="note">Written by <code>hbfctl report</code> from the run summary alone: one file, no '
            'scripts, nothing loaded from the network. The same run as a timeline: <code>hbfctl trace</code> '
            '(open it in ui.perfetto.dev or chrome://tracing).</p>')
    title = f"hbfsim run report - {(run.hbfd.get('profile') or {}).get('name', '?')}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
            f'img-src data:">'
            f"<style>{CSS}</style></head><body>{body}{foot}</body></html>\n")
