"""hbfd's malloc settings (hbfd/memtune.py): applied once on glibc, off by the knob, and they do what they are
for -- a freed 48 MiB block stays in the process for the next allocation instead of going back to the kernel
(which makes the next one fault its pages in again); each case in a fresh interpreter."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = r"""
import json, resource, sys
import numpy as np
from hbfd import knobs
from hbfd.memtune import tune_malloc
applied = tune_malloc(knobs.malloc_tune())
again = tune_malloc(True)
def rss(): return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
n = 48 << 20
r0 = rss()
a = np.ones(n, np.uint8)
r1 = rss()
del a
print(json.dumps({"applied": applied, "same": applied is again, "touched": r1 - r0, "kept": rss() - r0}))
"""


def _probe(env_value: str | None) -> dict:
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "HBFD_MALLOC_TUNE"}
    if env_value is not None:
        env["HBFD_MALLOC_TUNE"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _glibc() -> bool:
    import ctypes
    try:
        ctypes.CDLL("libc.so.6").gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(not _glibc(), reason="not glibc")
def test_tuned_malloc_keeps_a_freed_block_for_reuse():
    on, off = _probe(None), _probe("0")
    assert on["applied"]["applied"] and on["same"], on
    assert not off["applied"]["applied"] and off["applied"]["reason"] == "HBFD_MALLOC_TUNE=0"
    mib = 1 << 20
    assert on["touched"] > 40 * mib and off["touched"] > 40 * mib, (on, off)
    # glibc's default mmaps a 48 MiB block and unmaps it at free (the next allocation faults every page in
    # again); tuned, the block comes from the heap and stays resident for the next batch's arrays
    assert off["kept"] < 8 * mib, off
    assert on["kept"] > 40 * mib, on
