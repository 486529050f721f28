#!/usr/bin/env python3
"""Why a native entry costs more in a CUDA graph than the plain build (issue 15's last missed goal; stop 50:
matmul_host's native entry captured with HBF_GRAPH_NATIVE=all ran x1.057 of plain, +0.43 us per launch, while the
same entry on host launches ran x0.998 and attn_fwd / matmul_dev in graphs x1.009-1.016).

    python3 bench/graph_node_diag.py --dry-run --out /tmp/gnd             # CPU: part 0 only (sm_90 builds)
    PYTHONUNBUFFERED=1 python3 bench/graph_node_diag.py --out $OUT/gnd --budget-s 300    # GPU (H100/H200)

One process, nothing registered, each kernel of bench/tma_triton.py (--kernels; matmul_host first) built twice as
tma_triton builds them (``<k>_plain`` with CUDA's ptxas, ``<k>_natent`` through hbfcc-ptxas with
HBFCC_NATIVE_ENTRY=1, separate Triton caches by name), a session attached to a private hbfd (fixed 5 us source) with
the Triton hooks installed. Parts (each in its own try/except, its error recorded; the JSON rewritten after each):

  0 static     the two cubins compared offline (Triton's cuobjdump): the SASS of ``<k>_plain`` and of
               ``<k>_natent__hbnat`` (addresses and encodings stripped), each function's .nv.info (EIATTRs), its
               section header line (lmem/smem) and every section of both modules (the natent module carries the
               instrumented entry, hbfcc's globals and constant banks 3/4). Also in --dry-run (CPU).
  capture      BACK_TO_BACK launches of each build captured into a CUDA graph (torch.cuda.CUDAGraph(keep_graph=True):
               the cudaGraph_t kept): plain; natent with the session's HBF_GRAPH_NATIVE=all (the native entry
               captured: launch_selection captured_native == BACK_TO_BACK). The natent graph is stop 50's "all".
  1 nodes      every node of both graphs (type; edges): for kernel nodes the function (cuFuncGetName), grid, block,
               sharedMemBytes, the parameter layout (cuFuncGetParamInfo; the PTX signature as a cross-check), the
               raw parameter bytes (hex; plain vs natent byte by byte, the TensorMaps of a host-descriptor kernel
               included; a difference that is only the output's address is named so), every kernel-node attribute
               (cuGraphKernelNodeGetAttribute over CUkernelNodeAttrID), every function attribute (cuFuncGetAttribute
               over CUfunction_attribute) of the plain function, the native entry and the natent instrumented entry,
               the module each comes from (cuFuncGetModule; its functions: cuModuleGetFunctionCount /
               cuModuleEnumerateFunctions); a diff summary (what differs between the plain node and the natent
               node); each graph's DOT (cuGraphDebugDotPrint, verbose) under <out>/dot/.
  2 swap       graphs built by hand (cuGraphCreate + cuGraphAddKernelNode, BACK_TO_BACK nodes in a chain, each node's
               attributes copied from the captured node with cuGraphKernelNodeCopyAttributes) and timed against each
               other, replays interleaved PAIRS rounds (the order reversed every other round), each replay between two
               events behind a GPU sleep (tma_triton._event_ms), device ms per launch and the ratio to (a) per round:
                 a   plain's node params exactly                  b   plain's params, the native entry's function
                 c   natent's node params exactly                 d   natent's params, plain's function
                 a0  plain's params, no node attributes copied    a_nattr  plain's params, natent's node attributes
                 cap_plain / cap_natent  the captured graphs instantiated here,
                 e_plain / e_natent  plain's params with the function loaded again from a fresh module of the plain
                     cubin / of the natent cubin (cuModuleLoadData; the function attributes copied from plain's):
                     the module, not the attributes the session copied
                 f_const  plain's params with the plain PTX plus one unused 200-byte .visible .const array, assembled
                     by Triton's ptxas with Triton's command line (stop 51: the native entry's CONST_SIZE_BYTES is 200,
                     plain's 0 -- the only function attribute apart from the copied dynamic shared memory)
                 torch_plain / torch_natent  the captured graphs replayed through torch (stop 50's measurement)
               "which function" (a vs b, d vs c) apart from "which launch parameters / attributes" (a vs d, b vs c).
  3 identity   each hand-built graph replayed once into its output (filled with -1 first), compared bit for bit with
               the plain build's output.

The records of the natent capture are released after the graphs are destroyed (Session.release_graph_captures). No
part starts after --budget-s. Output: <out>/graph_node_diag.json (graph_node_diag_dry.json for --dry-run), its
"summary" the diff lines per kernel. Exit 0 when every part of every kernel ran without an error.
"""
from __future__ import annotations

import argparse
import ctypes
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tma_triton as TT  # noqa: E402
from devpath_common import gpu_info, prepare_run, stats, use_ptxas, write_json  # noqa: E402
from hbfcommon.env import env_set  # noqa: E402

log = logging.getLogger("graph_node_diag")

PAIRS = 21                     # interleaved rounds of the swap part (tma_triton: 11)
NATIVE_SUFFIX = "__hbnat"      # hbfcc/native_entry.py SUFFIX (the entry's name: <kernel>__hbnat)
MAX_PARAMS = 512               # cuFuncGetParamInfo probing stops here when cuFuncGetParamCount is missing
VARIANTS = ("a", "b", "c", "d", "a0", "a_nattr", "cap_plain", "cap_natent", "e_plain", "e_natent", "f_const",
            "torch_plain", "torch_natent")
VARIANT_WHAT = {
    "a": "plain's node params exactly (function, grid, block, shared bytes, parameter bytes, node attributes)",
    "b": "plain's node params, the function replaced by the native entry's CUfunction",
    "c": "natent's captured node params exactly (the native entry)",
    "d": "natent's node params, the function replaced by plain's CUfunction",
    "a0": "plain's node params, no node attribute copied (cuGraphAddKernelNode's defaults)",
    "a_nattr": "plain's node params and function, the natent node's attributes copied",
    "cap_plain": "the captured plain graph, instantiated here",
    "cap_natent": "the captured natent graph (HBF_GRAPH_NATIVE=all), instantiated here",
    "e_plain": "plain's node params, the function <k>_plain from a fresh module of the plain cubin",
    "e_natent": "plain's node params, the function <k>_natent__hbnat from a fresh module of the natent cubin",
    "f_const": "plain's node params, the plain kernel assembled again (Triton's ptxas command line) from its PTX with "
               "one unused .visible .const array of CONST_PAD_BYTES added: the native entry's CONST_SIZE_BYTES, "
               "nothing else",
    "torch_plain": "the captured plain graph replayed through torch.cuda.CUDAGraph.replay",
    "torch_natent": "the captured natent graph replayed through torch.cuda.CUDAGraph.replay",
}


# ------------------------------------------------------------------------------------------------ pure helpers
def err_text(e: BaseException, limit: int = 2000) -> str:
    return f"{type(e).__name__}: {e}"[:limit]


def err_record(e: BaseException) -> dict:
    return {"error": err_text(e), "traceback": traceback.format_exc()[-3000:]}


def hexbytes(b: bytes) -> str:
    return bytes(b).hex()


CONST_PAD_BYTES = 200         # the natent module's user constant bank on the H100 (stop 51: CONST_SIZE_BYTES 200 vs 0)


def with_const_pad(ptx: str, nbytes: int = CONST_PAD_BYTES, name: str = "__gnd_const_pad") -> str:
    """``ptx`` with one ``.visible .const`` array of ``nbytes`` that nothing reads, declared after its
    ``.address_size`` line: a module whose kernels carry a user constant bank of that size and the same code."""
    lines = ptx.splitlines(keepends=True)
    for i, ln in enumerate(lines):
        if ln.strip().startswith(".address_size"):
            return "".join(lines[:i + 1] + [f".visible .const .align 8 .b8 {name}[{int(nbytes)}];\n"] + lines[i + 1:])
    raise ValueError("the PTX has no .address_size line")


def byte_ranges(a: bytes, b: bytes) -> list[list[int]]:
    """The [lo, hi) byte ranges where a and b differ (over the longer one; a missing byte differs)."""
    n = max(len(a), len(b))
    out: list[list[int]] = []
    for i in range(n):
        same = i < len(a) and i < len(b) and a[i] == b[i]
        if same:
            continue
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def words_only(a: bytes, b: bytes, pairs: Iterable[tuple[int, int]]) -> bool:
    """Whether every aligned 8-byte word where a and b differ holds one of ``pairs`` (a's value, b's value): a
    parameter that differs only by an address the two builds do not share (their output tensors; a TensorMap's
    first word is its global address)."""
    allowed = {(int(x) & (2**64 - 1), int(y) & (2**64 - 1)) for x, y in pairs}
    if len(a) != len(b) or a == b:
        return False
    for off in range(0, len(a), 8):
        wa, wb = a[off:off + 8], b[off:off + 8]
        if wa == wb:
            continue
        if len(wa) != 8 or (int.from_bytes(wa, "little"), int.from_bytes(wb, "little")) not in allowed:
            return False
    return True


