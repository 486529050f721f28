"""Request-stream generators for the media models (cross-validation, benchmarks).

``make_stream(kind, geometry, n, load=..., arrivals=..., seed=...)`` returns ``n`` requests as a
``REQUEST_BATCH_DTYPE`` array (ids 0..n-1, arrival order), the same input for the media engine
(``MediaEngine.submit``) and the device-model twin (``DeviceModelTwin.run_batch``). Seeded: the same
arguments give the same stream.

Kinds (addresses; sizes):

* ``sequential``: 512 B warp requests walking the media in address order, 8 per 4 KiB page (a
  Triton fp16 load, 16 B per lane).
* ``strided``: one ``req_bytes`` request (default 512 B) at the start of every ``stride_pages``-th page
  (default 3): no page is read twice.
* ``random``: uniformly random pages, 1..64 contiguous 64 B sectors (64 B..4 KiB) inside the page.
* ``moe``: MoE expert weights: ``experts`` contiguous ranges of ``expert_bytes`` (default 64 x 2 MiB);
  per token ``top_k`` distinct experts drawn by Zipf(``zipf_s``) popularity, each streamed in order in
  512 B requests.
* ``mixed``: reads as ``sequential`` in the lower half of the media, ``write_fraction`` (default 0.3)
  of the requests are full 4 KiB page stores walking the upper half in order.

Offered load: ``load`` x :func:`bound_bytes_per_s` of the stream (the bytes that cross the channel:
64 B sectors; the bound counts the senses the stream's page sequence needs, so partial-page reads saturate
the planes below the channel), i.e. the request rate is ``load x bound / mean channel bytes per request``. Arrivals
``poisson`` (exponential gaps) or ``deterministic`` (equal gaps), integer ns from ``start_ns``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from hbfcommon.abi import HBF_OP_ATOMIC, HBF_OP_LOAD, HBF_OP_STORE
from hbfcommon.errors import ConfigError
from hbfd.contracts import REQUEST_BATCH_DTYPE

from .geometry import PAGE_BYTES, SECTOR_BYTES, MediaGeometry

KINDS = ("sequential", "strided", "random", "moe", "mixed")
ARRIVALS = ("poisson", "deterministic")
WARP_BYTES = 512

_DEFAULTS: dict[str, dict[str, Any]] = {
    "sequential": {"req_bytes": WARP_BYTES},
    "strided": {"req_bytes": WARP_BYTES, "stride_pages": 3},
    "random": {},
    "moe": {"experts": 64, "expert_bytes": 2 << 20, "top_k": 2, "zipf_s": 1.1},
    "mixed": {"write_fraction": 0.3},
}


def channel_bytes(batch: np.ndarray) -> np.ndarray:
    """Bytes each request moves over the channel: 64 x (distinct 64 B sectors touched, per page)."""
    ad = batch["media_address"].astype(np.int64)
    end = ad + batch["bytes"].astype(np.int64)
    # a page holds whole sectors, so the distinct sectors are those of [addr, end) rounded out
    return SECTOR_BYTES * ((end + SECTOR_BYTES - 1) // SECTOR_BYTES - ad // SECTOR_BYTES)


def bound_bytes_per_s(g: MediaGeometry, batch: np.ndarray) -> float:
    """The channel-byte rate (B/s) at which ``batch``'s request mix saturates the geometry: the channels
    (``channel_bytes`` per request over C x channel rate) or the planes in aggregate (one tR per sense and
    tPROG per 4 KiB written, over all C x D x P planes). Senses: every read page transaction whose page is
    not the previous read transaction's (a run of reads of one page is one sense: 8 warp reads of a page,
    an expert streamed), so a stream of 1 KiB random reads saturates the planes at a quarter of a 4 KiB
    stream's channel bytes. For reads of whole distinct pages this is ``geometry.read_bound_bytes_per_s``."""
    ad = batch["media_address"].astype(np.int64)
    nb = batch["bytes"].astype(np.int64)
    op = batch["op"].astype(np.int64)
    n = len(ad)
    first = ad // PAGE_BYTES
    npg = (ad + nb - 1) // PAGE_BYTES - first + 1
    req = np.repeat(np.arange(n, dtype=np.int64), npg)
    lpn = first[req] + (np.arange(len(req), dtype=np.int64) - np.repeat(np.cumsum(npg) - npg, npg))
    rd = op[req] != HBF_OP_STORE
    rp = lpn[rd]
    senses = int(len(rp) and 1 + np.count_nonzero(rp[1:] != rp[:-1]))
    cb = channel_bytes(batch)
    written = float(cb[(op == HBF_OP_STORE) | (op == HBF_OP_ATOMIC)].sum())
    plane_ns = (senses * g.t_read_ns + written / PAGE_BYTES * g.t_prog_ns) / g.planes   # per stream, aggregate
    chan_ns = float(cb.sum()) * 1e9 / g.aggregate_bytes_per_s
    return float(cb.sum()) * 1e9 / max(plane_ns, chan_ns)


