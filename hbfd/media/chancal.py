"""The device model's channel calendar (``channel_order="calendar"``, docs/design.md §3.9): each channel's
time in quanta, taken first-fit at a transaction's data-ready time, so no two transfers share channel time
and a late transaction does not hold the channel for earlier-ready ones.

Exact definition (the twin and tests/media/twin_ref.py compute the same integers; a device build was not made,
since the calendar agrees with the media engine no better than the arrival order: docs/design.md §3.9):

* quantum ``Q`` ns (``QUANTUM_NS`` = 1 by default: the model's time base; quantum ``k`` is the channel time
  ``[k Q, (k + 1) Q)``). A coarser quantum rounds every transfer up to whole quanta and the channel loses that
  capacity: one 64 B sector's time rounded up (:func:`sector_quantum_ns`: SG1 2 ns for 1.33) took 512 B
  transfers from 10.67 to 12 ns, the twin's MoE bandwidth -8 % at 100-200 % load (docs/RESULTS.md "Issue 14:
  the channel calendar").
* a transfer of ``xfer`` ns (thermally scaled) takes ``n = min(ceil(xfer / Q), 64 (W - 1))`` consecutive
  quanta (the cap: a transfer longer than the ring, a throttle below ~0.01 % at the default ring, is out of
  model: it holds the channel for the cap only).
* the channel's calendar is a ring of ``W`` words (a power of two; ``RING_WORDS`` by default), word ``A`` =
  quanta ``[64 A, 64 A + 64)`` in ring slot ``A mod W``, the slot holding a tag (the word it holds, + 1; 0 =
  never used) and 64 busy bits. Quantum ``k`` (word ``A = k >> 6``) is free iff the slot's tag is below
  ``A + 1`` (a stale word: read as empty) or equals ``A + 1`` with bit ``k & 63`` clear; a slot tagged with a
  newer word (``> A + 1``) makes word ``A`` read as full (it left the ring's window: never claimed again, so
  no quantum is ever claimed twice).
* a claim at ``ready`` ns: the least ``k >= ceil(ready / Q)`` with quanta ``k .. k + n - 1`` all free; they
  are taken (a stale slot is first emptied and retagged); the transfer runs ``[k Q, k Q + xfer)`` (within
  its quanta: ``xfer <= n Q`` below the cap).

Which transactions claim, in arrival order: a read at its data ready (a miss at its sense end, a hit at
``max(a + t_cmd, buffer ready)``); a store's data-in at ``max(a + t_cmd, P - (B - 1) tPROG)`` (no senses' frame:
the calendar needs none); an atomic's data-in at its read's completion + t_cmd. ``_calendar_pass`` is the
twin's whole timing pass in this mode (plane senses and programs as in ``DeviceModelTwin``, then the claims),
one transaction at a time (compiled by numba where ``hbfd.accel`` is on; its ``py_func``, the same code in
Python, otherwise).
"""
from __future__ import annotations

import types

import numpy as np

from hbfd import accel

from .geometry import SECTOR_BYTES

__all__ = ["RING_WORDS", "QUANTUM_NS", "sector_quantum_ns", "CHANNEL_ORDERS"]

RING_WORDS = 16384                # words per channel ring (64 quanta each): at 1 ns quanta a 1.05 ms window
QUANTUM_NS = 1
CHANNEL_ORDERS = ("arrival", "calendar")


