"""Fixtures of tests/report (the inputs themselves: report_inputs.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_inputs import FIXTURE, kernel_counters


@pytest.fixture
def demo_doc() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture
def demo_path(tmp_path, demo_doc) -> Path:
    p = tmp_path / "demo-summary.json"
    p.write_text(json.dumps(demo_doc))
    return p


@pytest.fixture
def counters_path(tmp_path) -> Path:
    p = tmp_path / "counters.json"
    p.write_text(json.dumps(kernel_counters()))
    return p