def param_bytes_diff(a: Sequence[str], b: Sequence[str], addr_pairs: Iterable[tuple[int, int]] = ()) -> dict:
    """Plain vs natent parameter bytes (hex strings, one per parameter): the parameters that differ, each with its
    sizes, differing byte ranges (at most 16) and whether only known address pairs differ (``address_only``)."""
    pairs = list(addr_pairs)
    out: dict = {"count": [len(a), len(b)], "identical": list(a) == list(b), "params": []}
    for i in range(max(len(a), len(b))):
        ba = bytes.fromhex(a[i]) if i < len(a) else b""
        bb = bytes.fromhex(b[i]) if i < len(b) else b""
        if ba == bb:
            continue
        r = byte_ranges(ba, bb)
        out["params"].append({"param": i, "sizes": [len(ba), len(bb)], "differing_bytes": sum(h - lo for lo, h in r),
                              "ranges": r[:16], "address_only": words_only(ba, bb, pairs)})
    out["only_addresses_differ"] = bool(out["params"]) and all(p["address_only"] for p in out["params"]) \
        and len(a) == len(b)
    return out


def device_address_pairs(a: Sequence[str], b: Sequence[str], is_device: Callable[[int], bool]) -> list[tuple[int, int]]:
    """The (a, b) value pairs of the parameters that differ and hold device addresses on both sides: an 8-byte
    parameter (a pointer: an output, Triton's global scratch) or a TensorMap's first word (its global address), each
    value asked of ``is_device`` (the driver: cuMemGetAddressRange) -- what param_bytes_diff may call address-only."""
    out = []
    for x, y in zip(a, b):
        if x == y:
            continue
        bx, by = bytes.fromhex(x), bytes.fromhex(y)
        if len(bx) != len(by) or len(bx) not in (8, 128):
            continue
        va, vb = int.from_bytes(bx[:8], "little"), int.from_bytes(by[:8], "little")
        if va != vb and va and vb and is_device(va) and is_device(vb):
            out.append((va, vb))
    return out


def dict_diff(a: dict | None, b: dict | None) -> dict:
    """{key: [a's value, b's value]} for the keys whose values differ (a key one side lacks: None there)."""
    a, b = a or {}, b or {}
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)}


def format_table(cols: dict[str, dict], width: int = 46) -> list[str]:
    """An attribute table as log lines: one row per attribute (the union of the columns' keys), one column per
    function / node (``cols``: column name -> {attribute: value}); rows whose values differ are marked ``<-``."""
    names = list(cols)
    keys: list[str] = []
    for c in names:
        for k in cols[c] or {}:
            if k not in keys:
                keys.append(k)
    head = f"{'':{width}}" + "".join(f" {n[:24]:>24}" for n in names)
    lines = [head]
    for k in keys:
        vals = [(cols[n] or {}).get(k, "-") for n in names]
        cells = "".join(f" {str(v)[:24]:>24}" for v in vals)
        mark = "  <-" if len({str(v) for v in vals}) > 1 else ""
        lines.append(f"{str(k)[:width]:{width}}{cells}{mark}")
    return lines


def ratio_stats(ms: dict[str, list[float]], ref: str) -> dict:
    """Per variant: device ms per launch (stats) and, against ``ref`` (round by round), the ratio and the extra us
    per launch of the medians. A variant with fewer rounds than ref is compared over the rounds both have."""
    out: dict = {}
    base = ms.get(ref) or []
    for k, xs in ms.items():
        v: dict = {"device_ms": stats(xs)}
        if k != ref and xs and base:
            n = min(len(xs), len(base))
            v["ratio"] = stats([x / p for x, p in zip(xs[:n], base[:n]) if p > 0])
            v["extra_us_median"] = round(1000 * (statistics.median(xs) - statistics.median(base)), 3)
        out[k] = v
    return out


def topo_order(nodes: Sequence[int], edges: Iterable[tuple[int, int]]) -> list[int]:
    """The nodes in dependency order (Kahn's algorithm; ties in the given order); a cycle leaves its nodes at the
    end in the given order."""
    preds: dict[int, set] = {n: set() for n in nodes}
    succ: dict[int, list] = {n: [] for n in nodes}
    for f, t in edges:
        if f in preds and t in preds:
            preds[t].add(f)
            succ[f].append(t)
    done: list[int] = []
    ready = [n for n in nodes if not preds[n]]
    seen = set(ready)
    while ready:
        n = ready.pop(0)
        done.append(n)
        for t in succ[n]:
            preds[t].discard(n)
            if not preds[t] and t not in seen:
                seen.add(t)
                ready.append(t)
    return done + [n for n in nodes if n not in set(done)]


_SCALAR = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
           "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8}


def ptx_param_layout(ptx: str, entry: str) -> list[list[int]]:
    """[offset, size] of each parameter of ``.entry entry(...)`` in a PTX text (the device-side layout: each at its
    alignment, ``.align N`` where given, else the scalar's size); [] when the entry is not found."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if m is None:
        return []
    out: list[list[int]] = []
    off = 0
    for decl in m.group(1).split(","):
        decl = decl.strip()
        if not decl.startswith(".param"):
            continue
        t = re.search(r"\.(b8|u8|s8|b16|u16|s16|f16|bf16|b32|u32|s32|f32|b64|u64|s64|f64)\b", decl)
        if t is None:
            continue
        elem = _SCALAR[t.group(1)]
        arr = re.search(r"\[(\d+)\]", decl)
        size = elem * (int(arr.group(1)) if arr else 1)
        al = re.search(r"\.align\s+(\d+)", decl[:t.start()])    # after the type (.ptr ... .align N): the pointee's
        align = int(al.group(1)) if al else elem
        off = -(-off // align) * align
        out.append([off, size])
        off += size
    return out


def same_layout(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> bool:
    """Whether two parameter layouts agree: the same sizes at the same offsets relative to the first parameter (the
    driver may count offsets from where the first parameter sits: a 64-byte aligned TensorMap moves it)."""
    if len(a) != len(b) or not a:
        return len(a) == len(b)
    a0, b0 = a[0][0], b[0][0]
    return all(x[1] == y[1] and x[0] - a0 == y[0] - b0 for x, y in zip(a, b))


def struct_plain(v: Any, depth: int = 3) -> Any:
    """A cuda.bindings value as JSON-able data: enums by name, handles as ints, structs as {field: value} (the
    public attributes that are not methods; a field that cannot be read records its error)."""
    if isinstance(v, int) and not isinstance(v, bool) and isinstance(getattr(v, "name", None), str):
        return v.name                   # an enum (cuda.bindings' FastEnum and IntEnum are ints with a name)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v if type(v) in (bool, int, float, str) or v is None else int(v) if isinstance(v, int) else v
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [struct_plain(x, depth - 1) for x in v][:64]
    fields = [a for a in dir(v) if not a.startswith("_") and a not in ("getPtr", "pad", "reserved")]
    if depth <= 0 or not fields:
        try:
            return int(v)
        except Exception:  # noqa: BLE001
            return str(v)[:400]
    out: dict = {}
    for a in fields:
        try:
            x = getattr(v, a)
        except Exception as e:  # noqa: BLE001
            out[a] = f"error: {err_text(e, 200)}"
            continue
        if callable(x) and not hasattr(x, "getPtr"):
            continue
        out[a] = struct_plain(x, depth - 1)
    if not out:
        try:
            return int(v)
        except Exception:  # noqa: BLE001
            return str(v)[:400]
    return out


# the kernel-node attribute id (CU_LAUNCH_ATTRIBUTE_*) -> the CUkernelNodeAttrValue field that holds it
ATTR_FIELD = {"ACCESS_POLICY_WINDOW": "accessPolicyWindow", "COOPERATIVE": "cooperative",
              "SYNCHRONIZATION_POLICY": "syncPolicy", "CLUSTER_DIMENSION": "clusterDim",
              "CLUSTER_SCHEDULING_POLICY_PREFERENCE": "clusterSchedulingPolicyPreference",
              "PROGRAMMATIC_STREAM_SERIALIZATION": "programmaticStreamSerializationAllowed",
              "PROGRAMMATIC_EVENT": "programmaticEvent", "PRIORITY": "priority",
              "MEM_SYNC_DOMAIN_MAP": "memSyncDomainMap", "MEM_SYNC_DOMAIN": "memSyncDomain",
              "PREFERRED_CLUSTER_DIMENSION": "preferredClusterDim", "LAUNCH_COMPLETION_EVENT": "launchCompletionEvent",
              "DEVICE_UPDATABLE_KERNEL_NODE": "deviceUpdatableKernelNode",
              "PREFERRED_SHARED_MEMORY_CARVEOUT": "sharedMemCarveout",
              "NVLINK_UTIL_CENTRIC_SCHEDULING": "nvlinkUtilCentricScheduling",
              "PORTABLE_CLUSTER_SIZE_MODE": "portableClusterSizeMode", "SHARED_MEMORY_MODE": "sharedMemoryMode"}


def attr_short(name: str) -> str:
    for p in ("CU_LAUNCH_ATTRIBUTE_", "CU_KERNEL_NODE_ATTRIBUTE_", "CU_FUNC_ATTRIBUTE_"):
        if name.startswith(p):
            return name[len(p):]
    return name


def attr_value(name: str, v: Any) -> Any:
    """A kernel-node attribute's value: the CUkernelNodeAttrValue field its id names (ATTR_FIELD), else the whole
    value."""
    f = ATTR_FIELD.get(attr_short(name))
    if f is not None:
        try:
            return struct_plain(getattr(v, f))
        except AttributeError:
            pass                        # a field these bindings name otherwise: the whole value
        except Exception as e:  # noqa: BLE001 - a union field that cannot be decoded (an enum without a 0 member)
            try:                        # the union's first word as it is
                return {"raw_u32": ctypes.c_uint32.from_address(int(v.getPtr())).value,
                        "decode_error": err_text(e, 200)}
            except Exception:  # noqa: BLE001
                return f"error: {err_text(e, 200)}"
    return struct_plain(v)


# ------------------------------------------------------------------------------------------------ part 0: static
def find_cuobjdump() -> str | None:
    """Triton's bundled cuobjdump (triton/backends/nvidia/bin), else one on PATH or under /usr/local/cuda."""
    try:
        import triton  # noqa: PLC0415
        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    except Exception:  # noqa: BLE001
        pass
    for c in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and Path(c).is_file():
            return c
    return None


