"""Reading a run: the summary (hbfd's or the demo's) and, optionally, the runtime's kernel counters.

Every failure is a :class:`RunInputError` (an :class:`hbfcommon.errors.HbfError`) whose message is one
line naming the file and what is wrong: a missing file, a FIFO or directory (refused without blocking),
bytes that are not strict JSON, a document of another schema or schema version, a field missing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hbfcommon.errors import ErrorCode, HbfError
from hbfcommon.fsutil import read_json_document
from hbfd.summary import SUMMARY_SCHEMA

HBFD_SCHEMA = SUMMARY_SCHEMA                      # the one definition: hbfd.summary
DEMO_SCHEMA = "hbfsim.demo-summary"
DEMO_SCHEMA_VERSION = 1
SUMMARY_MAX_BYTES = 512 << 20                     # a summary larger than this is refused unread
ACCEPTED = f"{HBFD_SCHEMA!r} (hbfd's run summary) or {DEMO_SCHEMA!r} version {DEMO_SCHEMA_VERSION} (the demo's)"


class RunInputError(HbfError):
    """An input of ``hbfctl trace`` / ``hbfctl report`` that cannot be used (exit 2)."""

    code = ErrorCode.INVALID_ARGUMENT


@dataclass(frozen=True)
class Run:
    """One run, as read: ``hbfd`` is hbfd's summary; ``demo`` the demo's own part (numbers, meaning,
    explanation, workload) when the input was a demo summary; ``counters`` the runtime's per-kernel
    counters when given."""

    path: str
    schema: str
    hbfd: dict[str, Any]
    demo: dict[str, Any] | None = None
    counters: dict[str, Any] | None = None
    counters_path: str | None = None

    @property
    def timeline(self) -> dict[str, Any] | None:
        t = self.hbfd.get("timeline")
        return t if isinstance(t, dict) and isinstance(t.get("columns"), dict) else None

    @property
    def thermal(self) -> dict[str, Any]:
        return self.hbfd.get("services", {}).get("thermal", {}) or {}

    @property
    def refresh(self) -> dict[str, Any]:
        return self.hbfd.get("services", {}).get("refresh", {}) or {}


def _read(path: str | Path, what: str) -> tuple[str, Any]:
    doc = read_json_document(path, what=what, error=RunInputError, max_bytes=SUMMARY_MAX_BYTES)
    return doc.where, doc.data


def _need(obj: Any, where: str, field: str, kind: type | tuple[type, ...]) -> Any:
    cur = obj
    for part in field.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise RunInputError(f"{where}: field {field!r} is missing", file=where, field=field)
        cur = cur[part]
    if not isinstance(cur, kind):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise RunInputError(f"{where}: field {field!r} is {type(cur).__name__}, not {names}", file=where,
                            field=field)
    return cur


def _check_hbfd(s: Any, where: str, prefix: str = "") -> dict[str, Any]:
    _need(s, where, "profile", dict)
    _need(s, where, "counters.reference", dict)
    _need(s, where, "counters.device", dict)
    _need(s, where, "services", dict)
    _need(s, where, "terminal_status", str)
    return s


def read_summary(path: str | Path) -> Run:
    where, data = _read(path, "the run summary")
    if not isinstance(data, dict):
        raise RunInputError(f"{where}: a run summary is a JSON object, not {type(data).__name__}", file=where,
                            field="<file>")
    schema = data.get("schema")
    if schema == HBFD_SCHEMA:
        return Run(path=where, schema=schema, hbfd=_check_hbfd(data, where))
    if schema == DEMO_SCHEMA:
        ver = data.get("schema_version")
        if ver != DEMO_SCHEMA_VERSION:
            raise RunInputError(f"{where}: demo summary schema_version {ver!r} is not supported (this hbfctl "
                                f"reads version {DEMO_SCHEMA_VERSION})", code=ErrorCode.UNSUPPORTED, file=where,
                                field="schema_version")
        inner = _need(data, where, "hbfd_summary", dict)
        if inner.get("schema") != HBFD_SCHEMA:
            raise RunInputError(f"{where}: hbfd_summary.schema {inner.get('schema')!r} is not {HBFD_SCHEMA!r}",
                                code=ErrorCode.UNSUPPORTED, file=where, field="hbfd_summary.schema")
        _check_hbfd(inner, where)
        demo = {k: data.get(k) for k in ("workload", "ok", "numbers", "meaning", "explanation")}
        return Run(path=where, schema=f"{DEMO_SCHEMA}/{ver}", hbfd=inner, demo=demo)
    if isinstance(schema, str) and (schema.startswith("hbfsim.summary/") or schema.startswith("hbfsim.")):
        raise RunInputError(f"{where}: schema {schema!r} is not supported (this hbfctl reads {ACCEPTED})",
                            code=ErrorCode.UNSUPPORTED, file=where, field="schema")
    raise RunInputError(f"{where}: not a run summary (schema {schema!r}; expected {ACCEPTED})", file=where,
                        field="schema")


def read_counters(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The runtime's counters (``json.dump(session.counters(), f)``): ``kernels`` (name -> counters)
    and ``totals``."""
    where, data = _read(path, "the kernel counters")
    return where, check_counters(data, where)


def check_counters(data: Any, where: str) -> dict[str, Any]:
    """``data`` as the runtime's counters (``kernels`` name -> counters, ``totals``), checked."""
    if not isinstance(data, dict) or not isinstance(data.get("kernels"), dict):
        raise RunInputError(f"{where}: not the runtime's counters (expected a JSON object with 'kernels' and "
                            f"'totals', as json.dump(session.counters()) writes)", file=where, field="kernels")
    for name, k in data["kernels"].items():
        _need(k, where, "ops", dict)
        for f in ("launches", "kstart_ns", "kend_ns", "wait_wall_ns"):
            v = _need(k, where, f, int)
            if v < 0:
                raise RunInputError(f"{where}: kernels.{name}.{f} is negative ({v})", file=where,
                                    field=f"kernels.{name}.{f}")
    return data


def reported_counters(run: Run) -> dict[str, Any] | None:
    """The per-kernel counters the runtime reported to hbfd when its session closed (the last Report
    of kind ``kernel_counters`` kept in the summary), or None."""
    reps = [r for r in (run.hbfd.get("reports") or []) if isinstance(r, dict) and r.get("kind") == "kernel_counters"]
    if not reps:
        return None
    return check_counters(reps[-1].get("data"), f"{run.path} (reports[kernel_counters])")


def load_run(summary: str | Path, counters: str | Path | None = None) -> Run:
    run = read_summary(summary)
    if counters is None:
        c = reported_counters(run)
        if c is None:
            return run
        return Run(path=run.path, schema=run.schema, hbfd=run.hbfd, demo=run.demo, counters=c,
                   counters_path=f"{run.path} (the runtime's kernel_counters report)")
    cwhere, c = read_counters(counters)
    return Run(path=run.path, schema=run.schema, hbfd=run.hbfd, demo=run.demo, counters=c, counters_path=cwhere)
