"""``hbfctl``: look at and control a running hbfd.

  hbfctl status    heartbeat age, profile, engine, thermal state, ring depth, ranges, counters
  hbfctl ranges    the registered ranges
  hbfctl summary   the run summary so far (counts by state, per-op counters)
  hbfctl shutdown  ordered shutdown; prints where the summary was written (exit 1, and says so,
                   when hbfd could not write it)
  hbfctl thermal-override MODE [--q-ppm Q] | clear
                   force the published thermal state (test/operator path; needs hbfd started with
                   HBFD_THERMAL=hbfd.thermal.override:make_service, see hbfd/thermal/override.py)
  hbfctl trace SUMMARY.json [-o run.perfetto.json] [--counters C.json]
                   a finished run as a Chrome/Perfetto trace (no daemon needed; docs/report.md)
  hbfctl report SUMMARY.json [-o report.html] [--counters C.json]
                   a finished run as a one-page HTML report with plots (no daemon needed)

``--json`` prints machine-readable JSON instead of tables; ``--socket PATH`` names another daemon's
socket (both before or after the command); ``hbfctl --version`` the package and ABI versions; every
command has its own ``--help``. Exit codes: 0 ok, 1 the daemon
answered with an error (a reply over the gRPC message limit included, named as such), 2 no daemon
is running (or bad usage).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from hbfcommon import ctl
from hbfcommon.cliargs import Parser, chosen_parser, parse
from hbfcommon.errors import DaemonError, ErrorCode, HbfError
from hbfcommon.version import version_line
from hbfd import knobs

OPS = ctl.OP_NAMES


def _ns(v: float) -> str:
    v = float(v)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} ns"


def _bytes(v: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v} B"


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  " + "  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r))
                     for r in cells)


def range_rows(ranges: list[dict]) -> str:
    if not ranges:
        return "  (none)"
    rows = [[r["range_id"], ctl.MODE_NAMES.get(r["mode"], r["mode"]), hex(r["base"]), _bytes(r["length"]),
             "".join(c for c, b in (("r", 1), ("w", 2), ("a", 4)) if r["perms"] & b), hex(r["media_offset"]),
             r.get("label", "")] for r in ranges]
    return _table(rows, ["id", "mode", "base", "length", "perms", "media_offset", "label"])


def counter_rows(counters: dict) -> str:
    ref, dev = counters["reference"], counters["device"]
    rows = []
    for op in OPS:
        r, d = ref[op], dev[op]
        if not (r["requests"] or d["requests"]):
            continue
        rows.append([op, r["requests"], _bytes(r["bytes"]), _ns(r["modeled_ns"]), _ns(r["service_ns"]),
                     d["requests"], _ns(d["modeled_ns"]), _ns(d["wall_ns"]), _ns(d["overhead_ns"])])
    if not rows:
        return "  (no requests yet)"
    return _table(rows, ["op", "ref reqs", "ref bytes", "ref modeled", "ref service",
                         "dev reqs", "dev modeled", "dev wall", "dev overhead"])


def inline_line(counters: dict) -> str:
    """The device's inline issue path's own time (helper ABI 8: kernels built with HBFCC_INLINE_TIME=1; the
    helpers' time is "dev overhead" above)."""
    ns = int(counters.get("device_inline_ns", 0))
    return f"device inline path time:     {_ns(ns)}" if ns else \
        "device inline path time:     0 (not measured: kernels built without HBFCC_INLINE_TIME=1, or none inline)"


def states_line(by_state: dict) -> str:
    nz = {k: v for k, v in by_state.items() if v}
    return ", ".join(f"{k} {v}" for k, v in nz.items()) if nz else "none"


def format_status(s: dict) -> str:
    counters = json.loads(s["counters_json"]) if s.get("counters_json") else None
    hb_age = int(s.get("heartbeat_age_ns", 0))
    lines = [
        f"hbfd       pid {s['daemon_pid']}, up {_ns(int(s.get('uptime_ns', 0)))}, "
        f"heartbeat {s.get('heartbeat', 0)} (age {_ns(hb_age)}{', STALE' if hb_age > 10_000_000 else ''})",
        f"profile    {s['profile_name']}  {s['profile_path']}",
        f"           sha256 {s['profile_sha256']}",
        f"engine     {s['engine']} (timing source: {s['timing_source']})",
        f"thermal    {s.get('thermal_mode', '?')}, q = {s.get('thermal_q_ppm', 0) / 1e4:.1f} %"
        + (f", hottest HBF layer {s['hbf_max_c']:.1f} C" if s.get("hbf_max_c") is not None
           else ", no temperatures (no thermal model)"),
        f"calibration {s.get('thermal_calibration') or 'not reported (an hbfd from before calibrations)'}",
        f"ring       {s.get('ring_depth', 0)} outstanding request(s)",
        f"attached   {'yes' if s.get('attached') else 'no'}  control region {s.get('ctl_path', '')}",
        f"ranges     {len(s.get('ranges', []))}",
        range_rows(s.get("ranges", [])),
    ]
    if counters:
        lines += ["counters", counter_rows(counters),
                  f"reference requests by state: {states_line(counters['reference_requests_by_state'])}",
                  f"device requests by state:    {states_line(counters['device_requests_by_state'])}",
                  inline_line(counters)]
    return "\n".join(lines)


def format_summary(s: dict) -> str:
    c = s["counters"]
    prof = s["profile"]
    th = s["services"]["thermal"]
    lines = [
        f"run        {s['terminal_status']}" + (f" ({s['shutdown_reason']})" if s.get("shutdown_reason") else ""),
        f"profile    {prof['name']}  {prof['path']}  sha256 {prof['sha256'][:16]}...",
        f"engine     {s['engine']} (timing source: {s['timing_source']}); {s['time_model']}",
        f"thermal    {th.get('service')}: {th.get('mode', '?')}",
        f"calibration {(th.get('calibration') or {}).get('line') or 'none (no package thermal model)'}",
        f"ranges     {len(s['ranges'])} registered at the end, {len(s.get('range_events', []))} range events",
        f"reference requests by state: {states_line(c['reference_requests_by_state'])}",
        f"device requests by state:    {states_line(c['device_requests_by_state'])}",
        "counters", counter_rows(c),
        inline_line(c),
    ]
    if s.get("outstanding_terminated"):
        lines.append(f"terminated at shutdown: {s['outstanding_terminated']} outstanding ticket(s)")
    rej = s.get("rejected_requests") or {}
    if rej or s.get("foreign_requests"):
        lines.append(f"ring requests refused: {sum(rej.values())} rejected "
                     f"({', '.join(f'{k} {v}' for k, v in sorted(rej.items())) or 'none'}), "
                     f"{s.get('foreign_requests', 0)} foreign (not their slot's next ticket; unanswered)")
    if s.get("reports_dropped") or s.get("attaches_dropped"):
        lines.append(f"not retained: {s.get('reports_dropped', 0)} report(s), "
                     f"{s.get('attaches_dropped', 0)} attach(es) (only the latest are kept)")
    if s.get("engine_error"):
        lines.append(f"engine error: {s['engine_error']}")
    return "\n".join(lines)


def _status_dict(rep) -> dict:
    from google.protobuf.json_format import MessageToDict
    d = MessageToDict(rep, preserving_proto_field_name=True, always_print_fields_with_no_presence=True,
                      use_integers_for_enums=True)
    for r in d.get("ranges", []):
        for k in ("base", "length", "media_offset", "backing_offset"):
            r[k] = int(r.get(k, 0))
    if "hbf_max_c" in d:   # NaN (no thermal model) -> None, so the JSON stays strict
        t = float(d["hbf_max_c"])
        d["hbf_max_c"] = None if math.isnan(t) else t
    for k in ("daemon_pid", "heartbeat", "heartbeat_age_ns", "ring_depth", "uptime_ns"):
        d[k] = int(d.get(k, 0))
    d.pop("error", None)
    return d


THERMAL_MODES = ("Normal", "Light", "Severe", "Shutdown", "clear")
OFFLINE = {"trace": ".perfetto.json", "report": ".html"}     # commands that read files, not the daemon
SOCKET_HELP = f"hbfd's unix socket (default {knobs.default_socket()}; env HBFD_SOCKET)"
JSON_HELP = "print machine-readable JSON instead of tables"
COMMANDS = {
    "status": ("the daemon at a glance",
               "Heartbeat (count and age; STALE past 10 ms), uptime, the profile (name, path, SHA-256), the timing "
               "engine and its timing source, the published thermal state (mode, service fraction q, hottest HBF "
               "layer), ring depth (outstanding requests), whether a workload is attached, the registered "
               "ranges, and the counters per op: reference path (requests, media bytes, modeled_ns = what the "
               "model asked for, service_ns = hbfd's host time from seeing a request to posting it) and device "
               "side (modeled_ns, wall_ns = what the consumers waited, overhead_ns = time lost that the model "
               "does not account for). Times are sums over requests, which overlap: a sum can exceed the run."),
    "ranges": ("the registered address ranges",
               "Each range a workload registered: id, mode (TIMING = charged the modeled media time), base "
               "address and length, permissions (r read, w write, a atomic), offset into the modeled media, label."),
    "summary": ("the run summary so far",
                "The summary hbfd writes at shutdown, as of now: run status, profile, engine and time model, "
                "thermal service, ranges, requests by terminal state (READY, IO_ERROR, ...), and the per-op "
                "counters (see `hbfctl status --help` for what each time means)."),
    "shutdown": ("ordered shutdown; prints where the summary was written",
                 "hbfd answers every outstanding request (DAEMON_LOST), sets the failure word, writes the run "
                 "summary by atomic replace and exits. Exit 1, and says so, when hbfd could not write it."),
    "thermal-override": ("force the published thermal state (test / operator drills)",
                         "Needs hbfd started with HBFD_THERMAL=hbfd.thermal.override:make_service (override over "
                         "no thermal model) or hbfd.thermal.override:make_model_service (over the profile's "
                         "model). The control loop publishes the override at its next tick; Shutdown ends the "
                         "run as a model-reached Shutdown does; clear returns to the model. The summary names "
                         "the thermal service operator-override(...) and lists every override."),
    "trace": ("a finished run as a Chrome/Perfetto trace (no daemon needed)",
              "Reads a run summary (hbfd's, or the demo's ./hbfd-demo-summary.json) and writes the JSON trace-event "
              "file that ui.perfetto.dev and chrome://tracing open: counter tracks over the run for temperatures, "
              "the service fraction q, thermal mode and admission, refresh debt and completed bandwidth; instant "
              "events for mode transitions, refresh-debt increases, attaches and workload reports; and, with "
              "--counters, one track per instrumented kernel (its latest launch's span on the GPU clock, its "
              "modeled time and exposed wait as args). Written by atomic replace. See docs/report.md."),
    "report": ("a finished run as a one-page HTML report (no daemon needed)",
               "Reads a run summary (and --counters) and writes one self-contained HTML page (inline SVG plots, no "
               "scripts, nothing from the network): the run header, requests per op, the per-kernel table, the "
               "latency CDF, bandwidth over time, temperatures and thermal state over time, refresh; each number "
               "with one line saying what it is, and a section without data says so. See docs/report.md."),
    "plan": ("EQ3 capacity planning: HBM/HBF package layouts under an area budget (no daemon needed)",
             "For each layout (default: the HBFSim paper's A = 6 HBM, B = 3 HBM + 2 HBF, C = 1 HBM + 3 HBF under its "
             "861.1 mm2 budget): area and whether it fits the budget, installed capacity, HBM available after the "
             "non-expert terms, whether the served model's whole expert set fits in HBM and the KV tokens HBM then "
             "holds, and the per-stack expert-residency threshold. Every parameter is data with its provenance "
             "(hbfd/eq3_plan.json; --params for your own; --json prints them). Nothing here is measured."),
}


def _thermal_mode(v: str) -> str:
    for m in THERMAL_MODES:
        if v.lower() == m.lower():
            return m
    return v       # argparse's choices check names it with the valid modes


def build_parser() -> Parser:
    ap = Parser(prog="hbfctl", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Look at and control a running hbfd (over its gRPC unix socket).",
                epilog="Exit status: 0 ok, 1 the daemon answered with an error, 2 no hbfd is running on the "
                       "socket,\nor bad usage. Each command has its own help: hbfctl COMMAND --help.")
    ap.add_argument("--version", action="version", version=version_line("hbfctl"),
                    help="print the package version, the control-region ABI and the helper ABI, and exit")
    ap.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
    ap.add_argument("--json", action="store_true", help=JSON_HELP)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (short, long) in COMMANDS.items():
        p = sub.add_parser(name, help=short, description=long)
        # also after the command (hbfctl status --socket S --json); SUPPRESS keeps a value given before it
        p.add_argument("--socket", metavar="PATH", default=argparse.SUPPRESS, help=SOCKET_HELP)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
        if name in OFFLINE:
            p.add_argument("summary", metavar="SUMMARY.json",
                           help="the run summary: hbfd's (HBFD_SUMMARY, default ./hbfd-summary.json) or the demo's "
                                "(./hbfd-demo-summary.json)")
            p.add_argument("-o", "--output", metavar="PATH", default=None,
                           help=f"where to write it (default: SUMMARY with the suffix {OFFLINE[name]})")
            p.add_argument("--counters", metavar="PATH", default=None,
                           help="the runtime's per-kernel counters: a JSON file written by "
                                "json.dump(session.counters(), f)")
        elif name == "plan":
            p.add_argument("--params", metavar="PATH", default=None,
                           help="parameters JSON ({parameters: {NAME: {value, provenance}}, layouts: [...]}; "
                                "default: the paper's, hbfd/eq3_plan.json)")
            p.add_argument("--layout", metavar="NAME=HBMxHBF", action="append", default=None,
                           help="a layout to plan instead of the file's (repeatable), e.g. --layout D=2x3")
        elif name == "shutdown":
            p.add_argument("--reason", default="hbfctl shutdown",
                           help="why, recorded in the summary as shutdown_reason (default: hbfctl shutdown)")
        elif name == "thermal-override":
            p.add_argument("mode", metavar="MODE", type=_thermal_mode, choices=THERMAL_MODES,
                           help="Normal (q = 100 %%, admission open) | Light (0 < q <= 100 %%, admission open) | "
                                "Severe (admission closed) | Shutdown (ends the run) | clear (back to the model); "
                                "any case")
            p.add_argument("--q-ppm", type=int, default=None, metavar="Q",
                           help="service fraction q in parts per million, 1..1000000 (Light: required; Severe: "
                                "default the current q; Normal: 1000000 only; not with clear)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = parse(ap, list(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        ap.fail(f"choose a command (valid: {', '.join(COMMANDS)})")
    if args.command == "thermal-override" and args.mode == "clear" and args.q_ppm is not None:
        chosen_parser(args, ap).fail("clear takes no --q-ppm")
    if args.command in OFFLINE:
        return _offline(args)
    if args.command == "plan":
        return _plan(args)
    try:
        from hbfcommon.rpc import Client
        with Client(args.socket, timeout_s=30.0 if args.command == "shutdown" else 5.0) as c:
            if args.command == "status":
                d = _status_dict(c.call("Status"))
                if args.json:
                    d["counters"] = json.loads(d.pop("counters_json") or "{}")
                    print(json.dumps(d, indent=2, sort_keys=True))
                else:
                    print(format_status(d))
            elif args.command == "ranges":
                rs = _status_dict(c.call("ListRanges")).get("ranges", [])
                print(json.dumps(rs, indent=2, sort_keys=True) if args.json else range_rows(rs))
            elif args.command == "summary":
                s = json.loads(c.call("GetSummary").summary_json)
                print(json.dumps(s, indent=2, sort_keys=True) if args.json else format_summary(s))
            elif args.command == "thermal-override":
                ov = {"clear": True} if args.mode == "clear" else \
                    {"mode": args.mode, **({"q_ppm": args.q_ppm} if args.q_ppm is not None else {})}
                c.call("Report", kind="thermal_override", json=json.dumps(ov))
                print(json.dumps(ov) if args.json else f"thermal override sent: {ov}")
            else:
                rep = c.call("Shutdown", reason=args.reason)
                if args.json:
                    print(json.dumps({"summary_path": rep.summary_path}))
                else:
                    print(f"hbfd shut down; summary: {rep.summary_path}")
    except BrokenPipeError:             # the reader went away (hbfctl status | head): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except HbfError as e:
        if e.code in (ErrorCode.DAEMON_UNAVAILABLE, ErrorCode.DAEMON_LOST):
            sock = args.socket or knobs.default_socket()
            print(f"hbfctl: no hbfd is running on {sock} (start one: hbfd --profile nominal)",
                  file=sys.stderr)
            return 2
        print(f"hbfctl: {e.code.name}: {e}", file=sys.stderr)
        return 1
    return 0


def _plan(args) -> int:
    """``hbfctl plan``: EQ3 layouts from parameters with provenance; bad input is one line, exit 2."""
    from hbfd import plan
    try:
        lays = [plan.parse_layout(x) for x in args.layout] if args.layout else None
        p = plan.plan(plan.load_params(args.params), lays)
    except HbfError as e:
        print(f"hbfctl plan: {e.code.name}: {e.message}", file=sys.stderr)
        return 2
    print(json.dumps(p, indent=2, sort_keys=True) if args.json else plan.format_plan(p))
    return 0


def _offline(args) -> int:
    """``hbfctl trace`` / ``hbfctl report``: read the run's files, write one output by atomic replace.
    Bad input is one line naming the file and what is wrong, exit 2; nothing is written then."""
    from pathlib import Path

    from hbfd import runreport
    out = args.output or str(Path(args.summary).with_suffix(OFFLINE[args.command]))
    try:
        run = runreport.load_run(args.summary, args.counters)
        write = runreport.write_trace if args.command == "trace" else runreport.write_report
        path = write(run, out)
    except HbfError as e:
        print(f"hbfctl {args.command}: {e.code.name}: {e.message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"output": str(path)}))
    else:
        print(f"hbfctl {args.command}: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
