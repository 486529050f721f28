"""MoE routing traces and the deduplicated expert demand they imply.

A routing trace is the expert ids the router chose per (decode step, layer, token, slot): an int
array ``ids`` of shape ``[steps, layers, batch, top_k]``, values in ``[0, num_experts)``, the
``top_k`` ids of one token distinct. A batch of ``b`` tokens touches only the *distinct* experts of
its rows, so the weight bytes one layer reads grow slower than ``b``: :func:`dedup_demand` measures
that ratio (the HBFSim paper's "deduplicated expert demand": x2.487 at batch 8 and x3.584 at batch
16 from a captured Qwen3 trace); :func:`expected_uniform_distinct` is the closed form for
independent uniform routing; :func:`synthetic_zipf` / :func:`calibrate_zipf` give a skewed
synthetic router matched to a measured ratio.

File format (JSON, one object; written by :func:`save_trace`, read and checked by :func:`load_trace`)::

    {"schema": "hbfsim.routing-trace", "version": 1,
     "source": "<captured|file|synthetic-zipf|synthetic-uniform>",
     "num_experts": E, "top_k": k, "model": "<free text>", "note": "<free text>",
     "ids": [[[[int]*k]*batch]*layers]*steps}

plus optional ``"weights"`` of the same shape as ``ids`` (finite floats, the routing weights) and
optional ``"params"`` (an object, e.g. the zipf exponent and seed of a synthetic trace). ``model``
and ``note`` may be left out on input (they read as ""); no other key is accepted.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import atomic_write_json, read_json_document

log = logging.getLogger(__name__)

SCHEMA = "hbfsim.routing-trace"
VERSION = 1
SOURCES = ("captured", "file", "synthetic-zipf", "synthetic-uniform")
KEYS = {"schema", "version", "source", "num_experts", "top_k", "model", "note", "ids", "weights", "params"}
MAX_EXPERTS = 1 << 20
TRACE_MAX_BYTES = 512 << 20          # a routing trace file larger than this is refused unread
ZIPF_S_RANGE = (0.0, 4.0)


def _idx(pos: Iterable[int]) -> str:
    return "".join(f"[{int(i)}]" for i in pos)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _check(where: str, source: Any, num_experts: Any, top_k: Any, model: Any, note: Any, params: Any,
           ids: np.ndarray, weights: np.ndarray | None) -> None:
    """Every rule of a routing trace; a ConfigError naming the first one broken."""
    if source not in SOURCES:
        raise ConfigError(f"{where}: source {source!r} is not one of {list(SOURCES)}", field="source", file=where)
    for name, v in (("num_experts", num_experts), ("top_k", top_k)):
        if not _is_int(v) or not 1 <= v <= MAX_EXPERTS:
            raise ConfigError(f"{where}: {name} must be an integer in [1, {MAX_EXPERTS}], not {v!r}",
                              field=name, file=where)
    if top_k > num_experts:
        raise ConfigError(f"{where}: top_k {top_k} > num_experts {num_experts}", field="top_k", file=where)
    for name, v, t in (("model", model, str), ("note", note, str), ("params", params, dict)):
        if not isinstance(v, t):
            raise ConfigError(f"{where}: {name} must be a {t.__name__}, not {type(v).__name__}", field=name,
                              file=where)
    if ids.dtype.kind not in "iu" or ids.ndim != 4 or ids.size == 0:
        raise ConfigError(f"{where}: ids must be a non-empty int [steps][layers][batch][top_k] array, not "
                          f"{ids.dtype} of shape {list(ids.shape)}", field="ids", file=where)
    if ids.shape[3] != top_k:
        raise ConfigError(f"{where}: ids has {ids.shape[3]} experts per token, top_k is {top_k}",
                          field="ids", file=where)
    bad = np.argwhere((ids < 0) | (ids >= num_experts))
    if bad.size:
        p = tuple(bad[0])
        raise ConfigError(f"{where}: ids{_idx(p)} = {int(ids[p])} is out of range [0, {num_experts})",
                          field="ids" + _idx(p), file=where)
    srt = np.sort(ids, axis=-1)
    rep = np.argwhere(srt[..., 1:] == srt[..., :-1])
    if rep.size:
        p = tuple(rep[0][:3])
        raise ConfigError(f"{where}: ids{_idx(p)} repeats expert {int(srt[p][rep[0][3]])} within its top_k "
                          f"({ids[p].tolist()})", field="ids" + _idx(p), file=where)
    if weights is not None:
        if weights.shape != ids.shape:
            raise ConfigError(f"{where}: weights has shape {list(weights.shape)}, ids {list(ids.shape)}",
                              field="weights", file=where)
        nf = np.argwhere(~np.isfinite(weights))
        if nf.size:
            raise ConfigError(f"{where}: weights{_idx(nf[0])} is not finite", field="weights" + _idx(nf[0]),
                              file=where)


@dataclass(frozen=True, eq=False)
class RoutingTrace:
    """One routing trace (see the module docstring); checked on construction (ConfigError)."""

    ids: np.ndarray                       # int32 [steps, layers, batch, top_k]
    num_experts: int
    top_k: int
    source: str
    model: str = ""
    note: str = ""
    weights: np.ndarray | None = None     # float32, ids' shape
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        w = None if self.weights is None else np.asarray(self.weights, dtype=np.float32)
        _check("RoutingTrace", self.source, self.num_experts, self.top_k, self.model, self.note, self.params, ids, w)
        for name, v in (("ids", ids.astype(np.int32)), ("weights", w), ("num_experts", int(self.num_experts)),
                        ("top_k", int(self.top_k)), ("params", dict(self.params))):
            object.__setattr__(self, name, v)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(steps, layers, batch, top_k)."""
        return tuple(int(x) for x in self.ids.shape)   # type: ignore[return-value]

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": SCHEMA, "version": VERSION, "source": self.source,
                               "num_experts": self.num_experts, "top_k": self.top_k, "model": self.model,
                               "note": self.note, "ids": self.ids.tolist()}
        if self.weights is not None:
            doc["weights"] = self.weights.astype(np.float64).tolist()
        if self.params:
            doc["params"] = self.params
        return doc


