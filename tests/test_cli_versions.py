"""`hbfd --version` and `hbfctl --version` (issue 18, item 5): the package version (one definition:
pyproject.toml's [project].version, read from the source tree or from the installed distribution's
metadata) and the two ABI versions. The installed-wheel case is checked in test_packaging.py."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hbfcommon import version as V
from hbfcommon.abi import HBF_HELPER_ABI_VERSION
from hbfcommon.ctl import HBF_CTL_ABI_VERSION

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd="/")


@pytest.mark.parametrize("prog,module", [("hbfd", "hbfd.cli"), ("hbfctl", "hbfd.ctl_cli")])
def test_version_names_package_and_both_abis(prog, module):
    r = _run(module, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout == (f"{prog} {PYPROJECT_VERSION} (hbfsim; control-region ABI {HBF_CTL_ABI_VERSION}, "
                        f"helper ABI {HBF_HELPER_ABI_VERSION})\n")
    assert r.stdout == V.version_line(prog) + "\n"


def test_the_source_tree_is_the_one_definition():
    assert V.package_version() == PYPROJECT_VERSION
    assert V.abi_versions() == {"control_region_abi": HBF_CTL_ABI_VERSION, "helper_abi": HBF_HELPER_ABI_VERSION}


def test_python310_reader_agrees_with_tomllib(monkeypatch):
    monkeypatch.setitem(sys.modules, "tomllib", None)          # `import tomllib` raises ImportError (3.10)
    assert V._source_version(ROOT) == PYPROJECT_VERSION


def test_a_pyproject_of_another_project_is_not_ours(tmp_path):
    (tmp_path / "hbfcommon").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "9.9"\n')
    assert V._source_version(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "hbfsim"\nversion = "2.5.1"\n')
    assert V._source_version(tmp_path) == "2.5.1"
    (tmp_path / "hbfcommon").rmdir()                           # a pyproject with no package beside it
    assert V._source_version(tmp_path) is None


def test_outside_a_source_tree_the_metadata_answers(monkeypatch, tmp_path):
    monkeypatch.setattr(V, "_SOURCE_ROOT", tmp_path)           # like site-packages: no pyproject.toml
    try:
        want = importlib.metadata.version("hbfsim")
    except importlib.metadata.PackageNotFoundError:
        want = None
    if want is not None:
        assert V.package_version() == want
    monkeypatch.setattr(V, "DIST_NAME", "hbfsim-no-such-distribution")
    assert V.package_version().startswith("unknown (")
