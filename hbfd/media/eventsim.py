"""Exact event-by-event scheduler for the commands of some channels over one batch.

Used where the vectorized Lindley form does not apply: channels that carry program, copyback or
erase commands (read priority is not FCFS), and channels where a die's queue depth binds.

Semantics (the same as the fast path wherever both apply):

* A die admits at most ``queue_depth`` outstanding commands; a command is outstanding from its
  admission until its array operation ends (a read's sense end: the page then waits in the
  plane's cache register for the channel; a program's, copyback's or erase's end). Waiting commands are admitted reads first, each class FIFO by
  (ready, seq). A slot freed at time t is usable by a command arriving at t.
* A read, once admitted at A, joins its plane's queue at A + t_cmd; the plane senses for tR
  (plane free again at sense end: the page goes to the cache register), then the data joins the
  channel queue at sense end; the channel transfers ``xfer_ns``; the read completes at transfer end.
* A program joins its plane's queue at A + t_cmd; when granted at g the plane is held until the
  program ends; with ``presense`` (read-merge of a partial page) the plane first senses for tR; the
  data-in joins the channel queue at g (+ tR); the program runs tPROG after the data-in ends. The
  store that filled the page is acknowledged at data-in end.
* Copyback (GC valid-page move, inside the plane, no channel): plane busy tR + tPROG. Erase: tBERS.
* Plane and channel queues serve reads first; within a class by (ready, seq).
* All events at one instant are applied before any decision at that instant.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

READ, PROG, COPYBACK, ERASE = 0, 1, 2, 3
KIND_NAMES = ("read", "program", "copyback", "erase")

# event types, in the order they are applied at one instant (all are applied before decisions)
_EV_COMPLETE, _EV_CARRY_DONE, _EV_ARRIVE, _EV_PLANE_ENQ, _EV_PLANE_DONE, _EV_CHAN_ENQ, _EV_CHAN_DONE, _EV_WAKE_P, _EV_WAKE_C, _EV_SENSE_END, _EV_OP_END = range(11)


@dataclass
class Commands:
    """Columns of the commands to schedule (all the same length)."""

    kind: np.ndarray      # u8: READ/PROG/COPYBACK/ERASE
    ready: np.ndarray     # i64: when the command reaches the die
    plane: np.ndarray     # i64: global plane id
    die: np.ndarray       # i64: global die id
    chan: np.ndarray      # i64
    xfer_ns: np.ndarray   # i64: channel occupancy (0 for copyback/erase)
    presense: np.ndarray  # bool: PROG with a read-merge sense first

    def __len__(self) -> int:
        return len(self.kind)


def simulate(cmds: Commands, *, t_cmd: int, t_read: int, t_prog: int, t_erase: int, queue_depth: int,
             plane_free: np.ndarray, chan_free: np.ndarray, die_carry: dict[int, list[int]],
             chan_busy_acc: np.ndarray | None = None):
    """Schedule ``cmds`` (seq = index order). Updates ``plane_free``/``chan_free`` in place.

    ``die_carry[d]``: completion times of commands still outstanding from earlier batches.
    Returns (done, ack, admit, start): int64 arrays (ack = data-in end for programs, else done;
    start = when the array operation began).
    """
    n = len(cmds)
    kind = cmds.kind.tolist()
    ready = cmds.ready.tolist()
    plane = cmds.plane.tolist()
    die = cmds.die.tolist()
    chan = cmds.chan.tolist()
    xfer = cmds.xfer_ns.tolist()
    pres = cmds.presense.tolist()
    done = [0] * n
    ack = [0] * n
    admit = [0] * n
    start = [0] * n
    heap: list[tuple[int, int, int]] = []
    push = heapq.heappush
    outstanding: dict[int, int] = {}
    for d, times in die_carry.items():
        outstanding[d] = len(times)
        for c in times:
            push(heap, (c, _EV_CARRY_DONE, d))
    # arrivals are already in (ready, seq) order: consumed through a cursor, not the heap
    nxt = 0
    die_rq: dict[int, list] = {}
    die_oq: dict[int, list] = {}
    plane_q: dict[int, list] = {}
    chan_q: dict[int, list] = {}
    plane_busy: set[int] = set()
    chan_busy: set[int] = set()
    plane_wake: set[int] = set()
    chan_wake: set[int] = set()
    pf = plane_free.tolist()
    cf = chan_free.tolist()
    tdies: set[int] = set()
    tplanes: set[int] = set()
    tchans: set[int] = set()
    inf = 1 << 63

    while heap or nxt < n:
        t = heap[0][0] if heap else inf
        if nxt < n and ready[nxt] < t:
            t = ready[nxt]
        while True:
            while nxt < n and ready[nxt] == t:       # arrivals at t
                x = nxt
                nxt += 1
                d = die[x]
                q = die_rq if kind[x] == READ else die_oq
                q.setdefault(d, deque()).append(x)
                tdies.add(d)
            while heap and heap[0][0] == t:
                _, ev, x = heapq.heappop(heap)
                if ev == _EV_ARRIVE:
                    d = die[x]
                    q = die_rq if kind[x] == READ else die_oq
                    q.setdefault(d, deque()).append(x)     # arrivals come in (ready, seq) order: FIFO
                    tdies.add(d)
                elif ev == _EV_COMPLETE:
                    d = die[x]
                    outstanding[d] -= 1
                    tdies.add(d)
                elif ev == _EV_CARRY_DONE:
                    outstanding[x] -= 1
                    tdies.add(x)
                elif ev == _EV_PLANE_ENQ:
                    p = plane[x]
                    push(plane_q.setdefault(p, []), (0 if kind[x] == READ else 1, t, x))
                    tplanes.add(p)
                elif ev == _EV_PLANE_DONE:
                    plane_busy.discard(x)
                    pf[x] = t
                    tplanes.add(x)
                elif ev == _EV_CHAN_ENQ:
                    c = chan[x]
                    push(chan_q.setdefault(c, []), (0 if kind[x] == READ else 1, t, x))
                    tchans.add(c)
                elif ev == _EV_CHAN_DONE:
                    chan_busy.discard(x)
                    cf[x] = t
                    tchans.add(x)
                elif ev == _EV_SENSE_END:        # read: plane free, die slot free, data to channel
                    p = plane[x]
                    plane_busy.discard(p)
                    pf[p] = t
                    tplanes.add(p)
                    d = die[x]
                    outstanding[d] -= 1
                    tdies.add(d)
                    c = chan[x]
                    push(chan_q.setdefault(c, []), (0, t, x))
                    tchans.add(c)
                elif ev == _EV_OP_END:           # program/copyback/erase: plane free, slot free
                    p = plane[x]
                    plane_busy.discard(p)
                    pf[p] = t
                    tplanes.add(p)
                    d = die[x]
                    outstanding[d] -= 1
                    tdies.add(d)
                elif ev == _EV_WAKE_P:
                    plane_wake.discard(x)
                    tplanes.add(x)
                else:
                    chan_wake.discard(x)
                    tchans.add(x)
            # admissions
            for d in tdies:
                rq = die_rq.get(d)
                oq = die_oq.get(d)
                o = outstanding.get(d, 0)
                while o < queue_depth and (rq or oq):
                    x = rq.popleft() if rq else oq.popleft()
                    o += 1
                    admit[x] = t
                    push(heap, (t + t_cmd, _EV_PLANE_ENQ, x))
                outstanding[d] = o
            tdies.clear()
            if heap and heap[0][0] == t:
                continue
            # plane grants
            for p in tplanes:
                q = plane_q.get(p)
                if not q or p in plane_busy:
                    continue
                if pf[p] > t:
                    if p not in plane_wake:
                        plane_wake.add(p)
                        push(heap, (pf[p], _EV_WAKE_P, p))
                    continue
                _, _, x = heapq.heappop(q)
                plane_busy.add(p)
                start[x] = t
                k = kind[x]
                if k == READ:
                    push(heap, (t + t_read, _EV_SENSE_END, x))
                elif k == PROG:
                    push(heap, (t + (t_read if pres[x] else 0), _EV_CHAN_ENQ, x))
                elif k == COPYBACK:
                    e = t + t_read + t_prog
                    done[x] = ack[x] = e
                    push(heap, (e, _EV_OP_END, x))
                else:
                    e = t + t_erase
                    done[x] = ack[x] = e
                    push(heap, (e, _EV_OP_END, x))
            tplanes.clear()
            if heap and heap[0][0] == t:
                continue
            for c in tchans:
                q = chan_q.get(c)
                if not q or c in chan_busy:
                    continue
                if cf[c] > t:
                    if c not in chan_wake:
                        chan_wake.add(c)
                        push(heap, (cf[c], _EV_WAKE_C, c))
                    continue
                _, _, x = heapq.heappop(q)
                chan_busy.add(c)
                e = t + xfer[x]
                if chan_busy_acc is not None:
                    chan_busy_acc[c] += xfer[x]
                push(heap, (e, _EV_CHAN_DONE, c))
                if kind[x] == READ:
                    done[x] = ack[x] = e
                else:  # program: data-in ends at e, the array programs for tPROG
                    ack[x] = e
                    pe = e + t_prog
                    done[x] = pe
                    push(heap, (pe, _EV_OP_END, x))
            tchans.clear()
            if (heap and heap[0][0] == t) or (nxt < n and ready[nxt] == t):
                continue
            break
    plane_free[:] = pf
    chan_free[:] = cf
    return (np.asarray(done, np.int64), np.asarray(ack, np.int64), np.asarray(admit, np.int64),
            np.asarray(start, np.int64))
