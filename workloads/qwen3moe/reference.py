"""The independent check: transformers' Qwen3-MoE model with the same weights, against our Triton decode.

Our decoder runs the prompt and generates greedily, keeping each step's fp32 logits. transformers then
runs one forward pass (bf16, its own attention and MoE code) over the prompt followed by our generated
tokens (teacher forcing: a divergence at one token does not compound), and its own greedy ``generate``.
Compared: the logits at every position that predicts a token (max |diff|, relative to the logits'
scale), the greedy token at each of those positions, and the generated sequences.
"""
from __future__ import annotations

import logging
from typing import Any

from hbfcommon.errors import ConfigError

from .config import ModelConfig
from .weights import to_hf

log = logging.getLogger(__name__)


def hf_model(cfg: ModelConfig, w: dict[str, Any], device: str):
    """transformers' Qwen3MoeForCausalLM for cfg, its parameters set to our tensors (bf16, eval)."""
    import torch  # noqa: PLC0415
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: PLC0415
    hc = Qwen3MoeConfig(**{k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "model_type",
                                                                              "torch_dtype")})
    with torch.device("meta"):
        m = Qwen3MoeForCausalLM(hc)
    m = m.to_empty(device=device).to(torch.bfloat16)
    sd = m.state_dict()
    fused = any(k.endswith("mlp.experts.gate_up_proj") for k in sd)
    src: dict[str, Any] = {}
    if fused:   # transformers >= 5: experts as 3-D tensors
        for k, t in to_hf(cfg, w):
            if ".mlp.experts." not in k:
                src[k] = t
        for i in range(cfg.layers):
            src[f"model.layers.{i}.mlp.experts.gate_up_proj"] = w[f"layers.{i}.w_gate_up"]
            src[f"model.layers.{i}.mlp.experts.down_proj"] = w[f"layers.{i}.w_down"]
    else:
        src = dict(to_hf(cfg, w))
    missing = sorted(set(sd) - set(src) - {k for k in sd if k.endswith("inv_freq")})
    if missing:
        raise ConfigError(f"this transformers' Qwen3-MoE has parameters our weights do not map to: {missing[:5]} "
                          "(a transformers version whose layout we do not know)", missing=missing[:5])
    m.load_state_dict({k: v.contiguous() for k, v in src.items()}, strict=False)
    m.model.rotary_emb = type(m.model.rotary_emb)(hc).to(device)   # inv_freq: a non-persistent buffer
    m.eval()
    return m


def compare(cfg: ModelConfig, w: dict[str, Any], K, *, batch: int = 2, prompt_len: int = 6, new_tokens: int = 6,
            seed: int = 0, device: str = "cuda", f32dot: bool = False, shared_prefix: int = 0) -> dict:
    import torch  # noqa: PLC0415

    from . import model
    steps = prompt_len + new_tokens - 1
    dec = model.Decoder(cfg, w, K, batch, steps, device=device, f32dot=f32dot, shared_prefix=shared_prefix)
    prompt = model.make_prompt(cfg, batch, prompt_len, seed=seed, device=device, shared_prefix=shared_prefix)
    ours = []
    for t in range(steps):
        dec.step(t, prompt)
        if t >= prompt_len - 1:
            ours.append(dec.buf["logits"].clone())
    gen = dec.buf["generated"][prompt_len - 1:].T.long()             # [B, new_tokens]
    ours_l = torch.stack(ours, dim=1)                                 # [B, new_tokens, V]
    m = hf_model(cfg, w, device)
    seq = torch.cat([prompt.T.long(), gen[:, :-1]], dim=1)
    with torch.no_grad():
        ref_l = m(seq).logits[:, prompt_len - 1:].float()             # [B, new_tokens, V]
        hf_gen = m.generate(prompt.T.long(), max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens,
                            pad_token_id=0)[:, prompt_len:]
    diff = (ours_l - ref_l).abs()
    scale = ref_l.abs().amax().item()
    ref_tok = ref_l.argmax(-1)
    agree = (ref_tok == gen).float().mean().item()
    # where the argmax differs: how far our token's reference logit is from the reference max (a near-tie)
    gaps = ref_l.amax(-1) - ref_l.gather(-1, gen[..., None])[..., 0]
    gap = gaps.amax().item()
    # a disagreement where our token is also a maximum of the reference's bf16 logits is a tie there
    tie_ok = ((ref_tok == gen) | (gaps == 0)).float().mean().item()
    return {"batch": batch, "prompt_len": prompt_len, "shared_prefix": shared_prefix, "new_tokens": new_tokens, "layers": cfg.layers,
            "max_abs_logit_diff": diff.amax().item(), "mean_abs_logit_diff": diff.mean().item(),
            "logit_scale": scale, "rel_max_diff": diff.amax().item() / max(scale, 1e-30),
            "teacher_forced_token_agreement": agree, "agreement_counting_bf16_ties": tie_ok, "max_ref_logit_gap_of_our_tokens": gap,
            "generate_identical": bool(torch.equal(hf_gen.to(gen.device), gen)),
            "ours": gen.tolist(), "transformers_generate": hf_gen.tolist()}
