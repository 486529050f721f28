"""The Triton kernels of one Qwen3-MoE decode step (every kernel the step launches is one of these).

Numerics follow Hugging Face's Qwen3-MoE in bf16 (transformers' modeling_qwen3_moe.py): fp32
accumulation, and the same bf16 roundings where the reference rounds (linear outputs, RMSNorm before
its weight, RoPE terms, silu(gate) x up, the routing weights, the residual adds). The routing is
exact top-k of the fp32 softmax of the (bf16) router logits, ties to the lower expert id.

Memory traffic is the decode step's: the weights are read once per step (every expert's weights by
the programs of that expert only, once, for all the tokens routed to it: the deduplicated demand),
activations are tiny. ``F32DOT`` (the Triton interpreter, CI) does each ``tl.dot`` in fp32 from the
bf16 values (products of bf16 are exact in fp32): the interpreter's bf16 dot is wrong.

The module is imported once per *variant* (plain ptxas / hbfcc-ptxas) under distinct module names
(workloads/qwen3moe/model.py ``load_kernels``): Triton keeps one compiled-kernel cache per function
object, so the two variants never share a binary.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _dot(a, b, acc, F32DOT: tl.constexpr):
    """acc + a @ b^T for bf16 a [M, K] and b [N, K]"""
    if F32DOT:
        return acc + tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), input_precision="ieee")
    else:
        return acc + tl.dot(a, tl.trans(b))


@triton.jit
def embed(tok_ptr, emb_ptr, out_ptr, H: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0)
    t = tl.load(tok_ptr + b).to(tl.int64)
    for h0 in range(0, H, BLOCK_H):
        offs = h0 + tl.arange(0, BLOCK_H)
        m = offs < H
        tl.store(out_ptr + b * H + offs, tl.load(emb_ptr + t * H + offs, mask=m), mask=m)


@triton.jit
def rmsnorm(x_ptr, w_ptr, out_ptr, eps, D: tl.constexpr, BLOCK_D: tl.constexpr):
    """out = w * bf16(x * rsqrt(mean(x^2) + eps)) per row of D (HF Qwen3MoeRMSNorm)"""
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    x = tl.load(x_ptr + r * D + offs, mask=m, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
    y = (x * inv).to(tl.bfloat16).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + r * D + offs, (w * y).to(tl.bfloat16), mask=m)


@triton.jit
def linear(x_ptr, w_ptr, out_ptr, res_ptr, B, N, K: tl.constexpr, HAS_RES: tl.constexpr,
           OUT_F32: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           F32DOT: tl.constexpr):
    """out[B, N] = x[B, K] @ w[N, K]^T (bf16 out, or fp32 with OUT_F32), + res (bf16 add) with HAS_RES"""
    pn = tl.program_id(0)
    rb = tl.arange(0, BLOCK_B)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mb = rb < B
    mn = rn < N
    acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + rb[:, None] * K + k0 + rk[None, :], mask=mb[:, None], other=0.0)
        w = tl.load(w_ptr + rn[:, None].to(tl.int64) * K + k0 + rk[None, :], mask=mn[:, None], other=0.0)
        acc = _dot(a, w, acc, F32DOT)
    m2 = mb[:, None] & mn[None, :]
    o_offs = rb[:, None] * N + rn[None, :]
    if OUT_F32:
        tl.store(out_ptr + o_offs, acc, mask=m2)
    else:
        o = acc.to(tl.bfloat16)
        if HAS_RES:
            r = tl.load(res_ptr + o_offs, mask=m2, other=0.0)
            o = (r.to(tl.float32) + o.to(tl.float32)).to(tl.bfloat16)
        tl.store(out_ptr + o_offs, o, mask=m2)


@triton.jit(do_not_specialize=["pos"])     # one binary for every position (no recompiles at 1, 16, ...)
def qk_norm_rope(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, q_out, kc_ptr, vc_ptr, pos, eps, b_stride, h_stride,
                 NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr):
    """q/k RMSNorm over the head, RoPE (rotate_half) at `pos`; q to q_out [B, NQ, D], k and v into a
    cache at `pos`: element (b, g, t, d) at b * b_stride + g * h_stride + t * D + d -- the layer's cache
    [B, NKV, T_MAX, D] (b_stride NKV * T_MAX * D, h_stride T_MAX * D), or a prefix shared by the batch
    [NKV, T_P, D] (b_stride 0, h_stride T_P * D: sequence 0 writes it). Grid (B, NQ + NKV)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    HALF: tl.constexpr = D // 2
    d = tl.arange(0, D)
    dp = (d + HALF) % D                      # rotate_half's partner
    sign = tl.where(d < HALF, -1.0, 1.0)
    row = qkv_ptr + b * ((NQ + 2 * NKV) * D) + h * D
    x = tl.load(row + d).to(tl.float32)
    xp = tl.load(row + dp).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
    is_q = h < NQ
    wn = tl.where(is_q, tl.load(qn_ptr + d), tl.load(kn_ptr + d)).to(tl.float32)
    wnp = tl.where(is_q, tl.load(qn_ptr + dp), tl.load(kn_ptr + dp)).to(tl.float32)
    y = (wn * (x * inv).to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16).to(tl.float32)
    yp = (wnp * (xp * inv).to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16).to(tl.float32)
    c = tl.load(cos_ptr + pos * D + d).to(tl.float32)
    s = tl.load(sin_ptr + pos * D + d).to(tl.float32)
    t1 = (y * c).to(tl.bfloat16).to(tl.float32)
    t2 = ((sign * yp).to(tl.bfloat16).to(tl.float32) * s).to(tl.bfloat16).to(tl.float32)
    o = (t1 + t2).to(tl.bfloat16)
    if is_q:
        tl.store(q_out + (b * NQ + h) * D + d, o)
    elif (b_stride > 0) | (b == 0):
        g = h - NQ
        slot = b.to(tl.int64) * b_stride + g * h_stride + pos * D
        tl.store(kc_ptr + slot + d, o)
        tl.store(vc_ptr + slot + d, tl.load(row + NKV * D + d))


