"""The one PTX linker: a helper module's definitions merged into a rewritten module, on the AST.

Linking is at the PTX level, not nvJitLink (docs/hbfcc.md §Linking says why): both helper modules
(the timing helpers of hbf_abi.h and the Eidola helpers the flags pass calls) are parsed with
:mod:`hbfcc.ptx.parser` and prepared once (:func:`prepare`): ``__hb_*`` symbols are made
``.weak`` (several modules of an ``-rdc`` build may each carry them; a relocatable hbfcc-ptxas run
then makes the functions module-local, so ptxas compiles them within their callers' caps: hbfcc/rdc.py),
every other symbol the helper defines is renamed to a private name (``__hb_l_`` / ``__hb_le_``: the helper's ``$str``
never meets the module's), ``.loc``/``.file``/``.section`` debug information and comments are
dropped (their file indices belong to the helper's own compilation), forward declarations of
what the helper defines are dropped and its other declarations kept as its ``.extern`` needs.
:func:`link` then appends a prepared helper to a module (a pipeline stage: :func:`stage`): only
what the module reaches (:func:`closure`: the functions and globals its own code names, and
everything those name in turn, plus the helper's exported globals, which the runtime binds), never
the whole library (docs/hbfcc.md, "Which helper functions are linked").

The declarations rewritten code needs (:func:`declarations`, :func:`extern_global`) are built here
too, from the ABI facts of :mod:`hbfcommon.abi`, so the names the passes call and the names the
linker checks are one list.
"""
from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Optional

from hbfcommon.abi import HELPER_PREFIX, Signature
from hbfcommon.errors import RewriteError

from hbfcc.ptx.model import (Address, ArgList, Block, Comment, Declarator, Directive, Function, Instruction,
                             Label, LabelRef, Module, Param, Register, Statement, Symbol, TopItem, VarDecl,
                             Vector)
from hbfcc.ptx.printer import remember

log = logging.getLogger(__name__)

_LINKAGE = (".visible", ".weak", ".common")


# --------------------------------------------------------------------------------------------
# Declarations from the ABI
# --------------------------------------------------------------------------------------------

def declarations(signatures: Iterable[Signature]) -> list[Function]:
    """``.weak .func`` prototypes (no body) of helper functions, in the order given."""
    p = lambda w, n: Param("param", f".b{w}", n)  # noqa: E731
    return [Function((".weak",), "func", s.name, tuple(p(w, n) for w, n in s.returns),
                     tuple(p(w, n) for w, n in s.params), (), None) for s in signatures]


def extern_global(name: str, type_: str, align: int, space: str = "global", nbytes: Optional[int] = None) -> VarDecl:
    """``.extern .global .align A TYPE name;`` (``.extern .const ... name[nbytes]``): a module global the
    helper module defines (the linker puts the helper's definition in its place)."""
    d = Declarator(name, dims=(nbytes,)) if nbytes is not None else Declarator(name)
    return VarDecl((".extern",), space, (f".align {align}",), type_, (d,))


