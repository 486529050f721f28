"""The decoder's weights: generated (seeded) or loaded from a Hugging Face safetensors checkpoint.

Internal layout (what the kernels read; one tensor per name, bf16, contiguous):

    embed [V, H]   lm_head [V, H]   final_norm [H]
    layers.{i}.in_norm [H]   .post_norm [H]   .q_norm [D]   .k_norm [D]
    layers.{i}.wqkv [(NQ + 2 NKV) D, H]   (q_proj, k_proj, v_proj rows stacked)
    layers.{i}.wo [H, NQ D]   .router [E, H]
    layers.{i}.w_gate_up [E, 2F, H]   (each expert's gate_proj rows, then its up_proj rows)
    layers.{i}.w_down [E, H, F]

A checkpoint uses Hugging Face's names (``model.layers.{i}.self_attn.q_proj.weight``, ...), with the
experts either per expert (``mlp.experts.{j}.gate_proj.weight``: the Hub's Qwen3-30B-A3B files) or
fused (``mlp.experts.gate_up_proj`` / ``down_proj``: what transformers 5 writes). ``write_checkpoint``
writes the per-expert form (config.json + model.safetensors), so a generated model can be handed to
transformers (and the loader tested) with no download.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import atomic_write_text, read_json_document

from .config import ModelConfig

log = logging.getLogger(__name__)

INIT_STD = 0.02   # transformers' initializer_range for Qwen3-MoE


def shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    H, D, E, F, V = cfg.hidden, cfg.head_dim, cfg.experts, cfg.expert_ffn, cfg.vocab
    out: dict[str, tuple[int, ...]] = {"embed": (V, H), "lm_head": (V, H), "final_norm": (H,)}
    for i in range(cfg.layers):
        p = f"layers.{i}."
        out.update({p + "in_norm": (H,), p + "post_norm": (H,), p + "q_norm": (D,), p + "k_norm": (D,),
                    p + "wqkv": (cfg.qkv_out, H), p + "wo": (H, cfg.q_heads * D), p + "router": (E, H),
                    p + "w_gate_up": (E, 2 * F, H), p + "w_down": (E, H, F)})
    return out


def is_norm(name: str) -> bool:
    return name.endswith("norm")


def generate(cfg: ModelConfig, *, seed: int = 0, device: str = "cuda") -> dict[str, Any]:
    """Seeded weights on `device`: norms 1, everything else N(0, 0.02) in bf16 (each tensor from its own
    generator seeded by (seed, its index), so a tensor does not depend on which others exist)."""
    import torch  # noqa: PLC0415
    out = {}
    for idx, (name, shp) in enumerate(shapes(cfg).items()):
        if is_norm(name):
            out[name] = torch.ones(shp, dtype=torch.bfloat16, device=device)
            continue
        g = torch.Generator(device=device)
        g.manual_seed(seed * 1_000_003 + idx)
        t = torch.empty(shp, dtype=torch.bfloat16, device=device)
        t.normal_(0.0, INIT_STD, generator=g)
        out[name] = t
    if cfg.tie_embeddings:
        out["lm_head"] = out["embed"]
    return out


# ------------------------------------------------------------------ Hugging Face names
def _hf_layer(i: int) -> str:
    return f"model.layers.{i}."


def to_hf(cfg: ModelConfig, w: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(HF name, tensor) pairs of a checkpoint in the per-expert form (views, no copies)."""
    NQD, NKVD, F = cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.expert_ffn
    yield "model.embed_tokens.weight", w["embed"]
    if not cfg.tie_embeddings:
        yield "lm_head.weight", w["lm_head"]
    yield "model.norm.weight", w["final_norm"]
    for i in range(cfg.layers):
        p, q = f"layers.{i}.", _hf_layer(i)
        yield q + "input_layernorm.weight", w[p + "in_norm"]
        yield q + "post_attention_layernorm.weight", w[p + "post_norm"]
        qkv = w[p + "wqkv"]
        yield q + "self_attn.q_proj.weight", qkv[:NQD]
        yield q + "self_attn.k_proj.weight", qkv[NQD:NQD + NKVD]
        yield q + "self_attn.v_proj.weight", qkv[NQD + NKVD:]
        yield q + "self_attn.o_proj.weight", w[p + "wo"]
        yield q + "self_attn.q_norm.weight", w[p + "q_norm"]
        yield q + "self_attn.k_norm.weight", w[p + "k_norm"]
        yield q + "mlp.gate.weight", w[p + "router"]
        gu, dn = w[p + "w_gate_up"], w[p + "w_down"]
        for j in range(cfg.experts):
            yield q + f"mlp.experts.{j}.gate_proj.weight", gu[j, :F]
            yield q + f"mlp.experts.{j}.up_proj.weight", gu[j, F:]
            yield q + f"mlp.experts.{j}.down_proj.weight", dn[j]


def write_checkpoint(cfg: ModelConfig, w: dict[str, Any], directory: str | Path) -> Path:
    """config.json + model.safetensors (per-expert names), the form of the Hub's Qwen3-MoE checkpoints."""
    from safetensors.torch import save_file  # noqa: PLC0415
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in to_hf(cfg, w)}
    tmp = d / ".model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(d / "model.safetensors")
    atomic_write_text(d / "config.json", json.dumps(cfg.to_hf(), indent=1) + "\n")
    return d


