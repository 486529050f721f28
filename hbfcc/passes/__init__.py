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
    if name == "capacity":
        from .capacity import capacity_pass
        return capacity_pass
    if name == "call_isolation":
        from .call_isolation import call_isolation
        return call_isolation
    if name == "capacity_admission":
        from .capacity import capacity_admission
        return capacity_admission
    raise KeyError(f"unknown pass {name!r}")


NAMES = ("timing", "flags", "flags_admission", "capacity", "capacity_admission", "call_isolation")


def pipeline(selection) -> tuple[str, ...]:
    """The stages for a pass selection (hbfcc.knobs.parse_passes): the flags pass runs before the
    timing pass (its flag loads are not HBF accesses; spin loops are recognized in the compiler's
    code), and ``flags_admission`` after it (the linked eidola helpers are admitted callees). The capacity pass
    runs right before the timing pass (which then sees the translated accesses) and ``capacity_admission`` last
    (the capacity helpers are admitted callees)."""
    out = ("flags",) if "flags" in selection else ()
    out += ("capacity",) if "capacity" in selection else ()
    out += ("timing",)
    out += ("flags_admission",) if "flags" in selection else ()
    out += ("capacity_admission",) if "capacity" in selection else ()
    return out