@triton.jit
def _scores(q, kc, kp, t0, T, P0, scale, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_T: tl.constexpr,
            F32DOT: tl.constexpr):
    """scaled q.k over positions [t0, t0 + BLOCK_T) (-inf at and past T), K rows below P0 from the shared
    prefix `kp`, the others from the sequence's cache `kc` (both at the KV head's base); also the rows'
    prefix flags, their element offsets and their in-range mask (for the V rows of the same block)"""
    rt = t0 + tl.arange(0, BLOCK_T)
    mt = rt < T
    inp = rt < P0
    off = rt[:, None] * D + tl.arange(0, D)[None, :]
    k = tl.load(tl.where(inp[:, None], kp + off, kc + off), mask=mt[:, None], other=0.0)
    s = _dot(q, k, tl.zeros((BLOCK_G, BLOCK_T), tl.float32), F32DOT) * scale
    return tl.where(mt[None, :], s, float("-inf")), inp, off, mt


@triton.jit(do_not_specialize=["T", "P0"])
def attention(q_ptr, kc_ptr, vc_ptr, kp_ptr, vp_ptr, out_ptr, T, P0, scale, NQ: tl.constexpr, NKV: tl.constexpr,
              T_MAX: tl.constexpr, T_P: tl.constexpr, D: tl.constexpr, G: tl.constexpr, BLOCK_G: tl.constexpr,
              BLOCK_T: tl.constexpr, F32DOT: tl.constexpr):
    """decode attention of the G query heads of one KV head over positions [0, T): positions below P0
    from the prefix shared by the batch (kp/vp [NKV, T_P, D]), the rest from the sequence's cache
    (kc/vc [B, NKV, T_MAX, D]). Exact softmax in fp32 (two passes: max and sum, then bf16 probabilities
    x V). Grid (B, NKV)."""
    b = tl.program_id(0)
    g = tl.program_id(1)
    rg = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D)
    mg = rg < G
    q = tl.load(q_ptr + (b * NQ + g * G + rg)[:, None] * D + d[None, :], mask=mg[:, None], other=0.0)
    base = (b * NKV + g) * T_MAX * D
    pbase = g * T_P * D
    m_i = tl.full((BLOCK_G,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_G,), tl.float32)
    for t0 in range(0, T, BLOCK_T):
        s, _, _, _ = _scores(q, kc_ptr + base, kp_ptr + pbase, t0, T, P0, scale, D, BLOCK_G, BLOCK_T, F32DOT)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m_i = m_new
    acc = tl.zeros((BLOCK_G, D), tl.float32)
    for t0 in range(0, T, BLOCK_T):
        s, inp, off, mt = _scores(q, kc_ptr + base, kp_ptr + pbase, t0, T, P0, scale, D, BLOCK_G, BLOCK_T, F32DOT)
        p = (tl.exp(s - m_i[:, None]) / l_i[:, None]).to(tl.bfloat16)
        v = tl.load(tl.where(inp[:, None], vp_ptr + pbase + off, vc_ptr + base + off), mask=mt[:, None],
                    other=0.0)
        acc = _dot(p, tl.trans(v), acc, F32DOT)
    tl.store(out_ptr + (b * NQ + g * G + rg)[:, None] * D + d[None, :], acc.to(tl.bfloat16), mask=mg[:, None])


