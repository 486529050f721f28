"""The device side of the request ring, in Python: what the GPU helper does (runtime_cuda/src/hbf_helpers.cu
hb_ref_issue / hb_ref_slot_wait / hb_ref_take), for the demo, tests and host-only experiments. It is the CPU
model of the device protocol (docs/runtime.md "ring"):

* reserve ticket t (ring_head; the GPU: an atomic on a device-memory counter);
* slot t % N is free when t < N or completion.consumed >= t - N + 1. While it is not, the issuer may STEAL
  the slot's posted-but-unconsumed completion (seq == t - N + 1): it claims it (claim word of the slot in device
  memory: the owner claims 2*(t'+1) by an atomic max, a stealer 2*(t'+1) + 1 by a compare-and-swap only while the
  word is below 2*(t'+1), so it never marks a ticket its owner took as stolen), copies it into the
  overflow table (device memory, index t' & (M - 1)) and writes consumed itself. A slot wait then depends
  only on hbfd's service, never on another warp's consumption (the deadlock of deferred consumption: warps
  each holding unconsumed tickets while waiting for a slot held by another's). A capacity hint's completion
  is never stolen (hbfd consumes it itself);
* write the payload, then seq = t + 1;
* the owner, at the value's use: polls completion.seq == t + 1, claims it (the claim overlaps its payload
  loads on the GPU), reads the completion (self-contained: it carries the request's site|flags and q|tag
  words) and writes consumed = t + 1. When a stealer claimed first, or the slot already moved on, it takes
  its completion from the overflow table (and marks the entry taken); a ticket found in neither was waited on
  another path before ("already waited").

An overflow entry still holding an untaken ticket where a stolen one must go fails the run (RingOverflow,
status RING_OVERFLOW), never overwritten; entries of tickets below ``floor`` (reserved before the last
synchronization point: their owners are gone) may be reused.

One RingDriver per process (it owns ring_head as the GPU would). It is thread-safe: ``_lock`` stands for the
GPU's device-memory atomics (ticket counter, claim words, overflow entries). The non-blocking steps
(``reserve``, ``slot_ready``, ``publish``, ``take``) let a test run thousands of cooperative "warps".
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from hbfcommon import ctl
from hbfcommon.capacity import HBF_REQ_CAP_HINT
from hbfcommon.errors import DaemonError, ErrorCode, HbfError

N = ctl.HBF_RING_SLOTS
OVERFLOW_ENTRIES = 1 << 16     # the emulation's default (the device's: runtime_cuda/knobs.py ring_overflow_log2)


@dataclass(frozen=True)
class Completion:
    ticket: int
    arrival_ns: int
    modeled_ns: int
    service_ns: int
    status: int
    site_flags: int = 0          # the request's site | flags << 32, as hbfd copied it into the completion
    q_tag: int = 0               # the request's thermal_q_ppm word (q | tag << 32)
    stolen: bool = False         # taken from the overflow table (a stealer freed its slot)


class RingOverflow(HbfError):
    """The overflow table held an untaken completion where a stolen one had to go (status RING_OVERFLOW)."""


class AlreadyWaited(HbfError):
    """The ticket's completion was consumed before (waited on another path) and is in no overflow entry."""


def seal(m: ctl.CtlMap, slot: int, seq: int, key: int) -> None:
    """Write the tag of slot ``slot``'s payload as ticket ``seq - 1`` under ``key`` (thermal_q_ppm bits
    32..63, ctl.request_tag), before its seq is published."""
    r = m.ring
    row = np.frombuffer(r[slot:slot + 1].tobytes(), np.uint64).copy().reshape(1, 8)
    row[0, 0] = seq
    row[0, 7] &= np.uint64(0xFFFFFFFF)
    r["thermal_q_ppm"][slot] = int(row[0, 7]) | (int(ctl.request_tag(row, key)[0]) << 32)


