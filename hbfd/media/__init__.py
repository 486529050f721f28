"""NAND media model for hbfd's reference path, and the calibrated cumulative-burst curve.

``make_engine(profile)`` is the engine factory the composition root (``hbfd.services.compose``) calls.
"""
from __future__ import annotations

from typing import Any

from .engine import COMPLETION_BATCH_DTYPE, REQUEST_BATCH_DTYPE, MediaEngine, warm_twins
from .geometry import MediaError, MediaGeometry

__all__ = ["MediaEngine", "MediaGeometry", "MediaError", "make_engine", "REQUEST_BATCH_DTYPE",
           "COMPLETION_BATCH_DTYPE"]


def make_engine(profile: Any):
    """The reference-path engine for ``profile``: the calibrated curve when the profile's timing
    source is ``curve``, otherwise the NAND media model built from the profile's geometry (its compiled twins
    warmed first, :func:`warm_twins`)."""
    from hbfcommon.profile import as_profile
    p = as_profile(profile)
    if p.timing_model.timing_source == "curve":
        from .curve import CurveEngine
        return CurveEngine.from_profile(p)
    g = MediaGeometry.from_profile(p)
    warm_twins(g)                 # compiled twins (hbfd/accel.py) ready before the daemon serves, not at its first batch
    return MediaEngine(g)