@triton.jit
def router_topk(logits_ptr, ids_ptr, w_ptr, ovr_ptr, E: tl.constexpr, TOPK: tl.constexpr,
                NORM: tl.constexpr, OVERRIDE: tl.constexpr, BLOCK_E: tl.constexpr):
    """softmax over the E (bf16) router logits in fp32, top-k (ties: lower id), renormalized (NORM),
    weights rounded to bf16. OVERRIDE: the ids come from ovr_ptr (a replayed or synthetic routing) and
    only their weights are computed. ids [B, TOPK] int32 (the routing trace), w [B, TOPK] bf16."""
    b = tl.program_id(0)
    e = tl.arange(0, BLOCK_E)
    me = e < E
    x = tl.load(logits_ptr + b * E + e, mask=me, other=float("-inf")).to(tl.float32)
    p = tl.exp(x - tl.max(x, axis=0))
    p = p / tl.sum(p, axis=0)
    p = tl.where(me, p, -1.0)
    total = 0.0
    for i in tl.static_range(TOPK):
        if OVERRIDE:
            idx = tl.load(ovr_ptr + b * TOPK + i)
            v = tl.sum(tl.where(e == idx, p, 0.0), axis=0)
        else:
            v = tl.max(p, axis=0)
            idx = tl.min(tl.where(p == v, e, BLOCK_E), axis=0)
        p = tl.where(e == idx, -1.0, p)
        total += v
        tl.store(ids_ptr + b * TOPK + i, idx.to(tl.int32))
        tl.store(w_ptr + b * TOPK + i, v)          # fp32 for now; normalized below
    for i in tl.static_range(TOPK):
        v = tl.load(w_ptr + b * TOPK + i)
        if NORM:
            v = v / total
        tl.store(w_ptr + b * TOPK + i, v.to(tl.bfloat16).to(tl.float32))


@triton.jit
def route_lists(ids_ptr, NA, list_ptr, count_ptr, NA_MAX: tl.constexpr, BLOCK_A: tl.constexpr):
    """for expert e = program 0: the assignments (token x slot indices into ids) routed to it, in order,
    into list[e, :count[e]]"""
    e = tl.program_id(0)
    a = tl.arange(0, BLOCK_A)
    ids = tl.load(ids_ptr + a, mask=a < NA, other=-1)
    sel = (ids == e).to(tl.int32)
    where = tl.cumsum(sel, axis=0) - 1
    tl.store(list_ptr + e * NA_MAX + where, a, mask=sel == 1)
    tl.store(count_ptr + e, tl.sum(sel, axis=0))


@triton.jit
def _routed(list_ptr, e, n, NA_MAX: tl.constexpr, BLOCK_A: tl.constexpr):
    """the n assignments routed to expert e (list[e, :n]) as a masked block of BLOCK_A"""
    ra = tl.arange(0, BLOCK_A)
    ma = ra < n
    return ma, tl.load(list_ptr + e * NA_MAX + ra, mask=ma, other=0)


