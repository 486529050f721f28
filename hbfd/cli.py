"""``hbfd``: the daemon and the tools around its models.

  hbfd serve --profile P [--socket PATH] [--summary PATH] [--engine E] [--thermal-calibration F] [-v]
                                             the daemon
  hbfd --profile P ...                       the same (the original form; every option of serve)
  hbfd bench media ...                       -> hbfd.media.bench:main(argv) (its own options and --help)
  hbfd thermal validate ...                  -> hbfd.thermal.validate:main(argv)
  hbfd --version                             package version, control-region ABI, helper ABI

A command line hbfd cannot take (an unknown command, tool or option; a missing --profile) is one line on
stderr naming it and the valid choices, exit status 2 (hbfcommon.cliargs).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from hbfcommon.cliargs import Parser, chosen_parser, parse
from hbfcommon.errors import HbfError
from hbfcommon.version import version_line
from hbfd import knobs

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# command -> tool -> (module whose main(argv) runs it, one line for `hbfd COMMAND --help`)
SUBTOOLS: dict[str, dict[str, tuple[str, str]]] = {
    "bench": {"media": ("hbfd.media.bench",
                        "drive the media model with a synthetic request stream (no daemon, no GPU): modeled "
                        "latency percentiles, bandwidth and queueing for a profile, op mix, request size and "
                        "arrival gap")},
    "thermal": {"validate": ("hbfd.thermal.validate",
                             "fit the package thermal ROM (or load the committed one with --committed) and print "
                             "its error against the full-order model on held-out power traces; exit 1 above "
                             "--tolerance-k. A fresh fit takes minutes: progress is logged every few seconds")},
}
COMMAND_HELP = {
    "bench": "benchmarks of hbfd's models, run in this process (no daemon)",
    "thermal": "tools for the package thermal model",
}


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="PROFILE",
                   help="device profile (required): a bundled profile by name, e.g. nominal (the JSON files of "
                        "hbfcommon/profiles/), or a path to a profile JSON")
    p.add_argument("--socket", metavar="PATH",
                   help=f"unix socket hbfd serves gRPC on, mode 0600 (default {knobs.default_socket()}; "
                        "env HBFD_SOCKET, the same for every client)")
    p.add_argument("--summary", metavar="PATH",
                   help=f"run summary JSON, written by atomic replace at shutdown (default "
                        f"{knobs.default_summary()}; env HBFD_SUMMARY)")
    p.add_argument("--engine", metavar="ENGINE",
                   help="timing engine: auto (the media model when present), fixed (the profile's fixed "
                        "latencies) or module:factory (env HBFD_ENGINE; default auto)")
    p.add_argument("--thermal-calibration", metavar="PATH",
                   help="calibration fragment of the package thermal model (the JSON bench/thermal_calibrate.py "
                        "writes: the heat-sink boundary and power split fitted against a card, with provenance); "
                        "checked against the profile's package geometry and the held-out error goal (env "
                        "HBFD_THERMAL_CALIBRATION; default: the geometry's assumed boundary)")
    p.add_argument("--thermal-calibration-allow-goal-miss", action="store_true",
                   help="use a calibration whose held-out error is above the goal (1 K RMS, 2 K max); the summary "
                        "says so (env HBFD_THERMAL_CALIBRATION_ALLOW_GOAL_MISS=1)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging (default level: env HBFD_LOG)")


def build_parser() -> Parser:
    ap = Parser(prog="hbfd", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="hbfsim daemon: owns the media, thermal and retention models of a modeled HBF\n"
                            "stack, serves the control region and the reference path of the request ring,\n"
                            "and writes the run summary.",
                epilog="`hbfd --profile P [options]` (no command) is `hbfd serve --profile P [options]`.\n"
                       "Each command has its own help: hbfd serve --help, hbfd bench media --help,\n"
                       "hbfd thermal validate --help.")
    ap.add_argument("--version", action="version", version=version_line("hbfd"),
                    help="print the package version, the control-region ABI and the helper ABI, and exit")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    serve = sub.add_parser("serve", help="run the daemon (until SIGTERM, SIGINT or `hbfctl shutdown`)",
                           description="Load and validate the profile, create the control region, build the "
                                       "models, publish the first heartbeat (readiness), serve gRPC and the "
                                       "reference path; at shutdown answer every outstanding request and write "
                                       "the run summary.")
    _serve_options(serve)
    for cmd, tools in SUBTOOLS.items():
        p = sub.add_parser(cmd, help=COMMAND_HELP[cmd], description=COMMAND_HELP[cmd] + ".",
                           epilog=f"Each tool has its own options: hbfd {cmd} TOOL --help.")
        tsub = p.add_subparsers(dest="tool", metavar="TOOL", parser_class=Parser)
        for tool, (_, text) in tools.items():
            tsub.add_parser(tool, help=text, add_help=False)
    return ap


def _run_tool(cmd: str, tool: str, argv: list[str]) -> int:
    mod = SUBTOOLS[cmd][tool][0]
    try:
        m = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and mod.startswith(e.name):
            print(f"hbfd: `hbfd {cmd} {tool}` is not available ({mod} is not installed)", file=sys.stderr)
            return EXIT_USAGE
        raise
    return int(m.main(argv) or 0)


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level="DEBUG" if args.verbose else knobs.log_level(),
                        format="%(asctime)s hbfd %(levelname)s %(name)s: %(message)s")
    from hbfd.server import Daemon
    d = Daemon(args.profile, socket_path=args.socket, summary_path=args.summary, engine=args.engine,
               thermal_calibration=args.thermal_calibration,
               thermal_calibration_allow_goal_miss=args.thermal_calibration_allow_goal_miss or None)
    try:
        d.start()
    except HbfError as e:
        d.close()
        print(f"hbfd: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BaseException:
        d.close()
        raise
    print(f"hbfd ready: profile {d.profile.name}, engine {d.engine.name}, socket {d.socket_path}", flush=True)
    rc = d.serve_forever()
    print(f"hbfd: summary written to {d.summary_path}", flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["serve", *argv]                    # the original form: options only
    if len(argv) >= 2 and argv[1] in SUBTOOLS.get(argv[0], {}):
        return _run_tool(argv[0], argv[1], argv[2:])   # the tool parses (and explains) its own options
    ap = build_parser()
    args = parse(ap, argv)
    if args.command is None:
        ap.fail(f"choose a command (valid: {', '.join(ap.subcommands())}), or give options to serve: "
                "hbfd --profile nominal")
    if args.command in SUBTOOLS:
        p = chosen_parser(args, ap)
        p.fail(f"choose a tool (valid: {', '.join(SUBTOOLS[args.command])})")
    if args.profile is None:
        chosen_parser(args, ap).fail("--profile is required (a bundled name such as nominal, or a profile JSON)")
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