def save_trace(trace: RoutingTrace, path) -> None:
    """Write ``trace`` to ``path`` (atomic replace)."""
    atomic_write_json(path, trace.to_doc(), allow_nan=False)


def _nested_problem(x: Any, leaf: tuple[type, ...], what: str) -> str | None:
    """The first place where ``x`` is not a 4-level rectangular list of ``leaf`` values."""
    shape, y = [], x
    while len(shape) < 4 and isinstance(y, list) and y:
        shape.append(len(y))
        y = y[0]
    stack = [((), x)]
    while stack:
        pos, y = stack.pop()
        d = len(pos)
        if d == 4:
            if not isinstance(y, leaf) or isinstance(y, bool):
                return f"{what}{_idx(pos)} is {type(y).__name__}, not a number of the right kind"
            continue
        if not isinstance(y, list):
            return f"{what}{_idx(pos)} is {type(y).__name__}, not a list ({4 - d} more level(s) expected)"
        if not y:
            return f"{what}{_idx(pos)} is empty"
        if len(y) != shape[d]:
            return (f"{what}{_idx(pos)} has {len(y)} entries, {what}{_idx((0,) * d)} has {shape[d]} "
                    "(ragged)")
        stack.extend((pos + (i,), z) for i, z in reversed(list(enumerate(y))))
    return None


def _array(x: Any, leaf: tuple[type, ...], what: str, where: str) -> np.ndarray:
    """A 4-level rectangular list of ``leaf`` numbers as an array, or a ConfigError naming the problem."""
    try:
        a = np.array(x, dtype=object)
    except ValueError:
        a = None
    ok = (a is not None and a.ndim == 4 and a.size > 0
          and set(map(type, a.ravel())) <= set(leaf))
    if not ok:
        prob = _nested_problem(x, leaf, what) or f"{what} is not a [steps][layers][batch][top_k] array"
        raise ConfigError(f"{where}: {prob}", field=what, file=where)
    try:
        return a.astype(np.float64 if float in leaf else np.int64)
    except OverflowError:
        raise ConfigError(f"{where}: {what} holds a number too large", field=what, file=where) from None


def load_trace(path) -> RoutingTrace:
    """Read and check a routing trace file; every problem is a ConfigError naming it (never a traceback)."""
    doc = read_json_document(path, what="routing trace", error=ConfigError, max_bytes=TRACE_MAX_BYTES)
    where, d = doc.where, doc.data
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: a routing trace is a JSON object, not {type(d).__name__}", file=where)
    if d.get("schema") != SCHEMA:
        raise ConfigError(f"{where}: schema is {d.get('schema')!r}, expected {SCHEMA!r}", field="schema", file=where)
    v = d.get("version")
    if type(v) is not int or v != VERSION:
        raise ConfigError(f"{where}: version {v!r} is not supported (only {VERSION})", field="version", file=where)
    extra = sorted(set(d) - KEYS)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {extra}; allowed: {sorted(KEYS)}", field=extra[0], file=where)
    for k in ("source", "num_experts", "top_k", "ids"):
        if k not in d:
            raise ConfigError(f"{where}: missing {k!r}", field=k, file=where)
    ids = _array(d["ids"], (int,), "ids", where)
    w = None if d.get("weights") is None else _array(d["weights"], (int, float), "weights", where)
    f = dict(source=d["source"], num_experts=d["num_experts"], top_k=d["top_k"], model=d.get("model", ""),
             note=d.get("note", ""), params=d.get("params", {}))
    _check(where, ids=ids, weights=w, **f)
    return RoutingTrace(ids=ids, weights=w, **f)


