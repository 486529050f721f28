"""Sweeps: profiles x tR x placement x workload, run here or, unchanged, on a Ray cluster, collected into
one table.

    python -m workloads.sweep run --workload trace --profiles ocp-sg1,ocp-sg3 --t-read-ns 2000,20000 --out DIR
    python -m workloads.sweep run --workload qwen3moe --profiles ocp-sg1,ocp-sg2 --t-read-ns 4000 \\
        --placements experts,all --arg model=small --arg batch=1,8 --backend ray --ray-address auto --out DIR
    python -m workloads.sweep table DIR          # the table again, from the points already in DIR

A **point** is one (workload, profile, tR, placement). Each point runs in its own process (a clean hbfd, a
clean CUDA context): :func:`run_point` derives the profile (``hbfcommon.profile.derive_profile``: tR replaced,
the fixed read time kept consistent), runs the workload's command with it, reads what the workload wrote and
returns one result document: the point, ``status`` (``ok`` or ``failed`` with the reason and the end of the
log), the rows (one per batch for the LLM run) and the raw summary. :func:`run_point` is the whole task: the
local backend calls it in a thread per job, the Ray backend as a remote function (``num_gpus`` per task for
workloads that need a GPU), so a sweep runs the same code on one machine and on a cluster. The driver writes
every result under ``DIR/points/<id>.json`` as it arrives (atomic replace; a worker needs no shared
filesystem), and the table (``sweep.json``, ``sweep.csv``, ``sweep.md``) after each point, so an interrupted
sweep keeps what finished and a rerun skips points already ``ok`` (``--force`` reruns them).

One failing point never ends the sweep: it is a row with ``status: failed`` and its reason, and the command
exits 1 at the end when any point failed. Bad input (an unknown workload, profile or placement, a tR that is
not a positive number of ns, a workload argument the workload does not take) is refused before anything runs.

Workloads (``WORKLOADS``):

* ``trace`` (CPU): ``workloads.demo``'s CPU path: hbfd on the point's profile, a second process drives an
  access trace through the request ring (``--arg trace=CSV``, default the bundled demo trace;
  ``--arg window=N``). Placement: ``range`` (the trace's one timing range).
* ``qwen3moe`` (GPU): ``python -m workloads.qwen3moe run`` with the point's profile and placement
  (``experts``, ``all``, ``attention-hbm``, ``none``); ``--arg model=``, ``batch=`` (comma list), ``tokens=``,
  ``prompt=``, ``layers=``; one row per batch size with the per-token split.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import csv
import dataclasses
import hashlib
import io
import itertools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tqdm import tqdm

from hbfcommon.errors import ConfigError, HbfError
from hbfcommon.fsutil import atomic_write_json, atomic_write_text, read_json_document
from hbfcommon.profile import PROFILE_DIR, derive_profile

log = logging.getLogger(__name__)

SCHEMA = "hbfsim.sweep"
POINT_SCHEMA = "hbfsim.sweep-point"
LOG_TAIL_CHARS = 3000
BACKENDS = ("local", "ray")


# ------------------------------------------------------------------ workloads
@dataclass(frozen=True)
class Workload:
    """How a point of this workload runs: its command, where it leaves its result, and the table rows."""
    name: str
    placements: tuple[str, ...]
    needs_gpu: bool
    args: Mapping[str, Callable[[str], Any]]             # --arg name -> parser (raises ValueError on bad input)
    command: Callable[["Point", Path, Path], list[str]]   # (point, profile path, work dir) -> argv
    rows: Callable[["Point", Path], tuple[list[dict], dict]]   # (point, work dir) -> (rows, raw summary)
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _positive_int(v: str) -> int:
    n = int(v)
    if n <= 0:
        raise ValueError(f"{v!r} is not a positive integer")
    return n


def _int_list(v: str) -> tuple[int, ...]:
    return tuple(_positive_int(x) for x in v.split(",") if x.strip())


def _existing_file(v: str) -> str:
    p = Path(v).expanduser().resolve()
    if not p.is_file():
        raise ValueError(f"{v!r} is not a file")
    return str(p)


def _trace_command(pt: "Point", profile: Path, work: Path) -> list[str]:
    argv = [sys.executable, "-m", "workloads.demo", "--profile", str(profile), "--summary", str(work / "summary.json")]
    if "trace" in pt.args:
        argv += ["--trace", pt.args["trace"]]
    if "window" in pt.args:
        argv += ["--window", str(pt.args["window"])]
    return argv


def _trace_rows(pt: "Point", work: Path) -> tuple[list[dict], dict]:
    doc = read_json_document(work / "summary.json", what="demo summary", error=HbfError).data
    n = doc.get("numbers") or {}
    hs = doc.get("hbfd_summary") or {}
    row: dict[str, Any] = {"ok": bool(doc.get("ok")), "requests": n.get("requests"),
                           "terminal_status": hs.get("terminal_status")}
    for k in ("modeled_ns", "wall_ns", "service_ns", "overhead_ns"):
        d = n.get(k) or {}
        row[f"{k}_p50"], row[f"{k}_p99"] = d.get("p50"), d.get("p99")
    return [row], doc


def _qwen_command(pt: "Point", profile: Path, work: Path) -> list[str]:
    a = pt.args
    argv = [sys.executable, "-m", "workloads.qwen3moe", "run", "--profile", str(profile),
            "--placement", pt.placement, "--out", str(work)]
    for b in a.get("batch", (1,)):
        argv += ["--batch", str(b)]
    for k in ("model", "tokens", "prompt", "layers"):
        if k in a:
            argv += [f"--{k}", str(a[k])]
    return argv


QWEN_FIELDS = ("tokens_identical_to_native", "native_ms_per_token", "instrumented_ms_per_token",
               "modeled_ms_per_token", "exposed_wait_ms_per_token", "overhead_ms_per_token",
               "device_floor_ms_per_token", "achieved_hbf_gb_per_s", "overhead_over_modeled", "simulator_bound")


def _qwen_rows(pt: "Point", work: Path) -> tuple[list[dict], dict]:
    doc = read_json_document(work / "run.json", what="qwen3moe run", error=HbfError, max_bytes=256 << 20).data
    rows = []
    for b, br in sorted((doc.get("batches") or {}).items(), key=lambda kv: int(kv[0])):
        s = br.get("summary") or {}
        rows.append({"batch": int(b), **{k: s.get(k) for k in QWEN_FIELDS}})
    if not rows:
        raise HbfError(f"{work / 'run.json'}: no batch results")
    raw = {k: v for k, v in doc.items() if k not in ("batches", "kernels")}
    return rows, raw


WORKLOADS: dict[str, Workload] = {
    "trace": Workload("trace", ("range",), False, {"trace": _existing_file, "window": _positive_int},
                      _trace_command, _trace_rows, {"HBFD_DEMO": "cpu"}),
    "qwen3moe": Workload("qwen3moe", ("experts", "all", "attention-hbm", "none"), True,
                         {"model": str, "batch": _int_list, "tokens": _positive_int, "prompt": _positive_int,
                          "layers": _positive_int},
                         _qwen_command, _qwen_rows),
}


# ------------------------------------------------------------------ the points
@dataclass(frozen=True)
class Point:
    workload: str
    profile: str                  # a bundled profile name or a path
    t_read_ns: int | None         # None: the profile's own tR
    placement: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> dict[str, Any]:
        return {"workload": self.workload, "profile": self.profile, "t_read_ns": self.t_read_ns,
                "placement": self.placement}

    @property
    def id(self) -> str:
        """stable and file-name safe: readable parts + a hash of the whole point (arguments included)"""
        h = hashlib.sha256(json.dumps({**self.key, "args": dict(self.args)}, sort_keys=True,
                                      default=str).encode()).hexdigest()[:10]
        prof = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(self.profile).stem)[:40]
        tr = "native-tr" if self.t_read_ns is None else f"tr{self.t_read_ns}"
        return f"{self.workload}-{prof}-{tr}-{self.placement}-{h}"


@dataclass(frozen=True)
class SweepSpec:
    workload: str
    profiles: tuple[str, ...]
    t_read_ns: tuple[int | None, ...] = (None,)
    placements: tuple[str, ...] = ()          # () = the workload's first placement
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        w = WORKLOADS.get(self.workload)
        if w is None:
            raise ConfigError(f"unknown workload {self.workload!r}: one of {', '.join(WORKLOADS)}", field="workload")
        if not self.profiles:
            raise ConfigError("no profile to sweep", field="profiles")
        for p in self.profiles:
            if not (PROFILE_DIR / f"{p}.json").is_file() and not Path(p).is_file():
                known = ", ".join(sorted(q.stem for q in PROFILE_DIR.glob("*.json") if q.stem != "profile.schema"))
                raise ConfigError(f"profile {p!r} is neither a bundled profile ({known}) nor a file", field="profiles")
        for t in self.t_read_ns:
            if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t <= 0):
                raise ConfigError(f"tR {t!r} must be a positive whole number of ns", field="t_read_ns")
        if not self.t_read_ns:
            raise ConfigError("no tR to sweep (leave it out for the profiles' own)", field="t_read_ns")
        with tempfile.TemporaryDirectory(prefix="hbfsim-sweep-check-") as td:   # every derivation is valid
            for i, (p, t) in enumerate(itertools.product(self.profiles, self.t_read_ns)):
                derive_profile(p, Path(td) / f"{i}.json", t_read_ns=t, why="workloads.sweep check")
        for pl in self.placements:
            if pl not in w.placements:
                raise ConfigError(f"placement {pl!r} is not one of workload {w.name}'s: {', '.join(w.placements)}",
                                  field="placements")
        for k in self.args:
            if k not in w.args:
                raise ConfigError(f"workload {w.name} takes no argument {k!r} (it takes: {', '.join(w.args)})",
                                  field="args")
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout {self.timeout_s!r} s must be > 0", field="timeout_s")

    def points(self) -> list[Point]:
        pls = self.placements or WORKLOADS[self.workload].placements[:1]
        return [Point(self.workload, p, t, pl, dict(self.args))
                for p, t, pl in itertools.product(self.profiles, self.t_read_ns, pls)]

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "profiles": list(self.profiles), "t_read_ns": list(self.t_read_ns),
                "placements": list(self.placements), "args": {k: (list(v) if isinstance(v, tuple) else v)
                                                              for k, v in self.args.items()},
                "timeout_s": self.timeout_s}


def parse_args_list(workload: str, pairs: Sequence[str]) -> dict[str, Any]:
    """``--arg name=value`` pairs, each value parsed by the workload's own parser (errors name the argument)"""
    w = WORKLOADS.get(workload)
    if w is None:
        raise ConfigError(f"unknown workload {workload!r}: one of {', '.join(WORKLOADS)}", field="workload")
    out: dict[str, Any] = {}
    for p in pairs:
        k, eq, v = p.partition("=")
        if not eq or not k:
            raise ConfigError(f"--arg {p!r}: write name=value", field="args")
        if k not in w.args:
            raise ConfigError(f"workload {w.name} takes no argument {k!r} (it takes: {', '.join(w.args)})",
                              field="args")
        try:
            out[k] = w.args[k](v)
        except ValueError as e:
            raise ConfigError(f"--arg {k}: {e}", field="args") from None
    return out