def sass_instructions(text: str) -> list[str]:
    """The instructions of a cuobjdump -sass listing, addresses (/*0000*/), encodings and the trailing ';' gone."""
    out = []
    for ln in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;", ln)
        if m:
            out.append(re.sub(r"\s+", " ", m.group(1)).strip())
    return out


def elf_block(elf: str, header: str) -> list[str]:
    """The lines of a cuobjdump -elf section dump that starts with the line ``header`` (up to the next section:
    a line starting with '.' after a blank line)."""
    lines = elf.splitlines()
    try:
        i = next(n for n, ln in enumerate(lines) if ln.strip() == header)
    except StopIteration:
        return []
    out = []
    for n in range(i + 1, len(lines)):
        ln = lines[n]
        if ln.startswith(".") and n > i + 1 and not lines[n - 1].strip():
            break
        out.append(ln.rstrip())
    while out and not out[-1].strip():
        out.pop()
    return out


def nv_info(elf: str, fn: str) -> list[str]:
    """A function's .nv.info EIATTRs (cuobjdump -elf), its own name replaced by <fn>, the <0xN> record counters and
    EIATTR_PARAM_CBANK's symbol index (the module's symbol numbering) dropped."""
    out = []
    block = elf_block(elf, f".nv.info.{fn}")
    skip_next = False
    for ln in block:
        s = ln.strip()
        if re.fullmatch(r"<0x[0-9a-f]+>", s):
            continue
        if s == "Attribute:\tEIATTR_PARAM_CBANK" or s.replace("\t", " ") == "Attribute: EIATTR_PARAM_CBANK":
            skip_next = True
        elif skip_next and s.startswith("Value:"):
            parts = s.split()
            s = "Value: <sym> " + " ".join(parts[2:])
            skip_next = False
        out.append(s.replace(fn, "<fn>"))
    return out


def elf_sections(elf: str) -> list[dict]:
    """The section table of a cuobjdump -elf dump: [{name, size}] (size from the table's size column, hex)."""
    out = []
    lines = elf.splitlines()
    try:
        i = next(n for n, ln in enumerate(lines) if ln.strip().startswith("Sections:"))
    except StopIteration:
        return out
    for ln in lines[i + 1:]:
        parts = ln.split()
        if not parts:
            if out:
                break
            continue
        if len(parts) < 6 or not re.fullmatch(r"[0-9a-f]+", parts[0]) or not parts[-1].startswith("."):
            continue
        try:
            out.append({"name": parts[-1], "size": int(parts[2], 16)})
        except ValueError:
            continue
    return out


def text_header(elf: str, fn: str) -> str | None:
    """The lmem/smem line cuobjdump prints under a function's .text section."""
    block = elf_block(elf, f".text.{fn}")
    return block[0].strip() if block and "smem" in block[0] else None


def first_differences(a: Sequence[str], b: Sequence[str], n: int = 12) -> list:
    out = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            out.append([i, x, y])
            if len(out) >= n:
                break
    return out


def static_compare(cubin_a: bytes, fn_a: str, cubin_b: bytes, fn_b: str, work: Path, tool: str | None = None) -> dict:
    """Part 0: two functions of two cubins compared offline (cuobjdump -elf / -sass -fun): SASS identical (addresses
    and encodings stripped), .nv.info identical (names and symbol indices normalized), the .text header line
    (lmem/smem), and both modules' section tables (the names normalized: fn_a / fn_b -> <fn>)."""
    tool = tool or find_cuobjdump()
    if tool is None:
        return {"error": "no cuobjdump (Triton's bundled one or on PATH)"}
    work.mkdir(parents=True, exist_ok=True)
    pa, pb = work / f"{fn_a}.cubin", work / f"{fn_b}.cubin"
    pa.write_bytes(cubin_a)
    pb.write_bytes(cubin_b)

    def run(*args) -> str:
        r = subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{Path(tool).name} {' '.join(args[:-1])}: rc {r.returncode}: {r.stderr[-800:]}")
        return r.stdout
    ea, eb = run("-elf", str(pa)), run("-elf", str(pb))
    sa, sb = sass_instructions(run("-sass", "-fun", fn_a, str(pa))), sass_instructions(run("-sass", "-fun", fn_b, str(pb)))
    ia, ib = nv_info(ea, fn_a), nv_info(eb, fn_b)
    out = {"tool": tool, "functions": [fn_a, fn_b],
           "sass_instructions": [len(sa), len(sb)], "sass_identical": bool(sa) and sa == sb,
           "sass_first_differences": first_differences(sa, sb),
           "nv_info_records": [len(ia), len(ib)], "nv_info_identical": bool(ia) and ia == ib,
           "nv_info_differences": first_differences(ia, ib, 20),
           "text_header": [text_header(ea, fn_a), text_header(eb, fn_b)],
           "cubin_bytes": [len(cubin_a), len(cubin_b)]}
    secs = {}
    for key, e, fn in (("a", ea, fn_a), ("b", eb, fn_b)):
        secs[key] = [{"name": s["name"].replace(fn, "<fn>"), "size": s["size"]} for s in elf_sections(e)]
    out["sections"] = secs
    na = {s["name"]: s["size"] for s in secs["a"]}
    nb = {s["name"]: s["size"] for s in secs["b"]}
    out["sections_of_fn_differ"] = {k: v for k, v in dict_diff({k: x for k, x in na.items() if "<fn>" in k},
                                                              {k: x for k, x in nb.items() if "<fn>" in k}).items()}
    out["sections_only_in_b"] = sorted(set(nb) - set(na))
    return out


# ------------------------------------------------------------------------------------------------ driver helpers (GPU)
def _d():
    from runtime_cuda.cudrv import drv  # noqa: PLC0415
    return drv()


def _call(name: str, *args):
    """cudrv.call: the driver function ``name`` checked (CudaError), its outputs."""
    from runtime_cuda.cudrv import call  # noqa: PLC0415
    return call(name, *args)


def _has(name: str) -> bool:
    return hasattr(_d(), name)


def _fn(h):
    d = _d()
    return h if isinstance(h, d.CUfunction) else d.CUfunction(int(h))


def func_name(f) -> str:
    n = _call("cuFuncGetName", _fn(f))
    return n.decode(errors="replace") if isinstance(n, bytes) else str(n)


def func_param_layout(f) -> dict:
    """The function's parameters ([offset, size] each) from the driver: cuFuncGetParamCount where the bindings have
    it, else cuFuncGetParamInfo probed until it fails."""
    d = _d()
    f = _fn(f)
    if not hasattr(d, "cuFuncGetParamInfo"):
        return {"error": "cuFuncGetParamInfo is not in this cuda-python"}
    n = None
    if hasattr(d, "cuFuncGetParamCount"):
        try:
            n = int(_call("cuFuncGetParamCount", f))
        except Exception:  # noqa: BLE001
            n = None
    out = []
    for i in range(n if n is not None else MAX_PARAMS):
        try:
            res = d.cuFuncGetParamInfo(f, i)
        except Exception as e:  # noqa: BLE001
            return {"error": f"cuFuncGetParamInfo({i}): {err_text(e, 300)}", "params": out}
        if int(res[0]) != 0:
            if n is not None:
                return {"error": f"cuFuncGetParamInfo({i}) failed: {res[0]}", "params": out}
            break
        out.append([int(res[1]), int(res[2])])
    return {"params": out, "count_from": "cuFuncGetParamCount" if n is not None else "cuFuncGetParamInfo probing"}