def _checkpoint_files(d: Path) -> list[Path]:
    idx = d / "model.safetensors.index.json"
    if idx.is_file():
        m = read_json_document(idx, what="safetensors index", error=ConfigError, max_bytes=64 << 20).data
        m = m.get("weight_map") if isinstance(m, dict) else None
        if not isinstance(m, dict) or not all(isinstance(f, str) for f in m.values()):
            raise ConfigError(f"{idx}: not a safetensors index (no weight_map of tensor -> file)", file=str(idx))
        files = sorted({d / f for f in m.values()})
    else:
        files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{d}: no *.safetensors file (nor model.safetensors.index.json)", directory=str(d))
    for f in files:
        if not f.is_file():
            raise ConfigError(f"{d}: the index names {f.name}, which is missing", file=str(f))
    return files


def load_checkpoint(cfg: ModelConfig, directory: str | Path, *, device: str = "cuda") -> dict[str, Any]:
    """The internal layout from a checkpoint directory (first cfg.layers layers; bf16 on `device`).
    Every tensor the decoder needs must be present with its shape; a missing or misshapen one is a
    ConfigError naming it."""
    import torch  # noqa: PLC0415
    from safetensors import safe_open  # noqa: PLC0415
    d = Path(directory)
    where: dict[str, tuple[Path, Any]] = {}
    for f in _checkpoint_files(d):
        try:
            h = safe_open(str(f), framework="pt", device="cpu")
        except Exception as e:   # safetensors raises its own SafetensorError / OSError
            raise ConfigError(f"{f}: not a safetensors file ({e})", file=str(f)) from None
        for k in h.keys():
            where[k] = (f, h)

    def get(name: str, shape: tuple[int, ...]):
        if name not in where:
            raise ConfigError(f"{d}: checkpoint has no tensor {name}", tensor=name)
        t = where[name][1].get_tensor(name)
        if tuple(t.shape) != tuple(shape):
            raise ConfigError(f"{d}: tensor {name} has shape {tuple(t.shape)}, the config needs {tuple(shape)}",
                              tensor=name)
        return t.to(device=device, dtype=torch.bfloat16)

    H, D, E, F, V = cfg.hidden, cfg.head_dim, cfg.experts, cfg.expert_ffn, cfg.vocab
    NQD, NKVD = cfg.q_heads * D, cfg.kv_heads * D
    out = {"embed": get("model.embed_tokens.weight", (V, H)), "final_norm": get("model.norm.weight", (H,))}
    out["lm_head"] = out["embed"] if cfg.tie_embeddings else get("lm_head.weight", (V, H))
    for i in range(cfg.layers):
        p, q = f"layers.{i}.", _hf_layer(i)
        out[p + "in_norm"] = get(q + "input_layernorm.weight", (H,))
        out[p + "post_norm"] = get(q + "post_attention_layernorm.weight", (H,))
        out[p + "q_norm"] = get(q + "self_attn.q_norm.weight", (D,))
        out[p + "k_norm"] = get(q + "self_attn.k_norm.weight", (D,))
        out[p + "wqkv"] = torch.cat([get(q + "self_attn.q_proj.weight", (NQD, H)),
                                     get(q + "self_attn.k_proj.weight", (NKVD, H)),
                                     get(q + "self_attn.v_proj.weight", (NKVD, H))]).contiguous()
        out[p + "wo"] = get(q + "self_attn.o_proj.weight", (H, NQD))
        out[p + "router"] = get(q + "mlp.gate.weight", (E, H))
        if q + "mlp.experts.gate_up_proj" in where:
            out[p + "w_gate_up"] = get(q + "mlp.experts.gate_up_proj", (E, 2 * F, H)).contiguous()
            out[p + "w_down"] = get(q + "mlp.experts.down_proj", (E, H, F)).contiguous()
        else:
            gu = torch.empty((E, 2 * F, H), dtype=torch.bfloat16, device=device)
            dn = torch.empty((E, H, F), dtype=torch.bfloat16, device=device)
            for j in range(E):
                gu[j, :F] = get(q + f"mlp.experts.{j}.gate_proj.weight", (F, H))
                gu[j, F:] = get(q + f"mlp.experts.{j}.up_proj.weight", (F, H))
                dn[j] = get(q + f"mlp.experts.{j}.down_proj.weight", (H, F))
            out[p + "w_gate_up"], out[p + "w_down"] = gu, dn
    log.info("loaded %d tensors of %s from %s", len(out), cfg.name, d)
    return out


def nbytes(w: dict[str, Any], which: str = "all") -> int:
    """bytes of the weights: all, experts (w_gate_up + w_down), or non-experts"""
    seen, total = set(), 0
    for k, t in w.items():
        if id(t) in seen:
            continue
        seen.add(id(t))
        e = k.endswith(("w_gate_up", "w_down"))
        if which == "all" or (which == "experts") == e:
            total += t.numel() * t.element_size()
    return total
