#!/usr/bin/env python3
"""Issue 14 item 4 on the H200: the bytes charged to HBF with the L2 model on are within 15 % of the DRAM read
bytes ncu measures for the same native kernel (docs/design.md §3.12).

WRITTEN AND ARGUMENT-CHECKED, NOT YET RUN ON A GPU (2026-12-05: no GPU in that session). ``--cpu-check`` compiles
the four kernels for sm_90a on the CPU, plain and through hbfcc (instrumented and admitted): that part runs here.

Cases (Triton, bf16 unless said; every input tensor registered, so the kernel's DRAM reads are reads of
registered ranges, and the outputs are written, not read):
  matmul        C = A @ B, the tutorial's grouped program order (GROUP_M 8), A 16384 x 4096, B 4096 x 4096
                (A 128 MiB: more than the L2; each A panel is reused by the programs of its group)
  matmul_fits   4096 x 4096 x 4096 (A and B 32 MiB each)
  gemv          y = W x, W 16384 x 16384 (512 MiB, read once), x registered too
  softmax       rows of 8192 fp32 (32768 rows, 1 GiB), three passes over each row (max, sum, normalize)
  attention     flash-attention forward, 64 heads, 1024 queries, 8192 keys, d 64: Q, K and V registered
For each case:
  native   a child runs the plain kernel once under
           ``ncu --clock-control none --cache-control all --metrics dram__bytes_read.sum,...`` (cold L2, as
           the L2 model starts: Session.l2_reset);
  hbf      a child per setting of HBF_L2_MODEL (1, 0), its kernel built with the L2 helper build
           (runtime_cuda/ptx/hbf_helpers_l2.ptx through HBFCC_HELPER_PTX: the same cubin both times), starts hbfd (profiles/nominal with the fixed source, 0 ns,
           and the profile's l2 section: the H200's L2 by default), registers the inputs, empties the L2 model,
           runs the instrumented kernel once and reads the kernel's counters: bytes charged to HBF (ops
           load + cp.async bytes), program bytes, l2_hit_bytes / l2_miss_bytes / l2_lines / l2_merged / l2_lost.
  result   charged_on / dram_read (goal 0.85 .. 1.15), charged_off / dram_read, the card's l2CacheSize.
Writes ``<out>/l2_vs_ncu.json`` after every step (partial results survive a timeout).

    python3 bench/l2_vs_ncu.py [--cases matmul,gemv,softmax,attention,matmul_fits] [--out bench/results]
                               [--ncu ncu] [--work DIR] [--cpu-check]
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import devpath_common as DC  # noqa: E402

RESULT = "@@RESULT"
GOAL = 0.15
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
           "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum")

BODY = r'''

@triton.jit
def mm_SFX(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BM)
    npn = tl.cdiv(N, BN)
    npg = GM * npn
    first = (pid // npg) * GM
    gsz = tl.minimum(npm - first, GM)
    pm = first + ((pid % npg) % gsz)
    pn = (pid % npg) // gsz
    rm = (pm * BM + tl.arange(0, BM)).to(tl.int64)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    ap = a + rm[:, None] * K + rk[None, :]
    bp = b + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(ap), tl.load(bp))
        ap += BK
        bp += BK * N
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


@triton.jit
def gemv_SFX(w, x, y, N, K, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    rn = (pid * BN + tl.arange(0, BN)).to(tl.int64)
    acc = tl.zeros((BN,), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        wv = tl.load(w + rn[:, None] * K + rk[None, :]).to(tl.float32)
        xv = tl.load(x + rk).to(tl.float32)
        acc += tl.sum(wv * xv[None, :], axis=1)
    tl.store(y + rn, acc)


@triton.jit
def smax_SFX(x, y, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = x + row * n
    yr = y + row * n
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    for i in range(0, n, BLOCK):
        m = tl.maximum(m, tl.load(xr + i + tl.arange(0, BLOCK)))
    mx = tl.max(m, axis=0)
    s = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, n, BLOCK):
        s += tl.exp(tl.load(xr + i + tl.arange(0, BLOCK)) - mx)
    tot = tl.sum(s, axis=0)
    for i in range(0, n, BLOCK):
        o = i + tl.arange(0, BLOCK)
        tl.store(yr + o, tl.exp(tl.load(xr + o) - mx) / tot)


@triton.jit
def attn_SFX(q, k, v, o, S_Q, S_KV, scale, D: tl.constexpr, BMQ: tl.constexpr, BNK: tl.constexpr):
    pq = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rq = pq * BMQ + tl.arange(0, BMQ)
    rd = tl.arange(0, D)
    qv = tl.load(q + (bh * S_Q + rq)[:, None] * D + rd[None, :])
    m = tl.full((BMQ,), float("-inf"), tl.float32)
    l = tl.zeros((BMQ,), tl.float32)
    acc = tl.zeros((BMQ, D), tl.float32)
    for j in range(0, S_KV, BNK):
        rk = j + tl.arange(0, BNK)
        kv = tl.load(k + (bh * S_KV + rk)[:, None] * D + rd[None, :])
        s = tl.dot(qv, tl.trans(kv)) * scale
        mn = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - mn[:, None])
        al = tl.exp(m - mn)
        l = l * al + tl.sum(p, axis=1)
        vv = tl.load(v + (bh * S_KV + rk)[:, None] * D + rd[None, :])
        acc = acc * al[:, None] + tl.dot(p.to(tl.bfloat16), vv)
        m = mn
    tl.store(o + (bh * S_Q + rq)[:, None] * D + rd[None, :], (acc / l[:, None]).to(tl.bfloat16))
'''

# case -> kernel, inputs {name: (shape, dtype)}, outputs, the launch (grid, args by name, constexprs, warps, stages)
CASES = {
    "matmul": {"kernel": "mm", "inputs": {"a": ((16384, 4096), "bfloat16"), "b": ((4096, 4096), "bfloat16")},
               "outputs": {"c": ((16384, 4096), "bfloat16")},
               "ints": {"M": 16384, "N": 4096, "K": 4096},
               "const": {"BM": 128, "BN": 128, "BK": 64, "GM": 8}, "warps": 8, "stages": 3,
               "grid": lambda c: ((16384 // 128) * (4096 // 128),)},
    "matmul_fits": {"kernel": "mm", "inputs": {"a": ((4096, 4096), "bfloat16"), "b": ((4096, 4096), "bfloat16")},
                    "outputs": {"c": ((4096, 4096), "bfloat16")},
                    "ints": {"M": 4096, "N": 4096, "K": 4096},
                    "const": {"BM": 128, "BN": 128, "BK": 64, "GM": 8}, "warps": 8, "stages": 3,
                    "grid": lambda c: ((4096 // 128) ** 2,)},
    "gemv": {"kernel": "gemv", "inputs": {"w": ((16384, 16384), "bfloat16"), "x": ((16384,), "bfloat16")},
             "outputs": {"y": ((16384,), "float32")}, "ints": {"N": 16384, "K": 16384},
             "const": {"BN": 16, "BK": 256}, "warps": 4, "stages": 1, "grid": lambda c: (16384 // 16,)},
    "softmax": {"kernel": "smax", "inputs": {"x": ((32768, 8192), "float32")},
                "outputs": {"y": ((32768, 8192), "float32")}, "ints": {"n": 8192},
                "const": {"BLOCK": 1024}, "warps": 4, "stages": 1, "grid": lambda c: (32768,)},
    "attention": {"kernel": "attn", "inputs": {"q": ((64, 1024, 64), "bfloat16"), "k": ((64, 8192, 64), "bfloat16"),
                                               "v": ((64, 8192, 64), "bfloat16")},
                  "outputs": {"o": ((64, 1024, 64), "bfloat16")}, "ints": {"S_Q": 1024, "S_KV": 8192},
                  "floats": {"scale": 0.125}, "const": {"D": 64, "BMQ": 64, "BNK": 64}, "warps": 4, "stages": 2,
                  "grid": lambda c: (1024 // 64, 64)},
}
# argument order of each kernel (pointers by tensor name, then ints / floats by name)
ARGS = {"mm": ("a", "b", "c", "M", "N", "K"), "gemv": ("w", "x", "y", "N", "K"), "smax": ("x", "y", "n"),
        "attn": ("q", "k", "v", "o", "S_Q", "S_KV", "scale")}
TRITON_PTR = {"bfloat16": "*bf16", "float32": "*fp32"}


def kernels(work: Path):
    return DC.import_source(work / "tk_l2ncu.py", DC.KERNEL_HEADER + BODY.replace("SFX", "plain")
                            + BODY.replace("SFX", "hbf"), "tk_l2ncu")


def _nbytes(shape, dtype) -> int:
    n = 1
    for s in shape:
        n *= s
    return n * {"bfloat16": 2, "float32": 4}[dtype]


def _tensors(case: dict):
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    t = {}
    for name, (shape, dt) in case["inputs"].items():
        t[name] = (torch.randn(shape, device="cuda", dtype=torch.float32, generator=g) * 0.1).to(getattr(torch, dt))
    for name, (shape, dt) in case["outputs"].items():
        t[name] = torch.empty(shape, device="cuda", dtype=getattr(torch, dt))
    return t


def _launch(K, name: str, case: dict, t: dict, sfx: str):
    fn = getattr(K, f"{case['kernel']}_{sfx}")
    vals = {**t, **case.get("ints", {}), **case.get("floats", {})}
    args = [vals[a] for a in ARGS[case["kernel"]]]
    return fn[case["grid"](case)](*args, num_warps=case["warps"], num_stages=case["stages"], **case["const"])


# ------------------------------------------------------------------------------------------------ children
def child_native(name: str) -> None:
    """The plain kernel once (ncu measures it)."""
    import torch
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    K = kernels(work)
    case = CASES[name]
    t = _tensors(case)
    DC.use_ptxas("plain")
    _launch(K, name, case, t, "plain")
    torch.cuda.synchronize()
    p = torch.cuda.get_device_properties(0)
    print(RESULT, json.dumps({"kind": "native", "case": name, "l2_cache_bytes": int(p.L2_cache_size),
                              "device": p.name}), flush=True)


def child_hbf(name: str) -> None:
    """hbfd + the instrumented kernel once, with the inputs registered and the L2 model empty."""
    import torch

    import runtime_cuda
    from hbfcommon import ctl as C
    work = Path(os.environ["TRITON_CACHE_DIR"]).parent
    K = kernels(work)
    case = CASES[name]
    tmp = Path(tempfile.mkdtemp(prefix="hbf-l2ncu-"))
    prof = DC.source_profile(tmp, "fixed0")
    with DC.hbfd_daemon(tmp, prof) as sock:
        s = runtime_cuda.attach(socket=sock)
        s.install_triton_hooks()
        t = _tensors(case)
        DC.use_ptxas("hbf")
        ranges = [s.register_timing_range(t[n].data_ptr(), t[n].numel() * t[n].element_size(), label=f"l2.{n}")
                  for n in case["inputs"]]
        try:
            s.l2_reset()
            before = s.counters(publish=False)["kernels"]
            t0 = time.time()
            _launch(K, name, case, t, "hbf")
            s.synchronize()
            wall = time.time() - t0
            d = DC.kernel_delta(before, s.counters(publish=False)["kernels"], [f"{case['kernel']}_hbf"])
        finally:
            for r in ranges:
                s.unregister(r)
        ops = d.get("ops", {})
        charged = sum(ops.get(o, {}).get("bytes", 0) for o in ("load", "cpasync"))
        program = sum(ops.get(o, {}).get("program_bytes", 0) for o in ("load", "cpasync"))
        rec = {"kind": "hbf", "case": name, "l2_model": s.l2.summary() if s.l2 is not None else None,
               "charged_bytes": charged, "program_bytes": program, "wall_s": round(wall, 3),
               "requests": sum(ops.get(o, {}).get("requests", 0) for o in ("load", "cpasync")),
               **{k: d.get(k, 0) for k in ("l2_lines", "l2_hit_bytes", "l2_miss_bytes", "l2_merged", "l2_lost",
                                           "l2_unmodeled")},
               "op_names": list(C.OP_NAMES)}
        print(RESULT, json.dumps(rec, default=str), flush=True)


# ------------------------------------------------------------------------------------------------ parent
def _results(stdout: str) -> list[dict]:
    return [json.loads(ln[len(RESULT):]) for ln in stdout.splitlines() if ln.startswith(RESULT)]


def parse_ncu_csv(text: str, kernel_prefix: str) -> dict:
    """ncu --csv --page raw --print-units base: one row per profiled kernel; the metrics of the (last) kernel
    whose name starts with kernel_prefix."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        raise ValueError("no CSV rows in ncu's output")
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    head = rows[0]
    name_col = head.index("Kernel Name")
    found = {}
    for r in rows[1:]:
        if len(r) != len(head) or not r[name_col].startswith(kernel_prefix):
            continue
        found = {m: float(r[head.index(m)].replace(",", "")) for m in METRICS if m in head}
    if not found:
        raise ValueError(f"no profiled kernel named {kernel_prefix}* in ncu's output")
    return found