def func_attributes(f) -> dict:
    """Every CUfunction_attribute the driver answers for ``f`` (short names); an error recorded as text."""
    d = _d()
    f = _fn(f)
    out: dict = {}
    for a in d.CUfunction_attribute:
        if a.name.endswith("_MAX"):
            continue
        try:
            res = d.cuFuncGetAttribute(a, f)
            out[attr_short(a.name)] = int(res[1]) if int(res[0]) == 0 else f"error {getattr(res[0], 'name', res[0])}"
        except Exception as e:  # noqa: BLE001 - an attribute this driver does not know
            out[attr_short(a.name)] = f"error: {err_text(e, 200)}"
    return out


def func_module(f) -> dict:
    """The module ``f`` comes from (cuFuncGetModule), its function count and names."""
    d = _d()
    out: dict = {}
    mod = _call("cuFuncGetModule", _fn(f))
    out["module"] = int(mod)
    if hasattr(d, "cuModuleGetFunctionCount"):
        n = int(_call("cuModuleGetFunctionCount", mod))
        out["function_count"] = n
        if hasattr(d, "cuModuleEnumerateFunctions") and n:
            fns = _call("cuModuleEnumerateFunctions", n, mod)
            names = []
            for g in list(fns)[:64]:
                try:
                    names.append(func_name(g))
                except Exception as e:  # noqa: BLE001
                    names.append(f"error: {err_text(e, 200)}")
            out["functions"] = names
    return out


def func_loaded(f) -> Any:
    d = _d()
    if not hasattr(d, "cuFuncIsLoaded"):
        return "cuFuncIsLoaded missing"
    return struct_plain(_call("cuFuncIsLoaded", _fn(f)))


def function_record(f) -> dict:
    """Name, parameter layout, attributes, module, loading state of one CUfunction (each part in try/except)."""
    rec: dict = {"handle": int(_fn(f))}
    for key, get in (("name", func_name), ("param_layout", func_param_layout), ("attributes", func_attributes),
                     ("module", func_module), ("loaded", func_loaded)):
        try:
            rec[key] = get(f)
        except Exception as e:  # noqa: BLE001
            rec[key] = {"error": err_text(e, 600)}
    return rec


def _counted(name: str, graph) -> tuple:
    """A cuGraphGet* query asked twice, as the API wants: its count (asked with 0), then its lists at that count;
    the result tuple (CUresult, lists..., count), or None when there is nothing."""
    d = _d()
    res = getattr(d, name)(graph, 0)
    if int(res[0]) != 0:
        raise RuntimeError(f"{name} failed: {res[0]}")
    n = int(res[-1])
    if n == 0:
        return None
    res = getattr(d, name)(graph, n)
    if int(res[0]) != 0:
        raise RuntimeError(f"{name}({n}) failed: {res[0]}")
    return res


def graph_nodes(graph) -> list:
    res = _counted("cuGraphGetNodes", graph)
    return [] if res is None else list(res[1])[:int(res[-1])]


def graph_edges(graph) -> list[tuple[int, int]]:
    res = _counted("cuGraphGetEdges", graph)
    if res is None:
        return []
    n = int(res[-1])
    return [(int(a), int(b)) for a, b in zip(list(res[1])[:n], list(res[2])[:n])]


def node_attributes(node) -> dict:
    """Every kernel-node attribute the driver answers (cuGraphKernelNodeGetAttribute over CUkernelNodeAttrID, or
    CUlaunchAttributeID where the bindings name it so); errors recorded as text."""
    d = _d()
    ids = getattr(d, "CUkernelNodeAttrID", None) or getattr(d, "CUlaunchAttributeID")
    out: dict = {}
    for a in ids:
        if a.name.endswith("IGNORE") or a.name.endswith("_MAX"):
            continue
        try:
            res = d.cuGraphKernelNodeGetAttribute(node, a)
            if int(res[0]) != 0:
                out[attr_short(a.name)] = f"error {getattr(res[0], 'name', res[0])}"
            else:
                out[attr_short(a.name)] = attr_value(a.name, res[1])
        except Exception as e:  # noqa: BLE001
            out[attr_short(a.name)] = f"error: {err_text(e, 200)}"
    return out


def read_params(kernel_params: int, layout: Sequence[Sequence[int]]) -> list[bytes]:
    """The parameter values a kernel node holds: ``kernel_params`` is the node's void** (host memory), each entry
    read for its size from ``layout`` ([offset, size] per parameter)."""
    if not kernel_params:
        raise ValueError("the node's kernelParams is NULL (its parameters are in 'extra')")
    out = []
    for i, (_, size) in enumerate(layout):
        p = ctypes.c_void_p.from_address(int(kernel_params) + 8 * i).value
        if not p:
            raise ValueError(f"parameter {i}: NULL pointer in kernelParams")
        out.append(ctypes.string_at(p, int(size)))
    return out


CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2   # cuda.h's 'extra' keys


def read_params_extra(extra: int, layout: Sequence[Sequence[int]]) -> tuple[list[bytes], str]:
    """The parameter values of a node that holds them in ``extra`` (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END: one
    packed buffer) instead of kernelParams: each parameter sliced at its layout offset, or at its offset from the first
    parameter's when the buffer is too short for the offsets as given; (values, which offsets were used)."""
    if not extra:
        raise ValueError("the node has neither kernelParams nor extra")
    buf = size = None
    for i in range(0, 64, 2):
        key = ctypes.c_void_p.from_address(int(extra) + 8 * i).value or 0
        if key == CU_LAUNCH_PARAM_END:
            break
        val = ctypes.c_void_p.from_address(int(extra) + 8 * (i + 1)).value or 0
        if key == CU_LAUNCH_PARAM_BUFFER_POINTER:
            buf = val
        elif key == CU_LAUNCH_PARAM_BUFFER_SIZE:
            size = ctypes.c_size_t.from_address(val).value if val else None
    if not buf or size is None:
        raise ValueError(f"extra holds no parameter buffer (pointer {buf}, size {size})")
    data = ctypes.string_at(buf, size)
    base = layout[0][0] if layout else 0
    as_given = all(o + n <= size for o, n in layout)
    shift = 0 if as_given else base
    return [data[o - shift:o - shift + n] for o, n in layout], "as given" if as_given else f"from the first (-{base})"


