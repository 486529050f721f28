"""Turn a finished run into things a person can look at: a Perfetto trace and a one-page HTML report.

``hbfctl trace SUMMARY.json -o run.perfetto.json`` and ``hbfctl report SUMMARY.json -o report.html``
(:mod:`hbfd.ctl_cli`). The input is a run summary: hbfd's own (``hbfsim.summary/1``, written at its
shutdown) or the demo's (``hbfsim.demo-summary`` version 1, which carries hbfd's inside it), and
optionally the runtime's per-kernel counters (``--counters``: the JSON of ``Session.counters()``).

Why here (docs/design.md §2): the summary is hbfd's document, so its reader lives beside its writer in
the daemon's package; it reads files only and imports nothing but :mod:`hbfcommon` and
:mod:`hbfd.timeline` (the runtime's counters arrive as JSON, so hbfd never imports runtime_cuda).
No daemon is needed; nothing here touches a socket.

* :mod:`.load`  reading and checking the inputs (one-line errors with codes; never a traceback)
* :mod:`.trace` the Chrome/Perfetto trace-event JSON, and its format check
* :mod:`.svg`   small inline-SVG plots (no JavaScript, no network)
* :mod:`.html`  the report page
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from hbfcommon.errors import ErrorCode
from hbfcommon.fsutil import atomic_write_text

from .load import Run, RunInputError, load_run

__all__ = ["Run", "RunInputError", "load_run", "write_trace", "write_report", "check_output_path"]


def check_output_path(out: str | os.PathLike, *inputs: str | os.PathLike | None) -> Path:
    """Where an output may go: its directory exists, it is not an input, and if it exists it is a
    regular file (a directory, FIFO or device is refused, not replaced)."""
    p = Path(out)
    if not p.parent.is_dir():
        raise RunInputError(f"{p}: the output's directory {p.parent} does not exist", code=ErrorCode.INVALID_ARGUMENT,
                            file=str(p))
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise RunInputError(f"{p}: cannot use as the output: {e.strerror}", file=str(p)) from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise RunInputError(f"{p}: the output exists and is not a regular file (refused, not replaced)",
                                file=str(p))
        for i in inputs:
            if i is not None and os.path.exists(i) and os.path.samefile(i, p):
                raise RunInputError(f"{p}: the output is the input file", file=str(p))
    return p


def _write(out: Path, text: str) -> Path:
    try:
        return atomic_write_text(out, text, make_parents=False)
    except OSError as e:
        raise RunInputError(f"{out}: cannot write: {e.strerror or e}", file=str(out)) from None


def write_trace(run: Run, out: str | os.PathLike) -> Path:
    """The run's trace-event JSON at ``out`` (atomic replace); refuses to write a trace that fails
    :func:`.trace.check_trace` (that would be a bug here, said as INTERNAL)."""
    from .trace import build_trace, check_trace
    p = check_output_path(out, run.path, run.counters_path)
    doc = build_trace(run)
    bad = check_trace(doc)
    if bad:
        raise RunInputError(f"the trace built from {run.path} is not valid: {bad[0]} ({len(bad)} problem(s))",
                            code=ErrorCode.INTERNAL)
    return _write(p, json.dumps(doc, allow_nan=False, separators=(",", ":")) + "\n")


def write_report(run: Run, out: str | os.PathLike) -> Path:
    """The run's one-page HTML report at ``out`` (atomic replace)."""
    from .html import build_report
    p = check_output_path(out, run.path, run.counters_path)
    return _write(p, build_report(run))
