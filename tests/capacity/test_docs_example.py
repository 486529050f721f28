"""docs/capacity.md's usage example runs as written (paths moved to a temporary directory): a 200 GiB generated
range (page tables materialized only where touched) and a sparse-file range through 256 frames."""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"


def test_the_usage_example_runs(tmp_path):
    text = DOC.read_text()
    text = text[text.index("## Using the host service in process"):]
    block = re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)
    code = block.replace('"/tmp/', f'"{tmp_path}/')
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)       # noqa: S102 (our own documentation)
    svc = ns["svc"]
    assert svc.failure is None and (tmp_path / "scratch.bin").exists()
    assert sum(len(t._chunks) for t in svc.pool.tables.values()) <= 3   # 200 GiB of table never materialized
