"""runtime_cuda — the workload side of hbfsim: device helpers (src/, compiled to PTX at build),
the control-region layout (include/hbf_ctl.h), and the Python API (attach, ranges, modules,
launch gate, counters). CUDA is imported lazily, so this package imports on machines without a GPU.
"""
from __future__ import annotations

from .session import DeviceFailure, LaunchRefused, ModuleBinding, Session, attach  # noqa: F401

__all__ = ["attach", "Session", "ModuleBinding", "LaunchRefused", "DeviceFailure"]
