"""The rewrite pipeline: named stages over one representation, the PTX AST; every stage can be dumped.

    parse -> [flags] -> timing -> [flags_admission] -> [call_isolation] -> native_entry -> link -> [link_eidola] -> print

Between parse and print every stage is ``(module, metadata) -> module`` on
:class:`hbfcc.ptx.model.Module` (the passes of :mod:`hbfcc.passes`, the linker of :mod:`hbfcc.link`);
hbfcc-ptxas adds ``occupancy_guard`` (:mod:`hbfcc.occupancy`) and ``print`` again after assembling,
and the artifact. With a dump directory (``dump_dir``, ``hbfcc rewrite --dump-stages DIR``,
HBFCC_DUMP_DIR) each stage writes ``NN-<stage>.ptx`` (the module, printed) and, when it reports
something, ``NN-<stage>.json`` into ``DIR/<file>.<sha12>/`` (``00-input.ptx`` is the input as given).

    res = rewrite_text(ptx_text, filename="k.ptx")
    res.text            # the rewritten, helper-linked PTX (print_text(res.module))
    res.meta["timing"]  # per-function classification report (see hbfcc.passes.timing)
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from hbfcommon import abi
from hbfcommon.fsutil import atomic_write_text

from . import helpers as H
from . import knobs
from . import link as L
from . import native_entry as NE
from .passes import get as get_pass
from .passes import pipeline as pass_pipeline
from .ptx.model import Module
from .toolchain import sha256_bytes

log = logging.getLogger(__name__)

MARKER = "// hbfcc: instrumented"

Stage = Callable[[Module, dict], Module]


class Dumps:
    """The dump directory of one rewrite: ``NN-<stage>.<ext>`` files, numbered in stage order."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.n = 0

    def _write(self, stage: str, ext: str, data: str) -> None:
        atomic_write_text(self.dir / f"{self.n:02d}-{stage}{ext}", data, fsync=False)  # debugging: no fsync

    def text(self, stage: str, text: str, report=None) -> None:
        """One stage's output text (and its report as JSON, when it has one)."""
        self._write(stage, ".ptx", text)
        if report is not None:
            self._write(stage, ".json", json.dumps(report, indent=1))
        self.n += 1

    def module(self, stage: str, module: Module, report=None) -> None:
        from .ptx import print_module
        self.text(stage, print_module(module), report)

    def json(self, stage: str, doc) -> None:
        self._write(stage, ".json", json.dumps(doc, indent=1))
        self.n += 1


@dataclass
class RewriteResult:
    text: str
    original_sha256: str
    transformed_sha256: str
    meta: dict
    helper: Optional[H.HelperModule]
    already_instrumented: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)
    module: Optional[Module] = None      # the AST ``text`` was printed from (the input's when left as is)
    dumps: Optional[Dumps] = None        # where later stages (occupancy guard, artifact) dump


def is_instrumented(module: Module) -> bool:
    """hbfcc's marker in the header, or the module declares or defines a timing helper."""
    return any(MARKER in c.text for c in module.header_comments) or \
        any(f.name in abi.HELPERS for f in module.functions())


def print_text(module: Module) -> str:
    """The print stage: the module's text, marked as instrumented."""
    from .ptx import print_module
    return f"{MARKER} by hbfcc (helper ABI {abi.HBF_HELPER_ABI_VERSION})\n" + print_module(module)


