"""The rewrite pipeline: parse -> timing pass -> print -> link helpers. Every stage can be dumped.

    res = rewrite_text(ptx_text, filename="k.ptx")
    res.text            # the rewritten, helper-linked PTX
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
from typing import Optional


from hbfcommon.fsutil import atomic_write_text

from . import helpers as H
from . import knobs
from .passes import get as get_pass
from .passes import pipeline as pass_pipeline
from .toolchain import sha256_bytes

log = logging.getLogger(__name__)

MARKER = "// hbfcc: instrumented"
PIPELINE = ("timing",)


@dataclass
class RewriteResult:
    text: str
    original_sha256: str
    transformed_sha256: str
    meta: dict
    helper: Optional[H.HelperModule]
    already_instrumented: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)


def is_instrumented(text: str) -> bool:
    return MARKER in text or re.search(r"\b__hb_issue\b", text) is not None


def _dump(dump_dir: Optional[Path], name: str, data: str) -> None:
    if dump_dir is None:
        return
    atomic_write_text(dump_dir / name, data, fsync=False)  # debugging dumps: no fsync cost


def rewrite_text(text: str, *, filename: str = "<ptx>", helper: Optional[H.HelperModule] = None,
                 link: bool = True, dump_dir: Optional[os.PathLike] = None,
                 cpasync_window: Optional[int] = None, passes: Optional[tuple[str, ...]] = None) -> RewriteResult:
    """Rewrite one PTX module. ``helper``: the helper module to link (default: :func:`H.load_helper`);
    ``link=False`` leaves the helpers as prototypes only (for inspection; not loadable).
    ``passes``: the pass selection (default HBFCC_PASSES, see :func:`knobs.parse_passes`)."""
    from hbfcc.ptx import parse_module, print_module

    k = knobs.load()
    dd = Path(dump_dir) if dump_dir is not None else (k.dump_dir if k.dump_dir else None)
    orig_sha = sha256_bytes(text.encode())
    if dd is not None:
        dd = dd / (Path(filename).name + "." + orig_sha[:12])
    if link and helper is None:
        helper = H.load_helper(module_text=text)
    if is_instrumented(text):
        log.info("%s is already instrumented: left as is", filename)
        return RewriteResult(text, orig_sha, orig_sha, {"already_instrumented": True}, helper, True)
    t = {}
    t0 = time.perf_counter()
    _dump(dd, "00-input.ptx", text)
    module = parse_module(text, filename=filename)
    t["parse"] = time.perf_counter() - t0
    meta: dict = {"cpasync_window": cpasync_window or k.cpasync_window, "filename": filename}
    selection = k.passes if passes is None else knobs.parse_passes(",".join(passes), "passes")
    pipeline = pass_pipeline(selection)
    meta["passes"] = list(selection)
    eidola = None
    if "flags" in selection:
        meta["flags_options"] = {"mwait": "mwait" in selection, "count_nonflag": True}
        if link:
            eidola = H.load_eidola_helper()
            meta["eidola_helper"] = eidola.to_dict()
    why = _target_too_old(module, helper)
    if why is not None:
        # Not instrumented, loudly: every kernel is recorded as not admitted (the runtime refuses
        # to launch it against registered ranges). Compiler-detection builds (CMake's sm_75 probe)
        # still work.
        log.warning("%s: %s", filename, why)
        meta["timing"] = _not_instrumented_report(module, why)
        meta["not_instrumented"] = why
        return RewriteResult(text, orig_sha, orig_sha, meta, helper, False, t)
    for i, name in enumerate(pipeline, start=1):
        t1 = time.perf_counter()
        module = get_pass(name)(module, meta)
        t[name] = time.perf_counter() - t1
        if dd is not None:
            _dump(dd, f"{i:02d}-{name}.ptx", print_module(module))
            _dump(dd, f"{i:02d}-{name}.json", json.dumps(meta.get(name, {}), indent=1))
    t1 = time.perf_counter()
    out = print_module(module)
    t["print"] = time.perf_counter() - t1
    defined, declared = [], []
    for it in module.items:
        if type(it).__name__ == "Function":
            (declared if it.body is None else defined).append(it.name)
        for d in getattr(it, "decls", ()):
            (declared if ".extern" in getattr(it, "linkage", ()) else defined).append(d.name)
    header = f"{MARKER} by hbfcc (helper ABI {H.abi_version()})\n"
    out = header + out
    if link:
        assert helper is not None
        t1 = time.perf_counter()
        out = H.link_text(out, helper, module_names=defined, declared_names=declared)
        if eidola is not None:
            out = H.link_eidola_text(out, eidola, module_names=defined, declared_names=declared)
        t["link"] = time.perf_counter() - t1
        _dump(dd, f"{len(pipeline) + 1:02d}-linked.ptx", out)
    t["total"] = time.perf_counter() - t0
    return RewriteResult(out, orig_sha, sha256_bytes(out.encode()), meta, helper, False, t)


def _sm(target: str) -> Optional[int]:
    m = re.match(r"(?:sm|compute)_(\d+)", target)
    return int(m.group(1)) if m else None


def _target_too_old(module, helper: Optional[H.HelperModule]) -> Optional[str]:
    if helper is None or helper.target_sm is None:
        return None
    sms = [x for x in (_sm(t) for t in module.target) if x is not None]
    if sms and min(sms) < helper.target_sm:
        return (f"module targets {','.join(module.target)} but the helper module needs sm_{helper.target_sm}+: "
                "NOT instrumented; its kernels are not admitted")
    return None


def _not_instrumented_report(module, why: str) -> dict:
    funcs = []
    entries = [f for f in module.functions() if f.is_entry and f.body is not None]
    for i, f in enumerate(entries):
        funcs.append({"name": f.name, "kind": "entry", "kernel_index": i, "admitted": False,
                      "not_admitted_reasons": [why], "classes": {}, "refused": [], "native_reasons": {},
                      "sites": 0, "waits": 0, "drains": 0, "cp_async_window": 0, "calls": []})
    return {"kernels": [f.name for f in entries], "functions": funcs}


def rewrite_file(src: os.PathLike, dst: os.PathLike, **kw) -> RewriteResult:
    """Rewrite ``src`` into ``dst`` (atomic replace; ``dst`` may equal ``src``)."""
    text = Path(src).read_text()
    res = rewrite_text(text, filename=str(src), **kw)
    write_atomic(Path(dst), res.text)
    return res


def write_atomic(path: Path, data: str) -> None:
    tmp = path.with_name(path.name + f".hbfcc-tmp.{os.getpid()}")
    mode = None
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        pass
    with open(tmp, "w") as f:
        f.write(data)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)
