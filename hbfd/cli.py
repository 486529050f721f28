"""``hbfd``: the daemon. ``hbfd --profile FILE [--socket PATH] [--summary PATH]``.

Sub-tools dispatched from here (owned by their packages):
  ``hbfd bench media ...``      -> hbfd.media.bench:main(argv)
  ``hbfd thermal validate ...`` -> hbfd.thermal.validate:main(argv)
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from hbfcommon.errors import HbfError
from hbfd import knobs

SUBTOOLS = {("bench", "media"): "hbfd.media.bench", ("thermal", "validate"): "hbfd.thermal.validate"}
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _dispatch(argv: list[str]) -> int | None:
    key = tuple(argv[:2])
    if key not in SUBTOOLS:
        return None
    mod = SUBTOOLS[key]
    try:
        m = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and mod.startswith(e.name):
            print(f"hbfd: `hbfd {' '.join(key)}` is not available ({mod} is not installed)", file=sys.stderr)
            return EXIT_USAGE
        raise
    rc = m.main(argv[2:])
    return int(rc or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rc = _dispatch(argv)
    if rc is not None:
        return rc
    ap = argparse.ArgumentParser(
        prog="hbfd", description="hbfsim daemon: owns the media, thermal and retention models, serves "
        "the control region and the reference path. Also: `hbfd bench media ...`, `hbfd thermal validate ...`.")
    ap.add_argument("--profile", required=True, help="device profile JSON (or a name in profiles/: nominal)")
    ap.add_argument("--socket", help=f"unix socket for gRPC (default {knobs.default_socket()})")
    ap.add_argument("--summary", help=f"run summary JSON, written at exit (default {knobs.default_summary()})")
    ap.add_argument("--engine", help="auto | fixed | module:factory (env HBFD_ENGINE)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level="DEBUG" if args.verbose else knobs.log_level(),
                        format="%(asctime)s hbfd %(levelname)s %(name)s: %(message)s")
    from hbfd.server import Daemon
    d = Daemon(args.profile, socket_path=args.socket, summary_path=args.summary, engine=args.engine)
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


if __name__ == "__main__":
    sys.exit(main())
