"""``python -m workloads.qwen3moe``: the Qwen3-MoE decode with its weights in HBF (issue 20).

    python -m workloads.qwen3moe run  [--model small|qwen3-30b-a3b|tiny|CKPT_DIR] [--layers N]
                                      [--checkpoint DIR] [--batch 1 --batch 8 ...] [--tokens 32] [--prompt 8]
                                      [--placement experts|all|attention-hbm|kv-prefix|none] [--shared-prefix N]
                                      [--profile ocp-sg1]
                                      [--t-read-ns NS] [--route model|uniform|zipf:S|trace:FILE] [--out DIR]
    python -m workloads.qwen3moe write-checkpoint --model tiny --out DIR [--seed 0]   (no GPU needed)
    python -m workloads.qwen3moe demand TRACE.json [--batch 1 --batch 8 ...]          (no GPU needed)
    python -m workloads.qwen3moe zipf --batch-size 8 --ratio 2.487                     (no GPU needed)
    python -m workloads.qwen3moe info [--model NAME]
    python -m workloads.qwen3moe check [--model NAME|DIR] [--layers N] [--checkpoint DIR] [--interpret]
        our decode against transformers' Qwen3-MoE with the same weights (--interpret: on the CPU,
        through the Triton interpreter); exit 1 when logits or greedy tokens disagree

Bad input is one line on stderr (``qwen3moe: CODE: what is wrong``), exit status 2.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Sequence

from hbfcommon.cliargs import Parser, parse
from hbfcommon.errors import ConfigError, HbfError

log = logging.getLogger("workloads.qwen3moe")


def _parser() -> Parser:
    p = Parser(prog="python -m workloads.qwen3moe", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="native and HBF-placed decode on the GPU, side by side")
    r.add_argument("--model", default="small")
    r.add_argument("--layers", type=int)
    r.add_argument("--checkpoint")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--batch", type=int, action="append")
    r.add_argument("--tokens", type=int, default=32)
    r.add_argument("--prompt", type=int, default=8)
    r.add_argument("--placement", default="experts")
    r.add_argument("--shared-prefix", type=int, default=0,
                   help="the first N prompt positions shared by the batch: one K/V copy (kv-prefix puts it in HBF)")
    r.add_argument("--profile", default="ocp-sg1")
    r.add_argument("--t-read-ns", type=int)
    r.add_argument("--route", default="model")
    r.add_argument("--out", default="qwen3moe-run")
    r.add_argument("--cache", help="Triton and hbfcc caches (shared between runs); default OUT/work")
    r.add_argument("--socket", help="use this running hbfd (its profile) instead of starting one")
    r.add_argument("--no-native", action="store_true")
    r.add_argument("--no-profile-step", action="store_true")
    w = sub.add_parser("write-checkpoint", help="a generated checkpoint (config.json + model.safetensors)")
    w.add_argument("--model", default="tiny")
    w.add_argument("--layers", type=int)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--out", required=True)
    d = sub.add_parser("demand", help="deduplicated expert demand of a routing trace")
    d.add_argument("trace")
    d.add_argument("--batch", type=int, action="append")
    z = sub.add_parser("zipf", help="the Zipf exponent whose demand ratio at a batch matches a target")
    z.add_argument("--experts", type=int, default=128)
    z.add_argument("--top-k", type=int, default=8)
    z.add_argument("--batch-size", type=int, default=8)
    z.add_argument("--ratio", type=float, default=2.487)
    c = sub.add_parser("check", help="logits and greedy tokens against transformers' Qwen3-MoE")
    c.add_argument("--model", default="tiny")
    c.add_argument("--layers", type=int)
    c.add_argument("--checkpoint")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--batch", type=int, default=2)
    c.add_argument("--prompt", type=int, default=4)
    c.add_argument("--tokens", type=int, default=4)
    c.add_argument("--shared-prefix", type=int, default=0)
    c.add_argument("--tolerance", type=float, default=0.03, help="max |logit diff| / max |logit|")
    c.add_argument("--interpret", action="store_true", help="CPU: the Triton interpreter (TRITON_INTERPRET=1)")
    c.add_argument("--out", help="write the comparison here (JSON)")
    i = sub.add_parser("info", help="a model's shape and parameter count")
    i.add_argument("--model", default="qwen3-30b-a3b")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    ns = parse(_parser(), sys.argv[1:] if argv is None else argv)
    try:
        return _run(ns)
    except HbfError as e:
        print(f"qwen3moe: {e.code.name}: {e.message}", file=sys.stderr)
        return 2


def _require(*modules: str, gpu: bool = False) -> None:
    """a one-line error, not an ImportError or a CUDA traceback, when the workload cannot run here"""
    import importlib.util  # noqa: PLC0415
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)} not installed (make torch, or pip install torch "
                          "'hbfsim[llm]')", missing=missing)
    if gpu:
        import torch  # noqa: PLC0415
        if not torch.cuda.is_available():
            raise ConfigError("no CUDA GPU here (torch.cuda.is_available() is false): `run` needs one; "
                              "`check --interpret` runs on the CPU", field="gpu")


def _run(ns) -> int:
    if ns.cmd == "check" and ns.interpret:
        import os   # noqa: PLC0415  (before anything imports triton: its language is decorated at import)
        os.environ["TRITON_INTERPRET"] = "1"
    if ns.cmd == "check":
        _require("torch", "triton", "transformers", gpu=not ns.interpret)
    elif ns.cmd == "write-checkpoint":
        _require("torch", "safetensors")
    from . import config as cfgmod
    from . import routing
    if ns.cmd == "check":
        return _check(ns, cfgmod)
    if ns.cmd == "info":
        cfg = cfgmod.resolve(ns.model)
        print(json.dumps({"config": cfgmod.dumps(cfg), "params": cfg.param_count()}, indent=1))
        return 0
    if ns.cmd == "write-checkpoint":
        from . import weights
        cfg = cfgmod.resolve(ns.model, ns.layers)
        w = weights.generate(cfg, seed=ns.seed, device="cpu")
        d = weights.write_checkpoint(cfg, w, ns.out)
        print(f"wrote {cfg.name} ({cfg.param_count()['total']:,} parameters) to {d}")
        return 0
    if ns.cmd == "demand":
        tr = routing.load_trace(ns.trace)
        bs = ns.batch or [b for b in (1, 8, 16, 32, 64) if b <= tr.ids.shape[2]]
        print(f"{ns.trace}: source {tr.source}, {tr.ids.shape[0]} steps x {tr.ids.shape[1]} layers x "
              f"{tr.ids.shape[2]} tokens, E={tr.num_experts}, top-{tr.top_k}")
        print(routing.format_demand(routing.dedup_demand(tr.ids, bs)))
        return 0
    if ns.cmd == "zipf":
        s = routing.calibrate_zipf(ns.experts, ns.top_k, ns.batch_size, ns.ratio)
        print(f"zipf exponent {s:.4f}: demand ratio {ns.ratio} at batch {ns.batch_size} "
              f"(E={ns.experts}, top-{ns.top_k})")
        return 0
    from .run import RunOptions, run
    opts = RunOptions(model=ns.model, layers=ns.layers, checkpoint=ns.checkpoint, seed=ns.seed,
                      batches=tuple(ns.batch or [1]), prompt_len=ns.prompt, new_tokens=ns.tokens,
                      placement=ns.placement, profile=ns.profile, t_read_ns=ns.t_read_ns, out=ns.out,
                      route=ns.route, profile_step=not ns.no_profile_step, native=not ns.no_native,
                      cache=ns.cache, socket=ns.socket, shared_prefix=ns.shared_prefix)
    _require("torch", "triton", gpu=True)          # after the options: a bad option is named first
    res = run(opts)
    print_summary(res)
    return 0 if all(b["summary"]["tokens_identical_to_native"] in (True, None) for b in res["batches"].values()) \
        and res["unmodeled_launches"] == 0 else 1


def _check(ns, cfgmod) -> int:
    import tempfile  # noqa: PLC0415

    from hbfcommon.fsutil import atomic_write_json  # noqa: PLC0415

    from . import model, reference, weights
    dev = "cpu" if ns.interpret else "cuda"
    cfg = cfgmod.resolve(ns.checkpoint or ns.model, ns.layers)
    w = weights.load_checkpoint(cfg, ns.checkpoint, device=dev) if ns.checkpoint else \
        weights.generate(cfg, seed=ns.seed, device=dev)
    with tempfile.TemporaryDirectory(prefix="qwen3moe-check-") as td:
        K = model.load_kernels("plain", td)
        r = reference.compare(cfg, w, K, batch=ns.batch, prompt_len=ns.prompt, new_tokens=ns.tokens, seed=ns.seed,
                              device=dev, f32dot=ns.interpret, shared_prefix=ns.shared_prefix)
    ok = r["rel_max_diff"] <= ns.tolerance and r["agreement_counting_bf16_ties"] == 1.0
    r["ok"], r["tolerance"], r["model"] = ok, ns.tolerance, cfg.name
    if ns.out:
        atomic_write_json(ns.out, r)
    print(json.dumps(r))
    print(f"{cfg.name}: max |logit diff| {r['max_abs_logit_diff']:.4g} ({r['rel_max_diff']:.2%} of the logits' "
          f"scale, tolerance {ns.tolerance:.0%}); greedy tokens agree {r['teacher_forced_token_agreement']:.1%} "
          f"({r['agreement_counting_bf16_ties']:.1%} counting bf16 ties); generate identical: "
          f"{r['generate_identical']} -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def print_summary(res: dict) -> None:
    print(f"{res['model']['name']} on {res['gpu']}: {res['weight_bytes'] / 1e9:.2f} GB weights, "
          f"placement {res['placement']['name']} ({res['placement']['bytes'] / 1e9:.2f} GB in HBF), "
          f"profile {res['profile']['name']}")
    print(f"  unmodeled launches {res['unmodeled_launches']}, refused {res['refused_launches']}, "
          f"wall {res['wall_s']['total']:.1f} s")
    print("  per decode step (median): native and instrumented wall; the modeled device's floor (HBF bytes over the "
          "profile's link bandwidth); modeled, exposed wait and helper overhead are sums over warps")
    hdr = ("batch", "identical", "native ms", "instr ms", "device floor ms", "modeled ms", "exposed ms", "overhead ms",
           "HBF GB", "HBF GB/s achieved")
    print("  " + " | ".join(hdr))
    for b, r in res["batches"].items():
        s = r["summary"]
        f = lambda v: "-" if v is None else f"{v:.3f}"   # noqa: E731
        print("  " + " | ".join([b, str(s["tokens_identical_to_native"]), f(s["native_ms_per_token"]),
                                 f(s["instrumented_ms_per_token"]), f(s["device_floor_ms_per_token"]),
                                 f(s["modeled_ms_per_token"]),
                                 f(s["exposed_wait_ms_per_token"]), f(s["overhead_ms_per_token"]),
                                 f(s["hbf_gb_per_token"]), f(s["achieved_hbf_gb_per_s"])]))
        if s.get("simulator_bound"):
            print(f"    WARNING: this time is the simulator's, not the modeled device's: HBF streamed at "
                  f"{s['achieved_hbf_gb_per_s']:.0f} GB/s of the profile's {s['link_gb_per_s']:.0f} GB/s, and the "
                  f"step added {s['added_ms_per_token']:.1f} ms over native where the device floor is "
                  f"{s['device_floor_ms_per_token']:.1f} ms (helper {s['overhead_ns_per_request'] or 0:.0f} ns per "
                  f"request vs {s['modeled_ns_per_request'] or 0:.0f} ns modeled)")
        print(f"    tokens[0]: {r['tokens'][0][:16]}")
        for k in ("trace", "png", "routing_trace"):
            if k in r:
                print(f"    {k}: {r[k]}")


if __name__ == "__main__":
    sys.exit(main())
