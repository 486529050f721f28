"""Exact event-by-event die/plane scheduler with read priority (semantics v2).

Used where the vectorized FIFO form (``diestage``) does not apply: dies whose batch holds both
read senses and array operations of another kind (program, copyback, erase), because reads have
priority at the die and at the plane (non-preemptive), which is not FIFO. Channels are not part
of it: in semantics v2 no array command uses the channel (a store's data crosses the channel with
the store; a program works on data already in the die), so channels stay FCFS and are scheduled
by the engine's Lindley stage afterwards.

Semantics (the same as the vectorized form wherever both apply, and as ``tests/media/refsim.py``):

* A die admits at most ``queue_depth`` outstanding commands; a command is outstanding from its
  admission until its array operation ends (a read's sense end: the page then waits in its page
  buffer for the channel). Waiting commands are admitted reads first, each class FIFO by
  (ready, seq). A slot freed at time t is usable by a command arriving at t.
* An admitted command joins its plane's queue at admission + t_cmd; the plane serves reads first,
  within a class by (plane-ready time, seq), and is busy for the command's service time
  (tR for a read, tPROG or tR + tPROG for a program, tR + tPROG for a copyback, tBERS for an erase).
* All events at one instant are applied before any decision at that instant.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

READ, PROG, COPYBACK, ERASE = 0, 1, 2, 3
KIND_NAMES = ("read", "program", "copyback", "erase")

_EV_RELEASE, _EV_PLANE_ENQ, _EV_PLANE_FREE = 0, 1, 2


def simulate(kind: np.ndarray, ready: np.ndarray, plane: np.ndarray, die: np.ndarray, service: np.ndarray, *,
             t_cmd: int, queue_depth: int, plane_free: np.ndarray, die_carry: dict[int, list[int]]):
    """Schedule commands given in (ready, seq) order (seq = index). Updates ``plane_free`` in place.

    ``die_carry[d]``: release times of commands still outstanding from earlier batches.
    Returns (start, end): int64 arrays (start of the array operation, its end = slot release).
    """
    n = len(kind)
    kind_l = kind.tolist()
    ready_l = ready.tolist()
    plane_l = plane.tolist()
    die_l = die.tolist()
    svc_l = service.tolist()
    start = [0] * n
    end = [0] * n
    heap: list[tuple[int, int, int]] = []
    push = heapq.heappush
    outstanding: dict[int, int] = {}
    for d, times in die_carry.items():
        outstanding[d] = len(times)
        for c in times:
            push(heap, (c, _EV_RELEASE, d))
    nxt = 0
    die_rq: dict[int, deque] = {}
    die_oq: dict[int, deque] = {}
    plane_q: dict[int, list] = {}
    pf = plane_free.tolist()
    busy: set[int] = set()
    tdies: set[int] = set()
    tplanes: set[int] = set()
    inf = 1 << 63
    while heap or nxt < n:
        t = heap[0][0] if heap else inf
        if nxt < n and ready_l[nxt] < t:
            t = ready_l[nxt]
        while True:
            while nxt < n and ready_l[nxt] == t:          # arrivals at t, in seq order
                d = die_l[nxt]
                (die_rq if kind_l[nxt] == READ else die_oq).setdefault(d, deque()).append(nxt)
                tdies.add(d)
                nxt += 1
            while heap and heap[0][0] == t:
                _, ev, x = heapq.heappop(heap)
                if ev == _EV_RELEASE:
                    outstanding[x] -= 1
                    tdies.add(x)
                elif ev == _EV_PLANE_ENQ:
                    p = plane_l[x]
                    push(plane_q.setdefault(p, []), (0 if kind_l[x] == READ else 1, t, x))
                    tplanes.add(p)
                else:
                    busy.discard(x)
                    tplanes.add(x)
            for d in tdies:                                # admissions
                rq = die_rq.get(d)
                oq = die_oq.get(d)
                o = outstanding.get(d, 0)
                while o < queue_depth and (rq or oq):
                    x = rq.popleft() if rq else oq.popleft()
                    o += 1
                    push(heap, (t + t_cmd, _EV_PLANE_ENQ, x))
                outstanding[d] = o
            tdies.clear()
            if heap and heap[0][0] == t:
                continue
            for p in tplanes:                              # plane grants
                q = plane_q.get(p)
                if not q or p in busy:
                    continue
                if pf[p] > t:                              # carried busy time: wake up then
                    push(heap, (pf[p], _EV_PLANE_FREE, p))
                    busy.add(p)
                    continue
                _, _, x = heapq.heappop(q)
                busy.add(p)
                start[x] = t
                e = t + svc_l[x]
                end[x] = e
                pf[p] = e
                push(heap, (e, _EV_PLANE_FREE, p))
                push(heap, (e, _EV_RELEASE, die_l[x]))
            tplanes.clear()
            if (heap and heap[0][0] == t) or (nxt < n and ready_l[nxt] == t):
                continue
            break
    plane_free[:] = pf
    return np.asarray(start, np.int64), np.asarray(end, np.int64)
