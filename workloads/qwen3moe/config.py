"""Model shape: a frozen, validated Qwen3-MoE configuration (the fields of a Hugging Face ``config.json``
that the decoder uses), the Qwen3-30B-A3B preset and small presets for CI-sized checks."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import read_json_document

# HF config.json keys -> our field names (the ones a Qwen3-MoE decode step needs)
_HF_KEYS = {"num_hidden_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "q_heads",
            "num_key_value_heads": "kv_heads", "head_dim": "head_dim", "num_experts": "experts",
            "num_experts_per_tok": "top_k", "moe_intermediate_size": "expert_ffn", "vocab_size": "vocab",
            "rms_norm_eps": "rms_eps", "norm_topk_prob": "norm_topk_prob",
            "max_position_embeddings": "max_positions", "tie_word_embeddings": "tie_embeddings"}


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    experts: int
    top_k: int
    expert_ffn: int
    vocab: int
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    norm_topk_prob: bool = True
    max_positions: int = 40_960
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "experts", "top_k", "expert_ffn",
                  "vocab", "max_positions"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"model config {self.name!r}: {f} must be a positive integer, got {v!r}",
                                  field=f)
        if self.q_heads % self.kv_heads:
            raise ConfigError(f"model config {self.name!r}: q_heads ({self.q_heads}) is not a multiple of "
                              f"kv_heads ({self.kv_heads})", field="q_heads")
        if self.top_k > self.experts:
            raise ConfigError(f"model config {self.name!r}: top_k ({self.top_k}) > experts ({self.experts})",
                              field="top_k")
        for f, m in (("head_dim", 32), ("hidden", 64), ("expert_ffn", 32)):
            if getattr(self, f) % m:
                raise ConfigError(f"model config {self.name!r}: {f} ({getattr(self, f)}) must be a multiple of "
                                  f"{m} (the kernels' tiles)", field=f)
        if self.head_dim & (self.head_dim - 1):
            raise ConfigError(f"model config {self.name!r}: head_dim ({self.head_dim}) must be a power of two",
                              field="head_dim")
        if not (self.rope_theta > 0 and self.rms_eps > 0):
            raise ConfigError(f"model config {self.name!r}: rope_theta and rms_eps must be > 0", field="rope_theta")

    # ------------------------------------------------------------------ sizes
    @property
    def group(self) -> int:
        """query heads per KV head (GQA)"""
        return self.q_heads // self.kv_heads

    @property
    def qkv_out(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    def expert_params(self) -> int:
        """parameters of one expert (gate, up, down)"""
        return 3 * self.expert_ffn * self.hidden

    def layer_params(self) -> dict[str, int]:
        h, d = self.hidden, self.head_dim
        attn = self.qkv_out * h + h * self.q_heads * d + 2 * d
        return {"attention": attn, "router": self.experts * h, "experts": self.experts * self.expert_params(),
                "norms": 2 * h}

    def param_count(self) -> dict[str, int]:
        lp = self.layer_params()
        emb = self.vocab * self.hidden
        out = {k: v * self.layers for k, v in lp.items()}
        out["embedding"] = emb
        out["lm_head"] = 0 if self.tie_embeddings else emb
        out["final_norm"] = self.hidden
        out["total"] = sum(out.values())
        out["active_per_token"] = out["total"] - out["experts"] + self.layers * self.top_k * self.expert_params()
        return out

    def to_hf(self) -> dict[str, Any]:
        """a Hugging Face Qwen3-MoE config.json for this shape (every layer sparse)"""
        d = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu",
             "num_hidden_layers": self.layers, "hidden_size": self.hidden, "num_attention_heads": self.q_heads,
             "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim, "num_experts": self.experts,
             "num_experts_per_tok": self.top_k, "moe_intermediate_size": self.expert_ffn,
             "intermediate_size": 3 * self.expert_ffn, "vocab_size": self.vocab, "rms_norm_eps": self.rms_eps,
             "rope_theta": self.rope_theta, "norm_topk_prob": self.norm_topk_prob,
             "max_position_embeddings": self.max_positions, "tie_word_embeddings": self.tie_embeddings,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False, "torch_dtype": "bfloat16",
             "output_router_logits": False, "sliding_window": None, "use_sliding_window": False}
        return d

    def with_layers(self, n: int) -> "ModelConfig":
        return dataclasses.replace(self, name=f"{self.name}-{n}l", layers=int(n))


QWEN3_30B_A3B = ModelConfig(name="qwen3-30b-a3b", layers=48, hidden=2048, q_heads=32, kv_heads=4, head_dim=128,
                            experts=128, top_k=8, expert_ffn=768, vocab=151_936)
# Qwen3-30B-A3B's head geometry (GQA 8:1, head 128) and routing (128 experts, top-8) at a small width
SMALL = ModelConfig(name="small", layers=4, hidden=512, q_heads=8, kv_heads=1, head_dim=128, experts=128, top_k=8,
                    expert_ffn=128, vocab=4096)
# CI on the Triton interpreter (CPU): the same code paths at toy size
TINY = ModelConfig(name="tiny", layers=2, hidden=128, q_heads=4, kv_heads=2, head_dim=32, experts=8, top_k=2,
                   expert_ffn=64, vocab=256)
PRESETS = {c.name: c for c in (QWEN3_30B_A3B, SMALL, TINY)}


def from_hf(d: dict[str, Any], name: str = "checkpoint") -> ModelConfig:
    """A ModelConfig from a Hugging Face Qwen3-MoE config.json dict (unsupported variants refused)."""
    if not isinstance(d, dict):
        raise ConfigError(f"{name}: config.json is not a JSON object")
    mt = d.get("model_type")
    if mt != "qwen3_moe":
        raise ConfigError(f"{name}: model_type {mt!r} is not qwen3_moe", field="model_type")
    if d.get("mlp_only_layers") or int(d.get("decoder_sparse_step", 1)) != 1:
        raise ConfigError(f"{name}: dense (mlp_only) layers are not supported: every layer must be sparse",
                          field="mlp_only_layers")
    if d.get("attention_bias"):
        raise ConfigError(f"{name}: attention_bias is not supported", field="attention_bias")
    rope = d.get("rope_scaling") or (d.get("rope_parameters") or {})
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        raise ConfigError(f"{name}: rope scaling {rope!r} is not supported (default RoPE only)", field="rope_scaling")
    if d.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{name}: hidden_act {d.get('hidden_act')!r} is not silu", field="hidden_act")
    kw: dict[str, Any] = {"name": name}
    for k, f in _HF_KEYS.items():
        if k in d:
            kw[f] = d[k]
        elif f in ("layers", "hidden", "q_heads", "kv_heads", "experts", "top_k", "expert_ffn", "vocab"):
            raise ConfigError(f"{name}: config.json has no {k}", field=k)
    if "head_dim" not in kw:
        kw["head_dim"] = kw["hidden"] // kw["q_heads"]
    theta = d.get("rope_theta", (d.get("rope_parameters") or {}).get("rope_theta", 1_000_000.0))
    kw["rope_theta"] = float(theta)
    kw["rms_eps"] = float(kw.get("rms_eps", 1e-6))
    kw["norm_topk_prob"] = bool(kw.get("norm_topk_prob", True))
    kw["tie_embeddings"] = bool(kw.get("tie_embeddings", False))
    return ModelConfig(**kw)


def load_hf_config(directory: str | Path) -> ModelConfig:
    p = Path(directory) / "config.json"
    d = read_json_document(p, what="checkpoint config.json", error=ConfigError).data
    return from_hf(d, name=Path(directory).name or "checkpoint")


def resolve(name_or_dir: str, layers: int | None = None) -> ModelConfig:
    """A preset name, or a checkpoint directory (its config.json); `layers` keeps only the first N."""
    if name_or_dir in PRESETS:
        cfg = PRESETS[name_or_dir]
    elif Path(name_or_dir).is_dir():
        cfg = load_hf_config(name_or_dir)
    else:
        raise ConfigError(f"model {name_or_dir!r} is neither a preset ({', '.join(PRESETS)}) nor a checkpoint "
                          "directory", model=name_or_dir)
    if layers is not None:
        if not 0 < layers <= cfg.layers:
            raise ConfigError(f"--layers {layers}: the model has {cfg.layers} layers", field="layers")
        if layers != cfg.layers:
            cfg = cfg.with_layers(layers)
    return cfg


def dumps(cfg: ModelConfig) -> str:
    return json.dumps(dataclasses.asdict(cfg), sort_keys=True)
