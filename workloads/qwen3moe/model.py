"""The decoder: one decode step = the Triton kernels of workloads/qwen3moe/kernels.py, launched in order,
with a KV cache, batch 1..64, greedy decoding. No torch kernel runs inside a step (torch only allocates).

Prompts are fed one position per step (prefill through the decode path), every sequence of the batch at
the same position. Step ``t`` reads token ``t`` of the prompt while ``t < prompt_len`` and the token
step ``t-1`` generated after that; the argmax kernel writes step ``t``'s token into ``generated[t]``.
The router's choices of every step and layer are written straight into the routing trace buffer
``route_ids[step, layer]`` (no copy in the step); with ``route_override`` the ids come from a trace
instead (replayed or synthetic) and only their weights are computed.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from hbfcommon.errors import ConfigError

from .config import ModelConfig

log = logging.getLogger(__name__)

KERNEL_SOURCE = Path(__file__).with_name("kernels.py")
VARIANTS = ("plain", "hbf")
MAX_BATCH = 64


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def load_kernels(variant: str, work: str | Path) -> ModuleType:
    """kernels.py with every @triton.jit function renamed NAME_<variant>, written under `work` and
    imported: one compiled-kernel cache per variant, and kernel names that say which (the runtime's
    per-kernel counters and hbfd's summary are keyed by name). ``K.linear`` is the variant's linear."""
    from workloads.triton_kernels import import_text  # noqa: PLC0415
    if variant not in VARIANTS:
        raise ConfigError(f"kernel variant {variant!r} is not one of {VARIANTS}", variant=variant)
    src = KERNEL_SOURCE.read_text()
    names = re.findall(r"@triton\.jit(?:\([^)]*\))?[^\n]*\ndef (\w+)\(", src)
    pat = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    mod = import_text(Path(work) / f"qwen3moe_kernels_{variant}.py",
                      pat.sub(lambda m: f"{m.group(1)}_{variant}", src))
    mod.VARIANT = variant
    for n in names:
        setattr(mod, n, getattr(mod, f"{n}_{variant}"))
    return mod


def rope_tables(cfg: ModelConfig, t_max: int, device: str):
    """cos, sin [t_max, D] in bf16, computed as transformers' Qwen3MoeRotaryEmbedding does (fp32, then cast)."""
    import torch  # noqa: PLC0415
    D = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(torch.float) / D))
    pos = torch.arange(t_max, dtype=torch.float)
    fr = pos[:, None] * inv[None, :]
    emb = torch.cat((fr, fr), dim=-1)
    return emb.cos().to(torch.bfloat16).to(device).contiguous(), emb.sin().to(torch.bfloat16).to(device).contiguous()


@dataclass
class Launch:
    """one kernel launch of a step, as the launch hook sees it"""
    name: str
    layer: int                          # -1: outside the layers