class RingDriver:
    def __init__(self, m: ctl.CtlMap, key: int, *, steal: bool = True, overflow_entries: int = OVERFLOW_ENTRIES
                 ) -> None:
        """``key``: the run's ring key (AttachReply.ring_key): every record carries its tag under it.
        ``steal``: take posted-but-unconsumed completions into the overflow table when a slot is needed
        (False: the protocol before it, which deadlocks under deferred consumption; for the tests).
        ``overflow_entries``: the overflow table's size (a power of two)."""
        if overflow_entries <= 0 or overflow_entries & (overflow_entries - 1):
            raise ValueError("overflow_entries must be a power of two")
        self.m = m
        self.h = m.ctl.header
        self.key = int(key)
        self.steal = bool(steal)
        self._lock = threading.Lock()                       # the GPU's device-memory atomics
        self.claim = np.zeros(N, np.uint64)                 # per slot: the largest claim (2*(t+1) [+1 stolen])
        self.ovf = np.zeros(overflow_entries, ctl.RING_OVF_DTYPE)
        self.ovf_mask = overflow_entries - 1
        self.floor = 0                                      # tickets below it were reserved before a sync point
        self.stats = {"steals": 0, "overflow_takes": 0, "owner_claim_lost": 0}

    def failed(self) -> int:
        return int(self.h.failure)

    # ---- the non-blocking steps -----------------------------------------------------------------
    def reserve(self, k: int = 1) -> int:
        """Reserve tickets t .. t+k-1; returns t (GPU: atom.global.add on a device-memory counter)."""
        with self._lock:
            t = int(self.h.ring_head)
            self.h.ring_head = t + k
        return t

    def _claim(self, slot: int, v: int) -> int:
        """atomicMax(&claim[slot], v): the previous value."""
        with self._lock:
            old = int(self.claim[slot])
            if v > old:
                self.claim[slot] = v
        return old

    def slot_ready(self, t: int) -> bool:
        """One check of the slot-reuse rule for ticket ``t`` (its slot's previous ticket consumed), stealing
        that ticket's posted completion when it is not (``steal``). Raises RingOverflow."""
        s = t % N
        need = t - N + 1
        if need <= 0:
            return True
        comp = self.m.completions
        if int(comp["consumed"][s]) >= need:
            return True
        if not self.steal or int(comp["seq"][s]) != need:
            return False
        # posted, unconsumed: its payload is stable until consumed >= need, and only the issuer of the
        # slot's next ticket (us) can make hbfd rewrite it after that
        row = comp[s].copy()
        if int(row["seq"]) != need:
            return False
        if (int(row["req_site_flags"]) >> 32) & HBF_REQ_CAP_HINT:
            return False                                    # hbfd consumes a hint's completion itself
        i = (need - 1) & self.ovf_mask
        with self._lock:                                    # (the GPU: CAS on the claim while below 2 need, then the entry)
            old = int(self.claim[s])
            if old >= 2 * need:
                return False                                # its owner claimed it first: it writes consumed
            e = self.ovf[i]
            occ = int(e["tick1"])
            if occ != 0 and int(e["taken"]) != occ and occ - 1 >= self.floor:
                raise RingOverflow(f"ring overflow table full: entry {i} still holds ticket {occ - 1}'s untaken "
                                   f"completion where ticket {need - 1}'s must go", code=ErrorCode.INTERNAL,
                                   status="RING_OVERFLOW", ticket=need - 1, held=occ - 1,
                                   entries=self.ovf_mask + 1)
            self.claim[s] = 2 * need + 1
            self.ovf[i] = (int(row["arrival_ns"]), int(row["modeled_ns"]), int(row["service_ns"]), int(row["status"]),
                           int(row["req_site_flags"]), int(row["req_q_tag"]), 0, 0)
            self.ovf["tick1"][i] = need                     # the GPU: st.release.gpu after the entry
            self.stats["steals"] += 1
        comp["consumed"][s] = need                          # the same value the owner would write
        return True

    def publish(self, t: int, *, arrival_ns: int, address: int, media_address: int, nbytes: int, op: int,
                range_id: int = 0, site: int = 0, flags: int = 0) -> None:
        """Write ticket ``t``'s request (its slot must be ready), then seq = t + 1."""
        s = t % N
        r = self.m.ring
        r["arrival_ns"][s], r["address"][s], r["media_address"][s] = arrival_ns, address, media_address
        r["bytes"][s], r["op"][s], r["range_id"][s], r["site"][s] = nbytes, op, range_id, site
        r["kernel_slot"][s], r["flags"][s], r["thermal_q_ppm"][s] = 0, flags, 0   # q 0: unthrottled
        seal(self.m, s, t + 1, self.key)
        r["seq"][s] = t + 1                        # release: after the payload

    def _from_overflow(self, ticket: int, wait: bool) -> Completion | None:
        i = ticket & self.ovf_mask
        while True:
            with self._lock:
                e = self.ovf[i]
                if int(e["tick1"]) == ticket + 1:
                    e["taken"] = ticket + 1
                    self.stats["overflow_takes"] += 1
                    return Completion(ticket, int(e["arrival_ns"]), int(e["modeled_ns"]), int(e["service_ns"]),
                                      int(e["status"]), int(e["req_site_flags"]), int(e["req_q_tag"]), True)
            if not wait:
                return None
            time.sleep(0)                         # the stealer that claimed it is writing the entry

    def take(self, ticket: int) -> Completion | None:
        """One poll of the owner for ``ticket``: its completion (consumed), or None when not posted yet.
        Raises AlreadyWaited when it was consumed before and is in no overflow entry."""
        s = ticket % N
        want = ticket + 1
        comp = self.m.completions
        sq = int(comp["seq"][s])
        if sq == want:
            old = self._claim(s, 2 * want)
            if old < 2 * want:                     # ours: stable until our consumed store
                row = comp[s].copy()
                out = Completion(ticket, int(row["arrival_ns"]), int(row["modeled_ns"]), int(row["service_ns"]),
                                 int(row["status"]), int(row["req_site_flags"]), int(row["req_q_tag"]))
                comp["consumed"][s] = want
                return out
            if old == 2 * want:                    # another path of this ticket claimed it: validated read
                v = ctl.read_completion_validated(comp, s, want)
                if v is not None:
                    comp["consumed"][s] = want
                    return Completion(ticket, *v)
            else:
                self.stats["owner_claim_lost"] += 1
            got = self._from_overflow(ticket, wait=(old == 2 * want + 1))
        elif sq > want:                            # the slot moved on: stolen, or waited before
            got = self._from_overflow(ticket, wait=False)
        else:
            return None
        if got is None:
            raise AlreadyWaited(f"ticket {ticket} was consumed before and is in no overflow entry",
                                code=ErrorCode.INVALID_ARGUMENT, ticket=ticket)
        return got

    # ---- blocking forms ---------------------------------------------------------------------------
    def _slot_spin(self, t: int, deadline: float, spins: int) -> int:
        """One round of a slot wait: fail if hbfd failed or ``deadline`` passed, else yield; the spins so far."""
        if self.failed():
            raise DaemonError("hbfd failed while waiting for a free slot", code=ErrorCode.DAEMON_LOST)
        if time.monotonic() > deadline:
            raise DaemonError("ring slot never freed", code=ErrorCode.TIMEOUT, ticket=t)
        time.sleep(0 if spins < 50 else 20e-6)
        return spins + 1

    def _wait_slot(self, t: int, deadline: float) -> None:
        spins = 0
        while not self.slot_ready(t):
            spins = self._slot_spin(t, deadline, spins)

    def issue(self, *, arrival_ns: int, address: int, media_address: int, nbytes: int, op: int,
              range_id: int = 0, site: int = 0, flags: int = 0, timeout_s: float = 10.0) -> int:
        t = self.reserve()
        self._wait_slot(t, time.monotonic() + timeout_s)
        self.publish(t, arrival_ns=arrival_ns, address=address, media_address=media_address, nbytes=nbytes,
                     op=op, range_id=range_id, site=site, flags=flags)
        return t

    def issue_many(self, *, arrival_ns, address, media_address, nbytes, op, range_id, flags, site=0,
                   timeout_s: float = 10.0) -> np.ndarray:
        """``issue`` of many requests at once (arrays, or scalars for all): tickets t .. t+k-1 reserved together,
        each slot's reuse rule waited for (stealing as ``slot_ready``), every payload written (tag included),
        then (fence) every seq: the same protocol as k ``issue`` calls, the seqs published after all the
        payloads. Returns the tickets."""
        k = len(np.atleast_1d(address))
        if k > N:
            raise ValueError(f"at most {N} requests at once (the ring's slots)")
        t = self.reserve(k)
        tickets = np.arange(t, t + k, dtype=np.uint64)
        slots = (tickets % np.uint64(N)).astype(np.intp)
        if t + k > N:                              # slot reuse rule: the previous completion there consumed
            need = tickets.astype(np.int64) - N + 1
            reuse = need > 0
            deadline = time.monotonic() + timeout_s
            cons = self.m.completions["consumed"]
            spins = 0
            while not (cons[slots[reuse]].astype(np.int64) >= need[reuse]).all():
                if self.steal:
                    late = np.flatnonzero(reuse & (cons[slots].astype(np.int64) < need))
                    for j in late:
                        self.slot_ready(int(tickets[j]))
                spins = self._slot_spin(t, deadline, spins)
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
        """``wait`` for many tickets: their completions as a COMPLETION_DTYPE array (in ticket order, seq =
        ticket + 1 and consumed set for each, also for one taken from the overflow table), each consumed once
        read. Claims all posted ones at once; a ticket whose claim was lost goes the way of ``take``."""
        tickets = np.asarray(tickets, np.uint64)
        slots = (tickets % np.uint64(N)).astype(np.intp)
        want = tickets + np.uint64(1)
        c = self.m.completions
        out = np.zeros(tickets.size, ctl.COMPLETION_DTYPE)
        left = np.ones(tickets.size, bool)
        deadline = time.monotonic() + timeout_s
        spins = 0
        while left.any():
            idx = np.flatnonzero(left)
            sq = c["seq"][slots[idx]]
            ready = idx[sq == want[idx]]
            if ready.size:
                v = 2 * want[ready]
                with self._lock:                   # one atomicMax per ticket
                    old = self.claim[slots[ready]].copy()
                    np.maximum.at(self.claim, slots[ready], v)
                mine = ready[old < v]
                out[mine] = c[slots[mine]]
                c["consumed"][slots[mine]] = want[mine]
                left[mine] = False
                for j in ready[old >= v]:          # claimed before (another path) or stolen
                    got = self.take(int(tickets[j]))
                    if got is not None:
                        self._fill(out, j, got)
                        left[j] = False
            moved = idx[sq > want[idx]]
            for j in moved:
                got = self.take(int(tickets[j]))
                if got is not None:
                    self._fill(out, j, got)
                    left[j] = False
            if not left.any():
                break
            spins += 1                              # spin briefly, then yield the core (hbfd may share it)
            time.sleep(0 if spins < 50 else 20e-6)
            if self.failed():                       # terminal completions are posted before the failure word
                if (c["seq"][slots[left]] == want[left]).all():
                    continue
                raise DaemonError("hbfd failed and a ticket has no completion", code=ErrorCode.DAEMON_LOST,
                                  failure=hex(self.failed()))
            if time.monotonic() > deadline:
                raise DaemonError("no completion in time", code=ErrorCode.TIMEOUT,
                                  ticket=int(tickets[np.flatnonzero(left)[0]]))
        return out

    @staticmethod
    def _fill(out: np.ndarray, j: int, got: Completion) -> None:
        out["seq"][j] = got.ticket + 1
        out["arrival_ns"][j], out["modeled_ns"][j], out["service_ns"][j] = got.arrival_ns, got.modeled_ns, got.service_ns
        out["status"][j], out["consumed"][j] = got.status, got.ticket + 1
        out["req_site_flags"][j], out["req_q_tag"][j] = got.site_flags, got.q_tag

    def poll(self, ticket: int) -> Completion | None:
        """``take``: the completion (consumed), or None when not posted yet."""
        return self.take(ticket)

    def wait(self, ticket: int, *, timeout_s: float = 10.0) -> Completion:
        deadline = time.monotonic() + timeout_s
        spins = 0
        while True:
            got = self.take(ticket)
            if got is not None:
                return got
            if self.failed():   # the daemon posts terminal completions before the failure word
                got = self.take(ticket)
                if got is not None:
                    return got
                raise DaemonError("hbfd failed and the ticket has no completion", code=ErrorCode.DAEMON_LOST,
                                  ticket=ticket, failure=hex(self.failed()))
            if time.monotonic() > deadline:
                raise DaemonError("no completion in time", code=ErrorCode.TIMEOUT, ticket=ticket)
            spins += 1
            if spins > 50:
                time.sleep(20e-6)
