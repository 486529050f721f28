"""Named compiler passes: each is ``(module, metadata) -> module`` (DESIGN.md §6).

``metadata`` is a dict the pass adds its report to (under its own name); the pipeline in
:mod:`hbfcc.rewrite` runs them, then the link stages (:func:`hbfcc.link.stage`), and dumps the
module after every stage when asked to.
"""
from __future__ import annotations

from typing import Callable

from hbfcc.ptx.model import Module

Pass = Callable[[Module, dict], Module]


def get(name: str) -> Pass:
    if name == "timing":
        from .timing import timing_pass
        return timing_pass
    if name == "flags":
        from .flags import flags_pass
        return flags_pass
    if name == "flags_admission":
        from .flags import admit_eidola_calls
        return admit_eidola_calls
    raise KeyError(f"unknown pass {name!r}")


NAMES = ("timing", "flags", "flags_admission")


def pipeline(selection) -> tuple[str, ...]:
    """The stages for a pass selection (hbfcc.knobs.parse_passes): the flags pass runs before the
    timing pass (its flag loads are not HBF accesses; spin loops are recognized in the compiler's
    code), and ``flags_admission`` after it (the linked eidola helpers are admitted callees)."""
    if "flags" in selection:
        return ("flags", "timing", "flags_admission")
    return ("timing",)