@dataclass
class Decoder:
    cfg: ModelConfig
    w: dict[str, Any]
    K: ModuleType
    batch: int
    steps: int                          # positions to run (prompt + generated - 1)
    device: str = "cuda"
    f32dot: bool = False
    launch_hook: Callable[[Launch, Callable[[], None]], None] | None = None
    shared_prefix: int = 0              # positions [0, P0) of every sequence are one shared prefix
    prefix_kv: tuple[Any, Any] | None = None   # its K/V [L, NKV, T_P, D] (allocated here when None)
    buf: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import torch  # noqa: PLC0415
        c, B = self.cfg, self.batch
        if not 1 <= B <= MAX_BATCH:
            raise ConfigError(f"batch {B} is outside 1..{MAX_BATCH}", batch=B)
        if self.steps < 1:
            raise ConfigError(f"steps {self.steps} < 1", steps=self.steps)
        self.t_max = _pow2(max(16, self.steps))
        dev, bf = self.device, torch.bfloat16
        z = lambda *s, dt=bf: torch.zeros(s, dtype=dt, device=dev)   # noqa: E731
        self.buf = {
            "h": z(B, c.hidden), "h2": z(B, c.hidden), "x": z(B, c.hidden),
            "qkv": z(B, c.qkv_out), "q": z(B, c.q_heads * c.head_dim), "attn": z(B, c.q_heads * c.head_dim),
            "rlogits": z(B, c.experts), "rw": z(B, c.top_k, dt=torch.float32),
            "lists": z(c.experts, B, dt=torch.int32), "counts": z(c.experts, dt=torch.int32),
            "act": z(B * c.top_k, c.expert_ffn), "eout": z(B * c.top_k, c.hidden),
            "logits": z(B, c.vocab, dt=torch.float32),
            "kcache": z(c.layers, B, c.kv_heads, self.t_max, c.head_dim),
            "vcache": z(c.layers, B, c.kv_heads, self.t_max, c.head_dim),
            "route_ids": z(self.steps, c.layers, B, c.top_k, dt=torch.int32),
            "generated": z(self.steps, B, dt=torch.int32),
        }
        self.cos, self.sin = rope_tables(c, self.t_max, dev)
        self.block_b = max(16, _pow2(B))
        P0 = self.shared_prefix
        if not 0 <= P0 <= self.steps:
            raise ConfigError(f"shared prefix {P0} is outside 0..{self.steps} (the positions run)", shared_prefix=P0)
        if P0 and self.prefix_kv is None:
            self.prefix_kv = prefix_buffers(c, P0, dev)
        if P0:
            kp, vp = self.prefix_kv
            if tuple(kp.shape[:2]) != (c.layers, c.kv_heads) or kp.shape[2] < P0 or kp.shape[3] != c.head_dim:
                raise ConfigError(f"prefix K/V of shape {tuple(kp.shape)} does not hold {P0} positions of "
                                  f"{c.layers} layers x {c.kv_heads} KV heads x {c.head_dim}", shared_prefix=P0)

    # ------------------------------------------------------------------ launches
    def _go(self, name: str, layer: int, fn) -> None:
        if self.launch_hook is None:
            fn()
        else:
            self.launch_hook(Launch(name, layer), fn)

    def _linear(self, x, wt, out, *, res=None, out_f32=False, name="linear", layer=-1) -> None:
        N, Kd = wt.shape
        bn = 16 if N <= 8192 else 64
        bk = 128 if Kd % 128 == 0 else 64
        grid = ((N + bn - 1) // bn,)
        self._go(name, layer, lambda: self.K.linear[grid](
            x, wt, out, res if res is not None else out, self.batch, N, K=Kd, HAS_RES=res is not None,
            OUT_F32=out_f32, BLOCK_B=self.block_b, BLOCK_N=bn, BLOCK_K=bk, F32DOT=self.f32dot))

    def step(self, t: int, prompt, route_override=None) -> None:
        """position t (0-based) for the whole batch; prompt [P, B] int32 on the device"""
        c, K, b, B, P0 = self.cfg, self.K, self.buf, self.batch, self.shared_prefix
        H, D, E, F, TK = c.hidden, c.head_dim, c.experts, c.expert_ffn, c.top_k
        P = prompt.shape[0]
        tok = prompt[t] if t < P else b["generated"][t - 1]
        bh = min(1024, _pow2(H))
        self._go("embed", -1, lambda: K.embed[(B,)](tok, self.w["embed"], b["h"], H=H, BLOCK_H=bh))
        scale = D ** -0.5
        for i in range(c.layers):
            p = f"layers.{i}."
            w = self.w
            self._go("rmsnorm", i, lambda: K.rmsnorm[(B,)](b["h"], w[p + "in_norm"], b["x"], c.rms_eps, D=H,
                                                              BLOCK_D=_pow2(H)))
            self._linear(b["x"], w[p + "wqkv"], b["qkv"], name="qkv", layer=i)
            kc, vc = b["kcache"][i], b["vcache"][i]
            kp, vp = (self.prefix_kv[0][i], self.prefix_kv[1][i]) if P0 else (kc, vc)
            t_p = kp.shape[-2] if P0 else self.t_max
            if t < P0:      # the shared prefix: written once (sequence 0), read by every sequence
                wk, wv, bs, hs = kp, vp, 0, t_p * D
            else:
                wk, wv, bs, hs = kc, vc, c.kv_heads * self.t_max * D, self.t_max * D
            self._go("qk_norm_rope", i, lambda: K.qk_norm_rope[(B, c.q_heads + c.kv_heads)](
                b["qkv"], w[p + "q_norm"], w[p + "k_norm"], self.cos, self.sin, b["q"], wk, wv, t, c.rms_eps, bs, hs,
                NQ=c.q_heads, NKV=c.kv_heads, D=D))
            self._go("attention", i, lambda: K.attention[(B, c.kv_heads)](
                b["q"], kc, vc, kp, vp, b["attn"], t + 1, P0, scale, NQ=c.q_heads, NKV=c.kv_heads, T_MAX=self.t_max,
                T_P=t_p, D=D, G=c.group, BLOCK_G=max(16, _pow2(c.group)), BLOCK_T=32, F32DOT=self.f32dot))
            self._linear(b["attn"], w[p + "wo"], b["h2"], res=b["h"], name="o_proj", layer=i)
            self._go("rmsnorm", i, lambda: K.rmsnorm[(B,)](b["h2"], w[p + "post_norm"], b["x"], c.rms_eps,
                                                              D=H, BLOCK_D=_pow2(H)))
            self._linear(b["x"], w[p + "router"], b["rlogits"], name="router", layer=i)
            ids = b["route_ids"][t, i]
            ovr = route_override[t, i] if route_override is not None else ids
            self._go("router_topk", i, lambda: K.router_topk[(B,)](
                b["rlogits"], ids, b["rw"], ovr, E=E, TOPK=TK, NORM=c.norm_topk_prob,
                OVERRIDE=route_override is not None, BLOCK_E=_pow2(E)))
            self._go("route_lists", i, lambda: K.route_lists[(E,)](
                ids, B * TK, b["lists"], b["counts"], NA_MAX=B, BLOCK_A=_pow2(B * TK)))
            bf = 32
            self._go("moe_gate_up", i, lambda: K.moe_gate_up[(E, F // bf)](
                b["x"], w[p + "w_gate_up"], b["lists"], b["counts"], b["act"], H=H, F=F, TOPK=TK, NA_MAX=B,
                BLOCK_A=self.block_b, BLOCK_F=bf, BLOCK_K=128 if H % 128 == 0 else 64, F32DOT=self.f32dot))
            bhd = 64
            self._go("moe_down", i, lambda: K.moe_down[(E, H // bhd)](
                b["act"], w[p + "w_down"], b["lists"], b["counts"], b["eout"], H=H, F=F, NA_MAX=B,
                BLOCK_A=self.block_b, BLOCK_H=bhd, BLOCK_K=64 if F % 64 == 0 else 32, F32DOT=self.f32dot))
            self._go("moe_combine", i, lambda: K.moe_combine[(B,)](
                b["eout"], b["rw"], b["h2"], b["h"], H=H, TOPK=TK, BLOCK_H=min(512, _pow2(H))))
        self._go("rmsnorm", -1, lambda: K.rmsnorm[(B,)](b["h"], self.w["final_norm"], b["x"], c.rms_eps, D=H,
                                                           BLOCK_D=_pow2(H)))
        self._linear(b["x"], self.w["lm_head"], b["logits"], out_f32=True, name="lm_head", layer=-1)
        self._go("argmax", -1, lambda: K.argmax[(B,)](b["logits"], b["generated"][t], c.vocab, BLOCK_V=1024))


def prefix_buffers(cfg: ModelConfig, positions: int, device: str):
    """K and V of a prefix shared by the batch: [L, NKV, T_P, D] bf16 each (T_P a power of two >= 16)"""
    import torch  # noqa: PLC0415
    shp = (cfg.layers, cfg.kv_heads, _pow2(max(16, positions)), cfg.head_dim)
    return (torch.zeros(shp, dtype=torch.bfloat16, device=device), torch.zeros(shp, dtype=torch.bfloat16, device=device))


def make_prompt(cfg: ModelConfig, batch: int, length: int, *, seed: int = 0, device: str = "cuda",
                shared_prefix: int = 0):
    """[length, batch] int32 prompt token ids (seeded, uniform over the vocabulary); the first
    `shared_prefix` positions are the same for every sequence."""
    import torch  # noqa: PLC0415
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    p = torch.randint(0, cfg.vocab, (length, batch), generator=g, dtype=torch.int32)
    if shared_prefix:
        p[:shared_prefix] = p[:shared_prefix, :1]
    return p.to(device).contiguous()

