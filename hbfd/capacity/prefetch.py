"""Prefetch policies of the capacity service: the pluggable interface, the paper's default, an example, and the
MoE policy. docs/capacity.md shows how to write one.

A policy is asked for pages at the two events the host sees (hits stay on the GPU and never reach it):

* ``on_miss(view, page)``: a demand miss on ``page`` was just served;
* ``on_prefetch_hit(view, page)``: the first hit on a prefetched frame (the frame's marker, taken by the device,
  posts a non-blocking hint: docs/design.md §3.6);

and returns the pages to prefetch, most wanted first. ``on_evict(view, page, prefetched, used)`` tells it what
became of a frame (a prefetched frame evicted unused was a wasted read). The service drops pages outside the
range, resident or already requested, caps the list at ``max_prefetch`` and issues the rest as media reads at
the event's time: they cost modeled bandwidth and time and contend with demand reads (hbfd/capacity/service.py).

``view`` (:class:`RangeView`): ``range_id``, ``pages`` (the range's page count), ``resident(page)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from hbfcommon.errors import ConfigError


@dataclass(frozen=True)
class RangeView:
    range_id: int
    pages: int
    resident: Callable[[int], bool]


@runtime_checkable
class PrefetchPolicy(Protocol):
    name: str

    def on_miss(self, view: RangeView, page: int) -> Sequence[int]: ...
    def on_prefetch_hit(self, view: RangeView, page: int) -> Sequence[int]: ...
    def on_evict(self, view: RangeView, page: int, prefetched: bool, used: bool) -> None: ...


class NoPrefetch:
    """Demand paging only."""

    name = "none"

    def on_miss(self, view, page):
        return ()

    def on_prefetch_hit(self, view, page):
        return ()

    def on_evict(self, view, page, prefetched, used):
        return None


class NextPages(NoPrefetch):
    """The paper's default (HBFSim §4.6): after a demand miss on p, fetch p+1 .. p+depth. Nothing on hits."""

    def __init__(self, depth: int = 8) -> None:
        if not isinstance(depth, int) or depth < 1:
            raise ConfigError("NextPages needs depth >= 1", field="depth", value=depth)
        self.depth = depth
        self.name = f"next-pages-{depth}"

    def on_miss(self, view, page):
        return range(page + 1, page + 1 + self.depth)

    def on_miss_many(self, view, pages):
        """:meth:`on_miss` of each of ``pages`` (int64, a batch's served demand misses of one range, in order) as
        one (len(pages), depth) array: row i is on_miss(view, pages[i]). The service's batched path uses it
        when a policy has it (no per-miss Python); it must equal the per-miss answers."""
        return np.asarray(pages, np.int64)[:, None] + np.arange(1, 1 + self.depth, dtype=np.int64)


class Stride(NoPrefetch):
    """The documented example (docs/capacity.md): when the last two misses of a range were ``d`` pages apart
    and this one is ``d`` after the last, fetch the next ``depth`` pages along the stride; each first use of a
    prefetched page keeps the window ``depth`` strides ahead of it."""

    def __init__(self, depth: int = 4) -> None:
        self.depth = depth
        self.name = f"stride-{depth}"
        self._last: dict[int, tuple[int, int]] = {}     # range -> (last miss, last delta)

    def on_miss(self, view, page):
        last, delta = self._last.get(view.range_id, (None, None))
        d = None if last is None else page - last
        self._last[view.range_id] = (page, d)
        if d and d == delta:
            return [page + k * d for k in range(1, self.depth + 1)]
        return ()

    def on_prefetch_hit(self, view, page):
        # a prefetched page was used: keep the window ``depth`` strides ahead of it (the service skips
        # the pages already resident)
        last, delta = self._last.get(view.range_id, (None, None))
        if delta:
            self._last[view.range_id] = (page, delta)
            return [page + k * delta for k in range(1, self.depth + 1)]
        return ()


