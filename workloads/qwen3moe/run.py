"""Decode on the GPU natively and with the weights placed in HBF, side by side in one process.

One run = one hbfd (one profile) + one runtime session:

1. weights generated (seeded) or loaded from a checkpoint, on the GPU;
2. **native** pass: the kernels built with the plain ptxas, every batch size, nothing registered;
3. the chosen weights registered as timing ranges (placement ``experts``: every layer's expert weights;
   ``all``: every weight; ``attention-hbm``: all but the attention weights and norms);
4. **instrumented** pass: the same kernels built through hbfcc-ptxas (bound by the session's Triton
   hooks; a kernel not admitted would be refused at its launch), every batch size, the same prompts.

Per step: host wall time (launches + synchronize), and the device counters' deltas (modeled HBF time,
exposed wait, helper overhead, service, HBF bytes and requests). One step per batch (the first decode
step after the prompt) is also profiled launch by launch (a synchronize and a counter read after each
launch) in both passes: that gives the per-layer split and the Perfetto trace. The routing of every
step is kept (the routing trace). Tokens of the two passes are compared exactly.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hbfcommon.env import env_set
from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import atomic_write_json
from hbfcommon.profile import Profile, derive_profile

from . import config as cfgmod
from . import model, weights

log = logging.getLogger(__name__)

PROFILE_SLEEP_CYCLES = 1_000_000   # ~0.5 ms of GPU spin before each profiled launch
WARM_STEPS = 2          # steps run before the timed pass: every kernel compiled (and bound) once
PLACEMENTS = ("experts", "all", "attention-hbm", "kv-prefix", "none")
SCHEMA = "hbfsim.qwen3moe-run"


@dataclass(frozen=True)
class RunOptions:
    model: str = "small"                 # preset or checkpoint directory
    layers: int | None = None
    checkpoint: str | None = None        # load weights from here (else generated)
    seed: int = 0
    batches: tuple[int, ...] = (1,)
    prompt_len: int = 8
    new_tokens: int = 32
    placement: str = "experts"
    profile: str = "ocp-sg1"
    t_read_ns: int | None = None         # override the profile's tR (and its fixed read time)
    out: str = "qwen3moe-run"
    route: str = "model"                 # model | trace:FILE | zipf:S | uniform
    profile_step: bool = True            # the launch-by-launch profile of one step per batch
    native: bool = True
    cache: str | None = None             # Triton and hbfcc caches (shared by runs); default <out>/work
    socket: str | None = None            # attach to this running hbfd instead of starting one (make demo)
    shared_prefix: int = 0               # the first N prompt positions shared by the batch (one K/V copy)

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"placement {self.placement!r} is not one of {PLACEMENTS}", field="placement")
        for b in self.batches:
            if not 1 <= int(b) <= model.MAX_BATCH:
                raise ConfigError(f"batch {b} is outside 1..{model.MAX_BATCH}", field="batches")
        if self.prompt_len < 1 or self.new_tokens < 1:
            raise ConfigError("prompt_len and new_tokens must be >= 1", field="new_tokens")
        if not 0 <= self.shared_prefix <= self.prompt_len:
            raise ConfigError(f"shared prefix {self.shared_prefix} is outside 0..prompt_len ({self.prompt_len})",
                              field="shared_prefix")
        if self.placement == "kv-prefix" and not self.shared_prefix:
            raise ConfigError("placement kv-prefix needs a shared prefix (--shared-prefix N)", field="placement")
        if self.t_read_ns is not None and self.t_read_ns <= 0:
            raise ConfigError(f"t_read_ns {self.t_read_ns} must be > 0", field="t_read_ns")
        if not (self.route in ("model", "uniform") or self.route.startswith(("trace:", "zipf:"))):
            raise ConfigError(f"route {self.route!r}: model, uniform, zipf:S or trace:FILE", field="route")


# ------------------------------------------------------------------ toolchain + daemon
def toolchain(work: Path, cache: Path | None = None) -> dict[str, str]:
    """hbfcc-ptxas as an executable (this interpreter), its artifact/cache dirs, and the real ptxas
    (hbfcc's own choice: HBFCC_REAL_PTXAS, PATH, $CUDA_HOME, Triton's bundled one)."""
    from hbfcc.toolchain import find_real_ptxas  # noqa: PLC0415
    real = find_real_ptxas()
    wrap = work / "bin" / "hbfcc-ptxas"
    wrap.parent.mkdir(parents=True, exist_ok=True)
    wrap.write_text(f"#!/bin/sh\nexec {sys.executable} -m hbfcc.cli ptxas \"$@\"\n")
    wrap.chmod(0o755)
    c = Path(cache) if cache else work
    return {"plain": real, "hbf": str(wrap), "HBFCC_ARTIFACT_DIR": str(c / "hbfcc-artifacts"),
            "HBFCC_CACHE_DIR": str(c / "hbfcc-cache"), "HBFCC_REAL_PTXAS": real, "cache": str(c)}


def variant_env(tc: dict[str, str], variant: str):
    """TRITON_PTXAS_PATH and TRITON_CACHE_DIR for the compiles of one variant (Triton reads them per compile)."""
    return env_set({"TRITON_PTXAS_PATH": tc[variant],
                    "TRITON_CACHE_DIR": str(Path(tc["cache"]) / f"triton-cache-{variant}"),
                    "HBFCC_ARTIFACT_DIR": tc["HBFCC_ARTIFACT_DIR"], "HBFCC_CACHE_DIR": tc["HBFCC_CACHE_DIR"],
                    "HBFCC_REAL_PTXAS": tc["HBFCC_REAL_PTXAS"]})


def derived_profile(name: str, t_read_ns: int | None, out: Path) -> Profile:
    """the profile `name` (a bundled name or a path), with tR replaced when asked (hbfcommon.profile's one
    derivation, written to `out`); validated here, before hbfd starts"""
    return derive_profile(name, out, t_read_ns=t_read_ns, why="workloads.qwen3moe --t-read-ns")


def floor_bandwidth(prof: Profile) -> float:
    """what a device of this profile can deliver (bytes/s): its channels, capped by the host link"""
    g = prof.geometry
    return min(g.aggregate_bytes_per_s, g.host_link_bytes_per_s or float("inf"))


# ------------------------------------------------------------------ placement
def placed_tensors(placement: str, w: dict[str, Any], prefix_kv: tuple | None = None) -> dict[str, Any]:
    """the tensors a placement puts in HBF: experts (every layer's expert weights), all (every weight),
    attention-hbm (all but the attention weights and norms), kv-prefix (the experts and the K/V of the
    prefix the batch shares)"""
    attn = ("wqkv", "wo", "norm")
    out = {}
    if placement == "kv-prefix":
        if prefix_kv is None:
            raise ConfigError("placement kv-prefix needs the shared prefix's K/V buffers", field="placement")
        out.update({"prefix.k": prefix_kv[0], "prefix.v": prefix_kv[1]})
        placement = "experts"
    for k, t in w.items():
        e = k.endswith(("w_gate_up", "w_down"))
        if placement == "experts" and e or placement == "all" or \
                placement == "attention-hbm" and not k.endswith(attn):
            if all(t.data_ptr() != o.data_ptr() for o in out.values()):
                out[k] = t
    return out


# ------------------------------------------------------------------ counters
SPLIT_FIELDS = ("modeled_ns", "exposed_wait_ns", "overhead_ns", "service_ns", "hbf_bytes", "requests")


def split_of(c: dict) -> dict[str, int]:
    """the four counters (and HBF bytes/requests) of one counters() kernel entry or its totals"""
    ops = c["ops"]
    return {"modeled_ns": sum(o["modeled_ns"] for o in ops.values()),
            "exposed_wait_ns": int(c["wait_wall_ns"]),
            "overhead_ns": sum(o["overhead_ns"] for o in ops.values()) + int(c["wait_overhead_ns"]),
            "service_ns": sum(o["service_ns"] for o in ops.values()),
            "hbf_bytes": sum(o["bytes"] for o in ops.values()),
            "requests": sum(o["requests"] for o in ops.values())}


def _delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: int(b[k]) - int(a[k]) for k in a}


def _dist(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)
    q = lambda f: s[min(len(s) - 1, int(f * (len(s) - 1) + 0.5))]   # noqa: E731
    return {"median": statistics.median(s), "p10": q(0.1), "p90": q(0.9), "min": s[0], "max": s[-1], "n": len(s)}


# ------------------------------------------------------------------ one pass
class Pass:
    """the steps of one variant at one batch size"""

    def __init__(self, cfg, w, K, batch: int, opts: RunOptions, session, override, prefix_kv=None):
        self.cfg, self.w, self.K, self.batch, self.opts, self.s = cfg, w, K, batch, opts, session
        self.steps = opts.prompt_len + opts.new_tokens - 1
        self.dec = model.Decoder(cfg, w, K, batch, self.steps, shared_prefix=opts.shared_prefix, prefix_kv=prefix_kv)
        self.prompt = model.make_prompt(cfg, batch, opts.prompt_len, seed=opts.seed + 17 * batch,
                                        shared_prefix=opts.shared_prefix)
        # the warm-up compiles every kernel the timed pass launches: past the shared prefix too
        self.warm = max(WARM_STEPS, opts.shared_prefix + 1)
        self.override = override

    def _totals(self) -> dict[str, int] | None:
        """the session's counter totals (instrumented variant only; each read synchronizes and copies)"""
        if self.s is None or self.K.VARIANT != "hbf":
            return None
        return split_of(self.s.counters(publish=False)["totals"])

    def _sync(self) -> None:
        if self.s is not None and self.K.VARIANT == "hbf":
            self.s.synchronize()      # raises a device failure the step recorded
        else:
            import torch  # noqa: PLC0415
            torch.cuda.synchronize()

    def run(self, steps: int | None = None) -> dict:
        """positions 0..steps-1 (all by default); a short run compiles and warms up"""
        per_step = []
        c0 = self._totals()
        for t in range(self.steps if steps is None else min(steps, self.steps)):
            t0 = time.perf_counter_ns()
            self.dec.step(t, self.prompt, self.override)
            self._sync()
            t1 = time.perf_counter_ns()
            row = {"step": t, "decode": t >= self.opts.prompt_len - 1, "wall_ns": t1 - t0}
            c1 = self._totals()
            if c0 is not None:
                row.update(_delta(c0, c1))
            c0 = c1
            per_step.append(row)
        gen = self.dec.buf["generated"][self.opts.prompt_len - 1:].T.contiguous().cpu().tolist()
        return {"per_step": per_step, "tokens": gen,
                "route_ids": self.dec.buf["route_ids"].cpu().numpy()}

    def profile(self, step: int) -> list[dict]:
        """re-run step `step` (after run(): the cache holds the earlier positions) launch by launch"""
        import torch  # noqa: PLC0415
        recs: list[dict] = []
        last = [self._totals()]

        def hook(launch: model.Launch, fn) -> None:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # keep the GPU busy while the host prepares the launch (Triton's launcher, the session's
            # gate): the events then time the kernel, not the host's launch work
            torch.cuda._sleep(PROFILE_SLEEP_CYCLES)
            e0.record()
            fn()
            e1.record()
            self._sync()
            r = {"name": launch.name, "layer": launch.layer, "wall_ns": int(round(e0.elapsed_time(e1) * 1e6))}
            now = self._totals()
            if now is not None:
                r.update(_delta(last[0], now))
                last[0] = now
            recs.append(r)
        self.dec.launch_hook = hook
        try:
            self.dec.step(step, self.prompt, self.override)
        finally:
            self.dec.launch_hook = None
        return recs


def _route_override(opts: RunOptions, cfg, batch: int, steps: int):
    if opts.route == "model":
        return None, "captured"
    import torch  # noqa: PLC0415

    from . import routing
    if opts.route.startswith("trace:"):
        tr = routing.load_trace(opts.route[len("trace:"):])
        ids = tr.ids
        if ids.shape[1] < cfg.layers or ids.shape[2] < batch or tr.num_experts != cfg.experts or tr.top_k != cfg.top_k:
            raise ConfigError(f"routing trace {opts.route[6:]}: shape {ids.shape} (E={tr.num_experts}, k={tr.top_k}) "
                              f"does not cover {cfg.layers} layers x batch {batch} (E={cfg.experts}, k={cfg.top_k})",
                              field="route")
        reps = -(-steps // ids.shape[0])
        import numpy as np  # noqa: PLC0415
        ids = np.concatenate([ids] * reps)[:steps, :cfg.layers, :batch]
        src = "file"
    elif opts.route.startswith("zipf:"):
        try:
            s = float(opts.route[5:])
        except ValueError:
            raise ConfigError(f"route {opts.route!r}: zipf:S needs a number", field="route") from None
        ids = routing.synthetic_zipf(steps, cfg.layers, batch, cfg.experts, cfg.top_k, s, opts.seed).ids
        src = "synthetic-zipf"
    else:
        ids = routing.synthetic_uniform(steps, cfg.layers, batch, cfg.experts, cfg.top_k, opts.seed).ids
        src = "synthetic-uniform"
    return torch.from_numpy(ids.astype("int32")).cuda().contiguous(), src


# ------------------------------------------------------------------ the run
def run(opts: RunOptions) -> dict:
    import torch  # noqa: PLC0415

    import runtime_cuda
    from hbfd.runner import start_daemon

    from . import routing, steptrace
    t_start = time.perf_counter_ns()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    cfg = cfgmod.resolve(opts.checkpoint or opts.model, opts.layers)
    if opts.checkpoint:
        w = weights.load_checkpoint(cfg, opts.checkpoint)
        wsrc = f"checkpoint {opts.checkpoint}"
    else:
        w = weights.generate(cfg, seed=opts.seed)
        wsrc = f"generated (seed {opts.seed})"
    torch.cuda.synchronize()
    t_weights = time.perf_counter_ns()
    log.info("%s: %.2f GB of weights (%s, %.2f GB experts)", cfg.name, weights.nbytes(w) / 1e9, wsrc,
             weights.nbytes(w, "experts") / 1e9)
    tc = toolchain(work, Path(opts.cache) if opts.cache else None)
    if opts.socket:
        hb, prof = None, None
    else:
        prof = derived_profile(opts.profile, opts.t_read_ns, work / "profile.json")
        hb = start_daemon(prof.path, workdir=work, summary=out / "hbfd-summary.json", timeout_s=60.0,
                          env={"HBFD_THERMAL": os.environ.get("HBFD_THERMAL", "none"),
                               "HBFD_REFRESH": os.environ.get("HBFD_REFRESH", "none")})
    res: dict[str, Any] = {"schema": SCHEMA, "version": 1, "options": dataclasses.asdict(opts),
                           "model": dataclasses.asdict(cfg), "weights": wsrc,
                           "weight_bytes": weights.nbytes(w), "expert_bytes": weights.nbytes(w, "experts"),
                           "profile": {"path": prof.path, "name": prof.name,
                                       "link_bytes_per_s": floor_bandwidth(prof)} if prof else
                           {"path": None, "name": "(the running hbfd's)", "link_bytes_per_s": None},
                           "gpu": torch.cuda.get_device_name(), "batches": {}}
    partial = out / "run.partial.json"
    try:
        s = runtime_cuda.attach(socket=opts.socket or str(hb.socket))
        s.install_triton_hooks()
        Kp = model.load_kernels("plain", work)
        Kh = model.load_kernels("hbf", work)
        steps = opts.prompt_len + opts.new_tokens - 1
        prof_step = opts.prompt_len     # the first step that reads a generated token
        overrides = {b: _route_override(opts, cfg, b, steps) for b in opts.batches}
        # one prefix K/V for the run (its address never changes: registered once, before any admitted launch)
        prefix_kv = model.prefix_buffers(cfg, opts.shared_prefix, "cuda") if opts.shared_prefix else None
        native: dict[int, dict] = {}
        if opts.native:
            with variant_env(tc, "plain"):
                for b in opts.batches:
                    ps = Pass(cfg, w, Kp, b, opts, s, overrides[b][0], prefix_kv)
                    ps.run(ps.warm)                            # compiles and warms up
                    native[b] = ps.run()
                    if opts.profile_step and prof_step < steps:
                        native[b]["profile"] = ps.profile(prof_step)
                    log.info("native batch %d: %.2f ms/step (median)", b,
                             statistics.median(r["wall_ns"] for r in native[b]["per_step"]) / 1e6)
        placed = placed_tensors(opts.placement, w, prefix_kv)
        ranges = {k: s.register_timing_range(t.data_ptr(), t.numel() * t.element_size(), label=k)
                  for k, t in placed.items()} if opts.placement != "none" else {}
        res["placement"] = {"name": opts.placement, "tensors": len(ranges),
                            "bytes": sum(t.numel() * t.element_size() for t in placed.values()) if ranges else 0}
        log.info("placement %s: %d ranges, %.2f GB in HBF", opts.placement, len(ranges),
                 res["placement"]["bytes"] / 1e9)
        t_native = time.perf_counter_ns()
        with variant_env(tc, "hbf"):
            for b in opts.batches:
                ps = Pass(cfg, w, Kh, b, opts, s, overrides[b][0], prefix_kv)
                tb = time.perf_counter_ns()
                ps.run(ps.warm)                                # compiles through hbfcc-ptxas, warms up
                tc1 = time.perf_counter_ns()
                inst = ps.run()
                if opts.profile_step and prof_step < steps:
                    inst["profile"] = ps.profile(prof_step)
                res["batches"][str(b)] = _batch_result(b, native.get(b), inst, overrides[b][1], tc1 - tb,
                                                       res["profile"]["link_bytes_per_s"])
                br = res["batches"][str(b)]
                if inst.get("profile"):
                    recs = _merge_profile(native.get(b, {}).get("profile"), inst["profile"])
                    tp = out / f"step-trace-b{b}.perfetto.json"
                    steptrace.write_step_trace(recs, tp, {"model": cfg.name, "batch": b, "step": prof_step,
                                                          "profile": res["profile"]["name"],
                                                          "placement": opts.placement})
                    split = steptrace.per_layer_split(recs)
                    br["per_layer"] = split
                    br["trace"] = str(tp)
                    try:
                        png = out / f"layer-split-b{b}.png"
                        steptrace.plot_layer_split(split, png, f"{cfg.name} batch {b} step {prof_step} "
                                                                 f"({res['profile']['name']}, {opts.placement} in HBF)",
                                                  res["profile"]["link_bytes_per_s"])
                        br["png"] = str(png)
                    except ConfigError as e:
                        log.warning("no PNG: %s", e)
                ids = inst["route_ids"]
                rt = routing.RoutingTrace(ids=ids, weights=None, num_experts=cfg.experts, top_k=cfg.top_k,
                                          source=overrides[b][1], model=cfg.name,
                                          note=f"batch {b}, {steps} steps (prompt {opts.prompt_len})", params={})
                routing.save_trace(rt, out / f"routing-b{b}.json")
                br["routing_trace"] = str(out / f"routing-b{b}.json")
                br["demand"] = routing.dedup_demand(ids, sorted({1, *[x for x in (8, 16, 32, 64) if x <= b], b}))
                atomic_write_json(partial, res)
                log.info("instrumented batch %d: %s", b, json.dumps(br["summary"]))
        c = s.counters()
        res["unmodeled_launches"] = len(c["unmodeled_launches"])
        res["refused_launches"] = len(c["refused_launches"])
        res["kernels"] = {k: split_of(v) | {"launches": v["launches"]} for k, v in c["kernels"].items()}
        res["device_status"] = c["totals"]["status"]
        s.close()
    finally:
        if hb is not None:
            res["hbfd_exit"] = hb.shutdown("qwen3moe run done")
    t_end = time.perf_counter_ns()
    res["wall_s"] = {"total": (t_end - t_start) / 1e9, "weights": (t_weights - t_start) / 1e9,
                     "native_pass": (t_native - t_weights) / 1e9, "instrumented_pass": (t_end - t_native) / 1e9}
    if (out / "hbfd-summary.json").exists():
        summ = json.loads((out / "hbfd-summary.json").read_text())
        res["hbfd_summary"] = {"path": str(out / "hbfd-summary.json"), "status": summ.get("status")}
    atomic_write_json(out / "run.json", res)
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    return res


def _merge_profile(nat: list[dict] | None, inst: list[dict]) -> list[dict]:
    recs = []
    for i, r in enumerate(inst):
        n = nat[i] if nat and i < len(nat) and nat[i]["name"] == r["name"] else None
        recs.append({"name": r["name"], "layer": r["layer"], "native_ns": int(n["wall_ns"]) if n else 0,
                     "wall_ns": int(r["wall_ns"]), "modeled_ns": int(r.get("modeled_ns", 0)),
                     "exposed_wait_ns": int(r.get("exposed_wait_ns", 0)), "overhead_ns": int(r.get("overhead_ns", 0)),
                     "hbf_bytes": int(r.get("hbf_bytes", 0)), "requests": int(r.get("requests", 0))})
    return recs


def _med(rows: list[dict], key: str) -> float | None:
    return statistics.median(int(r.get(key, 0)) for r in rows) if rows else None


def simulator_bound(s: dict) -> bool | None:
    """True when the instrumented step's time is not the modeled device's: it streamed HBF at under half
    the profile's link bandwidth while adding more than twice the device floor over native. Then the
    added time is mostly the simulator's own (the helpers' cost per access), and the run says so."""
    need = ("achieved_hbf_gb_per_s", "link_gb_per_s", "added_ms_per_token", "device_floor_ms_per_token")
    if any(s.get(k) is None for k in need) or not s["hbf_gb_per_token"]:
        return None
    return s["achieved_hbf_gb_per_s"] < 0.5 * s["link_gb_per_s"] and \
        s["added_ms_per_token"] > 2 * s["device_floor_ms_per_token"]


def _batch_result(b, nat, inst, route_src, compile_ns, link_bps) -> dict:
    """per decode step medians (the steps after the prompt), totals, and the time split"""
    dec = [r for r in inst["per_step"] if r["decode"]]
    ndec = [r for r in nat["per_step"] if r["decode"]] if nat else []
    tot = {k: sum(r.get(k, 0) for r in dec) for k in SPLIT_FIELDS}
    same = nat is not None and nat["tokens"] == inst["tokens"]
    ratios = [r["wall_ns"] / n["wall_ns"] for r, n in zip(dec, ndec) if n["wall_ns"] > 0]
    ms = lambda v: None if v is None else v / 1e6   # noqa: E731
    inst_ms, nat_ms = ms(_med(dec, "wall_ns")), ms(_med(ndec, "wall_ns"))
    gb = _med(dec, "hbf_bytes") / 1e9
    # the modeled device's floor for a step: its HBF bytes over the profile's link bandwidth (a device of
    # this profile cannot deliver them faster); and the rate the instrumented step actually streamed them
    floor_ms = gb * 1e9 / link_bps * 1e3 if link_bps else None
    summary = {"tokens_identical_to_native": same if nat else None,
               "decode_steps": len(dec), "route": route_src,
               "native_ms_per_token": nat_ms, "instrumented_ms_per_token": inst_ms,
               "added_ms_per_token": None if nat_ms is None else inst_ms - nat_ms,
               "device_floor_ms_per_token": floor_ms,
               "achieved_hbf_gb_per_s": gb / (inst_ms / 1e3) if inst_ms else None,
               "link_gb_per_s": link_bps / 1e9 if link_bps else None,
               "modeled_ms_per_token": ms(_med(dec, "modeled_ns")),
               "exposed_wait_ms_per_token": ms(_med(dec, "exposed_wait_ns")),
               "overhead_ms_per_token": ms(_med(dec, "overhead_ns")),
               "hbf_gb_per_token": gb,
               "slowdown_median": statistics.median(ratios) if ratios else None,
               "requests_per_token": _med(dec, "requests"),
               "modeled_ns_per_request": tot["modeled_ns"] / tot["requests"] if tot["requests"] else None,
               "overhead_ns_per_request": tot["overhead_ns"] / tot["requests"] if tot["requests"] else None,
               # the simulator's own time per request against the time it models: above 1, the modeled
               # latency hides behind the helper's cost and the injected time is not the device's
               "overhead_over_modeled": tot["overhead_ns"] / tot["modeled_ns"] if tot["modeled_ns"] else None,
               "compile_and_first_pass_s": compile_ns / 1e9}
    summary["simulator_bound"] = simulator_bound(summary)
    return {"summary": summary, "tokens": inst["tokens"], "native_tokens": nat["tokens"] if nat else None,
            "per_step": inst["per_step"], "native_per_step": nat["per_step"] if nat else None,
            "dist": {"instrumented_wall_ns": _dist([r["wall_ns"] for r in dec]),
                     "native_wall_ns": _dist([r["wall_ns"] for r in ndec]),
                     "slowdown": _dist(ratios), "modeled_ns": _dist([r.get("modeled_ns", 0) for r in dec])}}