# ------------------------------------------------------------------ one point (the task)
def run_point(point: Point, *, timeout_s: float = 3600.0, env: Mapping[str, str] | None = None,
              keep_dir: str | None = None) -> dict[str, Any]:
    """Run one point in a fresh process and return its result document; never raises for the workload's
    own failure (that is ``status: failed`` with the reason). ``keep_dir``: run there (kept) instead of a
    temp dir. The same function is the local backend's job and the Ray backend's remote task."""
    w = WORKLOADS[point.workload]
    t0 = time.time()
    res: dict[str, Any] = {"schema": POINT_SCHEMA, "schema_version": 1, "id": point.id, "point": point.key,
                           "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in point.args.items()},
                           "host": os.uname().nodename, "started_unix_s": t0}
    with tempfile.TemporaryDirectory(prefix=f"hbfsim-sweep-{point.id[:40]}-") as td:
        work = Path(keep_dir) if keep_dir else Path(td)
        work.mkdir(parents=True, exist_ok=True)
        logp = work / "point.log"
        try:
            prof = derive_profile(point.profile, work / "profile.json", t_read_ns=point.t_read_ns,
                                  why=f"workloads.sweep point {point.id}")
            res["profile"] = {"name": prof.name, "t_read_ns": prof.timing.t_read_ns, "sha256": prof.sha256}
            ppath = Path(prof.path)
            argv = w.command(point, ppath, work)
            res["command"] = argv
            penv = {**os.environ, **w.env, **(env or {})}
            penv["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                               penv.get("PYTHONPATH")]))
            rc = _run_workload(argv, penv, work, logp, timeout_s)
            res["exit_code"] = rc
            if rc is None:
                res["status"], res["reason"] = "failed", f"timed out after {timeout_s:g} s (its processes killed)"
            elif rc != 0:
                res["status"], res["reason"] = "failed", f"the workload exited {rc}"
                with contextlib.suppress(HbfError):          # what it wrote before it failed, if anything
                    res["rows"], res["summary"] = w.rows(point, work)
            else:
                res["rows"], res["summary"] = w.rows(point, work)
                bad = any(row.get("ok") is False for row in res["rows"])
                res["status"] = "failed" if bad else "ok"
                if bad:
                    res["reason"] = "the workload exited 0 but its summary says not ok"
        except HbfError as e:
            res["status"], res["reason"] = "failed", f"{type(e).__name__}: {e}"
        except OSError as e:
            res["status"], res["reason"] = "failed", f"{type(e).__name__}: {e}"
        if res["status"] != "ok" and logp.is_file():
            res["log_tail"] = logp.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    res["wall_s"] = round(time.time() - t0, 3)
    return res


def _run_workload(argv: list[str], env: Mapping[str, str], cwd: Path, logp: Path, timeout_s: float) -> int | None:
    """the workload in its own process group (it starts hbfd and its helpers); on timeout the whole group is
    killed, so no daemon outlives its point. Returns the exit code, None on timeout."""
    with open(logp, "w") as lf:
        proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None
        finally:
            if proc.poll() is None:          # interrupted (KeyboardInterrupt): leave nothing running
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# ------------------------------------------------------------------ backends
def _gpu_count() -> int:
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU ")) if r.returncode == 0 else 0


def run_local(points: Sequence[Point], *, jobs: int, timeout_s: float, gpus: int | None,
              on_result: Callable[[dict], None]) -> None:
    """A thread per job, each running points in their own processes; a GPU workload's point gets one GPU
    (CUDA_VISIBLE_DEVICES) from a pool of ``gpus`` (default: what nvidia-smi lists), so jobs <= GPUs run."""
    need_gpu = any(WORKLOADS[p.workload].needs_gpu for p in points)
    pool: queue.Queue[int | None] = queue.Queue()
    if need_gpu:
        n = _gpu_count() if gpus is None else gpus
        if n <= 0:
            raise ConfigError("this sweep's workload needs a GPU and none was found (nvidia-smi -L); "
                              "run it where there is one, or on a Ray cluster with --backend ray", field="backend")
        jobs = min(jobs, n)
        for g in range(n):
            pool.put(g)

    def job(p: Point) -> dict:
        g = pool.get() if need_gpu else None
        try:
            env = {"CUDA_VISIBLE_DEVICES": str(g)} if g is not None else {}
            return run_point(p, timeout_s=timeout_s, env=env)
        finally:
            if g is not None:
                pool.put(g)

    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = [ex.submit(job, p) for p in points]
        for f in cf.as_completed(futs):
            on_result(f.result())


def run_ray(points: Sequence[Point], *, timeout_s: float, address: str | None, cpus: int,
            gpus_per_task: float, on_result: Callable[[dict], None]) -> None:
    """Each point a Ray task running :func:`run_point` (``num_gpus`` = ``gpus_per_task`` for GPU workloads);
    ``address`` None starts a local Ray instance with ``cpus`` CPUs (what CI runs), else joins that cluster
    ("auto": the one this machine belongs to). Every worker needs this package installed (``pip install``)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs the ray package (pip install 'hbfsim[sweep]')",
                          field="backend") from None
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=cpus, num_gpus=0 if _gpu_count() == 0 else None, include_dashboard=False,
                     log_to_driver=False, object_store_memory=128 << 20,
                     runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                         filter(None, [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")]))}})
    try:
        refs, tasks = {}, {}
        for p in points:
            ng = gpus_per_task if WORKLOADS[p.workload].needs_gpu else 0
            if ng not in tasks:
                tasks[ng] = ray.remote(num_cpus=1, num_gpus=ng, max_retries=0)(run_point)
            refs[tasks[ng].remote(p, timeout_s=timeout_s)] = p
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    on_result(ray.get(ref))
                except ray.exceptions.RayError as e:     # the task itself died (worker lost, OOM)
                    p = refs[ref]
                    on_result({"schema": POINT_SCHEMA, "schema_version": 1, "id": p.id, "point": p.key,
                               "status": "failed", "reason": f"ray task failed: {type(e).__name__}: {e}"[:2000]})
    finally:
        if started:
            ray.shutdown()


# ------------------------------------------------------------------ the table
COLUMNS_HEAD = ("id", "workload", "profile", "t_read_ns", "placement", "status", "reason", "wall_s")


def table_rows(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """one row per (point, workload row), points in sweep order; a failed point is one row with its reason"""
    out = []
    for r in results:
        head = {"id": r["id"], **r["point"], "status": r["status"], "reason": r.get("reason", ""),
                "wall_s": r.get("wall_s")}
        for row in (r.get("rows") or [{}]):
            out.append({**head, **row})
    return out


def write_table(out: Path, spec: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> None:
    rows = table_rows(results)
    cols = list(COLUMNS_HEAD) + sorted({k for r in rows for k in r} - set(COLUMNS_HEAD))
    atomic_write_json(out / "sweep.json", {"schema": SCHEMA, "schema_version": 1, "spec": spec,
                                           "points": len(results),
                                           "failed": sum(r["status"] != "ok" for r in results),
                                           "columns": cols, "rows": rows}, indent=1)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / "sweep.csv", buf.getvalue())

    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "/").replace("\n", " ")[:120]
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    atomic_write_text(out / "sweep.md", "\n".join(md) + "\n")


def load_results(out: Path) -> list[dict[str, Any]]:
    res = []
    for p in sorted((out / "points").glob("*.json")):
        d = read_json_document(p, what="sweep point result", error=HbfError, max_bytes=64 << 20).data
        if d.get("schema") != POINT_SCHEMA:
            raise HbfError(f"{p}: not a sweep point result (schema {d.get('schema')!r})")
        res.append(d)
    return res


def run_sweep(spec: SweepSpec, out: Path, *, backend: str = "local", jobs: int = 1, force: bool = False,
              gpus: int | None = None, ray_address: str | None = None, gpus_per_task: float = 1.0,
              progress: bool = True) -> list[dict[str, Any]]:
    """Run every point not already ``ok`` in ``out`` (all with ``force``), write each result and the table as
    they arrive; return the results of the whole sweep in point order."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}", field="backend")
    if jobs < 1:
        raise ConfigError(f"jobs {jobs!r} must be >= 1", field="jobs")
    out.mkdir(parents=True, exist_ok=True)
    (out / "points").mkdir(exist_ok=True)
    pts = spec.points()
    have = {r["id"]: r for r in load_results(out)}
    todo = [p for p in pts if force or have.get(p.id, {}).get("status") != "ok"]
    log.info("sweep: %d points, %d to run (%d already ok in %s)", len(pts), len(todo), len(pts) - len(todo), out)
    sj = spec.to_json()
    bar = tqdm(total=len(todo), desc="sweep", unit="point", file=sys.stderr) if progress and todo else None

    def on_result(r: dict) -> None:
        have[r["id"]] = r
        atomic_write_json(out / "points" / f"{r['id']}.json", r, indent=1)
        write_table(out, sj, [have[p.id] for p in pts if p.id in have])
        (log.info if r["status"] == "ok" else log.warning)("point %s: %s%s (%.1f s)", r["id"], r["status"],
                                                           f" -- {r.get('reason')}" if r.get("reason") else "",
                                                           r.get("wall_s") or 0.0)
        if bar is not None:
            bar.update(1)
    try:
        if todo and backend == "local":
            run_local(todo, jobs=jobs, timeout_s=spec.timeout_s, gpus=gpus, on_result=on_result)
        elif todo:
            run_ray(todo, timeout_s=spec.timeout_s, address=ray_address, cpus=jobs, gpus_per_task=gpus_per_task,
                    on_result=on_result)
    finally:
        if bar is not None:
            bar.close()
    results = [have[p.id] for p in pts if p.id in have]
    write_table(out, sj, results)
    return results