@triton.jit
def moe_gate_up(x_ptr, w_ptr, list_ptr, count_ptr, act_ptr, H: tl.constexpr, F: tl.constexpr,
                TOPK: tl.constexpr, NA_MAX: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_F: tl.constexpr,
                BLOCK_K: tl.constexpr, F32DOT: tl.constexpr):
    """act[a, f] = bf16(silu(bf16(x gate)) * bf16(x up)) for the assignments a routed to expert e, f in
    this program's block; w [E, 2F, H] (gate rows then up rows). An expert nobody is routed to reads
    nothing. Grid (E, F / BLOCK_F)."""
    e = tl.program_id(0)
    fb = tl.program_id(1)
    n = tl.load(count_ptr + e)
    if n > 0:
        ma, asg = _routed(list_ptr, e, n, NA_MAX, BLOCK_A)
        tok = asg // TOPK
        rf = fb * BLOCK_F + tl.arange(0, BLOCK_F)
        rk = tl.arange(0, BLOCK_K)
        wg = w_ptr + e.to(tl.int64) * (2 * F * H) + rf[:, None] * H
        wu = wg + F * H
        acc_g = tl.zeros((BLOCK_A, BLOCK_F), tl.float32)
        acc_u = tl.zeros((BLOCK_A, BLOCK_F), tl.float32)
        for k0 in range(0, H, BLOCK_K):
            xa = tl.load(x_ptr + tok[:, None] * H + k0 + rk[None, :], mask=ma[:, None], other=0.0)
            acc_g = _dot(xa, tl.load(wg + k0 + rk[None, :]), acc_g, F32DOT)
            acc_u = _dot(xa, tl.load(wu + k0 + rk[None, :]), acc_u, F32DOT)
        g = acc_g.to(tl.bfloat16).to(tl.float32)
        u = acc_u.to(tl.bfloat16).to(tl.float32)
        s = (g / (1.0 + tl.exp(-g))).to(tl.bfloat16).to(tl.float32)
        tl.store(act_ptr + asg[:, None] * F + rf[None, :], (s * u).to(tl.bfloat16), mask=ma[:, None])


@triton.jit
def moe_down(act_ptr, w_ptr, list_ptr, count_ptr, out_ptr, H: tl.constexpr, F: tl.constexpr,
             NA_MAX: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
             F32DOT: tl.constexpr):
    """out[a, h] = bf16(act[a] @ down[e]^T) for the assignments a routed to expert e; w [E, H, F].
    Grid (E, H / BLOCK_H)."""
    e = tl.program_id(0)
    hb = tl.program_id(1)
    n = tl.load(count_ptr + e)
    if n > 0:
        ma, asg = _routed(list_ptr, e, n, NA_MAX, BLOCK_A)
        rh = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        rk = tl.arange(0, BLOCK_K)
        wd = w_ptr + e.to(tl.int64) * (H * F) + rh[:, None] * F
        acc = tl.zeros((BLOCK_A, BLOCK_H), tl.float32)
        for k0 in range(0, F, BLOCK_K):
            a = tl.load(act_ptr + asg[:, None] * F + k0 + rk[None, :], mask=ma[:, None], other=0.0)
            acc = _dot(a, tl.load(wd + k0 + rk[None, :]), acc, F32DOT)
        tl.store(out_ptr + asg[:, None] * H + rh[None, :], acc.to(tl.bfloat16), mask=ma[:, None])


@triton.jit
def moe_combine(out_ptr, w_ptr, res_ptr, y_ptr, H: tl.constexpr, TOPK: tl.constexpr, BLOCK_H: tl.constexpr):
    """y[b] = bf16(res[b] + bf16(sum_s bf16(out[b, s] * w[b, s]))). Grid (B,)."""
    b = tl.program_id(0)
    for h0 in range(0, H, BLOCK_H):
        rh = h0 + tl.arange(0, BLOCK_H)
        acc = tl.zeros((BLOCK_H,), tl.float32)
        for s in tl.static_range(TOPK):
            w = tl.load(w_ptr + b * TOPK + s)
            o = tl.load(out_ptr + (b * TOPK + s) * H + rh).to(tl.float32)
            acc += (o * w).to(tl.bfloat16).to(tl.float32)
        r = tl.load(res_ptr + b * H + rh).to(tl.float32)
        moe = acc.to(tl.bfloat16).to(tl.float32)
        tl.store(y_ptr + b * H + rh, (r + moe).to(tl.bfloat16))


@triton.jit
def argmax(logits_ptr, out_ptr, V, BLOCK_V: tl.constexpr):
    """out[b] = argmax over V fp32 logits (ties: lowest id). Grid (B,)."""
    b = tl.program_id(0)
    best = float("-inf")
    best_i = 0
    for v0 in range(0, V, BLOCK_V):
        rv = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(logits_ptr + b.to(tl.int64) * V + rv, mask=rv < V, other=float("-inf"))
        m = tl.max(x, axis=0)
        i = tl.min(tl.where(x == m, rv, V), axis=0)
        better = m > best
        best_i = tl.where(better, i, best_i)
        best = tl.where(better, m, best)
    tl.store(out_ptr + b, best_i.to(tl.int32))
