"""Import rules of docs/design.md §2, checked on the AST of every module.

Layers, bottom to top; a package imports only itself and the layers below it:

* ``hbfcommon`` (the contract layer) imports no other part; ``hbfproto`` (generated stubs) only from
  ``hbfcommon.rpc`` and hbfd's server layer.
* ``hbfcc`` (compiler), ``hbfd`` (daemon), ``runtime_cuda`` (runtime) import ``hbfcommon`` and never each
  other: the compiler works with no daemon, the runtime reaches hbfd only through the RPC contract, the
  daemon never imports the workload side.
* ``eidola`` imports ``hbfcommon`` and ``runtime_cuda``; ``workloads`` anything above; ``bench``/``tests`` anything.
* The models inside hbfd (hbfd/media, hbfd/thermal, hbfd/reliability) and eidola's models are pure:
  no socket / grpc / hbfproto / threading / subprocess / multiprocessing / asyncio / selectors imports,
  no clock calls (time.time/monotonic/perf_counter/sleep/..., datetime.now), and no import of the
  daemon's server shell. Exempt: the CLI entry modules of those packages (bench.py, validate.py, cli.py,
  __main__.py), which are tools around the models, and the functions listed in EXEMPT_FUNCTIONS (with why).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL_PACKAGES = ["hbfd/media", "hbfd/thermal", "hbfd/reliability"]
# eidola's pure models (the launcher eidola/replay.py drives CUDA and is not one)
EIDOLA_MODELS = ["eidola/trace.py", "eidola/wtt.py", "eidola/generator.py", "eidola/accounting.py",
                 "eidola/timeline.py", "eidola/clocksync.py", "eidola/from_recording.py", "eidola/compare.py"]
# what each top-level part may import (besides itself, stdlib and third-party packages)
OURS = {"hbfcommon", "hbfproto", "hbfcc", "hbfd", "runtime_cuda", "eidola", "workloads", "bench"}
ALLOWED = {
    "hbfcommon": {"hbfproto"},   # only hbfcommon/rpc.py, see HBFPROTO_USERS
    "hbfcc": {"hbfcommon"},
    "hbfd": {"hbfcommon", "hbfproto"},
    "runtime_cuda": {"hbfcommon"},
    "eidola": {"hbfcommon", "runtime_cuda"},
    "workloads": {"hbfcommon", "hbfcc", "hbfd", "runtime_cuda", "eidola"},
}
HBFPROTO_USERS = {"hbfcommon/rpc.py", "hbfd/server.py"}
# hbfd's server shell: the model packages never import these
SERVER_SHELL = {"hbfd.server", "hbfd.cli", "hbfd.ctl_cli", "hbfd.heartbeat", "hbfd.region",
                "hbfd.knobs", "hbfd.services", "hbfd.runner"}
CLI_MODULES = {"bench.py", "validate.py", "cli.py", "__main__.py"}
BANNED_IN_MODELS = {"socket", "grpc", "hbfproto", "threading", "_thread", "subprocess", "multiprocessing",
                    "asyncio", "selectors", "concurrent"}
BANNED_IN_HBFCC = {"hbfd", "grpc", "hbfproto"}
CLOCKS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep",
          "process_time", "process_time_ns", "thread_time", "clock_gettime", "clock_gettime_ns"}
EXEMPT_FUNCTIONS = {
    ("hbfd/thermal/rom.py", "compare_with_python_control"):
        "wall time of an ERA solver comparison reported by validation, not a model clock",
}


def _modules(pkg: str) -> list[Path]:
    return sorted((ROOT / pkg).rglob("*.py"))


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, node.module
            for a in node.names:
                yield node, f"{node.module}.{a.name}"


def _exempt_nodes(tree: ast.AST, rel: str) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, node.name) in EXEMPT_FUNCTIONS:
            ids.update(id(n) for n in ast.walk(node))
    return ids


def model_violations(path: Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    if path.name in CLI_MODULES:
        return []
    tree = ast.parse(path.read_text(), filename=rel)
    skip = _exempt_nodes(tree, rel)
    out = []
    time_aliases = {"time"}
    for node, name in _imports(tree):
        if id(node) in skip:
            continue
        if name.split(".")[0] in BANNED_IN_MODELS:
            out.append(f"{rel}:{node.lineno} imports {name}")
        if isinstance(node, ast.ImportFrom) and node.module == "time" and name != "time" \
                and name.split(".")[-1] in CLOCKS:
            out.append(f"{rel}:{node.lineno} imports the clock {name}")
        if isinstance(node, ast.Import):
            time_aliases.update(a.asname for a in node.names if a.name == "time" and a.asname)
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if isinstance(f.value, ast.Name) and f.value.id in time_aliases and f.attr in CLOCKS:
            out.append(f"{rel}:{node.lineno} calls the clock {f.value.id}.{f.attr}()")
        if f.attr in ("now", "utcnow", "today") and isinstance(f.value, (ast.Name, ast.Attribute)) and \
                ast.unparse(f.value).split(".")[-1] in ("datetime", "date"):
            out.append(f"{rel}:{node.lineno} calls the clock {ast.unparse(f)}()")
    return out


def hbfcc_violations(path: Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(), filename=rel)
    return [f"{rel}:{node.lineno} imports {name}" for node, name in _imports(tree)
            if name.split(".")[0] in BANNED_IN_HBFCC]


def layer_violations(path: Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    top = rel.split("/")[0]
    allowed = ALLOWED.get(top)
    if allowed is None:
        return []
    tree = ast.parse(path.read_text(), filename=rel)
    out = []
    for node, name in _imports(tree):
        head = name.split(".")[0]
        if head not in OURS or head == top:
            continue
        if head not in allowed:
            out.append(f"{rel}:{node.lineno} imports {name} ({top} may import only {sorted(allowed)})")
        elif head == "hbfproto" and rel not in HBFPROTO_USERS:
            out.append(f"{rel}:{node.lineno} imports {name} (only {sorted(HBFPROTO_USERS)} use the stubs)")
    return out


@pytest.mark.parametrize("top", sorted(ALLOWED))
def test_layers_import_one_way(top):
    files = _modules(top)
    assert files, f"{top} has no modules?"
    bad = [v for f in files for v in layer_violations(f)]
    assert not bad, "\n".join(bad)


def test_models_never_import_the_server_shell():
    bad = []
    for pkg in MODEL_PACKAGES:
        for f in _modules(pkg):
            if f.name in CLI_MODULES:
                continue
            tree = ast.parse(f.read_text())
            bad += [f"{f.relative_to(ROOT)}:{n.lineno} imports {name}" for n, name in _imports(tree)
                    if name in SERVER_SHELL or any(name.startswith(x + ".") for x in SERVER_SHELL)]
    assert not bad, "\n".join(bad)


def test_eidola_models_are_pure():
    bad = [v for rel in EIDOLA_MODELS for v in model_violations(ROOT / rel)]
    assert not bad, "\n".join(bad)


def test_the_layer_checker_catches_violations(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "runtime_cuda").mkdir()
    p = tmp_path / "runtime_cuda" / "m.py"
    p.write_text("import hbfd.knobs\nfrom hbfcc.artifact import lookup_by_ptx\nimport hbfproto.hbf_pb2\n"
                 "from hbfcommon import ctl\n")
    assert len(layer_violations(p)) == 4   # hbfd, hbfcc (module + name), hbfproto
    (tmp_path / "hbfd").mkdir()
    q = tmp_path / "hbfd" / "demo.py"
    q.write_text("import runtime_cuda\nfrom hbfproto import hbf_pb2\n")
    assert len(layer_violations(q)) == 3   # runtime_cuda; hbfproto (module + name) outside the server layer


def test_hbfcc_never_imports_the_daemon_or_grpc():
    files = _modules("hbfcc")
    assert files, "hbfcc has no modules?"
    bad = [v for f in files for v in hbfcc_violations(f)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("pkg", MODEL_PACKAGES)
def test_models_are_pure(pkg):
    bad = [v for f in _modules(pkg) for v in model_violations(f)]
    assert not bad, "\n".join(bad)


def test_exemptions_are_still_needed_and_exist():
    for (rel, fn), why in EXEMPT_FUNCTIONS.items():
        p = ROOT / rel
        if not p.exists():
            continue
        tree = ast.parse(p.read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == fn for n in ast.walk(tree)), \
            f"exempt function {rel}:{fn} no longer exists: drop it from EXEMPT_FUNCTIONS"


@pytest.mark.parametrize("src,n", [
    ("import socket", 1), ("import grpc.aio", 1), ("from concurrent import futures", 2),
    ("import threading as th", 1), ("from subprocess import run", 2),
    ("import time\nx = time.monotonic_ns()", 1), ("import time as t\nt.sleep(1)", 1),
    ("from time import perf_counter", 1), ("from datetime import datetime\ndatetime.now()", 1),
    ("import numpy as np\nimport time\nx = time.strftime('%Y')", 0), ("import math", 0),
])
def test_the_checker_catches_violations(tmp_path, monkeypatch, src, n):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    p = tmp_path / "m.py"
    p.write_text(src)
    assert len(model_violations(p)) == n, model_violations(p)


def test_the_hbfcc_checker_catches_violations(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    p = tmp_path / "m.py"
    p.write_text("import os\nfrom hbfd.server import Daemon\nimport hbfproto.hbf_pb2\n")
    assert len(hbfcc_violations(p)) == 3