def rewrite_text(text: Union[str, bytes], *, filename: str = "<ptx>", helper: Optional[H.HelperModule] = None,
                 link: bool = True, dump_dir: Optional[os.PathLike] = None,
                 cpasync_window: Optional[int] = None, passes: Optional[tuple[str, ...]] = None,
                 max_version: Optional[tuple[int, int]] = None, prune: Optional[bool] = None,
                 full_warp_all: tuple[str, ...] = (), prefetch_group_in: tuple[str, ...] = (),
                 early_clock_in: tuple[str, ...] = ()) -> RewriteResult:
    """Rewrite one PTX module. ``helper``: the helper module to link (default: :func:`H.load_helper`);
    ``link=False`` leaves the helpers as prototypes only (for inspection; not loadable).
    ``passes``: the pass selection (default HBFCC_PASSES, see :func:`knobs.parse_passes`).
    ``max_version``: the newest PTX ISA the assembling ptxas accepts (linking raises ``.version`` no
    higher, :func:`hbfcc.link.link`). ``prune=False`` links every helper function, not only what
    the module reaches (comparison builds: bench/hbfcc_buildcost.py, tests/hbfcc/test_link_prune.py);
    None: HBFCC_LINK_PRUNE (default 1).
    ``full_warp_all``: functions whose issue groups all get HBFCC_FULL_WARP's full-mask copy (`all`) whatever the
    knob's scope (HBFCC_FULL_WARP=auto's second build, hbfcc/cli.py). ``prefetch_group_in``: functions whose issue
    groups prefetch their loads into L2 whatever HBFCC_PREFETCH_GROUP says, ``early_clock_in``: functions whose groups
    read their clock first whatever HBFCC_EARLY_CLOCK says (the knobs' `auto`: that second build's third variant).
    ``text`` may be bytes (UTF-8); text that is not UTF-8 or holds NUL is a PtxError naming where."""
    from hbfcc.ptx.parser import as_text, parse_module

    text = as_text(text, filename)
    k = knobs.load()
    dd = Path(dump_dir) if dump_dir is not None else (k.dump_dir if k.dump_dir else None)
    orig_sha = sha256_bytes(text.encode())
    dumps = Dumps(dd / (Path(filename).name + "." + orig_sha[:12])) if dd is not None else None
    if link and helper is None:
        helper = H.load_helper(module_text=text)
    t = {}
    t0 = time.perf_counter()
    if dumps is not None:
        dumps.text("input", text)
    module = parse_module(text, filename=filename)
    t["parse"] = time.perf_counter() - t0
    if dumps is not None:
        dumps.module("parse", module)
    if is_instrumented(module):
        log.info("%s is already instrumented: left as is", filename)
        meta0 = {"already_instrumented": True, "timing": _not_instrumented_report(module, ALREADY_INSTRUMENTED)}
        return RewriteResult(text, orig_sha, orig_sha, meta0, helper, True, module=module, dumps=dumps)
    meta: dict = {"cpasync_window": cpasync_window or k.cpasync_window, "filename": filename,
                  "hoist_issues": k.hoist_issues, "inline_issues": k.inline_issues,
                  "group_issues": k.group_issues, "hoist_loads": k.hoist_loads,
                  "fast_groups": k.fast_groups, "merge_loads": k.merge_loads, "inline_multi": k.inline_multi,
                  "inline_live": k.inline_live, "share_until": k.share_until, "loads_first": k.loads_first, "full_warp": k.full_warp,
                  "full_warp_all": tuple(full_warp_all), "early_clock": k.early_clock == "1",
                  "early_clock_in": tuple(early_clock_in), "prefetch_next": k.prefetch_next,
                  "prefetch_group": k.prefetch_group == "1",
                  "prefetch_group_in": tuple(prefetch_group_in), "inline_time": k.inline_time,
                  "native_scope": k.native_scope,
                  "call_isolation": k.call_isolation}
    selection = k.passes if passes is None else knobs.parse_passes(",".join(passes), "passes")
    stages: list[tuple[str, Stage]] = [(name, get_pass(name)) for name in pass_pipeline(selection)]
    meta["passes"] = list(selection)
    if k.call_isolation:     # HBFCC_CALL_ISOLATION: after every pass (the helper calls exist), before linking
        stages.append(("call_isolation", get_pass("call_isolation")))
    if k.native_entry:       # HBFCC_NATIVE_ENTRY: <k>__hbnat from the parsed input, after every pass, before linking
        stages.append((NE.STAGE_NAME, NE.stage(module, True)))
    if "flags" in selection:
        meta["flags_options"] = {"mwait": "mwait" in selection, "count_nonflag": True}
    if prune is None:
        prune = k.link_prune
    if link:
        assert helper is not None
        stages.append(L.stage(helper, max_version, prune=prune))
        if "flags" in selection:
            eidola = H.load_eidola_helper()
            meta["eidola_helper"] = eidola.to_dict()
            stages.append(L.stage(eidola, max_version, prune=prune))
    why = _target_too_old(module, helper)
    if why is not None:
        # Not instrumented, loudly: every kernel is recorded as not admitted (the runtime refuses
        # to launch it against registered ranges). Compiler-detection builds (CMake's sm_75 probe)
        # still work.
        log.warning("%s: %s", filename, why)
        meta["timing"] = _not_instrumented_report(module, why)
        meta["not_instrumented"] = why
        meta["below_helper_target"] = True
        return RewriteResult(text, orig_sha, orig_sha, meta, helper, False, t, module=module, dumps=dumps)
    for name, run in stages:
        t1 = time.perf_counter()
        module = run(module, meta)
        t[name] = time.perf_counter() - t1
        if dumps is not None:
            dumps.module(name, module, meta.get(name))
    if NE.STAGE_NAME not in meta:   # off: each kernel's record says so (no stage, no dump)
        NE.stage(module, False)(module, meta)
    t1 = time.perf_counter()
    out = print_text(module)
    t["print"] = time.perf_counter() - t1
    if dumps is not None:
        dumps.text("print", out)
    t["total"] = time.perf_counter() - t0
    return RewriteResult(out, orig_sha, sha256_bytes(out.encode()), meta, helper, False, t, module=module,
                         dumps=dumps)


