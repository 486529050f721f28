"""The device side of the request ring, in Python: what the GPU helper does, for the demo, tests
and host-only experiments. Protocol (hbf_ctl.h): reserve ticket t (ring_head), wait until slot
t % N is free (t < N, or completion.consumed == t - N + 1), write the payload, then seq = t + 1;
wait for completion.seq == t + 1, read it, write consumed = t + 1.

One RingDriver per process (it owns ring_head as the GPU would, through its own atomics).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hbfcommon import ctl
from hbfcommon.errors import DaemonError, ErrorCode

N = ctl.HBF_RING_SLOTS


@dataclass(frozen=True)
class Completion:
    ticket: int
    arrival_ns: int
    modeled_ns: int
    service_ns: int
    status: int


def seal(m: ctl.CtlMap, slot: int, seq: int, key: int) -> None:
    """Write the tag of slot ``slot``'s payload as ticket ``seq - 1`` under ``key`` (thermal_q_ppm bits
    32..63, ctl.request_tag), before its seq is published."""
    r = m.ring
    row = np.frombuffer(r[slot:slot + 1].tobytes(), np.uint64).copy().reshape(1, 8)
    row[0, 0] = seq
    row[0, 7] &= np.uint64(0xFFFFFFFF)
    r["thermal_q_ppm"][slot] = int(row[0, 7]) | (int(ctl.request_tag(row, key)[0]) << 32)


class RingDriver:
    def __init__(self, m: ctl.CtlMap, key: int) -> None:
        """``key``: the run's ring key (AttachReply.ring_key): every record carries its tag under it."""
        self.m = m
        self.h = m.ctl.header
        self.key = int(key)

    def failed(self) -> int:
        return int(self.h.failure)

    def issue(self, *, arrival_ns: int, address: int, media_address: int, nbytes: int, op: int,
              range_id: int = 0, site: int = 0, flags: int = 0, timeout_s: float = 10.0) -> int:
        t = int(self.h.ring_head)
        self.h.ring_head = t + 1                   # GPU: atom.global.add (GPU-only atomic)
        s = t % N
        if t >= N:                                 # slot reuse rule
            deadline = time.monotonic() + timeout_s
            while int(self.m.completions["consumed"][s]) != t - N + 1:
                if self.failed():
                    raise DaemonError("hbfd failed while waiting for a free slot", code=ErrorCode.DAEMON_LOST)
                if time.monotonic() > deadline:
                    raise DaemonError("ring slot never freed", code=ErrorCode.TIMEOUT, ticket=t)
        r = self.m.ring
        r["arrival_ns"][s], r["address"][s], r["media_address"][s] = arrival_ns, address, media_address
        r["bytes"][s], r["op"][s], r["range_id"][s], r["site"][s] = nbytes, op, range_id, site
        r["kernel_slot"][s], r["flags"][s], r["thermal_q_ppm"][s] = 0, flags, 0   # q 0: unthrottled
        seal(self.m, s, t + 1, self.key)
        r["seq"][s] = t + 1                        # release: after the payload
        return t

    def issue_many(self, *, arrival_ns, address, media_address, nbytes, op, range_id, flags, site=0,
                   timeout_s: float = 10.0) -> np.ndarray:
        """``issue`` of many requests at once (arrays, or scalars for all): tickets t .. t+k-1 reserved together,
        each slot's reuse rule waited for, every payload written (tag included), then (fence) every seq: the
        same protocol as k ``issue`` calls, the seqs published after all the payloads. Returns the tickets."""
        k = len(np.atleast_1d(address))
        if k > N:
            raise ValueError(f"at most {N} requests at once (the ring's slots)")
        t = int(self.h.ring_head)
        self.h.ring_head = t + k                   # GPU: atom.global.add
        tickets = np.arange(t, t + k, dtype=np.uint64)
        slots = (tickets % np.uint64(N)).astype(np.intp)
        if t + k > N:                              # slot reuse rule: the previous completion there consumed
            need = tickets.astype(np.int64) - N + 1
            reuse = need > 0
            deadline = time.monotonic() + timeout_s
            cons = self.m.completions["consumed"]
            while not (cons[slots[reuse]].astype(np.int64) == need[reuse]).all():
                if self.failed():
                    raise DaemonError("hbfd failed while waiting for a free slot", code=ErrorCode.DAEMON_LOST)
                if time.monotonic() > deadline:
                    raise DaemonError("ring slot never freed", code=ErrorCode.TIMEOUT, ticket=t)
        rows = np.zeros((k, 8), np.uint64)
        rows[:, 0] = tickets + np.uint64(1)
        rows[:, 1] = np.asarray(arrival_ns, np.uint64)
        rows[:, 2] = np.asarray(address, np.uint64)
        rows[:, 3] = np.asarray(media_address, np.uint64)
        rows[:, 4] = np.asarray(nbytes, np.uint64) | (np.asarray(op, np.uint64) << np.uint64(32))
        rows[:, 5] = np.asarray(range_id, np.uint64)                       # kernel_slot 0
        rows[:, 6] = np.asarray(site, np.uint64) | (np.asarray(flags, np.uint64) << np.uint64(32))
        rows[:, 7] = ctl.request_tag(rows, self.key) << np.uint64(32)      # q 0: unthrottled
        r64 = self.m.ring.view(np.uint64).reshape(N, ctl.REQUEST_DTYPE.itemsize // 8)
        r64[slots, 1:8] = rows[:, 1:8]
        ctl.full_fence()
        r64[slots, 0] = rows[:, 0]                 # release: after every payload
        return tickets

    def wait_many(self, tickets: np.ndarray, *, timeout_s: float = 10.0) -> np.ndarray:
        """``wait`` for many tickets: their completions as a COMPLETION_DTYPE array (in ticket order), each
        consumed once read."""
        tickets = np.asarray(tickets, np.uint64)
        slots = (tickets % np.uint64(N)).astype(np.intp)
        want = tickets + np.uint64(1)
        c = self.m.completions
        deadline = time.monotonic() + timeout_s
        spins = 0
        while not (c["seq"][slots] == want).all():
            spins += 1                              # spin briefly, then yield the core (hbfd may share it)
            time.sleep(0 if spins < 50 else 20e-6)
            if self.failed():                       # terminal completions are posted before the failure word
                if (c["seq"][slots] == want).all():
                    break
                raise DaemonError("hbfd failed and a ticket has no completion", code=ErrorCode.DAEMON_LOST,
                                  failure=hex(self.failed()))
            if time.monotonic() > deadline:
                raise DaemonError("no completion in time", code=ErrorCode.TIMEOUT, ticket=int(tickets[0]))
        out = c[slots].copy()                      # payloads after the seqs (acquire on x86)
        c["consumed"][slots] = want
        return out

    def poll(self, ticket: int) -> Completion | None:
        s = ticket % N
        c = self.m.completions
        if int(c["seq"][s]) != ticket + 1:
            return None
        row = c[s]                                 # payload after seq (acquire on x86)
        out = Completion(ticket, int(row["arrival_ns"]), int(row["modeled_ns"]), int(row["service_ns"]),
                         int(row["status"]))
        c["consumed"][s] = ticket + 1
        return out

    def wait(self, ticket: int, *, timeout_s: float = 10.0) -> Completion:
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.poll(ticket)
            if got is not None:
                return got
            if self.failed():   # the daemon posts terminal completions before the failure word
                got = self.poll(ticket)
                if got is not None:
                    return got
                raise DaemonError("hbfd failed and the ticket has no completion", code=ErrorCode.DAEMON_LOST,
                                  ticket=ticket, failure=hex(self.failed()))
            if time.monotonic() > deadline:
                raise DaemonError("no completion in time", code=ErrorCode.TIMEOUT, ticket=ticket)
