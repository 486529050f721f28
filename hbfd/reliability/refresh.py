"""Deterministic refresh scheduling (HBFSim paper §4.4).

When a registered block becomes eligible (damage ≥ threshold, or read disturb ≥ limit) it receives
an eligibility epoch. Blocks are refreshed one at a time in the order

    (eligibility epoch, channel round robin, die round robin, zone, block, page)

where the round robin is the distance from a cursor that advances past the channel and die of every
completed block. A block whose (channel, die) is occupied by an application read at planning time
is skipped for that plan. A planned block becomes page-aligned READ/PROGRAM pairs, one per page, in
a request-ID namespace disjoint from ring tickets (bit 63 set, :data:`REFRESH_ID_BASE`), so the
requests can enter the media model's queues beside foreground traffic without ever completing an
application ticket. The plan is also published as monotonic byte debt (``hbf_refresh_debt``).

A block commits one PEC and clears its damage and disturb count only when EVERY request of its plan
completed successfully; a failed request leaves the counters and the block is planned again.

Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from hbfcommon import ctl
from hbfd.contracts import REQUEST_BATCH_DTYPE

from .ledger import BlockLedger

REFRESH_ID_BASE = 1 << 63
OP_READ = ctl.HBF_OP_LOAD
OP_PROGRAM = ctl.HBF_OP_STORE


def is_refresh_id(request_id: int) -> bool:
    return int(request_id) >= REFRESH_ID_BASE


@dataclass(frozen=True)
class RefreshRequest:
    id: int
    block: int
    page: int
    op: int                  # OP_READ or OP_PROGRAM
    channel: int
    die: int
    media_address: int
    bytes: int


@dataclass
class BlockPlan:
    """One block's refresh: requests ``first_id .. first_id + n_requests - 1``, page-aligned
    READ/PROGRAM pairs (request 2·page reads page, 2·page + 1 rewrites it)."""

    index: int               # ledger index
    block: int
    channel: int
    die: int
    first_id: int
    n_requests: int
    page_bytes: int

    @property
    def bytes(self) -> int:
        return self.n_requests * self.page_bytes


class RefreshScheduler:
    def __init__(self, ledger: BlockLedger, *, page_bytes: int = 4096):
        self.ledger = ledger
        self.page_bytes = page_bytes
        self.epoch_of = np.full(0, -1, np.int64)
        self.next_epoch = 0
        self.cursor_channel = 0
        self.cursor_die = 0
        self.next_seq = 0
        self.plan_now: BlockPlan | None = None
        self._done = np.zeros(0, bool)
        self._n_done = 0
        self._failed = False
        self._drain_pos = 0                                 # fluid drain: requests of the plan served
        self._buckets: dict[int, list[list[list[int]]]] = {}   # epoch -> [channel][die] -> ledger idx (sorted)
        self._heads: dict[int, np.ndarray] = {}
        self._left: dict[int, int] = {}
        self.debt_total_bytes = 0
        self.completed_bytes = 0
        self.completed_blocks = 0
        self.failed_attempts = 0
        self.skipped_busy = 0
        self.order_log: list[int] = []                      # block ids in commit order

    @property
    def in_flight(self) -> int | None:
        return None if self.plan_now is None else self.plan_now.index

    # ---- eligibility -----------------------------------------------------------------------------
    def update_eligibility(self) -> int:
        """Stamp newly eligible blocks with the next epoch; returns how many became eligible."""
        L = self.ledger
        n = L.n_blocks
        if len(self.epoch_of) < n:
            self.epoch_of = np.concatenate([self.epoch_of, np.full(n - len(self.epoch_of), -1, np.int64)])
        new = L.eligible_mask() & (self.epoch_of < 0)
        if self.plan_now is not None:
            new[self.plan_now.index] = False
        idx = np.flatnonzero(new)
        if not len(idx):
            return 0
        e = self.next_epoch
        self.next_epoch += 1
        self.epoch_of[idx] = e
        order = idx[np.lexsort((L.block[idx], L.zone[idx]))]       # zone, then block, within a bucket
        buckets = [[[] for _ in range(L.dies)] for _ in range(L.channels)]
        for i in order:
            buckets[L.channel[i]][L.die[i]].append(int(i))
        self._buckets[e] = buckets
        self._heads[e] = np.zeros((L.channels, L.dies), np.int64)
        self._left[e] = len(idx)
        return len(idx)

    def _requeue(self, i: int) -> None:
        """A failed block goes back, eligible, in a fresh epoch of its own."""
        e = self.next_epoch
        self.next_epoch += 1
        L = self.ledger
        self.epoch_of[i] = e
        buckets = [[[] for _ in range(L.dies)] for _ in range(L.channels)]
        buckets[L.channel[i]][L.die[i]].append(int(i))
        self._buckets[e] = buckets
        self._heads[e] = np.zeros((L.channels, L.dies), np.int64)
        self._left[e] = 1

    def _pick(self, busy: set[tuple[int, int]]) -> int | None:
        L = self.ledger
        for e in sorted(self._buckets):
            if not self._left[e]:
                continue
            b, h = self._buckets[e], self._heads[e]
            for dc in range(L.channels):
                ch = (self.cursor_channel + dc) % L.channels
                for dd in range(L.dies):
                    die = (self.cursor_die + dd) % L.dies
                    while h[ch, die] < len(b[ch][die]):
                        i = b[ch][die][h[ch, die]]
                        if not L.active[i]:             # unregistered while it waited: drop it
                            h[ch, die] += 1
                            self._left[e] -= 1
                            self.epoch_of[i] = -1
                            continue
                        if (ch, die) in busy:
                            self.skipped_busy += 1
                            break
                        h[ch, die] += 1
                        self._left[e] -= 1
                        if not self._left[e]:
                            del self._buckets[e], self._heads[e], self._left[e]
                        return i
                    if not self._left[e]:
                        break
                if not self._left[e]:
                    break
            if e in self._left and not self._left[e]:
                del self._buckets[e], self._heads[e], self._left[e]
        return None

    def eligible_order(self) -> np.ndarray:
        """Reference order of the waiting eligible blocks for the current cursor (spec form, for
        checking): (epoch, channel RR, die RR, zone, block)."""
        L = self.ledger
        cand = np.flatnonzero((self.epoch_of >= 0) & L.active[:len(self.epoch_of)])
        if self.plan_now is not None:
            cand = cand[cand != self.plan_now.index]
        ch_rr = (L.channel[cand] - self.cursor_channel) % L.channels
        die_rr = (L.die[cand] - self.cursor_die) % L.dies
        return cand[np.lexsort((L.block[cand], L.zone[cand], die_rr, ch_rr, self.epoch_of[cand]))]

    # ---- planning --------------------------------------------------------------------------------
    def plan(self, busy: Iterable[tuple[int, int]] = ()) -> BlockPlan | None:
        """The next block's refresh (None while one is in flight or nothing is eligible). ``busy``:
        (channel, die) pairs an application read occupies now; their blocks wait."""
        if self.plan_now is not None:
            return None
        i = self._pick(set(busy))
        if i is None:
            return None
        L = self.ledger
        n_req = 2 * L.pages_per_block
        self.plan_now = BlockPlan(i, int(L.block[i]), int(L.channel[i]), int(L.die[i]),
                                  REFRESH_ID_BASE + self.next_seq, n_req, self.page_bytes)
        self.next_seq += n_req
        self._done = np.zeros(n_req, bool)
        self._n_done = 0
        self._failed = False
        self._drain_pos = 0
        self.debt_total_bytes += self.plan_now.bytes
        return self.plan_now

    def requests(self, plan: BlockPlan) -> list[RefreshRequest]:
        """The plan's requests, in page order (READ then PROGRAM of each page)."""
        L = self.ledger
        local = plan.block // (L.channels * L.dies)
        out = []
        for page in range(L.pages_per_block):
            page_index = ((local * L.pages_per_block + page) * L.dies + plan.die) * L.channels + plan.channel
            addr = page_index * self.page_bytes
            for j, op in enumerate((OP_READ, OP_PROGRAM)):
                out.append(RefreshRequest(plan.first_id + 2 * page + j, plan.block, page, op, plan.channel,
                                          plan.die, addr, self.page_bytes))
        return out

    def request_batch(self, reqs: list[RefreshRequest], arrival_ns: int) -> np.ndarray:
        """Requests as a media-engine batch (hbfd.contracts.REQUEST_BATCH_DTYPE)."""
        out = np.zeros(len(reqs), REQUEST_BATCH_DTYPE)
        out["id"] = [r.id for r in reqs]
        out["arrival_ns"] = arrival_ns
        out["media_address"] = [r.media_address for r in reqs]
        out["bytes"] = [r.bytes for r in reqs]
        out["op"] = [r.op for r in reqs]
        return out

    # ---- completion ------------------------------------------------------------------------------
    def complete(self, request_id: int, ok: bool) -> bool:
        """One refresh request finished. Returns True when this committed its block."""
        if not is_refresh_id(request_id):
            raise ValueError(f"request {request_id} is not in the refresh namespace")
        pl = self.plan_now
        j = int(request_id) - (pl.first_id if pl else 0)
        if pl is None or not 0 <= j < pl.n_requests or self._done[j]:
            raise ValueError(f"refresh request {request_id} is not outstanding")
        self._done[j] = True
        self._n_done += 1
        if ok:
            self.completed_bytes += self.page_bytes
        else:
            self._failed = True
        if self._n_done < pl.n_requests:
            return False
        return self._finish()

    def _finish(self) -> bool:
        pl = self.plan_now
        assert pl is not None
        L = self.ledger
        i = pl.index
        self.plan_now = None
        if self._failed:
            self.failed_attempts += 1                       # counters stay; the block is eligible again
            self._requeue(i)
            return False
        L.commit_refresh(i)
        self.epoch_of[i] = -1
        self.completed_blocks += 1
        self.order_log.append(pl.block)
        self.cursor_channel = (pl.channel + 1) % L.channels
        self.cursor_die = (pl.die + 1) % L.dies
        return True

    def drain(self, nbytes: int) -> int:
        """Fluid service when no media model runs the requests: serve up to ``nbytes`` of the plan in
        order (whole requests); returns bytes consumed. Completes the block when all are served."""
        pl = self.plan_now
        if pl is None:
            return 0
        k = min(pl.n_requests - self._drain_pos, max(0, nbytes) // self.page_bytes)
        if k <= 0:
            return 0
        lo = self._drain_pos
        if self._done[lo:lo + k].any():
            raise ValueError("fluid drain over requests already completed by the media path")
        self._done[lo:lo + k] = True
        self._n_done += k
        self._drain_pos += k
        self.completed_bytes += k * self.page_bytes
        if self._n_done == pl.n_requests:
            self._finish()
        return k * self.page_bytes

    @property
    def pending_bytes(self) -> int:
        pl = self.plan_now
        return 0 if pl is None else (pl.n_requests - self._n_done) * self.page_bytes

    def summary(self) -> dict[str, Any]:
        return {"debt_total_bytes": int(self.debt_total_bytes), "refresh_completed_bytes": int(self.completed_bytes),
                "refresh_pending_bytes": int(self.pending_bytes), "completed_refresh_blocks": self.completed_blocks,
                "failed_refresh_attempts": self.failed_attempts,
                "eligible_waiting_blocks": int((self.epoch_of >= 0).sum()) - (self.plan_now is not None),
                "skipped_busy_die_picks": self.skipped_busy, "request_id_base": REFRESH_ID_BASE}
