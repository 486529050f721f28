"""The ptxas command line as hbfcc-ptxas reads it: its ``.ptx`` inputs, its output, its target, whether it is a
relocatable build. Standard library only: hbfcc-ptxas's light entry (:mod:`hbfcc.ptxas_entry`,
``HBFCC_DEFER=rewrite``) reads the command line without importing the rewriter."""
from __future__ import annotations

import os
from typing import Optional, Sequence

# set by hbfcc-ptxas for everything it runs (its pid): an hbfcc-ptxas that finds another process's pid here was
# started by hbfcc-ptxas, i.e. took itself for the real ptxas. Not an HBFCC_ knob (those are recorded as the build's
# configuration: hbfcommon.deferred.build_env), hence the leading underscore.
ACTIVE_VAR = "_HBFCC_PTXAS_PID"


def entered() -> Optional[str]:
    """Mark this process as hbfcc-ptxas for its children; the message to fail with when a parent hbfcc-ptxas
    started this one (a ptxas path that leads back to hbfcc-ptxas: it would call itself for ever), else None."""
    was, me = os.environ.get(ACTIVE_VAR), str(os.getpid())
    if was and was != me:
        return (f"hbfcc-ptxas was started by hbfcc-ptxas (pid {was}): the ptxas it chose leads back to itself "
                f"(HBFCC_REAL_PTXAS / TRITON_PTXAS_PATH / PATH name a wrapper of ours); set HBFCC_REAL_PTXAS to "
                f"the real ptxas")
    os.environ[ACTIVE_VAR] = me
    return None

# ptxas options that take a separate value argument
VALUE_OPTS = {
    "-o", "--output-file", "-arch", "--gpu-name", "-maxrregcount", "--maxrregcount", "-O",
    "--opt-level", "-dlcm", "--def-load-cache", "-dscm", "--def-store-cache", "-e", "--entry",
    "-optf", "--options-file", "-m", "--machine", "-fmad", "--fmad", "-split-compile",
    "--split-compile", "-ftz", "--ftz", "-prec-div", "--prec-div", "-prec-sqrt", "--prec-sqrt",
    "-c-rt", "-suppress-stack-size-warning", "--position-independent-code", "-pic",
    "--extensible-whole-program", "-ewp", "-knob", "--device-function-maxrregcount", "-func-maxrregcount",
    "--compile-as-tools-patch", "-asm-tools-patch",
}
# the options that make ptxas compile relocatable code (nvcc -rdc's ptxas steps)
RELOCATABLE_OPTS = ("-c", "--compile-only")


def parse(args: list[str]) -> tuple[list[int], Optional[int], Optional[str]]:
    """(indices of .ptx inputs, index of the -o value, target arch)."""
    inputs: list[int] = []
    out_idx: Optional[int] = None
    arch: Optional[str] = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "--output-file"):
            out_idx = i + 1
            i += 2
            continue
        if a.startswith("--output-file="):
            out_idx = i
        elif a.startswith("--gpu-name=") or a.startswith("-arch="):
            arch = a.split("=", 1)[1]
        elif a in ("-arch", "--gpu-name") and i + 1 < len(args):
            arch = args[i + 1]
            i += 2
            continue
        elif a.startswith("-arch") and len(a) > 5 and a[5] != "=":
            arch = a[5:]
        elif a in VALUE_OPTS and a not in ("-o",):
            i += 2
            continue
        elif not a.startswith("-") and a.endswith(".ptx"):
            inputs.append(i)
        i += 1
    return inputs, out_idx, arch


def with_arch(args: list[str], arch: str) -> list[str]:
    """``args`` with every target option (``-arch=X``, ``-arch X``, ``-archX``, ``--gpu-name[=] X``) naming ``arch``."""
    out = list(args)
    i = 0
    while i < len(out):
        a = out[i]
        if a.startswith("--gpu-name=") or a.startswith("-arch="):
            out[i] = a.split("=", 1)[0] + "=" + arch
        elif a in ("-arch", "--gpu-name") and i + 1 < len(out):
            out[i + 1] = arch
            i += 1
        elif a.startswith("-arch") and len(a) > 5 and a[5] != "=":
            out[i] = "-arch" + arch
        elif a in VALUE_OPTS:
            i += 1
        i += 1
    return out


def jit_real_target(arch: Optional[str]) -> Optional[str]:
    """The real target of a virtual one (``compute_90a`` -> ``sm_90a``): what the driver JITs the PTX for on that
    architecture, whose plain build gives the registers of a HBFCC_JIT build's launch bound; None for another."""
    return "sm_" + arch[len("compute_"):] if arch and arch.startswith("compute_") else None


def out_path(args: list[str], out_idx: Optional[int]) -> Optional[str]:
    if out_idx is None or out_idx >= len(args):
        return None
    a = args[out_idx]
    return a.split("=", 1)[1] if a.startswith("--output-file=") else a


def relocatable(args: Sequence[str]) -> bool:
    """Whether the ptxas call compiles relocatable code (``-c``, ``--compile-only``)."""
    return any(a in RELOCATABLE_OPTS for a in args)


SPLIT_OPTS = ("-split-compile", "--split-compile")


def split_compile(args: Sequence[str], threads: int, entries: int) -> list[str]:
    """What hbfcc-ptxas adds to the real ptxas's command line for a REWRITTEN module (HBFCC_PTXAS_THREADS): the
    helpers are assembled again for every kernel of the module (whole-program ptxas gives each entry its own
    copy), and ``-split-compile N`` lets ptxas assemble the entries in parallel -- the machine code is the same
    (only the cubin's tool note records the option). ``threads``: the knob (0 = auto: the CPUs this process may
    run on, at most ``entries``; 1 = nothing added). Nothing either when the caller passed -split-compile itself
    (theirs stands) or where N would be 1."""
    if any(a in SPLIT_OPTS or a.startswith(tuple(o + "=" for o in SPLIT_OPTS)) for a in args):
        return []
    if threads == 0:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        threads = min(cpus, max(entries, 1))
    return ["-split-compile", str(threads)] if threads > 1 else []
