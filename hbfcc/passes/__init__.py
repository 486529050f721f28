"""Named compiler passes: each is ``(module, metadata) -> module`` (DESIGN.md §6).

``metadata`` is a dict the pass adds its report to (under its own name); the pipeline in
:mod:`hbfcc.rewrite` dumps the module after every pass when asked to.
"""
from __future__ import annotations

from typing import Callable

from hbfcc.ptx.model import Module

Pass = Callable[[Module, dict], Module]


def get(name: str) -> Pass:
    if name == "timing":
        from .timing import timing_pass
        return timing_pass
    raise KeyError(f"unknown pass {name!r}")


NAMES = ("timing",)