def signature_widths(f: Function) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(return widths, parameter widths) of a function header, as in :attr:`Signature.widths`."""
    def w(p: Param) -> int:
        digits = "".join(ch for ch in p.type if ch.isdigit())
        if not digits or p.dims:
            raise RewriteError("helper parameter has no scalar type", function=f.name, param=p.name)
        return int(digits)
    return tuple(w(p) for p in f.returns), tuple(w(p) for p in f.params)


# --------------------------------------------------------------------------------------------
# A prepared helper module
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HelperModule:
    """A helper module ready to link (see :func:`prepare`)."""

    role: str                        # "helper" (hbf_abi.h) | "eidola helper" (the flags pass's extern API)
    path: str
    sha256: str
    abi_version: Optional[int]       # HBF_HELPER_ABI_VERSION for the timing helper, else None
    version: tuple[int, int]         # its .version (a module below it is raised to it)
    target_sm: Optional[int]         # its .target SM number (modules below it cannot link it)
    globals: tuple[VarDecl, ...]     # its global variables (before the module's functions)
    externs: tuple[TopItem, ...]     # the declarations its functions need (added once)
    functions: tuple[Function, ...]  # its function definitions, in source order
    defined: frozenset[str]          # every top-level name it defines (after renaming)
    export_prefix: str = HELPER_PREFIX   # the names :meth:`to_dict` lists as its functions
    stage_name: str = "link"             # its pipeline stage (:func:`stage`)
    # per defined name (function or global): the other names it defines that this one names
    refs: tuple[tuple[str, frozenset[str]], ...] = ()

    @functools.cached_property
    def ref_map(self) -> dict[str, frozenset[str]]:
        return dict(self.refs)

    @functools.cached_property
    def roots(self) -> frozenset[str]:
        """What every linked module gets: the exported (``__hb_*``) globals, the module globals the
        runtime looks up by name (``__hb_state``, ``__hb_kslot_base``, ``__hb_cdesc``, trace and
        profile globals) whether or not the module's code names them."""
        return frozenset(d.name for g in self.globals for d in g.decls if d.name.startswith(HELPER_PREFIX))

    @property
    def ptx_version(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def to_dict(self) -> dict:
        return {"path": self.path, "sha256": self.sha256, "ptx_version": self.ptx_version,
                "functions": sorted(n for n in self.defined if n.startswith(self.export_prefix))}

    def banner(self) -> Comment:
        """The comment the linker puts before the helper's items."""
        abi = f" ABI {self.abi_version}" if self.abi_version is not None else ""
        return Comment(f"// ---- hbfcc: {self.role} module {os.path.basename(self.path)} sha256 {self.sha256}"
                       f"{abi} ----")


def _sm_of(target: tuple[str, ...]) -> Optional[int]:
    for t in target:
        if t.startswith("sm_") and t[3:].rstrip("af").isdigit():
            return int(t[3:].rstrip("af"))
    return None


def version_tuple(v: str) -> tuple[int, int]:
    a, _, b = v.strip().partition(".")
    return int(a), int(b or 0)


def prepare(mod: Module, *, role: str, path: str, sha256: str, required: Mapping[str, Signature],
            private_prefix: str, abi_version: Optional[int] = None, export_prefix: str = HELPER_PREFIX,
            stage_name: str = "link") -> HelperModule:
    """A parsed helper module made ready to link. Every function of ``required`` must be defined
    with exactly its parameter widths (else :class:`RewriteError` naming the function)."""
    funcs = {it.name: it for it in mod.items if type(it) is Function and it.body is not None}
    for name, sig in required.items():
        f = funcs.get(name)
        if f is None:
            raise RewriteError(f"{role} module does not define a function rewritten code calls", helper=path,
                               function=name)
        found = signature_widths(f)
        if found != sig.widths:
            raise RewriteError(f"{role} function signature differs from the ABI", helper=path, function=name,
                               expected=str(sig.widths), found=str(found))
    renames: dict[str, str] = {}
    for it in mod.items:
        for n in _defines(it):
            if not n.startswith(HELPER_PREFIX):
                renames[n] = private_prefix + n.lstrip("$")
    globals_: list[VarDecl] = []
    externs: list[TopItem] = []
    functions: list[Function] = []
    for it in mod.items:
        t = type(it)
        if t is Function:
            if it.body is None:
                if it.name not in funcs:            # a forward declaration of its own function: dropped
                    externs.append(it)
                continue
            body = _rename_body(_strip_debug(it.body), renames)
            functions.append(replace(it, name=renames.get(it.name, it.name), body=body,
                                     linkage=_linkage(it.linkage, it.name.startswith(HELPER_PREFIX))))
        elif t is VarDecl:
            if ".extern" in it.linkage:
                externs.append(it)
                continue
            exported = any(d.name.startswith(HELPER_PREFIX) for d in it.decls)
            decls = tuple(replace(d, name=renames.get(d.name, d.name), init=_rename_tokens(d.init, renames))
                          for d in it.decls)
            globals_.append(replace(it, decls=decls, linkage=_linkage(it.linkage, exported)))
        # Comment, Directive (.file, .section debug bodies, anything else at top level): dropped
    defined = {f.name for f in functions} | {d.name for g in globals_ for d in g.decls}
    refs = tuple((f.name, frozenset(_names_in_function(f)) & defined - {f.name}) for f in functions)
    refs += tuple((d.name, frozenset(d.init or ()) & defined - {d.name}) for g in globals_ for d in g.decls)
    remember(functions)          # printed into every module it is linked into: print once
    return HelperModule(role=role, path=path, sha256=sha256, abi_version=abi_version,
                        version=version_tuple(mod.version), target_sm=_sm_of(mod.target),
                        globals=tuple(globals_), externs=tuple(externs), functions=tuple(functions),
                        defined=frozenset(defined), export_prefix=export_prefix, stage_name=stage_name,
                        refs=refs)


def _defines(it) -> tuple[str, ...]:
    if type(it) is Function:
        return (it.name,) if it.body is not None else ()
    if type(it) is VarDecl and ".extern" not in it.linkage:
        return tuple(d.name for d in it.decls)
    return ()


def _linkage(linkage: tuple[str, ...], exported: bool) -> tuple[str, ...]:
    """``.weak`` for an exported (``__hb_*``) symbol, no visibility for a renamed private one."""
    rest = tuple(x for x in linkage if x not in _LINKAGE)
    return ((".weak",) + rest) if exported else rest


def _strip_debug(body: tuple[Statement, ...]) -> tuple[Statement, ...]:
    out: list[Statement] = []
    for s in body:
        t = type(s)
        if t is Comment or (t is Directive and s.name in ("loc", "file")):
            continue
        out.append(replace(s, body=_strip_debug(s.body)) if t is Block else s)
    return tuple(out)


def _rename_tokens(toks: Optional[tuple[str, ...]], names: Mapping[str, str]) -> Optional[tuple[str, ...]]:
    if toks is None or not names:
        return toks
    return tuple(names.get(x, x) for x in toks)


def _rename_op(op, names: Mapping[str, str]):
    t = type(op)
    if t is Symbol or t is LabelRef:
        n = names.get(op.name)
        return op if n is None else t(n)
    if t is Register and not op.name.startswith("%"):
        n = names.get(op.name)
        return op if n is None else Register(n)
    if t is Address:
        base = op.base if op.base is None or type(op.base) is Register else _rename_op(op.base, names)
        coords = None if op.coords is None else _rename_op(op.coords, names)
        return op if base is op.base and coords == op.coords else replace(op, base=base, coords=coords)
    if t is ArgList:
        return ArgList(tuple(_rename_op(x, names) for x in op.items))
    if t is Vector:
        return Vector(tuple(_rename_op(x, names) for x in op.elems))
    return op


def _rename_body(body: tuple[Statement, ...], names: Mapping[str, str]) -> tuple[Statement, ...]:
    """Every use of a renamed name: operands, labels, declarations and directive arguments."""
    if not names:
        return body
    out: list[Statement] = []
    for s in body:
        t = type(s)
        if t is Block:
            s = replace(s, body=_rename_body(s.body, names))
        elif t is Instruction:
            ops = tuple(_rename_op(o, names) for o in s.operands)
            if ops != s.operands:
                s = replace(s, operands=ops)
        elif t is Label and s.name in names:
            s = replace(s, name=names[s.name])
        elif t is VarDecl:
            s = replace(s, decls=tuple(replace(d, name=names.get(d.name, d.name), init=_rename_tokens(d.init, names))
                                       for d in s.decls))
        elif t is Directive and s.args:
            s = replace(s, args=_rename_tokens(s.args, names))
        out.append(s)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# What a module reaches
# --------------------------------------------------------------------------------------------

def _op_names(op, out: list[str]) -> None:
    t = type(op)
    if t is Symbol or t is LabelRef or t is Register:
        out.append(op.name)
    elif t is Address:
        if op.base is not None:
            _op_names(op.base, out)
        if op.coords is not None:
            _op_names(op.coords, out)
    elif t is ArgList:
        for x in op.items:
            _op_names(x, out)
    elif t is Vector:
        for x in op.elems:
            _op_names(x, out)


def _names_in_body(body: tuple[Statement, ...], out: list[str]) -> None:
    for s in body:
        t = type(s)
        if t is Instruction:
            for o in s.operands:
                _op_names(o, out)
        elif t is Block:
            _names_in_body(s.body, out)
        elif t is VarDecl:
            for d in s.decls:
                if d.init:
                    out.extend(d.init)
        elif t is Directive and s.args:
            out.extend(s.args)


def _names_in_function(f: Function) -> list[str]:
    """Every name a function's body (and its directives) uses: an over-approximation (registers,
    labels and parameters are in it too), which is what the closure needs: it only ever intersects
    this with the names a helper module defines."""
    out: list[str] = []
    for d in f.directives:
        out.extend(d.args)
    if f.body is not None:
        _names_in_body(f.body, out)
    return out


def uses_any(f: Function, names: frozenset[str]) -> bool:
    """Whether the function's body or directives name any of ``names`` (e.g. calls a timing helper)."""
    return not names.isdisjoint(_names_in_function(f))


def named_in(f: Function, names: frozenset[str]) -> frozenset[str]:
    """Those of ``names`` the function's body or directives name (e.g. the module functions it calls)."""
    return names.intersection(_names_in_function(f))


def module_names(module: Module, skip: frozenset[str] = frozenset()) -> set[str]:
    """The names the module's own code uses (function bodies, global initializers, the arguments of
    top-level directives such as ``.alias``), leaving out the items named in ``skip`` (a helper's
    definitions already linked in)."""
    out: list[str] = []
    for it in module.items:
        t = type(it)
        if t is Function and it.body is not None and it.name not in skip:
            out.extend(_names_in_function(it))
        elif t is VarDecl:
            for d in it.decls:
                if d.init and d.name not in skip:
                    out.extend(d.init)
        elif t is Directive and it.args:
            out.extend(it.args)
    return set(out)


_WORD = re.compile(r"[A-Za-z_$%][\w$]*")


def opaque_references(module: Module, names: frozenset[str]) -> list[str]:
    """Names of ``names`` that the module's text mentions where the parser keeps it opaque (the raw
    body of a top-level ``.section``: DWARF data that may hold a symbol's address), sorted. Such a
    reference cannot be followed: :func:`closure` then keeps the whole helper."""
    found: set[str] = set()
    for it in module.items:
        if type(it) is Directive and it.raw:
            found.update(w for w in _WORD.findall(it.raw) if w in names)
    return sorted(found)


def closure(module: Module, helper: HelperModule) -> frozenset[str]:
    """The helper's names a module needs: its roots (:attr:`HelperModule.roots`), the functions and
    globals the module's own code names, and everything those name, transitively. ptxas compiles
    every ``.weak`` function of a relocatable (``-c``, ``-rdc``) module, and a whole-program module
    carries the PTX of every one in its embedded text (``.nv_debug_ptx_txt`` with line info, the
    fatbin's PTX); linking only this set keeps each function that can run and nothing else.

    Every reference PTX can make to a function or variable is by its name (a call target, a
    ``mov``/``cvta`` operand taking an address, an address base, an initializer's token), so the set
    is exact; the one place a name can hide from the AST is a ``.section``'s raw body
    (:func:`opaque_references`): a module whose raw text names a helper definition gets the whole
    helper (logged)."""
    hidden = opaque_references(module, helper.defined)
    if hidden:
        log.warning("%s link: the module's raw section text names %s, which cannot be followed: linking the "
                    "whole %s module", helper.role, ", ".join(hidden[:5]) + (" ..." if len(hidden) > 5 else ""),
                    os.path.basename(helper.path))
        return helper.defined
    refs = helper.ref_map
    need = set(helper.roots) | (module_names(module, helper.defined) & helper.defined)
    todo = list(need)
    while todo:
        for n in refs.get(todo.pop(), ()):
            if n not in need:
                need.add(n)
                todo.append(n)
    return frozenset(need)


# --------------------------------------------------------------------------------------------
# Linking
# --------------------------------------------------------------------------------------------

def symbols(module: Module) -> tuple[set[str], set[str]]:
    """(names the module defines, names it only declares) at top level."""
    defined: set[str] = set()
    declared: set[str] = set()
    for it in module.items:
        if type(it) is Function:
            (declared if it.body is None else defined).add(it.name)
        elif type(it) is VarDecl:
            (declared if ".extern" in it.linkage else defined).update(d.name for d in it.decls)
    return defined, declared


def _declares(it) -> set[str]:
    if type(it) is Function:
        return {it.name}
    if type(it) is VarDecl:
        return {d.name for d in it.decls}
    return set()


def link(module: Module, helper: HelperModule, max_version: Optional[tuple[int, int]] = None, *,
         prune: bool = True) -> Module:
    """``module`` with ``helper`` linked in: with ``prune`` (the default) only the helper's
    :func:`closure` for this module, else every function and global it defines (the comparison
    builds of bench/hbfcc_buildcost.py and tests/hbfcc/test_link_prune.py).

    The module's ``.version`` is raised to the helper's when lower, but not above ``max_version``
    (the newest PTX ISA the ptxas that assembles it accepts: Triton's bundled ptxas 12.8 takes 8.7,
    the helper is built as 9.0 and uses nothing newer; a helper that did would be rejected by that
    ptxas, loudly). A module that already defines everything of the helper that it needs is
    returned as it is (linked before); one that defines some of it but lacks something it needs is
    refused (two copies of a helper function, or helpers out of step, would link wrong).
    Otherwise the helper's globals take the place of the module's first ``.extern`` declaration of
    them (the timing pass declares ``__hb_state`` and ``__hb_cdesc`` before the functions that read
    them; the other such declarations are dropped), or else
    follow the banner comment at the end; then the declarations the helper needs that the module
    does not have, then the helper's functions. Prototypes the module holds of helper functions it
    does not need (the timing pass declares every function of the ABI) are dropped with them: ptxas
    refuses a ``.weak`` prototype without its definition."""
    v = version_tuple(module.version)
    want = helper.version if max_version is None else max(v, min(helper.version, max_version))
    if want > v:
        log.info("raised .version %d.%d -> %d.%d for the %s module", *v, *want, helper.role)
        module = replace(module, version=f"{want[0]}.{want[1]}")
    defined, declared = symbols(module)
    already = defined & helper.defined
    keep = closure(module, helper) if prune else helper.defined
    if already:
        if keep <= defined:
            return module
        raise RewriteError(f"module defines some {helper.role} symbols but not all it needs", names=sorted(already),
                           missing=sorted(keep - defined))
    known = defined | declared
    fnames = {f.name for f in helper.functions}
    dropped = fnames - keep
    items = [it for it in module.items
             if not (type(it) is Function and it.body is None and it.name in dropped)]
    globals_ = tuple(g2 for g2 in (_kept_decls(g, keep) for g in helper.globals) if g2 is not None)
    functions = tuple(f for f in helper.functions if f.name in keep)
    uses: set[str] = set()
    for f in functions:
        uses.update(_names_in_function(f))
    for g in globals_:
        for d in g.decls:
            uses.update(d.init or ())
    tail: list[TopItem] = [helper.banner()]
    gnames = {d.name for g in helper.globals for d in g.decls}
    ext = [i for i, it in enumerate(items) if type(it) is VarDecl and ".extern" in it.linkage
           and {d.name for d in it.decls} <= gnames]
    if ext:   # the first such declaration becomes the definitions, the others go
        for i in reversed(ext[1:]):
            del items[i]
        items[ext[0]:ext[0] + 1] = globals_
    else:
        tail.extend(globals_)
    tail.extend(e for e in helper.externs if not _declares(e) <= known and _declares(e) & uses)
    tail.extend(functions)
    if dropped:
        log.debug("%s module: linked %d of %d functions (not reached: %s)", helper.role, len(functions),
                  len(fnames), ", ".join(sorted(dropped)))
    return replace(module, items=tuple(items) + tuple(tail))


def _kept_decls(g: VarDecl, keep: frozenset[str]) -> Optional[VarDecl]:
    decls = tuple(d for d in g.decls if d.name in keep)
    if not decls:
        return None
    return g if len(decls) == len(g.decls) else replace(g, decls=decls)


def linked_functions(module: Module, helper: HelperModule) -> list[str]:
    """The helper's functions a (linked) module defines, sorted."""
    fnames = {f.name for f in helper.functions}
    return sorted(f.name for f in module.functions() if f.body is not None and f.name in fnames)


def stage(helper: HelperModule, max_version: Optional[tuple[int, int]] = None, *, prune: bool = True
          ) -> tuple[str, Callable[[Module, dict], Module]]:
    """(name, stage): the pipeline stage ``(module, meta) -> module`` that links ``helper``
    (``link``, ``link_eidola``); it records what it linked under ``meta[name]`` (the helper, and
    ``linked``: the helper functions the module got). ``max_version``, ``prune``: see :func:`link`."""
    name = helper.stage_name

    def run(module: Module, meta: dict) -> Module:
        out = link(module, helper, max_version, prune=prune)
        meta[name] = {**helper.to_dict(), "pruned": prune, "linked": linked_functions(out, helper)}
        return out
    run.__name__ = name
    return name, run
