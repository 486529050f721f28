"""The flags pass (issue 7, optional): route flag-like loads through the Eidola extern API.

A load is *flag-like* when it is a scalar 32/64-bit ``ld`` of global (or generic) memory with
``.volatile``, ``.acquire`` or ``.relaxed`` semantics — the loads a spin-wait on a peer's flag
compiles to (a plain weak ``ld.global`` may be hoisted out of a loop by the compiler and is never a
correct flag poll). Each one becomes::

    { .reg .b64 %__hb_fa; add.s64 %__hb_fa, base, off;
      .param .b64 __hb_p0; .param .bN __hb_rv; st.param.b64 [__hb_p0], %__hb_fa;
      call (__hb_rv), __hb_eidola_ld_flag_uN, (__hb_p0); ld.param.bN dst, [__hb_rv]; }

``__hb_eidola_ld_flag_uN`` (runtime_cuda/src/hbf_eidola.cuh, extern API) classifies the address at
run time against the registered flag ranges: in a range -> a counted flag read, served by engine (b)
(the Write Tracking Table's value at this instant) or by memory (engine a / real peers); outside ->
a counted non-flag read from memory. Every ``.entry`` gets ``__hb_eidola_kernel_enter()`` first, so
wakeups are relative to the kernel's own start. The extern module is appended by
:func:`link_extern` (textual, like hbfcc's helper linking; symbols ``.weak``).

With ``mwait=True`` a recognized spin-wait loop is parked with monitor/mwait: a loop whose body
(between its label and its back edge, no other label) holds a flag-like 32-bit load of ``rX``, a
``setp.ne.{u32,s32,b32} p, rX, K`` (or ``p, K, rX``) and ``@p bra`` back to the label, waits until
the flag equals K; before the load the pass inserts ``hit = __hb_eidola_monitor(addr, 4, K);
@!hit __hb_eidola_mwait(addr)``. The load and the compare stay (Mesa-safe: the loop still checks),
so the program's semantics do not depend on the monitor. Not done: counting plain non-flag loads
(the timing pass's domain).

Stage: ``flags_pass(module, meta) -> module`` (DESIGN.md §6); report under ``meta["flags"]``.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from hbfcommon.errors import RewriteError, ToolchainError

from hbfcc.ptx.model import (Address, ArgList, Block, Declarator, Function, Guard, Immediate, Instruction,
                             Label, LabelRef, Module, PredPair, Register, Statement, Symbol, VarDecl)

PASS_NAME = "flags"
EXTERN_DEFINE = "HBF_EIDOLA_EXTERN_API"

PROTOTYPES = {
    "__hb_eidola_ld_flag_u32": ".weak .func (.param .b32 func_retval0) __hb_eidola_ld_flag_u32(.param .b64 addr);",
    "__hb_eidola_ld_flag_u64": ".weak .func (.param .b64 func_retval0) __hb_eidola_ld_flag_u64(.param .b64 addr);",
    "__hb_eidola_kernel_enter": ".weak .func __hb_eidola_kernel_enter();",
    "__hb_eidola_monitor": ".weak .func (.param .b32 func_retval0) __hb_eidola_monitor(.param .b64 addr, "
                           ".param .b32 nbytes, .param .b64 wake);",
    "__hb_eidola_mwait": ".weak .func __hb_eidola_mwait(.param .b64 addr);",
}

_SEMANTICS = {"volatile", "acquire", "relaxed"}
_SIZES = {"u32": 32, "b32": 32, "s32": 32, "u64": 64, "b64": 64, "s64": 64}
_OTHER_SPACES = {"shared", "local", "const", "param", "tex"}


def flag_load_width(inst: Instruction) -> Optional[int]:
    """32 or 64 when ``inst`` is a flag-like load (see module doc), else None."""
    if inst.opcode != "ld":
        return None
    mods = set(inst.modifiers)
    if not (mods & _SEMANTICS) or (mods & _OTHER_SPACES) or any(m.startswith("v") and m[1:].isdigit() for m in mods):
        return None
    if any(m.startswith("shared::") for m in mods):
        return None
    widths = [_SIZES[m] for m in inst.modifiers if m in _SIZES]
    if len(widths) != 1 or len(inst.operands) != 2:
        return None
    dst, addr = inst.operands
    if not isinstance(dst, Register) or not isinstance(addr, Address) or addr.coords is not None:
        return None
    return widths[0]


def _reg(name: str) -> Register:
    return Register(name)


def _rewrite(inst: Instruction, width: int) -> Block:
    dst, addr = inst.operands
    g = inst.guard
    body: list[Statement] = [VarDecl((), "reg", (), ".b64", (Declarator("%__hb_fa"),))]
    base = addr.base
    if base is None:
        body.append(Instruction(None, "mov", ("b64",), (_reg("%__hb_fa"), Immediate(str(addr.offset)))))
    else:
        if isinstance(base, Symbol):
            body.append(Instruction(None, "mov", ("u64",), (_reg("%__hb_fa"), base)))
        else:
            body.append(Instruction(None, "mov", ("b64",), (_reg("%__hb_fa"), base)))
        if addr.offset:
            body.append(Instruction(None, "add", ("s64",), (_reg("%__hb_fa"), _reg("%__hb_fa"),
                                                            Immediate(str(addr.offset)))))
    body.append(VarDecl((), "param", (), ".b64", (Declarator("__hb_p0"),)))
    body.append(VarDecl((), "param", (), f".b{width}", (Declarator("__hb_rv"),)))
    body.append(Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_p0")), _reg("%__hb_fa"))))
    fn = f"__hb_eidola_ld_flag_u{width}"
    body.append(Instruction(g, "call", (), (ArgList((Symbol("__hb_rv"),)), Symbol(fn),
                                            ArgList((Symbol("__hb_p0"),)))))
    body.append(Instruction(g, "ld", ("param", f"b{width}"), (dst, Address(Symbol("__hb_rv")))))
    return Block(tuple(body))


def _addr_code(addr: Address, reg: str) -> list[Statement]:
    out: list[Statement] = []
    base = addr.base
    if base is None:
        out.append(Instruction(None, "mov", ("b64",), (_reg(reg), Immediate(str(addr.offset)))))
        return out
    out.append(Instruction(None, "mov", ("u64" if isinstance(base, Symbol) else "b64",), (_reg(reg), base)))
    if addr.offset:
        out.append(Instruction(None, "add", ("s64",), (_reg(reg), _reg(reg), Immediate(str(addr.offset)))))
    return out


def _spin_loops(body: tuple[Statement, ...]) -> dict[int, tuple]:
    """Index of the flag load of each recognized spin-wait loop -> (address, K operand)."""
    found: dict[int, tuple] = {}
    labels = {st.name: i for i, st in enumerate(body) if isinstance(st, Label)}
    for j, st in enumerate(body):
        if not (isinstance(st, Instruction) and st.opcode == "bra" and st.guard is not None
                and not st.guard.negated and st.operands and isinstance(st.operands[0], LabelRef)):
            continue
        i = labels.get(st.operands[0].name)
        if i is None or i >= j or any(isinstance(x, Label) for x in body[i + 1:j]):
            continue
        pred = st.guard.reg.name
        setp = None
        for k in range(j - 1, i, -1):
            x = body[k]
            if isinstance(x, Instruction) and x.opcode == "setp" and x.operands:
                d = x.operands[0]
                dname = d.first.name if isinstance(d, PredPair) and isinstance(d.first, Register) else \
                    (d.name if isinstance(d, Register) else None)
                if dname == pred:
                    setp = (k, x)
                    break
        if setp is None:
            continue
        k, x = setp
        if len(x.modifiers) < 2 or x.modifiers[0] != "ne" or x.modifiers[-1] not in ("u32", "s32", "b32"):
            continue
        a, b = x.operands[1], x.operands[2]
        for m in range(i + 1, k):
            ld = body[m]
            if isinstance(ld, Instruction) and flag_load_width(ld) == 32 and ld.guard is None:
                dst = ld.operands[0].name
                if isinstance(a, Register) and a.name == dst and not (isinstance(b, Register) and b.name == dst):
                    found[m] = (ld.operands[1], b)
                elif isinstance(b, Register) and b.name == dst and not (isinstance(a, Register) and a.name == dst):
                    found[m] = (ld.operands[1], a)
    return found


def _park(addr: Address, k) -> Block:
    body: list[Statement] = [VarDecl((), "reg", (), ".b64", (Declarator("%__hb_ma"), Declarator("%__hb_mk"))),
                             VarDecl((), "reg", (), ".b32", (Declarator("%__hb_hit"),)),
                             VarDecl((), "reg", (), ".pred", (Declarator("%__hb_q"),))]
    body += _addr_code(addr, "%__hb_ma")
    if isinstance(k, Immediate):
        body.append(Instruction(None, "mov", ("b64",), (_reg("%__hb_mk"), Immediate(str(int(k.value) & 0xFFFFFFFF)))))
    else:
        body.append(Instruction(None, "cvt", ("u64", "u32"), (_reg("%__hb_mk"), k)))
    body += [VarDecl((), "param", (), ".b64", (Declarator("__hb_m0"), Declarator("__hb_m2"))),
             VarDecl((), "param", (), ".b32", (Declarator("__hb_m1"), Declarator("__hb_mr"))),
             Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_m0")), _reg("%__hb_ma"))),
             Instruction(None, "st", ("param", "b32"), (Address(Symbol("__hb_m1")), Immediate("4"))),
             Instruction(None, "st", ("param", "b64"), (Address(Symbol("__hb_m2")), _reg("%__hb_mk"))),
             Instruction(None, "call", (), (ArgList((Symbol("__hb_mr"),)), Symbol("__hb_eidola_monitor"),
                                            ArgList((Symbol("__hb_m0"), Symbol("__hb_m1"), Symbol("__hb_m2"))))),
             Instruction(None, "ld", ("param", "b32"), (_reg("%__hb_hit"), Address(Symbol("__hb_mr")))),
             Instruction(None, "setp", ("eq", "u32"), (_reg("%__hb_q"), _reg("%__hb_hit"), Immediate("0"))),
             Instruction(Guard(_reg("%__hb_q")), "call", (), (Symbol("__hb_eidola_mwait"), ArgList((Symbol("__hb_m0"),))))]
    return Block(tuple(body))


def _walk(body: tuple[Statement, ...], report: dict, fname: str) -> tuple[Statement, ...]:
    out: list[Statement] = []
    spins = _spin_loops(body) if report.get("mwait") else {}
    for idx, st in enumerate(body):
        if isinstance(st, Block):
            out.append(Block(_walk(st.body, report, fname)))
            continue
        if idx in spins:
            addr, k = spins[idx]
            out.append(_park(addr, k))
            report["spin_loops"].append({"kernel": fname, "line": st.line})
            report["used"].update({"__hb_eidola_monitor", "__hb_eidola_mwait"})
        if isinstance(st, Instruction):
            w = flag_load_width(st)
            if w is not None:
                report["sites"].append({"kernel": fname, "load": st.mnemonic, "width": w, "line": st.line})
                report["used"].add(f"__hb_eidola_ld_flag_u{w}")
                out.append(_rewrite(st, w))
                continue
        out.append(st)
    return tuple(out)


def flags_pass(module: Module, meta: dict, *, mwait: bool = False) -> Module:
    if any(isinstance(it, Function) and it.name.startswith("__hb_eidola_") and it.body is not None
           for it in module.items):
        raise RewriteError("module already carries the eidola extern API (rewritten twice?)")
    report: dict = {"sites": [], "used": set(), "entries": [], "spin_loops": [], "mwait": mwait}
    items = []
    for it in module.items:
        if isinstance(it, Function) and it.body is not None and not it.name.startswith("__hb_"):
            body = _walk(it.body, report, it.name)
            if it.is_entry:
                enter = Instruction(None, "call", (), (Symbol("__hb_eidola_kernel_enter"), ArgList(())))
                body = (Block((enter,)),) + body
                report["entries"].append(it.name)
                report["used"].add("__hb_eidola_kernel_enter")
            it = Function(it.linkage, it.kind, it.name, it.returns, it.params, it.directives, body, it.line)
        items.append(it)
    meta[PASS_NAME] = {"rewritten_loads": len(report["sites"]), "sites": report["sites"],
                       "spin_loops_parked": len(report["spin_loops"]),
                       "entries": report["entries"], "extern": sorted(report["used"])}
    module = Module(module.version, module.target, module.address_size, tuple(items), module.header_comments)
    return module


def prototypes_text(names) -> str:
    return "\n".join(PROTOTYPES[n] for n in sorted(names)) + "\n"


def build_extern_ptx(out_dir: str | Path, *, nvcc: Optional[str] = None, arch: str = "compute_90a") -> Path:
    """Compile the extern API (hbf_eidola.cuh with HBF_EIDOLA_EXTERN_API) to an -rdc PTX module."""
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        raise ToolchainError("nvcc not found", argv=["nvcc"])
    root = Path(__file__).resolve().parents[2]
    hdr = root / "runtime_cuda" / "src" / "hbf_eidola.cuh"
    tag = hashlib.sha256(hdr.read_bytes() + arch.encode()).hexdigest()[:12]
    out = Path(out_dir) / f"hbf_eidola_extern-{tag}.ptx"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".cu")
    src.write_text(f"#define {EXTERN_DEFINE}\n#include \"hbf_eidola.cuh\"\n")
    argv = [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-rdc=true", "-ptx", f"-I{hdr.parent}",
            str(src), "-o", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolchainError("nvcc failed building the eidola extern module", argv=argv,
                             returncode=r.returncode, stderr=r.stderr)
    return out


_HEADER_RE = re.compile(r"^\s*\.(version|target|address_size)\b.*$", re.M)


def link_extern(module_text: str, extern_text: str, used) -> str:
    """Insert the prototypes before the first function of ``module_text`` and append the extern
    module's items (``.visible`` made ``.weak``); the module's ``.version`` is raised if needed."""
    body = _HEADER_RE.sub("", extern_text)
    body = re.sub(r"^\s*//.*$", "", body, flags=re.M)
    body = re.sub(r"^\.visible\s+", ".weak ", body, flags=re.M)
    mv = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", module_text, re.M)
    ev = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", extern_text, re.M)
    if mv and ev and (int(ev.group(1)), int(ev.group(2))) > (int(mv.group(1)), int(mv.group(2))):
        module_text = module_text[:mv.start()] + f".version {ev.group(1)}.{ev.group(2)}" + module_text[mv.end():]
    m = re.search(r"^\s*(\.visible|\.weak|\.extern)?\s*\.(entry|func)\b", module_text, re.M)
    protos = prototypes_text(used)
    if m is None:
        raise RewriteError("module has no function to instrument")
    return module_text[:m.start()] + protos + module_text[m.start():] + "\n" + body


def rewrite_text(ptx: str, extern_ptx: str, meta: Optional[dict] = None, *, mwait: bool = False) -> str:
    """Parse, run the flags pass, print, link the extern module."""
    from hbfcc.ptx.parser import parse_module
    from hbfcc.ptx.printer import print_module
    meta = {} if meta is None else meta
    mod = flags_pass(parse_module(ptx), meta, mwait=mwait)
    return link_extern(print_module(mod), extern_ptx, meta[PASS_NAME]["extern"])