def sector_quantum_ns(channel_bytes_per_s: int) -> int:
    """One 64 B sector's transfer time at full rate, rounded up, at least 1 ns (a coarser quantum, measured)."""
    return max(1, -(-SECTOR_BYTES * 1_000_000_000 // int(channel_bytes_per_s)))


@accel.jit
def _claim(tags, busy, cnt, c, ready, xfer, Q, W):
    """First-fit claim on channel ``c``'s ring (module doc): returns the transfer's start (ns)."""
    n = (xfer + Q - 1) // Q
    cap = 64 * (W - 1)
    if n > cap:
        n = cap
    if n < 1:
        n = 1
    mask = W - 1
    k = (ready + Q - 1) // Q
    while True:
        j = k
        ok = True
        while j < k + n:
            A = j >> 6
            s = A & mask
            t = tags[c, s]
            if t > A + 1 or (t == A + 1 and cnt[c, s] == 64):     # out of the window, or full: the next word
                k = (A + 1) << 6
                ok = False
                break
            if t < A + 1:                                          # stale: the whole word is free
                j = (A + 1) << 6
                continue
            if busy[c, (s << 6) | (j & 63)]:
                k = j + 1
                ok = False
                break
            j += 1
        if ok:
            break
    for j in range(k, k + n):
        A = j >> 6
        s = A & mask
        if tags[c, s] != A + 1:
            tags[c, s] = A + 1
            for b in range(64):
                busy[c, (s << 6) | b] = 0
            cnt[c, s] = 0
        busy[c, (s << 6) | (j & 63)] = 1
        cnt[c, s] += 1
    return k * Q


@accel.jit
def _calendar_pass(ta, ch, plane, kind, t_read, xfer, prog, miss, r_acc, src, ready_acc, sf, pf, tags, busy, cnt,
                   t_cmd, t_prog, buf_hold, Q, W, done, xs1, xs2):
    """The device model's timing, one page transaction at a time in arrival order, with the channel calendar.
    ``kind``: 0 read (load, cp.async), 1 store, 2 atomic. ``miss`` / ``r_acc`` / ``src``: a read's miss flag,
    its access index and its source access (a hit's buffer: its sense, or a carried buffer whose ready is
    in ``ready_acc`` already). Fills ``ready_acc`` (sense ends), ``done``, ``xs1`` / ``xs2`` (the claims'
    starts, -1 where none); updates ``sf`` / ``pf`` (planes' sense and program tails) and the rings."""
    T = ta.shape[0]
    for i in range(T):
        c = ch[i]
        p = plane[i]
        a = ta[i]
        cmd = a + t_cmd
        op = kind[i]
        x = xfer[i]
        t = a
        xs1[i] = -1
        xs2[i] = -1
        if op != 1:                                   # read: a miss senses (read priority), a hit waits for
            if miss[i]:                               # its buffer
                tr = t_read[i]
                S = sf[p]
                P = pf[p]
                base = cmd if cmd > S else S
                if P > base:
                    if S >= cmd:
                        start = S
                    elif t_prog:
                        start = P - (P - cmd) // t_prog * t_prog
                    else:
                        start = P
                    pf[p] = P + tr
                else:
                    start = base
                ready = start + tr
                sf[p] = ready
                ready_acc[r_acc[i]] = ready
            else:
                ready = ready_acc[src[i]]
                if ready < cmd:
                    ready = cmd
            s1 = _claim(tags, busy, cnt, c, ready, x, Q, W)
            xs1[i] = s1
            t = s1 + x
        if op != 0:                                   # write: a store's data-in once a page buffer is free,
            if op == 1:                               # an atomic's at its read's completion + t_cmd
                rdy = pf[p] - buf_hold
                if rdy < cmd:
                    rdy = cmd
            else:
                rdy = t + t_cmd
            s2 = _claim(tags, busy, cnt, c, rdy, x, Q, W)
            if op == 1:
                xs1[i] = s2
            else:
                xs2[i] = s2
            t = s2 + x
            P = pf[p]
            if sf[p] > P:
                P = sf[p]
            if t > P:
                P = t
            pf[p] = P + prog[i]
        done[i] = t


def new_rings(channels: int, ring_words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empty rings for ``channels`` channels: (tags, busy bits as bytes, busy count per word)."""
    return (np.zeros((channels, ring_words), np.int64), np.zeros((channels, 64 * ring_words), np.uint8),
            np.zeros((channels, ring_words), np.int64))


def _python_pass():
    """``_calendar_pass``'s Python form calling ``_claim``'s Python form (the jit wrapper would compile it)."""
    fn = _calendar_pass.py_func
    g = dict(fn.__globals__)
    g["_claim"] = _claim.py_func
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def calendar_pass(*args) -> None:
    """``_calendar_pass``, compiled where ``hbfd.accel`` is on, else its Python form (the same integers)."""
    (_calendar_pass if accel.enabled() else _python_pass())(*args)
