"""The version of hbfsim: one definition, ``[project].version`` in pyproject.toml.

An installed package (``pip install .``, a wheel, an editable install) reads it from the distribution's
metadata, which the build wrote from that field; a source checkout run without installing (``PYTHONPATH``
pointing at the tree) reads the field itself, so a stale install elsewhere never misreports the code
that runs. :func:`version_line` is what every ``--version`` prints: the package version and the two
binary contracts a workload and a daemon must agree on (the control-region ABI, :mod:`hbfcommon.ctl`,
and the helper ABI that rewritten kernels call, :mod:`hbfcommon.abi`).
"""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

DIST_NAME = "hbfsim"
_SOURCE_ROOT = Path(__file__).resolve().parent.parent      # the checkout (or site-packages) above hbfcommon/


def _source_version(root: Path | None = None) -> str | None:
    """``[project].version`` of ``root/pyproject.toml`` (root: the tree above hbfcommon/) when that file is
    this project's, else None."""
    root = _SOURCE_ROOT if root is None else root
    p = root / "pyproject.toml"
    if not (p.is_file() and (root / "hbfcommon").is_dir()):
        return None
    text = p.read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:                      # Python 3.10: the [project] table's two keys by pattern
        m = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        body = m.group(1) if m else ""
        name = re.search(r'^name\s*=\s*"([^"]+)"', body, re.M)
        ver = re.search(r'^version\s*=\s*"([^"]+)"', body, re.M)
        project = {"name": name and name.group(1), "version": ver and ver.group(1)}
    else:
        project = tomllib.loads(text).get("project", {})
    if project.get("name") != DIST_NAME or not project.get("version"):
        return None
    return str(project["version"])


def package_version() -> str:
    """hbfsim's version: the source tree's pyproject.toml when running from one, else the installed
    distribution's metadata; ``"unknown"`` (said so) when neither exists (a copied tree)."""
    v = _source_version()
    if v is not None:
        return v
    try:
        return importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (hbfsim is not installed and no pyproject.toml is beside it)"


def abi_versions() -> dict[str, int]:
    """The binary contracts: control region (hbf_ctl.h) and device helpers (hbf_abi.h)."""
    from .abi import HBF_HELPER_ABI_VERSION
    from .ctl import HBF_CTL_ABI_VERSION
    return {"control_region_abi": int(HBF_CTL_ABI_VERSION), "helper_abi": int(HBF_HELPER_ABI_VERSION)}


def version_line(prog: str) -> str:
    """``PROG VERSION (hbfsim; control-region ABI N, helper ABI M)``: what ``PROG --version`` prints."""
    a = abi_versions()
    return (f"{prog} {package_version()} ({DIST_NAME}; control-region ABI {a['control_region_abi']}, "
            f"helper ABI {a['helper_abi']})")