def make_stream(kind: str, g: MediaGeometry, n: int, *, load: float = 0.5, arrivals: str = "poisson",
                seed: int = 0, start_ns: int = 0, **params: Any) -> np.ndarray:
    """``n`` requests of stream ``kind`` at ``load`` x its bound (see module doc)."""
    if kind not in KINDS:
        raise ConfigError(f"stream kind {kind!r}: must be one of {', '.join(KINDS)}", field="kind", value=kind)
    if arrivals not in ARRIVALS:
        raise ConfigError(f"arrivals {arrivals!r}: must be poisson or deterministic", field="arrivals",
                          value=arrivals)
    if not isinstance(n, int) or n < 1:
        raise ConfigError("stream length must be an integer >= 1", field="n", value=n)
    if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
        raise ConfigError("load must be a number > 0 (a fraction of the stream's bound)", field="load", value=load)
    unknown = sorted(set(params) - set(_DEFAULTS[kind]))
    if unknown:
        raise ConfigError(f"stream {kind}: unknown parameter {unknown[0]!r} (known: "
                          f"{', '.join(_DEFAULTS[kind]) or 'none'})", field=unknown[0])
    p = {**_DEFAULTS[kind], **params}
    rng = np.random.default_rng(seed)
    addr, nbytes, op = _GEN[kind](g, n, rng, **p)
    b = np.zeros(n, REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(n, dtype=np.uint64)
    b["media_address"] = addr.astype(np.uint64)
    b["bytes"] = nbytes.astype(np.uint32)
    b["op"] = op.astype(np.uint8)
    cb = channel_bytes(b)
    rate = load * bound_bytes_per_s(g, b) / float(cb.mean())     # requests per second
    gap = 1e9 / rate
    if arrivals == "poisson":
        t = np.cumsum(rng.exponential(gap, n)) - gap
        t[0] = 0.0
    else:
        t = np.arange(n, dtype=np.float64) * gap
    b["arrival_ns"] = (start_ns + np.floor(np.maximum(t, 0.0))).astype(np.uint64)
    return b


def _check(name: str, v: Any, lo: float, hi: float | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= lo and (hi is None or v <= hi)):
        raise ConfigError(f"stream parameter {name} = {v!r}: must be in [{lo}, {hi if hi is not None else 'inf'}]",
                          field=name, value=v)


def _walk(g: MediaGeometry, n: int, req_bytes: int, base: int, span: int) -> np.ndarray:
    """Addresses of ``n`` consecutive ``req_bytes`` requests from ``base``, wrapping inside ``span``."""
    per = span // req_bytes
    return base + (np.arange(n, dtype=np.int64) % per) * req_bytes


def _sequential(g, n, rng, *, req_bytes):
    _check("req_bytes", req_bytes, 1, PAGE_BYTES)
    return (_walk(g, n, int(req_bytes), 0, g.capacity_bytes), np.full(n, req_bytes, np.int64),
            np.full(n, HBF_OP_LOAD, np.int64))


def _strided(g, n, rng, *, req_bytes, stride_pages):
    _check("req_bytes", req_bytes, 1, PAGE_BYTES)
    _check("stride_pages", stride_pages, 1, g.logical_pages - 1)
    pages = (np.arange(n, dtype=np.int64) * int(stride_pages)) % g.logical_pages
    return pages * PAGE_BYTES, np.full(n, req_bytes, np.int64), np.full(n, HBF_OP_LOAD, np.int64)


def _random(g, n, rng):
    k = rng.integers(1, PAGE_BYTES // SECTOR_BYTES + 1, n)                 # sectors
    off = (rng.random(n) * (PAGE_BYTES // SECTOR_BYTES - k + 1)).astype(np.int64)
    pages = rng.integers(0, g.logical_pages, n)
    return pages * PAGE_BYTES + off * SECTOR_BYTES, k * SECTOR_BYTES, np.full(n, HBF_OP_LOAD, np.int64)


def _moe(g, n, rng, *, experts, expert_bytes, top_k, zipf_s):
    _check("experts", experts, 1)
    _check("top_k", top_k, 1, experts)
    _check("expert_bytes", expert_bytes, WARP_BYTES)
    _check("zipf_s", zipf_s, 0.0)
    experts, top_k, expert_bytes = int(experts), int(top_k), int(expert_bytes) // WARP_BYTES * WARP_BYTES
    if experts * expert_bytes > g.capacity_bytes:
        raise ConfigError(f"stream moe: {experts} x {expert_bytes} B experts exceed the media "
                          f"({g.capacity_bytes} B)", field="experts", value=experts)
    per_expert = expert_bytes // WARP_BYTES
    tokens = -(-n // (top_k * per_expert))
    pop = 1.0 / np.arange(1, experts + 1, dtype=np.float64) ** float(zipf_s)
    pop /= pop.sum()
    # top_k distinct experts per token, drawn by popularity (Gumbel top-k = sampling without replacement)
    keys = np.log(pop)[None, :] - np.log(-np.log(rng.random((tokens, experts))))
    chosen = np.argsort(-keys, axis=1)[:, :top_k].ravel()[: -(-n // per_expert)]
    addr = (chosen[:, None] * expert_bytes + np.arange(per_expert, dtype=np.int64)[None, :] * WARP_BYTES).ravel()[:n]
    return addr, np.full(n, WARP_BYTES, np.int64), np.full(n, HBF_OP_LOAD, np.int64)


def _mixed(g, n, rng, *, write_fraction):
    _check("write_fraction", write_fraction, 0.0, 1.0)
    w = rng.random(n) < float(write_fraction)
    half = g.logical_pages // 2 * PAGE_BYTES
    r_addr = _walk(g, n, WARP_BYTES, 0, half)
    w_addr = _walk(g, n, PAGE_BYTES, half, g.capacity_bytes - half)
    ri = np.cumsum(~w) - 1                      # the k-th read / k-th store walk on
    wi = np.cumsum(w) - 1
    addr = np.where(w, w_addr[np.maximum(wi, 0)], r_addr[np.maximum(ri, 0)])
    return (addr, np.where(w, PAGE_BYTES, WARP_BYTES).astype(np.int64),
            np.where(w, HBF_OP_STORE, HBF_OP_LOAD).astype(np.int64))


_GEN = {"sequential": _sequential, "strided": _strided, "random": _random, "moe": _moe, "mixed": _mixed}