# the reason recorded for the kernels of an input that hbfcc had already rewritten, until the
# record of that rewrite (the store's by-transformed entry, or nvcc's sink) replaces it
ALREADY_INSTRUMENTED = ("the PTX was already instrumented by hbfcc and the record of that rewrite was not found "
                        "(artifact store by-transformed/<sha256>.hbfcc.json)")


def _sm(target: str) -> Optional[int]:
    m = re.match(r"(?:sm|compute)_(\d+)", target)
    return int(m.group(1)) if m else None


def _target_too_old(module: Module, helper: Optional[H.HelperModule]) -> Optional[str]:
    if helper is None or helper.target_sm is None:
        return None
    sms = [x for x in (_sm(t) for t in module.target) if x is not None]
    if sms and min(sms) < helper.target_sm:
        return (f"module targets {','.join(module.target)} but the helper module needs sm_{helper.target_sm}+: "
                "NOT instrumented; its kernels are not admitted")
    return None


def _not_instrumented_report(module: Module, why: str) -> dict:
    funcs = []
    entries = [f for f in module.functions() if f.is_entry and f.body is not None]
    for i, f in enumerate(entries):
        funcs.append({"name": f.name, "kind": "entry", "kernel_index": i, "admitted": False,
                      "not_admitted_reasons": [why], "classes": {}, "refused": [], "native_reasons": {},
                      "sites": 0, "waits": 0, "drains": 0, "cp_async_window": 0, "calls": []})
    return {"kernels": [f.name for f in entries], "functions": funcs}


def rewrite_file(src: os.PathLike, dst: os.PathLike, **kw) -> RewriteResult:
    """Rewrite ``src`` into ``dst`` (atomic replace; ``dst`` may equal ``src``). ``src`` is read with
    :func:`hbfcc.ptx.parser.read_ptx` (refused, and ``dst`` left as it is, when it is not UTF-8)."""
    from hbfcc.ptx.parser import read_ptx
    text = read_ptx(src)
    res = rewrite_text(text, filename=str(src), **kw)
    atomic_write_text(dst, res.text, fsync=False)
    return res