class ParamBuffers:
    """Host copies of a kernel's parameter values, each 64-byte aligned, and the void* array that points at them
    (a CUDA_KERNEL_NODE_PARAMS.kernelParams); alive as long as this object."""

    def __init__(self, values: Sequence[bytes], align: int = 64) -> None:
        self._keep = []
        addrs = []
        for v in values:
            raw = (ctypes.c_uint8 * (len(v) + align))()
            base = ctypes.addressof(raw)
            at = -(-base // align) * align
            ctypes.memmove(at, bytes(v), len(v))
            self._keep.append(raw)
            addrs.append(at)
        self.array = (ctypes.c_void_p * max(1, len(addrs)))(*addrs)
        self.address = ctypes.addressof(self.array)
        self.addresses = addrs


def kernel_node(node, ptx_layout: Sequence[Sequence[int]] | None = None) -> tuple[dict, dict]:
    """(record, raw) of one kernel node: record for the JSON (function name, grid, block, shared bytes, the
    parameter layout and bytes, the node's attributes), raw for building graphs (the function handle, dims,
    parameter bytes)."""
    p = _call("cuGraphKernelNodeGetParams", node)
    f = p.func
    rec: dict = {"function": int(f), "grid": [int(p.gridDimX), int(p.gridDimY), int(p.gridDimZ)],
                 "block": [int(p.blockDimX), int(p.blockDimY), int(p.blockDimZ)],
                 "sharedMemBytes": int(p.sharedMemBytes), "kernelParams": int(p.kernelParams or 0),
                 "extra": int(p.extra or 0)}
    for opt in ("kern", "ctx"):
        if hasattr(p, opt):
            try:
                rec[opt] = int(getattr(p, opt))
            except Exception:  # noqa: BLE001
                rec[opt] = str(getattr(p, opt))[:100]
    try:
        rec["name"] = func_name(f)
    except Exception as e:  # noqa: BLE001
        rec["name"] = f"error: {err_text(e, 300)}"
    try:
        lay = func_param_layout(f)
    except Exception as e:  # noqa: BLE001 - a binding without the call in this driver: the PTX signature then
        lay = {"error": err_text(e, 300)}
    layout = lay.get("params") if "error" not in lay else None      # a partial layout is no layout
    rec["param_layout_from"] = lay.get("count_from") or lay.get("error")
    if not layout and ptx_layout:
        layout = [list(x) for x in ptx_layout]
        rec["param_layout_from"] = f"the PTX signature (driver: {lay.get('error') or 'no parameters'})"
    rec["param_layout"] = layout
    if ptx_layout:
        rec["param_layout_matches_ptx"] = same_layout(ptx_layout, layout or [])
    raw: dict = {"func": f, "grid": rec["grid"], "block": rec["block"], "shared": rec["sharedMemBytes"], "values": None}
    try:
        if rec["kernelParams"] or not rec["extra"]:
            vals = read_params(rec["kernelParams"], layout or [])
        else:
            vals, rec["params_from_extra"] = read_params_extra(rec["extra"], layout or [])
        raw["values"] = vals
        rec["param_sizes"] = [len(v) for v in vals]
        rec["param_bytes"] = [hexbytes(v) for v in vals]
    except Exception as e:  # noqa: BLE001
        rec["param_bytes_error"] = err_text(e, 600)
    rec["attributes"] = node_attributes(node)
    return rec, raw


def node_type_name(node) -> str:
    t = _call("cuGraphNodeGetType", node)
    return getattr(t, "name", str(t)).replace("CU_GRAPH_NODE_TYPE_", "")


def graph_record(graph, ptx_layout=None) -> tuple[dict, dict]:
    """(record, raws) of a graph: node count, types, edges, the kernel nodes in dependency order (the first one in
    full; every other compared with it: function, dims, parameter bytes, attributes), other nodes' params."""
    nodes = graph_nodes(graph)
    edges = graph_edges(graph)
    by_id = {int(n): n for n in nodes}
    order = [by_id[i] for i in topo_order(list(by_id), edges)]
    rec: dict = {"nodes": len(nodes), "edges": len(edges), "types": {}, "kernel_nodes": 0, "other_nodes": []}
    raws: dict = {"first_kernel_node": None, "kernel_nodes": []}
    first = None
    same = []
    for n in order:
        try:
            t = node_type_name(n)
        except Exception as e:  # noqa: BLE001
            t = f"error: {err_text(e, 200)}"
        rec["types"][t] = rec["types"].get(t, 0) + 1
        if t == "KERNEL":
            kr, raw = kernel_node(n, ptx_layout)
            raws["kernel_nodes"].append(n)
            if first is None:
                first = kr
                rec["first_kernel_node"] = kr
                raws["first_kernel_node"] = n
                raws["first"] = raw
            else:
                same.append(all(kr.get(k) == first.get(k) for k in ("function", "grid", "block", "sharedMemBytes",
                                                                      "param_bytes", "attributes")))
        else:
            o: dict = {"type": t}
            get = {"MEMSET": "cuGraphMemsetNodeGetParams", "MEMCPY": "cuGraphMemcpyNodeGetParams"}.get(t)
            if get and _has(get):
                try:
                    o["params"] = struct_plain(_call(get, n))
                except Exception as e:  # noqa: BLE001
                    o["params"] = f"error: {err_text(e, 300)}"
            rec["other_nodes"].append(o)
    rec["kernel_nodes"] = len(raws["kernel_nodes"])
    rec["kernel_nodes_like_the_first"] = all(same) if same else None
    rec["kernel_nodes_unlike_the_first"] = sum(not x for x in same)
    return rec, raws


def dot_dump(graph, path: Path) -> str:
    d = _d()
    flags = int(d.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)
    path.parent.mkdir(parents=True, exist_ok=True)
    _call("cuGraphDebugDotPrint", graph, str(path).encode(), flags)
    return str(path)


class HandGraph:
    """A graph built by hand: ``n`` kernel nodes in a chain, each with ``func``, the dims, shared bytes and
    parameter values given, and (``attrs_from``) the node attributes of a captured node copied onto each
    (cuGraphKernelNodeCopyAttributes); instantiated and uploaded. launch(stream) replays it."""

    def __init__(self, func, grid, block, shared: int, values: Sequence[bytes], n: int, attrs_from=None) -> None:
        d = _d()
        self.buffers = ParamBuffers(values)
        self.graph = _call("cuGraphCreate", 0)
        self.exec = None
        self.attr_errors: list[str] = []
        prev = None
        for _ in range(n):
            p = d.CUDA_KERNEL_NODE_PARAMS()
            p.func = _fn(func)
            p.gridDimX, p.gridDimY, p.gridDimZ = (int(x) for x in grid)
            p.blockDimX, p.blockDimY, p.blockDimZ = (int(x) for x in block)
            p.sharedMemBytes = int(shared)
            p.kernelParams = self.buffers.address
            p.extra = 0
            deps = [prev] if prev is not None else None
            node = _call("cuGraphAddKernelNode", self.graph, deps, 1 if prev is not None else 0, p)
            if attrs_from is not None:
                try:
                    _call("cuGraphKernelNodeCopyAttributes", node, attrs_from)
                except Exception as e:  # noqa: BLE001
                    self.attr_errors.append(err_text(e, 300))
            prev = node
        self.exec = _call("cuGraphInstantiate", self.graph, 0)

    def upload(self, stream: int) -> None:
        _call("cuGraphUpload", self.exec, _d().CUstream(int(stream)))

    def launch(self, stream: int) -> None:
        _call("cuGraphLaunch", self.exec, _d().CUstream(int(stream)))

    def destroy(self) -> None:
        for name, h in (("cuGraphExecDestroy", self.exec), ("cuGraphDestroy", self.graph)):
            if h is not None:
                try:
                    _call(name, h)
                except Exception:  # noqa: BLE001
                    pass
        self.exec = self.graph = None


class ExecOf:
    """An executable of an existing graph (the captured ones: cuGraphInstantiate on torch's kept cudaGraph_t)."""

    def __init__(self, graph) -> None:
        self.exec = _call("cuGraphInstantiate", graph, 0)

    def upload(self, stream: int) -> None:
        _call("cuGraphUpload", self.exec, _d().CUstream(int(stream)))

    def launch(self, stream: int) -> None:
        _call("cuGraphLaunch", self.exec, _d().CUstream(int(stream)))

    def destroy(self) -> None:
        if self.exec is not None:
            try:
                _call("cuGraphExecDestroy", self.exec)
            except Exception:  # noqa: BLE001
                pass
            self.exec = None


# ------------------------------------------------------------------------------------------------ capture (GPU)
def capture(fn, torch) -> tuple[Any, Any, str]:
    """(torch graph or None, CUgraph, how) of BACK_TO_BACK launches of fn (launched once first). torch's CUDAGraph
    with keep_graph=True (its cudaGraph_t kept: raw_cuda_graph); where this torch lacks it, the driver's capture on a
    side stream in RELAXED mode (the graph is then ours)."""
    d = _d()
    fn()
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        g = None
    if g is not None and hasattr(g, "raw_cuda_graph"):
        with torch.cuda.graph(g):
            for _ in range(TT.BACK_TO_BACK):
                fn()
        torch.cuda.synchronize()
        return g, d.CUgraph(int(g.raw_cuda_graph())), "torch keep_graph"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    st = d.CUstream(int(side.cuda_stream))
    with torch.cuda.stream(side):
        _call("cuStreamBeginCapture", st, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
        try:
            for _ in range(TT.BACK_TO_BACK):
                fn()
        finally:
            graph = _call("cuStreamEndCapture", st)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    return None, graph, "driver capture (RELAXED, side stream)"


# ------------------------------------------------------------------------------------------------ the kernel's diagnosis
def output_pairs(outs: dict) -> list[tuple[int, int]]:
    """The address pairs (plain's, natent's) a parameter may differ by: the two launchers' outputs."""
    return [(int(outs["plain"].data_ptr()), int(outs["natent"].data_ptr()))]


def diff_summary(name: str, nodes: dict, funcs: dict) -> list[str]:
    """What differs between the plain graph's kernel node and the natent graph's (part 1), as lines."""
    p = (nodes.get("plain") or {})
    n = (nodes.get("natent") or {})
    lines = []
    if "error" in p or "error" in n:
        return [f"{name}: nodes not read: {p.get('error') or n.get('error')}"]
    lines.append(f"{name}: graphs: plain {p.get('nodes')} nodes {p.get('types')} edges {p.get('edges')}; natent "
                 f"{n.get('nodes')} nodes {n.get('types')} edges {n.get('edges')}; kernel nodes unlike the graph's "
                 f"first: {p.get('kernel_nodes_unlike_the_first')} / {n.get('kernel_nodes_unlike_the_first')}")
    if p.get("other_nodes") or n.get("other_nodes"):
        lines.append(f"  other nodes: plain {p.get('other_nodes')} natent {n.get('other_nodes')}")
    kp, kn = p.get("first_kernel_node") or {}, n.get("first_kernel_node") or {}
    lines.append(f"  function: {kp.get('name')} vs {kn.get('name')}")
    for k in ("grid", "block", "sharedMemBytes", "param_layout", "extra"):
        if kp.get(k) != kn.get(k):
            lines.append(f"  DIFFERS {k}: {kp.get(k)} vs {kn.get(k)}")
    pd = nodes.get("param_diff") or {}
    if pd.get("identical"):
        lines.append(f"  parameter bytes identical ({pd.get('count')} parameters)")
    elif pd:
        what = "only the outputs' addresses" if pd.get("only_addresses_differ") else "NOT only addresses"
        lines.append(f"  parameter bytes differ in {len(pd.get('params', []))} parameters ({what}): " + ", ".join(
            f"#{x['param']} {x['differing_bytes']} B{' (address)' if x['address_only'] else ''} {x['ranges'][:4]}"
            for x in pd.get("params", [])[:8]))
    ad = dict_diff(kp.get("attributes"), kn.get("attributes"))
    lines.append(f"  node attributes: {'identical' if not ad else 'DIFFER ' + str(ad)[:800]}")
    fp, fn_ = (funcs.get("plain") or {}), (funcs.get("native_entry") or {})
    fd = dict_diff(fp.get("attributes"), fn_.get("attributes"))
    lines.append(f"  function attributes (plain vs native entry): {'identical' if not fd else 'DIFFER ' + str(fd)[:800]}")
    mp, mn = fp.get("module") or {}, fn_.get("module") or {}
    lines.append(f"  modules: plain {mp.get('function_count')} functions {mp.get('functions')}; native entry's "
                 f"{mn.get('function_count')} functions {mn.get('functions')}")
    return lines


def time_variants(launch: dict[str, Callable[[], None]], torch, pairs: int, deadline: float) -> dict:
    """PAIRS rounds, each one replay of every variant (the order reversed every other round), each replay between
    two events behind a GPU sleep (tma_triton._event_ms), per launch (ms). Stops early at the deadline (rounds)."""
    ms: dict[str, list[float]] = {k: [] for k in launch}
    keys = list(launch)
    errors: dict = {}
    rounds = 0
    for r in range(pairs):
        if time.time() > deadline or not keys:
            break
        for k in (keys if r % 2 == 0 else keys[::-1]):
            if k in errors:
                continue
            try:
                ms[k].append(TT._event_ms(launch[k], torch) / TT.BACK_TO_BACK)
            except Exception as e:  # noqa: BLE001 - this variant's rounds end here; the others go on
                errors[k] = f"round {r}: {err_text(e, 600)}"
        keys = [k for k in keys if k not in errors]
        rounds += 1
    return {"ms": ms, "rounds": rounds, "errors": errors}


def const_pad_cubin(kp, work: Path) -> tuple[bytes, dict]:
    """The plain kernel's PTX with :func:`with_const_pad`, assembled by Triton's ptxas with the command line Triton
    ran for it (runtime_cuda.triton_load.ptxas_argv from its metadata; its own ptxas). (cubin, what was run)."""
    from hbfcommon import deferred as DF  # noqa: PLC0415
    from runtime_cuda import triton_load as TL  # noqa: PLC0415
    meta = kp.metadata._asdict() if hasattr(kp.metadata, "_asdict") else dict(vars(kp.metadata))
    meta = {k: (v._asdict() if hasattr(v, "_asdict") else v) for k, v in meta.items()}
    tgt = meta.get("target")
    # Triton 3.6's metadata holds a GPUTarget (a dataclass, no mapping): its arch attribute, or a dict's
    arch = getattr(tgt, "arch", None) or (tgt.get("arch") if isinstance(tgt, dict) else None) or 90
    ptxas = TL.triton_ptxas(int(arch))
    try:
        argv = TL.ptxas_argv("f_const", meta)
        how = "triton_load.ptxas_argv"
    except Exception as e:  # noqa: BLE001 - metadata the reconstruction does not know: Triton's defaults
        argv = ["-lineinfo", "-v", f"--gpu-name=sm_{arch}a", DF.PTX_TOKEN, "-o", DF.OUT_TOKEN]
        how = f"defaults ({err_text(e, 200)})"
    work.mkdir(parents=True, exist_ok=True)
    src, out = work / "f_const.ptx", work / "f_const.cubin"
    src.write_text(with_const_pad(kp.asm["ptx"]))
    cmd = [ptxas] + [str(src) if a == DF.PTX_TOKEN else str(out) if a == DF.OUT_TOKEN else a for a in argv]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if cp.returncode != 0:
        raise RuntimeError(f"ptxas exit {cp.returncode}: {(cp.stderr or cp.stdout)[-600:]}")
    return out.read_bytes(), {"argv": cmd, "argv_from": how, "pad_bytes": CONST_PAD_BYTES}


def diag_kernel(s, K, name: str, work: Path, out_dir: Path, torch, rec: dict, save: Callable[[str], None],
                deadline: float, pairs: int) -> None:
    """One kernel: builds, part 0 (static), the captures, part 1 (nodes), part 2 (swap timing), part 3 (identity)."""
    from runtime_cuda import cudrv  # noqa: PLC0415
    torch.manual_seed(0)
    ins = TT._inputs(name, torch)
    use_ptxas("plain")
    go = {"plain": TT._launcher(K, name, "plain", ins, torch)}
    kp, out_p = go["plain"]()
    torch.cuda.synchronize()
    ref_out = out_p.clone()         # the plain build's output: what every graph of part 3 must write
    same = {"plain": out_p}
    nat = TT._variant_launchers(name, ins, work, torch, same, variants=TT.NATENT_VARIANT)
    same.pop("plain")
    rec["natent_host_launch_identical"] = same
    if "natent" not in nat:
        raise RuntimeError(f"the natent build did not build or run: {same}")
    go["natent"] = nat["natent"]
    kn, out_n = go["natent"]()
    torch.cuda.synchronize()
    outs = {"plain": out_p, "natent": out_n}
    b = s.bindings.get(int(kn.module))
    natname = f"{name}_natent"
    nfn = b.native_fns.get(natname) if b is not None else None
    rec["builds"] = {
        "plain": {"function": int(kp.function), "module": int(kp.module), "n_regs": getattr(kp, "n_regs", None),
                  "shared": getattr(kp.metadata, "shared", None), "num_warps": getattr(kp.metadata, "num_warps", None),
                  "num_ctas": getattr(kp.metadata, "num_ctas", None),
                  "launch_pdl": getattr(kp.metadata, "launch_pdl", None),
                  "launch_cooperative_grid": getattr(kp.metadata, "launch_cooperative_grid", None)},
        "natent": {"function": int(kn.function), "module": int(kn.module), "n_regs": getattr(kn, "n_regs", None),
                   "shared": getattr(kn.metadata, "shared", None), "bound": b is not None,
                   "native_entry": (b.kernel(natname).native_entry if b and b.kernel(natname) else None),
                   "native_function": int(nfn) if nfn is not None else None,
                   "native_ready": bool(b and natname in b.native_ready)}}
    save(f"{name}: built")
    log.info("%s: built: plain fn %#x, natent fn %#x, native entry %s (fn %s)", name, int(kp.function),
             int(kn.function), rec["builds"]["natent"]["native_entry"], rec["builds"]["natent"]["native_function"])

    # ---- part 0: static
    try:
        rec["static"] = static_compare(kp.asm["cubin"], f"{name}_plain", kn.asm["cubin"], f"{natname}{NATIVE_SUFFIX}",
                                       work / "static" / name)
    except Exception as e:  # noqa: BLE001
        rec["static"] = err_record(e)
    st = rec["static"]
    log.info("%s: part 0 static: SASS identical %s %s, nv.info identical %s, text headers %s, sections of the "
             "function that differ %s %s", name, st.get("sass_identical"), st.get("sass_instructions"),
             st.get("nv_info_identical"), st.get("text_header"), st.get("sections_of_fn_differ"), st.get("error", ""))
    save(f"{name}: part 0 static")

    graphs: dict = {}          # torch graphs (kept alive until the end)
    raw_graphs: dict = {}
    hand: dict = {}
    launch: dict = {}          # variant -> a replay (torch's replay methods hold their graphs: cleared first)
    extra_modules: list = []
    try:
        # ---- capture
        try:
            was = s.graph_native
            sel0 = dict(s.launch_selection.get(natname) or {})
            graphs["plain"], raw_graphs["plain"], how = capture(go["plain"], torch)
            s.graph_native = "all"
            try:
                graphs["natent"], raw_graphs["natent"], _ = capture(go["natent"], torch)
            finally:
                s.graph_native = was
            sel1 = s.launch_selection.get(natname) or {}
            rec["capture"] = {"how": how, "launches_per_graph": TT.BACK_TO_BACK,
                              "natent_launch_selection": {f: int(sel1.get(f, 0)) - int(sel0.get(f, 0))
                                                          for f in ("captured", "captured_native", "native_entry")},
                              "records": s.counters(publish=False).get("graph_native")}
            rec["capture"]["native_entry_captured"] = \
                rec["capture"]["natent_launch_selection"]["captured_native"] == TT.BACK_TO_BACK
        except Exception as e:  # noqa: BLE001
            rec["capture"] = err_record(e)
            save(f"{name}: capture failed")
            log.error("%s: capture failed: %s", name, rec["capture"]["error"])
            return
        log.info("%s: captured (%s): natent selection %s", name, rec["capture"]["how"],
                 rec["capture"]["natent_launch_selection"])
        save(f"{name}: captured")

        # ---- part 1: nodes
        raws: dict = {}
        nodes: dict = {}
        funcs: dict = {}
        try:
            for key, k in (("plain", kp), ("natent", kn)):
                entry = f"{name}_plain" if key == "plain" else f"{natname}"
                try:
                    lay = ptx_param_layout(k.asm["ptx"], entry)
                    nodes[key], raws[key] = graph_record(raw_graphs[key], lay)
                    nodes[key]["ptx_param_layout"] = lay
                except Exception as e:  # noqa: BLE001
                    nodes[key] = err_record(e)
                try:
                    nodes[key]["dot"] = dot_dump(raw_graphs[key], out_dir / "dot" / f"{name}_{key}.dot")
                except Exception as e:  # noqa: BLE001
                    nodes[key]["dot"] = f"error: {err_text(e, 300)}"
            fp = (nodes.get("plain") or {}).get("first_kernel_node") or {}
            fq = (nodes.get("natent") or {}).get("first_kernel_node") or {}
            if fp.get("param_bytes") is not None and fq.get("param_bytes") is not None:
                addr_pairs = output_pairs(outs) + device_address_pairs(
                    fp["param_bytes"], fq["param_bytes"], lambda v: cudrv.address_range(v) is not None)
                nodes["param_diff"] = param_bytes_diff(fp["param_bytes"], fq["param_bytes"], addr_pairs)
                nodes["param_diff"]["address_pairs"] = [[hex(x), hex(y)] for x, y in addr_pairs]
            nodes["node_attributes_diff"] = dict_diff(fp.get("attributes"), fq.get("attributes"))
            funcs["plain"] = function_record(kp.function)
            funcs["native_entry"] = function_record(fq["function"]) if fq.get("function") else \
                {"error": "no kernel node in the natent graph"}
            funcs["natent_instrumented_entry"] = function_record(kn.function)
            if nfn is not None:
                funcs["native_entry_is_the_sessions"] = int(nfn) == int(fq.get("function") or 0)
            funcs["attributes_diff_plain_native"] = dict_diff((funcs["plain"] or {}).get("attributes"),
                                                              (funcs["native_entry"] or {}).get("attributes"))
            rec["nodes"], rec["functions"] = nodes, funcs
            rec["summary"] = diff_summary(name, nodes, funcs)
            for ln in rec["summary"]:
                log.info("%s", ln)
            for ln in format_table({"plain": (funcs["plain"] or {}).get("attributes") or {},
                                    "native_entry": (funcs["native_entry"] or {}).get("attributes") or {},
                                    "natent_instr": (funcs["natent_instrumented_entry"] or {}).get("attributes") or {}}):
                log.info("  fattr %s", ln)
            for ln in format_table({"plain_node": fp.get("attributes") or {}, "natent_node": fq.get("attributes") or {}}):
                log.info("  nattr %s", ln)
        except Exception as e:  # noqa: BLE001
            rec["nodes"] = {**nodes, **err_record(e)}
            rec["functions"] = funcs
        save(f"{name}: part 1 nodes")

        # ---- part 2: swap timing
        stream = int(torch.cuda.current_stream().cuda_stream)
        try:
            if time.time() > deadline:
                raise TimeoutError("budget spent before part 2")
            rp, rn = raws.get("plain") or {}, raws.get("natent") or {}
            P, N = rp.get("first"), rn.get("first")
            if not P or not N or P.get("values") is None or N.get("values") is None:
                raise RuntimeError("the captured kernel nodes' parameters were not read (part 1)")
            np_, nn_ = rp["first_kernel_node"], rn["first_kernel_node"]
            build = {"a": (P["func"], P, np_), "b": (N["func"], P, np_), "c": (N["func"], N, nn_),
                     "d": (P["func"], N, nn_), "a0": (P["func"], P, None), "a_nattr": (P["func"], P, nn_)}
            errors: dict = {}
            e_funcs: dict = {}
            for k, (f, src, attrs) in build.items():
                log.info("%s: part 2: hand graph %s", name, k)     # a crash in the driver names its step
                try:
                    hand[k] = HandGraph(f, src["grid"], src["block"], src["shared"], src["values"], TT.BACK_TO_BACK,
                                        attrs)
                except Exception as e:  # noqa: BLE001
                    errors[k] = err_text(e, 800)
            # (e) the function loaded again from a fresh module of each cubin, plain's attributes copied onto it
            for k, cub, fname in (("e_plain", kp.asm["cubin"], f"{name}_plain"),
                                  ("e_natent", kn.asm["cubin"], f"{natname}{NATIVE_SUFFIX}"),
                                  ("f_const", None, f"{name}_plain")):
                log.info("%s: part 2: fresh module %s", name, k)
                try:
                    if cub is None:                  # f_const: the plain PTX with a user constant bank, assembled
                        cub, rec["f_const"] = const_pad_cubin(kp, work / "f_const" / name)
                        rec["f_const"]["static_vs_plain"] = static_compare(kp.asm["cubin"], fname, cub, fname,
                                                                           work / "static_f" / name)
                    mod = cudrv.module_load_data(cub)
                    extra_modules.append(mod)
                    f = cudrv.module_functions(mod, [fname])[fname]
                    copied = cudrv.copy_function_attributes(kp.function, f)
                    hand[k] = HandGraph(f, P["grid"], P["block"], P["shared"], P["values"], TT.BACK_TO_BACK, np_)
                    hand[k].copied = copied
                    e_funcs[k] = function_record(f)
                except Exception as e:  # noqa: BLE001
                    errors[k] = err_text(e, 800)
            log.info("%s: part 2: built %s; errors %s", name, sorted(hand), sorted(errors))
            execs: dict = {}
            for k in ("plain", "natent"):
                try:
                    execs[f"cap_{k}"] = ExecOf(raw_graphs[k])
                except Exception as e:  # noqa: BLE001
                    errors[f"cap_{k}"] = err_text(e, 800)
            for k in VARIANTS:
                h = hand.get(k) or execs.get(k)
                if h is not None:
                    try:
                        h.upload(stream)
                        launch[k] = (lambda h=h: h.launch(stream))
                    except Exception as e:  # noqa: BLE001
                        errors[k] = err_text(e, 800)
            for k in ("plain", "natent"):
                g = graphs.get(k)
                if g is not None:
                    try:
                        if hasattr(g, "instantiate"):
                            g.instantiate()
                        launch[f"torch_{k}"] = g.replay
                    except Exception as e:  # noqa: BLE001
                        errors[f"torch_{k}"] = err_text(e, 800)
            hand.update({k: v for k, v in execs.items()})
            for k, f in launch.items():          # each once: warm, and a failure named before the rounds
                try:
                    f()
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001
                    errors[k] = err_text(e, 800)
            for k in errors:
                launch.pop(k, None)
            t = time_variants(launch, torch, pairs, deadline)
            ref_variant = "a" if "a" in launch else "cap_plain"
            rec["swap"] = {"pairs": pairs, "rounds": t["rounds"], "launches_per_graph": TT.BACK_TO_BACK,
                           "reference": ref_variant, "variants": ratio_stats(t["ms"], ref_variant),
                           "vs_cap_plain": {k: v.get("ratio") for k, v in ratio_stats(t["ms"], "cap_plain").items()}
                           if "cap_plain" in launch else None,
                           "what": {k: VARIANT_WHAT[k] for k in launch}, "errors": {**errors, **t["errors"]},
                           "attribute_copy_errors": {k: h.attr_errors for k, h in hand.items()
                                                     if getattr(h, "attr_errors", None)},
                           "e_attributes_copied": {k: getattr(hand.get(k), "copied", None)
                                                   for k in ("e_plain", "e_natent", "f_const")},
                           "e_functions": e_funcs,
                           "order": "every round each variant once, the order reversed on odd rounds"}
            for k, v in rec["swap"]["variants"].items():
                r = v.get("ratio") or {}
                log.info("%s: part 2 swap %-12s %.4f ms/launch  x%s [%s, %s]  %+s us  (%s)", name, k,
                         (v.get("device_ms") or {}).get("median", float("nan")),
                         None if not r else round(r["median"], 4), None if not r else round(r["min"], 4),
                         None if not r else round(r["max"], 4), v.get("extra_us_median"), VARIANT_WHAT.get(k, "")[:60])
            if errors:
                log.warning("%s: part 2 errors: %s", name, errors)
        except Exception as e:  # noqa: BLE001
            rec["swap"] = err_record(e)
            log.error("%s: part 2 failed: %s", name, rec["swap"]["error"])
        save(f"{name}: part 2 swap")

        # ---- part 3: identity
        try:
            ident: dict = {}
            writes = {"a": "plain", "b": "plain", "a0": "plain", "a_nattr": "plain", "e_plain": "plain",
                      "e_natent": "plain", "f_const": "plain",
                      "cap_plain": "plain", "c": "natent", "d": "natent", "cap_natent": "natent"}
            for k, which in writes.items():
                h = hand.get(k)
                if h is None:
                    continue
                try:
                    o = outs[which]
                    o.fill_(-1.0)
                    torch.cuda.synchronize()
                    h.launch(stream)
                    torch.cuda.synchronize()
                    ident[k] = {"output": which, "identical": bool(torch.equal(o.view(torch.int8),
                                                                                    ref_out.view(torch.int8)))}
                except Exception as e:  # noqa: BLE001
                    ident[k] = {"output": which, "error": err_text(e, 600)}
            rec["identity"] = ident
            rec["identity_ok"] = bool(ident) and all(v.get("identical") for v in ident.values())
            log.info("%s: part 3 identity: %s", name, {k: v.get("identical", v.get("error")) for k, v in ident.items()})
        except Exception as e:  # noqa: BLE001
            rec["identity"] = err_record(e)
        save(f"{name}: part 3 identity")
    finally:
        launch.clear()
        torch.cuda.synchronize()
        for h in hand.values():
            h.destroy()
        hand.clear()
        if graphs.get("plain") is None and raw_graphs.get("plain") is not None:      # driver captures: ours
            for g in raw_graphs.values():
                try:
                    _call("cuGraphDestroy", g)
                except Exception:  # noqa: BLE001
                    pass
        raw_graphs.clear()
        f = g = None                   # part 2's loop names: the last held a torch graph (or its replay method)
        graphs.clear()                 # the graphs destroyed first: then their records may go
        torch.cuda.synchronize()
        try:
            rec["released"] = s.release_graph_captures()
        except Exception as e:  # noqa: BLE001
            rec["released"] = {"error": err_text(e)}
        for m in extra_modules:
            try:
                cudrv.module_unload(m)
            except Exception:  # noqa: BLE001
                pass


def gpu_main(res: dict, names: Sequence[str], work: Path, out_dir: Path, out_path: Path, deadline: float,
             pairs: int) -> None:
    """The session (a private hbfd, fixed 5 us source, Triton hooks), then each kernel in try/except."""
    import torch  # noqa: PLC0415
    import triton  # noqa: PLC0415

    import runtime_cuda  # noqa: PLC0415
    from devpath_common import SOURCES, hbfd_daemon, source_profile  # noqa: PLC0415
    SOURCES["fixed5us"] = ("fixed", 5_000)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    K = TT.load_kernels(work)
    tmp = Path(tempfile.mkdtemp(prefix="hbfd-gnd-", dir=work if len(str(work)) < 60 else None))
    kernels = res.setdefault("kernels", {})
    with hbfd_daemon(tmp, source_profile(tmp, "fixed5us")) as sock:
        s = runtime_cuda.attach(socket=sock)
        try:
            s.install_triton_hooks()
            try:
                res["driver_version"] = int(_call("cuDriverGetVersion"))
            except Exception as e:  # noqa: BLE001
                res["driver_version"] = f"error: {err_text(e, 200)}"
            res["session"] = {k: str(getattr(s, a, None)) for k, a in (("graph_native_knob", "graph_native"),
                                                                        ("native_entry", "native_entry"),
                                                                        ("native_select", "native_select"))}
            for name in names:
                rec = kernels.setdefault(name, {})

                def save(stage: str, rec=rec) -> None:
                    rec["stage"] = stage
                    res["summary"] = {k: v.get("summary") for k, v in kernels.items() if v.get("summary")}
                    write_json(out_path, res)
                if time.time() > deadline:
                    rec["error"] = "budget spent before this kernel"
                    save("skipped")
                    continue
                t = time.time()
                try:
                    diag_kernel(s, K, name, work, out_dir, torch, rec, save, deadline, pairs)
                except Exception as e:  # noqa: BLE001
                    rec.update(err_record(e))
                    log.error("%s: %s", name, rec["error"])
                rec["seconds"] = round(time.time() - t, 1)
                save("done")
        finally:
            try:
                s.close()
            except Exception as e:  # noqa: BLE001
                res["close_error"] = err_text(e)


# ------------------------------------------------------------------------------------------------ CPU (--dry-run)
def dry_run(res: dict, names: Sequence[str], work: Path, out_path: Path, deadline: float) -> None:
    """Part 0 on the CPU: each kernel's plain and natent builds compiled for sm_90 (tma_triton's CPU signature) and
    compared statically."""
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415
    K = TT.load_kernels(work)
    V = TT.load_variants(work, TT.NATENT_VARIANT)
    kernels = res.setdefault("kernels", {})
    for name in names:
        rec = kernels.setdefault(name, {})
        if time.time() > deadline:
            rec["error"] = "budget spent before this kernel"
            continue
        try:
            sig, attrs = TT.cpu_signature(name)
            cx, warps = TT.CONFIG[name]

            def comp(fn):
                return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=dict(cx), attrs=attrs),
                                      target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
            use_ptxas("plain")
            kp = comp(getattr(K, f"{name}_plain"))
            use_ptxas("hbf")
            with env_set(TT.NATENT_VARIANT["natent"]):
                kn = comp(getattr(V, f"{name}_natent"))
            rec["ptx_param_layout"] = ptx_param_layout(kp.asm["ptx"], f"{name}_plain")
            rec["ptx_param_layout_natent"] = ptx_param_layout(kn.asm["ptx"], f"{name}_natent")
            rec["shared"] = [getattr(kp.metadata, "shared", None), getattr(kn.metadata, "shared", None)]
            rec["static"] = static_compare(kp.asm["cubin"], f"{name}_plain", kn.asm["cubin"],
                                           f"{name}_natent{NATIVE_SUFFIX}", work / "static" / name)
            st = rec["static"]
            log.info("%s: part 0 static: SASS identical %s %s, nv.info identical %s, text headers %s, function "
                     "sections differ %s, natent-only sections %s", name, st.get("sass_identical"),
                     st.get("sass_instructions"), st.get("nv_info_identical"), st.get("text_header"),
                     st.get("sections_of_fn_differ"), st.get("sections_only_in_b"))
        except Exception as e:  # noqa: BLE001
            rec.update(err_record(e))
            log.error("%s: %s", name, rec["error"])
        write_json(out_path, res)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"),
                    help="output folder (graph_node_diag.json, dot/)")
    ap.add_argument("--work", default="", help="build folder (default: a new temporary one)")
    ap.add_argument("--kernels", default=",".join(TT.KERNELS), help="comma list (default: all, matmul_host first)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="no part starts after this many seconds")
    ap.add_argument("--pairs", type=int, default=PAIRS, help="interleaved rounds of the swap timing")
    ap.add_argument("--dry-run", action="store_true", help="CPU: part 0 (static) only, sm_90 builds")
    a = ap.parse_args(argv)
    names = tuple(n for n in a.kernels.split(",") if n)
    if not names or set(names) - set(TT.KERNELS):
        ap.error(f"--kernels: choose from {', '.join(TT.KERNELS)}")
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    logging.basicConfig(level=logging.INFO, format="[graph_node_diag %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    t0 = time.time()
    deadline = t0 + a.budget_s
    os.environ["HBF_TMA_DEVICE"] = "1"          # as tma_triton: the TMA device path opted in
    os.environ.setdefault("HBF_COMPLETION_TIMEOUT_NS", "5000000000")
    out_dir, _, work, _ = prepare_run(a.out, "graph_node_diag", a.work)
    out_path = out_dir / ("graph_node_diag_dry.json" if a.dry_run else "graph_node_diag.json")
    res: dict = {"what": "why a native entry costs more in CUDA graphs than the plain build (issue 15): the graphs' "
                         "kernel nodes dumped and compared, hand-built graphs swapping function and launch "
                         "parameters timed, outputs checked, nothing registered",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "command": " ".join(["python3", "bench/graph_node_diag.py", *(sys.argv[1:] if argv is None else argv)]),
                 "mode": "dry-run (CPU, sm_90 target: part 0)" if a.dry_run else "gpu",
                 "kernels_asked": list(names), "pairs": a.pairs, "launches_per_graph": TT.BACK_TO_BACK,
                 "variants": VARIANT_WHAT}
    rc = 1
    try:
        import triton  # noqa: PLC0415
        res["triton"] = triton.__version__
        try:
            import cuda.bindings  # noqa: PLC0415
            res["cuda_bindings"] = getattr(cuda.bindings, "__version__", "?")
        except Exception as e:  # noqa: BLE001
            res["cuda_bindings"] = f"error: {err_text(e, 200)}"
        if a.dry_run:
            res["gpu"] = "CPU"
            dry_run(res, names, work, out_path, deadline)
            res["ok"] = all("error" not in r and "error" not in (r.get("static") or {})
                            for r in res.get("kernels", {}).values()) and len(res.get("kernels", {})) == len(names)
        else:
            import torch  # noqa: PLC0415
            res["torch"] = torch.__version__
            if not torch.cuda.is_available():
                log.error("no GPU: only --dry-run runs here")
                res.update(error="no GPU (torch.cuda.is_available() is False): only --dry-run runs here", ok=False)
                write_json(out_path, res)
                return 2
            res["gpu"] = gpu_info()
            gpu_main(res, names, work, out_dir, out_path, deadline, a.pairs)
            part_keys = ("static", "capture", "nodes", "swap", "identity")
            res["ok"] = all("error" not in r and all("error" not in (r.get(k) or {}) for k in part_keys)
                            and r.get("identity_ok") for r in res.get("kernels", {}).values()) \
                and len(res.get("kernels", {})) == len(names)
        rc = 0 if res.get("ok") else 1
    except Exception as e:  # noqa: BLE001
        res.update(err_record(e))
        res["ok"] = False
    res["seconds"] = round(time.time() - t0, 1)
    write_json(out_path, res)
    log.info("ok=%s, wrote %s (%.1f s)", res.get("ok"), out_path, res["seconds"])
    return rc


if __name__ == "__main__":
    sys.exit(main())