def run_child(argv: list[str], env: dict, timeout: int) -> tuple[int, str, str]:
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def cpu_check(work: Path) -> dict:
    """Compile the four kernels for sm_90a on the CPU, plain and through hbfcc (the hbf one instrumented and
    admitted): what can be checked here without a GPU."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from hbfcommon import artifact as A
    K = kernels(work)
    from hbfcommon import resources
    os.environ["HBFCC_HELPER_PTX"] = str(resources.helper_ptx("l2"))   # what the GPU run compiles with
    out = {}
    for name, case in CASES.items():
        kern = case["kernel"]
        if kern in {c["kernel"] for n, c in CASES.items() if n in out}:
            continue
        sig, attrs = {}, {}
        for i, a in enumerate(ARGS[kern]):
            if a in case["inputs"] or a in case["outputs"]:
                sig[a] = TRITON_PTR[(case["inputs"].get(a) or case["outputs"][a])[1]]
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif a in case.get("floats", {}):
                sig[a] = "fp32"
            else:
                sig[a] = "i32"
                attrs[(i,)] = [["tt.divisibility", 16]]
        for c in case["const"]:
            sig[c] = "constexpr"
        r = {}
        for sfx in ("plain", "hbf"):
            DC.use_ptxas(sfx)
            try:
                k = triton.compile(ASTSource(fn=getattr(K, f"{kern}_{sfx}"), signature=sig,
                                             constexprs=dict(case["const"]), attrs=attrs),
                                   target=GPUTarget("cuda", 90, 32),
                                   options={"num_warps": case["warps"], "num_stages": case["stages"]})
                art = A.lookup_by_ptx(k.asm["ptx"].encode()) if sfx == "hbf" else None
                ka = (art or {}).get("kernels", [{}])[0] if art else {}
                r[sfx] = {"has_hb_issue": b"__hb_issue" in k.asm["cubin"], "admitted": ka.get("admitted"),
                          "l2_hooks": b"__hb_l2_hooks" in k.asm["cubin"],
                          "reasons": (ka.get("not_admitted_reasons") or [])[:3]}
            except Exception as e:  # noqa: BLE001
                r[sfx] = {"error": f"{type(e).__name__}: {e}"[:800]}
        r["ok"] = r["hbf"].get("has_hb_issue") is True and r["hbf"].get("admitted") is True \
            and r["hbf"].get("l2_hooks") is True and r["plain"].get("has_hb_issue") is False
        out[name] = r
        DC.log(f"cpu-check {name} ({kern}): {r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default=str(DC.ROOT / "bench" / "results"))
    ap.add_argument("--work", default="")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per child")
    ap.add_argument("--cpu-check", action="store_true", help="compile the kernels for sm_90a on the CPU only")
    ap.add_argument("--child-native", default="", help=argparse.SUPPRESS)
    ap.add_argument("--child-hbf", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child_native:
        child_native(a.child_native)
        return 0
    if a.child_hbf:
        child_hbf(a.child_hbf)
        return 0
    cases = [c for c in a.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        ap.error(f"unknown case(s) {bad} (known: {', '.join(CASES)})")
    if a.timeout <= 0:
        ap.error("--timeout must be positive")
    out_dir, out_json, work, env = DC.prepare_run(a.out, "l2_vs_ncu" if not a.cpu_check else "l2_vs_ncu_cpu_check",
                                                  a.work)
    doc: dict = {"what": "HBF bytes charged with the L2 model on/off vs ncu dram__bytes_read.sum of the native "
                         "kernel (issue 14 item 4)", "date": time.strftime("%Y-%m-%d"), "goal_rel": GOAL,
                 "argv": sys.argv[1:], "cases": {}}
    if a.cpu_check:
        doc["cpu_check"] = cpu_check(work)
        doc["card"] = "CPU (this 2-core box): compile only"
        DC.write_json(out_json, doc)
        print(json.dumps({k: v["ok"] for k, v in doc["cpu_check"].items()}))
        return 0 if all(v["ok"] for v in doc["cpu_check"].values()) else 1
    ncu = shutil.which(a.ncu) or a.ncu
    if not Path(ncu).exists() and not shutil.which(ncu):
        ap.error(f"ncu not found ({a.ncu}): Nsight Compute is needed for the native side")
    from hbfcommon import resources
    l2_helper = resources.helper_ptx("l2")         # the L2 build (make helpers-ptx); a clear error when missing
    doc["gpu"] = DC.gpu_info()
    me = [sys.executable, str(Path(__file__).resolve())]
    for name in cases:
        case = CASES[name]
        rec: dict = {"inputs_bytes": sum(_nbytes(*v) for v in case["inputs"].values())}
        doc["cases"][name] = rec
        prefix = f"{case['kernel']}_plain"
        argv = [ncu, "--clock-control", "none", "--cache-control", "all", "--target-processes", "all",
                "--metrics", ",".join(METRICS), "--csv", "--page", "raw", "--print-units", "base",
                "-k", f"regex:^{prefix}", *me, "--child-native", name]
        rc, so, se = run_child(argv, env, a.timeout)
        try:
            rec["ncu"] = parse_ncu_csv(so, prefix)
            rec["native"] = (_results(so) or [{}])[-1]
        except ValueError as e:
            rec["ncu_error"] = f"rc {rc}: {e}: {se[-1500:]}"
        DC.write_json(out_json, doc)
        for l2 in ("1", "0"):
            # the L2 helper build for both (the same cubin; the knob decides): docs/design.md §3.12
            rc, so, se = run_child([*me, "--child-hbf", name],
                                   {**env, "HBF_L2_MODEL": l2, "HBFCC_HELPER_PTX": str(l2_helper)}, a.timeout)
            res = _results(so)
            rec[f"hbf_l2_{'on' if l2 == '1' else 'off'}"] = res[-1] if res else {"error": f"rc {rc}: {se[-1500:]}"}
            DC.write_json(out_json, doc)
        dram = (rec.get("ncu") or {}).get("dram__bytes_read.sum")
        on, off = rec.get("hbf_l2_on", {}).get("charged_bytes"), rec.get("hbf_l2_off", {}).get("charged_bytes")
        if dram and on is not None:
            rec["on_vs_dram"] = round(on / dram, 4)
            rec["within_goal"] = abs(on / dram - 1.0) <= GOAL
        if dram and off is not None:
            rec["off_vs_dram"] = round(off / dram, 4)
        DC.write_json(out_json, doc)
        DC.log(f"{name}: dram {dram} on {on} off {off} -> {rec.get('on_vs_dram')} / {rec.get('off_vs_dram')}")
    doc["complete"] = True
    DC.write_json(out_json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
