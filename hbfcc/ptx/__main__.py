"""Inspect PTX with the hbfcc front end.

    python -m hbfcc.ptx FILE.ptx                 # summary: functions, instructions, memory ops by class
    python -m hbfcc.ptx FILE.ptx --print         # canonical re-print (what passes start from)
    python -m hbfcc.ptx FILE.ptx --cfg KERNEL    # basic blocks of one function (labels, edges)
    python -m hbfcc.ptx FILE.ptx --check         # parse -> print -> parse must be equal (exit 1 if not)

Exit status: 0 ok, 1 check failed, 2 PTX error (message names file:line:column).
"""
from __future__ import annotations

import argparse
import collections
import sys

from hbfcommon.errors import HbfError

from .cfg import build_cfg
from .parser import parse_module, read_ptx
from .printer import format_instruction, print_module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hbfcc.ptx", description=__doc__.splitlines()[0])
    ap.add_argument("file")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--print", action="store_true", help="print the canonical PTX")
    g.add_argument("--cfg", metavar="FUNCTION", help="dump the CFG of one function")
    g.add_argument("--check", action="store_true", help="round-trip check")
    a = ap.parse_args(argv)
    try:
        text = read_ptx(a.file)
        m = parse_module(text, a.file)
        if a.print:
            sys.stdout.write(print_module(m))
            return 0
        if a.check:
            ok = parse_module(print_module(m), a.file + "<printed>") == m
            print("round trip: " + ("equal" if ok else "NOT EQUAL"))
            return 0 if ok else 1
        if a.cfg:
            c = build_cfg(m.function(a.cfg))
            for b in c.blocks:
                labels = ",".join(n for _, n in b.labels)
                print(f"B{b.index} [{labels}] preds={b.preds} succs={b.succs}"
                      + (" EXIT" if b.may_exit else ""))
                for _, ins in b.instrs:
                    print("    " + format_instruction(ins))
            for p, why in c.unsupported:
                print(f"unsupported at {p}: {why}")
            return 0
        print(f"{a.file}: .version {m.version} .target {','.join(m.target)} .address_size {m.address_size}")
        for fn in m.functions():
            if fn.body is None:
                print(f"  declaration {fn.kind} {fn.name}")
                continue
            cls: collections.Counter = collections.Counter()
            n = 0
            for ins in fn.instructions():
                n += 1
                if ins.is_memory_op:
                    cls[f"{ins.family}.{ins.state_space}"] += 1
            c = build_cfg(fn)
            print(f"  {fn.kind} {fn.name}: {len(fn.params)} params, {n} instructions, {len(c.blocks)} blocks")
            for k, v in sorted(cls.items()):
                print(f"      {k:40s} {v}")
        return 0
    except HbfError as e:      # PtxError, or ConfigError for a file that cannot be read
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"error: no function {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
