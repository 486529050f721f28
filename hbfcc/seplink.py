"""The separate link (``HBFCC_LINK=separate``, opt-in; docs/hbfcc.md "The separate link").

The whole-program route (the default) links the helper library into every module as PTX, so ptxas
assembles the helpers again with each module. The separate route leaves the helpers as ``.extern``
declarations, gives each instrumented entry ``.maxnreg`` (Triton's ``.reqntid`` makes ptxas ignore
``-maxrregcount``), assembles the module with ``ptxas -c``, and ``nvlink``s it with a helper object
assembled once per (helper PTX sha256, cap, ptxas, arch) under ``-maxrregcount=cap`` and kept in a cache.
nvlink gives each kernel the maximum register count over its call graph, so the helper object's cap is
the smallest of the module's entry caps.

The entry caps (``HBFCC_SEPARATE_CAP``): ``plain`` (the default) the plain build's registers, at least 64;
``body`` the rewritten body's own need (the rewrite assembled with do-nothing helpers, one extra ptxas run per
build), so that the kernel's hot code does not spill and the spills go to the (cold) helpers; or a number.

On the device (H100) no faster than whole-program and not safe: 3 of 32 stress cases did not end (2026-12-06);
with the body's cap and call isolation slower still and one more hang (stop 51). The helpers then run as ABI calls
compiled once under a cap instead of being allocated with each kernel (docs/RESULTS.md, "an opt-in separate link",
"Stop 51").
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from hbfcommon.errors import RewriteError, ToolchainError
from hbfcommon.fsutil import atomic_write_bytes, atomic_write_text

from . import occupancy
from .knobs import SEPARATE_CAP_BODY
from .rdc import RELOCATABLE_OPTS
from .ptx.model import Function, Module
from .toolchain import sha256_bytes

log = logging.getLogger("hbfcc")

STAGE_NAME = "separate_link"
MIN_CAP = 64              # HBFCC_SEPARATE_CAP=plain: never below this (a choice, not the helpers' floor: FLOOR)
# The lowest cap the separate link asks for: ptxas's own lower bound for .maxnreg / -maxrregcount on sm_90a
# (it raises a smaller one to 24, with a warning). The helper object (the ABI functions) assembles and links at it
# (ptxas/nvlink 13.0, measured: every helper then spills, nothing fails; tests/hbfcc/test_seplink.py).
FLOOR = occupancy.MIN_MAXNREG
MAX_CAP = 255
BODY_SOURCE = "ptxas -v of the rewrite linked with do-nothing helpers (hbfcc.helpers.stub_helper), the caller's options"
HELPER_PREFIX = "__hb_"
CACHE_SUBDIR = "helper-objects"
_ELF = b"\x7fELF"


def plain_cap(plain_registers: Optional[int]) -> int:
    """An entry's cap under ``HBFCC_SEPARATE_CAP=plain``: max(its plain registers, 64), rounded up to 8, <= 255."""
    n = max(plain_registers or 0, MIN_CAP)
    return min(MAX_CAP, (n + 7) // 8 * 8)


def body_cap(body_registers: int) -> int:
    """An entry's cap under ``HBFCC_SEPARATE_CAP=body``: its rewritten body's own need (the registers of the rewrite
    linked with do-nothing helpers), rounded up to 8, at least :data:`FLOOR`, at most 255."""
    return min(MAX_CAP, max(FLOOR, (body_registers + 7) // 8 * 8))


def callers(module: Module) -> frozenset[str]:
    """The entries with a body that name a helper of the ABI (the instrumented ones: they reach a helper)."""
    from hbfcommon.abi import HELPERS

    from .link import uses_any
    names = frozenset(HELPERS)
    return frozenset(f.name for f in module.functions() if f.is_entry and f.body is not None and uses_any(f, names))


def entry_caps(module: Module, plain: dict[str, Optional[int]], cap, callers: frozenset[str],
               body: Optional[dict[str, Optional[int]]] = None) -> tuple[dict[str, int], dict[str, dict]]:
    """``.maxnreg`` per instrumented entry (those in ``callers``: they reach a helper), and the decision per entry
    (what the artifact records): ``cap`` an integer (HBFCC_SEPARATE_CAP=N): it; ``"body"``: :func:`body_cap` of
    ``body`` (the entry's registers in the stub-helper build); None (``plain``): :func:`plain_cap` of the plain
    build's count. Raises RewriteError when ``body`` has no count for an entry (the whole route then builds)."""
    caps, why = {}, {}
    for f in module.functions():
        if not (f.is_entry and f.body is not None and f.name in callers):
            continue
        if cap == SEPARATE_CAP_BODY:
            need = (body or {}).get(f.name)
            if not need:
                raise RewriteError(f"separate link: no body register count for {f.name} (the stub-helper build failed)",
                                   entry=f.name)
            caps[f.name] = body_cap(need)
            why[f.name] = {"mode": "body", "body_registers": need, "cap": caps[f.name], "floor": FLOOR,
                           "source": BODY_SOURCE, "plain_registers": plain.get(f.name)}
        elif cap is not None:
            caps[f.name] = cap
            why[f.name] = {"mode": "fixed", "cap": cap, "plain_registers": plain.get(f.name)}
        else:
            caps[f.name] = plain_cap(plain.get(f.name))
            why[f.name] = {"mode": "plain", "cap": caps[f.name], "floor": MIN_CAP,
                           "plain_registers": plain.get(f.name)}
    return caps, why


def helper_cap(caps: dict[str, int]) -> int:
    """The helper object's ``-maxrregcount``: the smallest entry cap (a kernel gets the maximum over its
    call graph, so a helper above an entry's cap would lift that entry above it)."""
    return min(caps.values())


def extern_helpers(module: Module) -> Module:
    """The helper prototypes the rewrite leaves (``link=False``: ``.weak .func __hb_*`` declarations)
    made ``.extern``, so ``ptxas -c`` leaves them to the link."""
    items = []
    for it in module.items:
        if type(it) is Function and it.body is None and it.name.startswith(HELPER_PREFIX) \
                and ".extern" not in it.linkage:
            it = replace(it, linkage=tuple(x for x in it.linkage if x not in (".weak", ".visible")) + (".extern",))
        items.append(it)
    return replace(module, items=tuple(items))


def stage(module: Module, meta: dict) -> Module:
    """The stage ``(module, meta) -> module``: ``.maxnreg`` on the entries of ``meta["separate_link"]["caps"]``,
    helpers ``.extern``."""
    return extern_helpers(occupancy.apply(module, dict(meta.get(STAGE_NAME, {}).get("caps", {}))))


# ptxas options after which hbfcc's separate route does not apply (the caller wants something else than
# one sm_XX cubin built from this module alone)
_WHOLE_ONLY = ("-ewp", "--extensible-whole-program", "--compile-as-tools-patch", "-asm-tools-patch")


def _arch_count(args: Sequence[str]) -> int:
    """How many target options (``-arch X``, ``-arch=X``, ``-archX``, ``--gpu-name[=]X``) the call has."""
    return sum(1 for a in args if a.startswith("-arch") or a == "--gpu-name" or a.startswith("--gpu-name="))


def unsupported(args: Sequence[str], arch: Optional[str], out_path: Optional[str], *, nvcc_step: bool,
                occupancy_guard: bool, passes: tuple[str, ...]) -> Optional[str]:
    """Why this ptxas call cannot take the separate route (then the whole one builds it), else None."""
    if nvcc_step:
        return "an nvcc step: nvcc embeds the rewritten PTX beside the cubin, which must stay whole-program"
    for a in args:
        if a in RELOCATABLE_OPTS:
            return f"the caller asked for a relocatable object ({a}); the separate link writes a linked cubin"
        if a in _WHOLE_ONLY:
            return f"{a} is not served by the separate link"
    if _arch_count(args) > 1:
        return "several -arch/--gpu-name options"
    if arch is None or not re.fullmatch(r"sm_\d+[af]?", arch):
        return f"target {arch or '(none)'} is not one sm_XX cubin target"
    if out_path is None:
        return "no -o output (ptxas's default elf.o)"
    if occupancy_guard:
        return "HBFCC_OCCUPANCY_GUARD=1 reassembles the whole-program module"
    if "flags" in passes:
        return "the flags pass links the eidola helper, which the separate link does not serve"
    return None


def nvlink_beside(ptxas: str) -> Optional[str]:
    """The nvlink of the toolkit the ptxas belongs to: beside it (also beside the file a symlink names)."""
    for d in dict.fromkeys((os.path.dirname(ptxas), os.path.dirname(os.path.realpath(ptxas)))):
        p = os.path.join(d or ".", "nvlink")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


@dataclass(frozen=True)
class HelperObject:
    data: bytes
    sha256: str
    key: str
    cap: int
    cached: bool          # taken from the cache (False: assembled by this build)
    path: str             # the cache entry


def _key(helper_sha: str, cap: int, ptxas: str, ptxas_version: str, arch: str) -> str:
    return sha256_bytes(json.dumps([helper_sha, cap, os.path.realpath(ptxas), ptxas_version, arch]).encode())


def helper_object(helper_path: str, helper_sha: str, cap: int, ptxas: str, ptxas_version: str, arch: str,
                  cache_dir: Path, tmpdir: str, run, check=None) -> HelperObject:
    """The helper module assembled with ``ptxas -arch=ARCH -c -maxrregcount=CAP`` (no -lineinfo: its text is
    not carried into every cubin), from ``cache_dir/helper-objects`` when a valid entry is there: the
    object and a record of its sha256 and key, both replaced atomically (concurrent builds write the
    same entry); an entry whose object does not match its record is rebuilt, never trusted.
    ``run(argv) -> CompletedProcess``; ``check()``: called before an object is assembled (the whole helper
    module parsed and checked against the ABI, hbfcc.helpers.load_helper: an entry exists only for a helper
    that passed). Raises ToolchainError when ptxas fails."""
    key = _key(helper_sha, cap, ptxas, ptxas_version, arch)
    d = cache_dir / CACHE_SUBDIR
    obj, rec = d / f"{key}.o", d / f"{key}.json"
    try:
        meta = json.loads(rec.read_text())
        data = obj.read_bytes()
        if meta.get("key") == key and meta.get("sha256") == sha256_bytes(data) and data[:4] == _ELF:
            return HelperObject(data, meta["sha256"], key, cap, True, str(obj))
        log.warning("separate link: helper object %s does not match its record; assembling it again", obj)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, AttributeError) as e:
        log.warning("separate link: helper object cache entry %s unreadable (%s); assembling it again", rec, e)
    if check is not None:
        check()
    raw = Path(helper_path).read_bytes()
    if sha256_bytes(raw) != helper_sha:
        raise ToolchainError("separate link: the helper PTX changed while hbfcc ran", argv=[helper_path])
    src = os.path.join(tmpdir, "helper.ptx")
    Path(src).write_bytes(raw)
    out = os.path.join(tmpdir, "helper.o")
    argv = [ptxas, f"-arch={arch}", "-c", f"-maxrregcount={cap}", src, "-o", out]
    cp = run(argv)
    if cp.returncode != 0:
        raise ToolchainError(f"separate link: ptxas failed on the helper module (exit {cp.returncode}): "
                             f"{cp.stderr.strip()[-500:]}", argv=argv, returncode=cp.returncode)
    data = Path(out).read_bytes()
    sha = sha256_bytes(data)
    try:
        atomic_write_bytes(obj, data, fsync=False)
        atomic_write_text(rec, json.dumps({"key": key, "sha256": sha, "helper_sha256": helper_sha, "cap": cap,
                                           "ptxas": os.path.realpath(ptxas), "ptxas_version": ptxas_version,
                                           "arch": arch}, indent=1) + "\n", fsync=False)
    except OSError as e:
        log.warning("separate link: cannot keep the helper object in %s: %s", d, e)
    return HelperObject(data, sha, key, cap, False, str(obj))