# ------------------------------------------------------------------ CLI
def _split(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _t_read_list(v: str) -> tuple[int | None, ...]:
    out: list[int | None] = []
    for x in _split(v):
        if x in ("profile", "native"):
            out.append(None)
            continue
        try:
            out.append(int(x))
        except ValueError:
            raise ConfigError(f"--t-read-ns {x!r}: a whole number of ns, or 'profile' for the profile's own",
                              field="t_read_ns") from None
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workloads.sweep", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{run,table}")
    r = sub.add_parser("run", help="run the points of a sweep (skipping those already ok in --out)")
    r.add_argument("--workload", required=True, help=f"one of: {', '.join(WORKLOADS)}")
    r.add_argument("--profiles", required=True, help="comma list: bundled profile names or paths")
    r.add_argument("--t-read-ns", default="profile", help="comma list of tR in ns ('profile': the profile's own)")
    r.add_argument("--placements", default="", help="comma list (default: the workload's first)")
    r.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", help="a workload argument")
    r.add_argument("--out", required=True, type=Path, help="the sweep's directory (results, table)")
    r.add_argument("--backend", default="local", choices=BACKENDS)
    r.add_argument("--jobs", type=int, default=1, help="points at once (local); CPUs of a local Ray instance")
    r.add_argument("--gpus", type=int, help="GPUs to hand out locally (default: nvidia-smi's count)")
    r.add_argument("--ray-address", help="join this Ray cluster ('auto': this machine's); default: a local instance")
    r.add_argument("--gpus-per-task", type=float, default=1.0, help="Ray num_gpus of a GPU workload's task")
    r.add_argument("--timeout-s", type=float, default=3600.0, help="per point")
    r.add_argument("--force", action="store_true", help="rerun points already ok")
    t = sub.add_parser("table", help="write the table again from the points in DIR and print it")
    t.add_argument("dir", type=Path)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[sweep] %(message)s")
    try:
        if a.cmd == "table":
            res = load_results(a.dir)
            if not res:
                raise ConfigError(f"{a.dir}: no sweep points there ({a.dir / 'points'})", field="dir")
            old = a.dir / "sweep.json"
            spec = read_json_document(old, what="sweep table", error=HbfError, max_bytes=256 << 20).data["spec"] \
                if old.is_file() else {}
            write_table(a.dir, spec, res)
            print((a.dir / "sweep.md").read_text(), end="")
            return 0 if all(x["status"] == "ok" for x in res) else 1
        spec = SweepSpec(workload=a.workload, profiles=tuple(_split(a.profiles)),
                         t_read_ns=_t_read_list(a.t_read_ns), placements=tuple(_split(a.placements)),
                         args=parse_args_list(a.workload, a.arg), timeout_s=a.timeout_s)
        res = run_sweep(spec, a.out, backend=a.backend, jobs=a.jobs, force=a.force, gpus=a.gpus,
                        ray_address=a.ray_address, gpus_per_task=a.gpus_per_task)
    except HbfError as e:
        print(f"workloads.sweep: error: {e}", file=sys.stderr)
        return 2
    bad = [x for x in res if x["status"] != "ok"]
    print((a.out / "sweep.md").read_text(), end="")
    print(f"[sweep] {len(res) - len(bad)} of {len(res)} points ok; table: {a.out / 'sweep.md'} "
          f"(also sweep.json, sweep.csv)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
