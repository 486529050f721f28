"""runtime_cuda.cudrv.htod / dtoh keep the host object alive until the copy has returned.

The H200 run of 2026-12-05 (bench/results/tma_tensormap_gpu.json, device_decode) decoded 2,746 of 2,747 recorded
descriptors like the Python twin; the one left was descriptor 0 of the device input -- the same 128 bytes sit at
indices 0, 18 and 23 of that input and only one disagreed, so it was not the decoder. htod rebound its parameter to
the ctypes object's address, which dropped the last reference to a temporary argument
(``htod(d, (c_uint8 * n).from_buffer_copy(buf), n)``): the array was freed before cuMemcpyHtoD read it, and malloc
wrote its free-list words over the first bytes, which the device decoded as RESERVED. CPU only: a fake driver records,
at the moment of the copy, whether the object is still alive and what bytes it holds."""
from __future__ import annotations

import ctypes
import gzip
import json
import types
from pathlib import Path

import pytest

from runtime_cuda import cudrv

ROOT = Path(__file__).resolve().parents[2]
R2 = ROOT / "bench" / "results" / "tma_tensormap_encodings_h200_r2.json.gz"


class _FakeDriver:
    CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self, dead: list) -> None:
        self.dead = dead
        self.copies: list[tuple[bool, bytes | None]] = []

    def _record(self, addr: int, n: int, write: bytes | None = None) -> tuple[int]:
        alive = not self.dead
        got = None
        if alive:                       # never touch freed memory: only read / write a live object
            if write is not None:
                ctypes.memmove(addr, write, n)
            got = ctypes.string_at(addr, n)
        self.copies.append((alive, got))
        return (0,)

    def cuMemcpyHtoD(self, dptr, src, n):  # noqa: N802 -- the driver's name
        return self._record(src, n)

    def cuMemcpyDtoH(self, dst, dptr, n):  # noqa: N802
        return self._record(dst, n, write=bytes(range(256)) * (n // 256) + bytes(n % 256))


def _probe_type(n: int, dead: list):
    """A ctypes array type whose instances append to ``dead`` when they are freed."""
    class Probe(ctypes.c_uint8 * n):
        def __del__(self) -> None:
            dead.append(True)
    return Probe


@pytest.fixture
def fake(monkeypatch):
    dead: list = []
    f = _FakeDriver(dead)
    monkeypatch.setattr(cudrv, "drv", lambda: f)
    return f, dead


def test_htod_keeps_a_temporary_source_alive_until_the_copy(fake):
    f, dead = fake
    payload = bytes(range(256))
    cudrv.htod(0x1000, _probe_type(256, dead).from_buffer_copy(payload), 256)
    assert f.copies[0][0], "htod dropped the last reference to its source before cuMemcpyHtoD read it"
    assert f.copies[0][1] == payload
    assert dead, "the temporary is freed after the call (the probe itself works)"


def test_dtoh_keeps_a_temporary_destination_alive_until_the_copy(fake):
    f, dead = fake
    cudrv.dtoh(_probe_type(64, dead)(), 0x1000, 64)
    assert f.copies[0][0], "dtoh dropped the last reference to its destination before cuMemcpyDtoH wrote it"


def test_htod_of_the_recorded_device_decode_input_copies_every_descriptor(fake):
    """The exact call of bench/tma_tensormap.py device_decode over the H200 recording it ran on (r2)."""
    f, dead = fake
    recs = json.loads(gzip.decompress(R2.read_bytes()))["records"]
    ok = [bytes.fromhex(r["bytes"]) for r in recs if r["bytes"]]
    assert len(ok) == 2747
    buf = b"".join(ok)
    cudrv.htod(0x1000, _probe_type(len(buf), dead).from_buffer_copy(buf), len(buf))
    alive, got = f.copies[0]
    assert alive and got == buf
