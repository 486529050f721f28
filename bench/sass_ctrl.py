"""SASS with its scheduling control decoded, on a machine without a GPU (issue 13: what an instrumented kernel's
instructions wait for).

Every Volta-and-later instruction is 128 bits; its top 23 bits are the compiler's scheduling control: stall
cycles (4 bits, 105-108), yield (109), the write scoreboard it sets (110-112; 7 = none), the read scoreboard it
sets (113-115; 7 = none), the scoreboards it waits for (a 6-bit mask, 116-121) and the operand reuse flags
(122-125). A variable-latency instruction (a global load, a shuffle, a constant load, S2R...) sets a write
scoreboard that its consumers wait on, and a read scoreboard that instructions overwriting its source registers
wait on; a warp has six. So "does the group's code wait for the load in flight?" is a static question: the
instructions between a load and its first use whose wait mask holds the load's scoreboards.

    python bench/sass_ctrl.py KERNEL.cubin [--function NAME] [--loads]

prints each instruction as ``addr S<stall> <Y|-> W<wr> R<rd> wait[<mask>] <text>``; ``--loads`` adds, per global
load, the first instruction after it (address order) that waits for it and whether that one uses the value.
nvdisasm comes from PATH, ``.tools/cuda/bin`` (``make sass-tools``) or CUDA's bin; none: a clear error.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_INS = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;?\s*/\* (0x[0-9a-f]{16}) \*/")
_HI = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_FUNC = re.compile(r"^([.$\w]+):\s*$")


@dataclass(frozen=True)
class Ctrl:
    stall: int
    yld: bool
    wr: int | None          # the write scoreboard this instruction sets (None: none)
    rd: int | None          # the read scoreboard it sets
    wait: frozenset[int]    # the scoreboards it waits for
    reuse: int


def decode(hi: int) -> Ctrl:
    """The control fields of an instruction's high 64-bit word."""
    c = hi >> 41
    wr, rd = (c >> 5) & 7, (c >> 8) & 7
    return Ctrl(stall=c & 15, yld=bool((c >> 4) & 1), wr=None if wr == 7 else wr, rd=None if rd == 7 else rd,
                wait=frozenset(b for b in range(6) if (c >> 11) >> b & 1), reuse=(c >> 17) & 15)


@dataclass(frozen=True)
class Ins:
    func: str
    addr: int
    text: str
    ctrl: Ctrl

    def line(self) -> str:
        c = self.ctrl
        w = "".join(str(b) for b in sorted(c.wait))
        return (f"{self.addr:05x} S{c.stall:02d} {'Y' if c.yld else '-'} W{'-' if c.wr is None else c.wr} "
                f"R{'-' if c.rd is None else c.rd} wait[{w:6s}] {self.text}")


