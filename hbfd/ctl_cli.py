"""``hbfctl``: look at and control a running hbfd.

  hbfctl status    heartbeat age, profile, engine, thermal state, ring depth, ranges, counters
  hbfctl ranges    the registered ranges
  hbfctl summary   the run summary so far (counts by state, per-op counters)
  hbfctl shutdown  ordered shutdown; prints where the summary was written (exit 1, and says so,
                   when hbfd could not write it)
  hbfctl thermal-override MODE [--q-ppm Q] | clear
                   force the published thermal state (test/operator path; needs hbfd started with
                   HBFD_THERMAL=hbfd.thermal.override:make_service, see hbfd/thermal/override.py)

``--json`` prints machine-readable JSON instead of tables. Exit codes: 0 ok, 1 the daemon
answered with an error (a reply over the gRPC message limit included, named as such), 2 no daemon
is running (or bad usage).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from hbfcommon import ctl
from hbfcommon.errors import DaemonError, ErrorCode, HbfError
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
        f"ring       {s.get('ring_depth', 0)} outstanding request(s)",
        f"attached   {'yes' if s.get('attached') else 'no'}  control region {s.get('ctl_path', '')}",
        f"ranges     {len(s.get('ranges', []))}",
        range_rows(s.get("ranges", [])),
    ]
    if counters:
        lines += ["counters", counter_rows(counters),
                  f"reference requests by state: {states_line(counters['reference_requests_by_state'])}",
                  f"device requests by state:    {states_line(counters['device_requests_by_state'])}"]
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
        f"ranges     {len(s['ranges'])} registered at the end, {len(s.get('range_events', []))} range events",
        f"reference requests by state: {states_line(c['reference_requests_by_state'])}",
        f"device requests by state:    {states_line(c['device_requests_by_state'])}",
        "counters", counter_rows(c),
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hbfctl", description="Look at and control a running hbfd.")
    ap.add_argument("command", choices=["status", "ranges", "summary", "shutdown", "thermal-override"])
    ap.add_argument("mode", nargs="?", help="thermal-override: Normal | Light | Severe | Shutdown | clear")
    ap.add_argument("--q-ppm", type=int, default=None, help="thermal-override: service fraction q (ppm)")
    ap.add_argument("--socket", help=f"hbfd's unix socket (default {knobs.default_socket()})")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--reason", default="hbfctl shutdown", help="shutdown: reason recorded in the summary")
    args = ap.parse_args(argv)
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
                if not args.mode:
                    ap.error("thermal-override needs a mode (Normal, Light, Severe, Shutdown) or clear")
                ov = {"clear": True} if args.mode.lower() == "clear" else \
                    {"mode": args.mode, **({"q_ppm": args.q_ppm} if args.q_ppm is not None else {})}
                c.call("Report", kind="thermal_override", json=json.dumps(ov))
                print(json.dumps(ov) if args.json else f"thermal override sent: {ov}")
            else:
                rep = c.call("Shutdown", reason=args.reason)
                if args.json:
                    print(json.dumps({"summary_path": rep.summary_path}))
                else:
                    print(f"hbfd shut down; summary: {rep.summary_path}")
    except HbfError as e:
        if e.code in (ErrorCode.DAEMON_UNAVAILABLE, ErrorCode.DAEMON_LOST):
            sock = args.socket or knobs.default_socket()
            print(f"hbfctl: no hbfd is running on {sock} (start one: hbfd --profile nominal)",
                  file=sys.stderr)
            return 2
        print(f"hbfctl: {e.code.name}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