@dataclass
class MoeExperts(NoPrefetch):
    """Expert-aware prefetch for MoE weights laid out expert after expert (``pages_per_expert`` pages each,
    ``experts_per_layer`` experts per layer, ``experts_per_token`` routed per token and layer: what a serving
    stack knows from its tensor offsets and its model config).

    * After a miss on p, or the first hit on a prefetched p: the rest of p's expert (p+1 .. its last page),
      never past it (the default's boundary pages are most of its wasted reads).
    * Guessed heads (the first page of an expert; a used head posts a hint and pulls in its expert, so a right
      guess removes that expert's only wait). The policy counts the experts it has seen start in the current
      layer visit; ``guess_first``: at the visit's first expert, heads of other experts of this layer (each is
      one of the 3 of 15 still to come); ``guess_next``: once ``experts_per_token`` experts of the layer have
      started, heads of the next layer (each is one of its 4 of 16). ``guesses`` heads per event, not resident,
      the most used first (ties: address order after the current expert, wrapping); ``head_pages`` pages of each
      (2: the expert's second page is there too, so the rest, fetched at the head's first use, has one more
      access of lead time). Experts that hit entirely in HBM are not seen by the host (hits stay on the GPU), so
      the count is a lower bound.
    """

    pages_per_expert: int
    experts_per_layer: int
    experts_per_token: int = 0
    guesses: int = 2
    guess_first: bool = True
    guess_next: bool = True
    head_pages: int = 1
    name: str = "moe-experts"
    _uses: dict[int, int] = field(default_factory=dict)
    _visit: tuple[int, int] = (-1, 0)          # (layer, experts started in this visit)

    def __post_init__(self) -> None:
        for f in ("pages_per_expert", "experts_per_layer"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"MoeExperts needs {f} >= 1", field=f, value=v)
        if not isinstance(self.head_pages, int) or not 1 <= self.head_pages <= self.pages_per_expert:
            raise ConfigError("MoeExperts needs 1 <= head_pages <= pages_per_expert", field="head_pages",
                              value=self.head_pages)
        for f in ("guesses", "experts_per_token"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 0:
                raise ConfigError(f"MoeExperts needs {f} >= 0", field=f, value=v)
        if self.guess_next and self.guesses and self.experts_per_token < 1:
            raise ConfigError("MoeExperts guess_next needs experts_per_token (the router's top-k)",
                              field="experts_per_token", value=self.experts_per_token)
        self.name = (f"moe-experts-g{self.guesses}" + ("-first" if self.guess_first else "")
                     + ("-next" if self.guess_next else "") + (f"-h{self.head_pages}" if self.head_pages > 1 else ""))

    def _heads(self, view: RangeView, layer: int, after: int) -> list[int]:
        ppe, epl = self.pages_per_expert, self.experts_per_layer
        layer0 = layer * epl
        if layer0 * ppe >= view.pages:
            return []
        cands = [layer0 + (after - layer0 + k) % epl for k in range(1, epl + 1)]
        cands = [e for e in cands if (e + 1) * ppe <= view.pages and not view.resident(e * ppe)]
        cands.sort(key=lambda e: -self._uses.get(e, 0))          # stable: address order breaks ties
        return [e * ppe + i for e in cands[:self.guesses] for i in range(self.head_pages)]

    def _pages(self, view: RangeView, page: int) -> list[int]:
        ppe, epl = self.pages_per_expert, self.experts_per_layer
        expert = page // ppe
        out = list(range(page + 1, min((expert + 1) * ppe, view.pages)))
        if page % ppe or not self.guesses:
            return out
        self._uses[expert] = self._uses.get(expert, 0) + 1
        layer = expert // epl
        vl, k = self._visit
        k = k + 1 if vl == layer else 1
        self._visit = (layer, k)
        if self.guess_first and k == 1:
            out += self._heads(view, layer, expert)
        if self.guess_next and k == self.experts_per_token:
            out += self._heads(view, layer + 1, (layer + 1) * epl - 1)
        return out

    def on_miss(self, view, page):
        return self._pages(view, page)

    def on_prefetch_hit(self, view, page):
        return self._pages(view, page)


POLICIES = {"none": NoPrefetch, "next-pages": NextPages, "stride": Stride, "moe-experts": MoeExperts}