def nvdisasm() -> str:
    for cand in (shutil.which("nvdisasm"), REPO / ".tools/cuda/bin/nvdisasm",
                 Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin/nvdisasm"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return str(cand)
    raise SystemExit("sass_ctrl: no nvdisasm on PATH, in .tools/cuda/bin or in CUDA's bin: run `make sass-tools`")


def parse(text: str) -> list[Ins]:
    """nvdisasm ``-c -hex`` text -> instructions with their control decoded (function = the last label that
    names a function: ``name:`` lines that are not ``.L_x_*``)."""
    out: list[Ins] = []
    lines = text.splitlines()
    func = ""
    for i, ln in enumerate(lines):
        f = _FUNC.match(ln)
        if f and not f.group(1).startswith((".L", ".text")):
            func = f.group(1)
            continue
        m = _INS.search(ln)
        if not m or i + 1 >= len(lines):
            continue
        h = _HI.match(lines[i + 1])
        if not h:
            continue
        out.append(Ins(func, int(m.group(1), 16), m.group(2).strip(), decode(int(h.group(1), 16))))
    return out


def disassemble(cubin: Path) -> list[Ins]:
    cp = subprocess.run([nvdisasm(), "-c", "-hex", str(cubin)], capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"sass_ctrl: nvdisasm failed on {cubin}: {cp.stderr.strip()[:400]}")
    return parse(cp.stdout)


_DEST = re.compile(r"^(?:@!?P\w+\s+)?LDG([\w.]*)\s+R(\d+)")


def load_waits(ins: list[Ins]) -> list[dict]:
    """Per global load (LDG) of the list: the first later instruction of the same function (in address order: a
    straight-line reading, branches not followed) that waits on the load's write scoreboard -- from there on the
    load has completed -- and what that one is: ``use`` (it reads the load's destination registers), ``sibling``
    (it reads those of another load that set the same scoreboard: scoreboards are counters, so the program's own
    use of one load waits for all of them) or ``other`` (code that waits for a load it does not use); and the first
    that waits on its read scoreboard (the load's source registers read)."""
    loads = []
    for i, x in enumerate(ins):
        d = _DEST.match(x.text)
        if d and x.ctrl.wr is not None:
            width = 4 if ".128" in d.group(1) else 2 if ".64" in d.group(1) else 1      # registers it writes
            loads.append((i, x, {f"R{int(d.group(2)) + k}" for k in range(width)}))
    pos = {id(y): j for j, y in enumerate(ins)}
    rows = []
    for i, x, dest in loads:
        rest = [y for y in ins[i + 1:] if y.func == x.func]
        first_w = next((y for y in rest if x.ctrl.wr in y.ctrl.wait), None)
        first_r = next((y for y in rest if x.ctrl.rd is not None and x.ctrl.rd in y.ctrl.wait), None)
        fw = None
        if first_w is not None:
            regs = set(re.findall(r"\bR\d+\b", first_w.text.split(" ", 1)[-1] if not first_w.text.startswith("@")
                                  else first_w.text.split(" ", 2)[-1]))
            siblings = set().union(*(dd for j, y, dd in loads if y is not x and y.func == x.func
                                     and y.ctrl.wr == x.ctrl.wr and j < pos[id(first_w)]))
            fw = {"addr": f"{first_w.addr:05x}", "text": first_w.text,
                  "what": "use" if dest & regs else "sibling" if siblings & regs else "other",
                  "after": sum(1 for y in rest if y.addr < first_w.addr)}
            fw["uses_value"] = fw["what"] == "use"
        rows.append({"func": x.func, "addr": f"{x.addr:05x}", "load": x.text, "wr": x.ctrl.wr, "rd": x.ctrl.rd,
                     "first_wait": fw,
                     "first_read_wait": None if first_r is None else {"addr": f"{first_r.addr:05x}",
                                                                      "text": first_r.text}})
    return rows


WHAT = {"use": "by its use", "sibling": "by the use of a load sharing its scoreboard",
        "other": "by code that does NOT use it"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cubin", type=Path)
    ap.add_argument("--function", default="", help="only this function (a kernel or $kernel$helper name)")
    ap.add_argument("--loads", action="store_true", help="per global load, the first instruction that waits for it")
    ap.add_argument("--json", type=Path, default=None, help="also write the --loads rows here (atomic replace)")
    a = ap.parse_args(argv)
    if not a.cubin.is_file():
        print(f"sass_ctrl: no such cubin: {a.cubin}", file=sys.stderr)
        return 2
    ins = [x for x in disassemble(a.cubin) if not a.function or x.func == a.function]
    if not ins:
        print(f"sass_ctrl: no instructions{' in ' + a.function if a.function else ''}", file=sys.stderr)
        return 2
    func = None
    for x in ins:
        if x.func != func:
            func = x.func
            print(f"{func}:")
        print(x.line())
    if a.json:
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps({"cubin": str(a.cubin), "function": a.function or None,
                                   "instructions": len(ins), "loads": load_waits(ins)}, indent=1))
        os.replace(tmp, a.json)
    if a.loads:
        print("\n# global loads: the first instruction that waits for each (straight-line reading)")
        for r in load_waits(ins):
            fw, fr = r["first_wait"], r["first_read_wait"]
            print(f"{r['func']} {r['addr']} W{r['wr']} R{r['rd']} {r['load']}")
            if fw:
                print(f"    waited for at {fw['addr']}, {fw['after']} instructions on, "
                      f"{WHAT[fw['what']]}: {fw['text']}")
            if fr:
                print(f"    source registers waited for at {fr['addr']}: {fr['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