# ---- deduplicated demand -------------------------------------------------------------------------

def _ids4(ids) -> np.ndarray:
    a = np.asarray(getattr(ids, "ids", ids))
    if a.ndim != 4 or a.size == 0 or a.dtype.kind not in "iu":
        raise ConfigError("ids must be a non-empty int array [steps, layers, batch, top_k]", shape=list(a.shape))
    return a


def distinct_counts(ids, b: int | None = None) -> np.ndarray:
    """Distinct experts touched by the first ``b`` tokens (all with None), per (step, layer): [steps, layers]."""
    a = _ids4(ids)
    S, L, B, k = a.shape
    b = B if b is None else b
    if not isinstance(b, (int, np.integer)) or isinstance(b, bool) or not 1 <= b <= B:
        raise ConfigError(f"batch size {b!r} is not in [1, {B}] (the trace's batch)", batch=b)
    s = np.sort(a[:, :, :b, :].reshape(S, L, b * k), axis=-1)
    return 1 + np.count_nonzero(s[..., 1:] != s[..., :-1], axis=-1)


def expected_uniform_distinct(E: int, k: int, b: int) -> float:
    """Expected distinct experts of ``b`` tokens each routed to ``k`` of ``E`` uniformly and independently."""
    return E * (1.0 - (1.0 - k / E) ** b)


def dedup_demand(ids, batch_sizes: Sequence[int], *, num_experts: int | None = None) -> dict[int, dict[str, Any]]:
    """Per batch size b: distinct experts per (step, layer) of the first b tokens (mean, median, p10,
    p90, min, max), and ``ratio_vs_batch1`` = mean / top_k. With ``num_experts`` also the uniform
    router's expectation (``uniform_mean``, ``uniform_ratio``)."""
    k = _ids4(ids).shape[3]
    out: dict[int, dict[str, Any]] = {}
    for b in dict.fromkeys(batch_sizes):
        c = distinct_counts(ids, b).astype(np.float64).ravel()
        p10, med, p90 = np.percentile(c, [10, 50, 90])
        r = {"batch": int(b), "samples": int(c.size), "mean": float(c.mean()), "median": float(med),
             "p10": float(p10), "p90": float(p90), "min": int(c.min()), "max": int(c.max()),
             "ratio_vs_batch1": float(c.mean() / k)}
        if num_experts is not None:
            u = expected_uniform_distinct(num_experts, k, int(b))
            r.update(uniform_mean=u, uniform_ratio=u / k)
        out[int(b)] = r
    return out


def expert_bytes_per_step(ids, bytes_per_expert) -> np.ndarray:
    """Expert weight bytes each step reads: distinct experts of the whole batch x bytes per expert
    (an int, or one per layer), summed over layers; int64 [steps]."""
    c = distinct_counts(ids).astype(np.int64)
    bpe = np.asarray(bytes_per_expert, dtype=np.int64)
    if bpe.ndim > 1 or (bpe.ndim == 1 and bpe.shape[0] != c.shape[1]) or np.any(bpe < 0):
        raise ConfigError("bytes_per_expert must be an int >= 0 or one per layer", layers=int(c.shape[1]))
    return (c * bpe).sum(axis=1).astype(np.int64)


def format_demand(result: Mapping[int, Mapping[str, Any]]) -> str:
    """A small text table of :func:`dedup_demand`'s result."""
    uni = all("uniform_ratio" in r for r in result.values())
    head = f"{'batch':>5} {'mean':>8} {'median':>7} {'p10':>6} {'p90':>6} {'min':>4} {'max':>4} {'ratio':>7}"
    lines = [head + (f" {'uniform':>8}" if uni else "")]
    for b, r in result.items():
        lines.append(f"{b:>5} {r['mean']:>8.2f} {r['median']:>7.1f} {r['p10']:>6.1f} {r['p90']:>6.1f} "
                     f"{r['min']:>4} {r['max']:>4} {r['ratio_vs_batch1']:>6.3f}x"
                     + (f" {r['uniform_ratio']:>7.3f}x" if uni else ""))
    return "\n".join(lines)


# ---- synthetic routers ---------------------------------------------------------------------------

