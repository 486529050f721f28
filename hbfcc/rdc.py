"""Relocatable builds (``ptxas -c`` / ``--compile-only``: nvcc ``-rdc``): the linked helpers within their callers' caps.

Whole-program, ptxas allocates a helper's registers with each kernel that calls it (its own copy, within
the kernel's bound). Relocatable, it compiles every ``.weak`` or ``.visible`` function on its own, under the
ABI, with its own register count, and nvlink gives a kernel the maximum over its call graph: the helpers
linked ``.weak`` (hbfcc/link.py) came out at their natural 100-156 registers, so a kernel whose
``__launch_bounds__`` caps it lower did not build (``Entry function ... with max regcount of 32 calls function
'__hb_issue' with regcount of 156``), and one without bounds linked at 156 (no 1024-thread launch).

What is done here (:func:`stage`, in every relocatable hbfcc-ptxas run of a module that carries helper
definitions): the helper functions lose ``.weak`` and become module-local, the way cicc clones a visible
device function into a module-local ``name$1`` for the kernels of its module. ptxas then compiles each
local function once, within the smallest cap among the functions that call it (an entry's cap: what ptxas
derives from its directives, :func:`hbfcc.occupancy.ptxas_entry_cap`; the launch bound hbfcc adds to
entries without one, hbfcc/occupancy.py, now builds here too). The helpers' globals stay ``.weak``: one
``__hb_state`` per link, as the runtime binds it.

Why not ``.weak`` helpers under a ``-maxrregcount``: nvlink keeps the FIRST ``.weak`` copy of a function in
link order (CUDA 13.0, measured): with module A's helpers capped at 32 and B's at 64, ``nvlink A B`` links
both kernels within their caps, ``nvlink B A`` fails (``entry function '...' with max regcount of 32 calls
function ... with regcount of 44``). Module-local helpers leave nvlink nothing to choose (each module keeps
its own copy: a larger image, the same code per kernel).

What ptxas cannot see: a device function of the module callable from other modules (``.visible``/``.weak``
with a body) that reaches a helper is compiled for callers it does not know. Such a module gets
``--device-function-maxrregcount`` :data:`EXPORTED_CAP` (32: on sm_90 no ``__launch_bounds__`` gives less,
ptxas ignores a ``.minnctapersm`` beyond 2048 threads per SM), or the caller's smaller
``-maxrregcount``/``--device-function-maxrregcount``: it caps every device function of that module,
the user's own included. A caller elsewhere capped lower still (``.maxnreg`` below 32) fails at nvlink,
which names it.

The facts go into the artifact, ``link.rdc_register_cap`` (:func:`record`).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Optional, Sequence

from hbfcommon.abi import HELPER_PREFIX

from . import occupancy
from .link import named_in
from .ptx.model import Function, Module
from .ptxas_args import RELOCATABLE_OPTS, relocatable  # noqa: F401 - re-exported (seplink, cli)

log = logging.getLogger("hbfcc")

STAGE_NAME = "rdc_local_helpers"
RECORD_KEY = "rdc_register_cap"

# the smallest register cap a launch bound gives on sm_90 (65536 / 2048 threads per SM)
EXPORTED_CAP = occupancy.REGS_PER_SM // occupancy.MAX_THREADS_PER_SM
DF_CAP_OPTION = "--device-function-maxrregcount"

_MRC = ("-maxrregcount", "--maxrregcount")
_DF_MRC = (DF_CAP_OPTION, "-func-maxrregcount")


def user_caps(args: Sequence[str]) -> dict[str, Optional[int]]:
    """The register caps the caller gave ptxas: ``maxrregcount`` (``-maxrregcount N``, ``--maxrregcount=N``,
    what nvcc's ``-maxrregcount`` and ``-Xptxas`` pass) and ``device_function_maxrregcount``; the last of each wins."""
    out: dict[str, Optional[int]] = {"maxrregcount": None, "device_function_maxrregcount": None}
    for i, a in enumerate(args):
        for key, names in (("maxrregcount", _MRC), ("device_function_maxrregcount", _DF_MRC)):
            for n in names:
                v = None
                if a == n and i + 1 < len(args):
                    v = args[i + 1]
                elif a.startswith(n + "="):
                    v = a[len(n) + 1:]
                if v is not None:
                    try:
                        out[key] = int(v, 0)
                    except ValueError:
                        pass                    # ptxas says what is wrong with it
    return out


def helper_functions(module: Module) -> frozenset[str]:
    """The ``.weak`` helper functions the module defines (hbfcc/link.py linked them)."""
    return frozenset(f.name for f in module.functions()
                     if f.body is not None and f.name.startswith(HELPER_PREFIX) and ".weak" in f.linkage)


def stage(module: Module, meta: dict) -> Module:
    """The stage ``(module, meta) -> module``: the module's ``.weak`` helper functions (definitions and
    prototypes) made module-local (no linkage); ``meta[STAGE_NAME]["local"]`` names them."""
    names = frozenset(meta.get(STAGE_NAME, {}).get("local", ()))
    if not names:
        return module
    from .rewrite import MARKER
    items = []
    for it in module.items:
        if type(it) is Function and it.name in names:
            it = replace(it, linkage=tuple(x for x in it.linkage if x != ".weak"))
        items.append(it)
    # printed again (rewrite.print_text adds the marker): an input instrumented before keeps one marker line
    return replace(module, items=tuple(items),
                   header_comments=tuple(c for c in module.header_comments if MARKER not in c.text))


def reach(module: Module) -> dict[str, frozenset[str]]:
    """Per function with a body: the functions the module defines that it reaches through calls (or
    names), itself included, transitively."""
    bodies = {f.name: f for f in module.functions() if f.body is not None}
    names = frozenset(bodies)
    direct = {n: named_in(f, names) for n, f in bodies.items()}
    out: dict[str, frozenset[str]] = {}
    for n in bodies:
        seen, todo = {n}, [n]
        while todo:
            for m in direct[todo.pop()]:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        out[n] = frozenset(seen)
    return out


def exported_callers(module: Module, reached: Optional[dict[str, frozenset[str]]] = None) -> list[str]:
    """The module's device functions other modules can call (``.visible``/``.weak``, a body, not a
    helper) that reach a helper, sorted."""
    reached = reach(module) if reached is None else reached
    return sorted(f.name for f in module.functions()
                  if not f.is_entry and f.body is not None and not f.name.startswith(HELPER_PREFIX)
                  and (".visible" in f.linkage or ".weak" in f.linkage)
                  and any(x.startswith(HELPER_PREFIX) for x in reached.get(f.name, ())))


def device_function_cap(module: Module, user: dict[str, Optional[int]]) -> Optional[int]:
    """The ``--device-function-maxrregcount`` hbfcc adds: :data:`EXPORTED_CAP` when the module exports a
    device function that reaches a helper and the caller's own cap for device functions (its
    ``--device-function-maxrregcount``, else its ``-maxrregcount``) is not already that low; else None."""
    if not exported_callers(module):
        return None
    theirs = user.get("device_function_maxrregcount")
    if theirs is None:
        theirs = user.get("maxrregcount")
    return None if theirs is not None and theirs <= EXPORTED_CAP else EXPORTED_CAP


def with_device_function_cap(args: Sequence[str], cap: Optional[int]) -> list[str]:
    """``args`` with ``--device-function-maxrregcount=cap`` in place of any the caller gave (ptxas warns
    about a second one; :func:`device_function_cap` gives a cap only below the caller's)."""
    if cap is None:
        return list(args)
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _DF_MRC:
            skip = True
            continue
        if any(a.startswith(n + "=") for n in _DF_MRC):
            continue
        out.append(a)
    return out + [f"{DF_CAP_OPTION}={cap}"]


def graph_registers(module: Module, registers: dict[str, Optional[int]], skip_prefix: Optional[str] = None
                    ) -> dict[str, Optional[int]]:
    """Per entry: the largest register count over the functions it reaches in this module (what nvlink
    gives it when it calls nothing outside the module), from ``registers`` (per function); functions
    named with ``skip_prefix`` left out. None when the entry's own count is unknown."""
    reached = reach(module)
    out: dict[str, Optional[int]] = {}
    for f in module.functions():
        if not f.is_entry or f.body is None:
            continue
        own = registers.get(f.name)
        if own is None:
            out[f.name] = None
            continue
        vals = [registers.get(n) for n in reached.get(f.name, ())
                if not (skip_prefix and n.startswith(skip_prefix))]
        out[f.name] = max(v for v in vals + [own] if v is not None)
    return out


def record(module: Module, meta: dict, user: dict[str, Optional[int]], df_cap: Optional[int],
           registers: dict[str, Optional[int]]) -> dict:
    """``link.rdc_register_cap`` of the artifact: per instrumented entry (one that reaches a helper) its
    cap (:func:`hbfcc.occupancy.ptxas_entry_cap`, else the caller's ``-maxrregcount``, else none: the entry
    is unbounded) and its registers over its call graph in the module (``registers``: the object's, per
    function); the smallest cap and the entry (or exported function) that set it; what hbfcc gave ptxas.
    An entry above its cap is logged (ptxas keeps local helpers within it: it would be a ptxas change)."""
    reached = reach(module)
    graph = graph_registers(module, registers)
    bodies = {f.name: f for f in module.functions() if f.body is not None}
    external = frozenset(f.name for f in module.functions() if f.body is None) - frozenset(bodies)
    entries: dict[str, dict] = {}
    for f in module.functions():
        if not f.is_entry or f.body is None or not any(x.startswith(HELPER_PREFIX) for x in reached[f.name]):
            continue
        c = occupancy.ptxas_entry_cap(f)
        if c is None and user.get("maxrregcount") is not None:
            c = (user["maxrregcount"], f"-maxrregcount {user['maxrregcount']}")
        regs = graph.get(f.name)
        d = {"cap": c[0] if c else None, "source": c[1] if c else "none (unbounded)", "registers": regs,
             "external_calls": sorted(set().union(*(named_in(bodies[g], external) for g in reached[f.name])))}
        d["fits"] = None if c is None or regs is None else regs <= c[0]
        if d["fits"] is False:
            log.warning("-rdc: %s uses %d registers over its call graph, above its cap %d (%s)", f.name, regs, c[0],
                        c[1])
        entries[f.name] = d
    cands = [(d["cap"], n, d["source"]) for n, d in entries.items() if d["cap"] is not None]
    exported = exported_callers(module, reached)
    if df_cap is not None:
        cands += [(df_cap, n, f"exported device function ({DF_CAP_OPTION}={df_cap})") for n in exported]
    else:       # the caller's own cap on device functions (the helpers are ones)
        for key, opt in (("device_function_maxrregcount", DF_CAP_OPTION), ("maxrregcount", "-maxrregcount")):
            if user.get(key) is not None:
                cands.append((user[key], "(ptxas options)", f"{opt} {user[key]}"))
                break
    low = min(cands, key=lambda c: (c[0], c[1].startswith("("))) if cands else None   # an entry on a tie
    return {"helpers": "module-local", "local": list(meta.get(STAGE_NAME, {}).get("local", ())),
            "cap": low[0] if low else None, "set_by": low[1] if low else None, "source": low[2] if low else None,
            "exported_callers": exported, "device_function_maxrregcount": df_cap,
            "user": dict(user), "entries": entries}