def _check_shape(steps: int, layers: int, batch: int, E: int, k: int) -> None:
    for n, v in (("steps", steps), ("layers", layers), ("batch", batch), ("num_experts", E), ("top_k", k)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{n} must be an integer >= 1, not {v!r}", field=n)
    if k > E:
        raise ConfigError(f"top_k {k} > num_experts {E}", field="top_k")


def _draw(rng: np.random.Generator, logp: np.ndarray, steps: int, batch: int, k: int) -> np.ndarray:
    """ids [steps, layers, batch, k]: per token k distinct experts drawn without replacement with
    probability ``exp(logp[layer])`` (normalized), vectorized as the Gumbel-top-k of ``logp`` + noise,
    which has the distribution of ``rng.choice(E, size=k, replace=False, p=p)`` (successive draws,
    each among the experts not yet drawn), in draw order."""
    L, E = logp.shape
    ids = np.empty((steps, L, batch, k), dtype=np.int32)
    for st in range(steps):                                      # one step at a time bounds memory
        score = rng.gumbel(size=(L, batch, E)) + logp[:, None, :]
        top = np.argpartition(-score, k - 1, axis=-1)[..., :k]
        order = np.argsort(-np.take_along_axis(score, top, axis=-1), axis=-1, kind="stable")
        ids[st] = np.take_along_axis(top, order, axis=-1)
    return ids


def synthetic_zipf(steps: int, layers: int, batch: int, E: int, k: int, s: float, seed: int) -> RoutingTrace:
    """Each layer ranks the experts by a seeded random permutation; each token draws ``k`` distinct
    experts without replacement with probability proportional to 1/rank**s (s=0: uniform)."""
    _check_shape(steps, layers, batch, E, k)
    if not (isinstance(s, (int, float)) and math.isfinite(s) and s >= 0):
        raise ConfigError(f"zipf exponent s must be a finite number >= 0, not {s!r}", field="s")
    rng = np.random.default_rng(seed)
    log_rank = np.log(np.arange(1, E + 1, dtype=np.float64))
    logp = np.empty((layers, E))
    for li in range(layers):
        logp[li, rng.permutation(E)] = -float(s) * log_rank      # the expert at rank r gets p ~ 1/r**s
    return RoutingTrace(ids=_draw(rng, logp, steps, batch, k), num_experts=E, top_k=k, source="synthetic-zipf",
                        note=f"zipf s={float(s):g}, per-layer popularity permutation",
                        params={"s": float(s), "seed": seed})


def synthetic_uniform(steps: int, layers: int, batch: int, E: int, k: int, seed: int) -> RoutingTrace:
    """Each token draws ``k`` distinct experts uniformly, independently of every other token."""
    _check_shape(steps, layers, batch, E, k)
    rng = np.random.default_rng(seed)
    return RoutingTrace(ids=_draw(rng, np.zeros((layers, E)), steps, batch, k), num_experts=E, top_k=k,
                        source="synthetic-uniform", note="uniform, independent tokens", params={"seed": seed})


def _zipf_ratio(gumbel: np.ndarray, logr: np.ndarray, k: int, s: float) -> float:
    """Dedup ratio of the zipf router for fixed Gumbel noise [n, b, E]: the Gumbel-top-k of
    log p + noise is a draw of k without replacement with p (the rank order; the permutation of
    a layer relabels experts and leaves the distinct count unchanged)."""
    score = gumbel - s * logr
    e = score.shape[-1]
    kth = np.partition(score, e - k, axis=-1)[..., e - k:e - k + 1]
    touched = (score >= kth).any(axis=1)
    return float(touched.sum(axis=-1).mean() / k)


def calibrate_zipf(E: int, k: int, batch: int, target_ratio: float, seed: int = 0, *,
                   samples: int = 2000, tol: float = 1e-3) -> float:
    """The zipf exponent s in [0, 4] whose dedup ratio at ``batch`` is ``target_ratio`` (bisection on
    ``samples`` (step, layer) draws with common random numbers, so the estimate is smooth in s)."""
    _check_shape(1, 1, batch, E, k)
    rng = np.random.default_rng(seed)
    g = rng.gumbel(size=(samples, batch, E)).astype(np.float32)
    logr = np.log(np.arange(1, E + 1, dtype=np.float32))
    lo, hi = ZIPF_S_RANGE
    r_lo, r_hi = _zipf_ratio(g, logr, k, lo), _zipf_ratio(g, logr, k, hi)
    if not (isinstance(target_ratio, (int, float)) and r_hi <= target_ratio <= r_lo):
        raise ConfigError(f"target ratio {target_ratio!r} at batch {batch} is outside what zipf s in "
                          f"[{lo:g}, {hi:g}] gives ([{r_hi:.3f}, {r_lo:.3f}])", target_ratio=target_ratio)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if _zipf_ratio(g, logr, k, mid) > target_ratio:
            lo = mid
        else:
            hi = mid
    s = 0.5 * (lo + hi)
    log.debug("calibrate_zipf E=%d k=%d batch=%d target=%.4f -> s=%.4f", E, k, batch, target_ratio, s)
    return s
