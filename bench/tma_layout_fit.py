#!/usr/bin/env python3
"""Fit the sm_90 CUtensorMap bit layout to real cuTensorMapEncodeTiled encodings (CPU only; issue 15).

    python3 bench/tma_layout_fit.py [--fixture bench/results/tma_tensormap_encodings_h200_r1.json.gz]
                                    [--out bench/results/tma_layout_fit.json]

The fixture is what ``bench/tma_tensormap.py gpu`` recorded on the H200: per call the inputs of
cuTensorMapEncodeTiled, the driver's result and the 128 bytes it wrote. From the ACCEPTED records alone, and
without reading hbfcommon/tensormap.py's table, this script derives:

1. every input field's position and encoding: for a numeric input (address, globalDim, globalStrides, boxDim,
   elementStrides, rank) the (bit, encoding) pairs -- encodings raw, value-1, value>>4 -- whose extracted bits equal
   the input in EVERY record that has it (an exhaustive search over all 1024 bit positions; ties between equivalent
   descriptions, e.g. value>>4 at bit 96 vs raw at bit 92 when the low 4 bits are always zero, go to the position
   aligned to the larger power of two); for an enum input (dtype, interleave, swizzle, L2 promotion, OOB fill) the
   positions whose bits are a non-constant function of it, preferring the identity code, then a one-to-one code,
   then the most distinct codes, with the code table observed;
2. what is left: the bits of every record not explained by (1) -- the bits the driver sets from several inputs --
   tested against named formulas (the TF32 flag, the box-bytes word, the swizzle's shared-memory alignment), and
   that nothing else remains anywhere;
3. the driver's acceptance rules: named predicates (documented cuda.h rules, and the ones this driver enforces
   beyond them) evaluated on every record, with how many refusals each explains and whether any accepted record
   breaks one; the bound on the box's bytes as the bracket the records give;
then checks the library (hbfcommon/tensormap.py): its FIELDS table against the fit, encode() against the driver's
bytes, decode() against the inputs, and its rules against the driver's verdicts. Writes --out (JSON) and logs a
summary. One named exclusion: a rank-1 call refused when cuda-python passed no globalStrides array (it turns the
empty list into a NULL pointer; cuTensorMapEncodeTiled accepts rank 1 with a stride pointer).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import logging
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hbfcommon import tensormap as tm  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("tma_layout_fit")
BITS = tm.DESC_BYTES * 8
ELEM_BYTES = (1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 0, 0, 0)      # cuda.h, per CUtensorMapDataType
FLOAT_TYPES = frozenset(range(6, 13))
ENCODINGS: dict[str, tuple[Callable[[int], int], int]] = {   # name -> (stored form, preference: lower wins ties)
    "raw": (lambda v: v, 0), "minus1": (lambda v: v - 1, 1), "shr4": (lambda v: v >> 4, 2)}
# documented value ranges, as bits of the stored form (cuda.h): the most a field could need
DOC_WIDTH = {"ADDR": 64, "RANK": 3, "DIM": 32, "GSTRIDE": 36, "BOX": 8, "ESTRIDE": 3, "DTYPE": 4, "INTERLEAVE": 2,
             "SWIZZLE": 3, "L2PROMO": 2, "FILL": 1}
# the table this fit replaced (hbfcommon/tensormap.py at 37ad3de: every position a hypothesis): name -> (lo, width,
# encoding)
OLD_HYPOTHESIS = {"ADDR": (0, 64, "raw"), **{f"DIM{i}": (64 + 32 * i, 32, "minus1") for i in range(5)},
                  **{f"GSTRIDE{i}": (224 + 36 * i, 36, "shr4") for i in range(4)},
                  **{f"BOX{i}": (368 + 8 * i, 8, "minus1") for i in range(5)},
                  **{f"ESTRIDE{i}": (408 + 3 * i, 3, "minus1") for i in range(5)},
                  "RANK": (423, 3, "minus1"), "DTYPE": (426, 4, "ptx_elemtype"), "INTERLEAVE": (430, 2, "raw"),
                  "SWIZZLE": (432, 3, "ptx swizzle_mode"), "L2PROMO": (435, 2, "raw"), "FILL": (437, 1, "raw"),
                  "IM2COL": (438, 1, "raw"), "SWZ_ATOM": (439, 2, "ptx swizzle_atomicity")}


def _tz(x: int) -> int:
    return (x & -x).bit_length() - 1 if x else 64


def _stamp(argv: list[str]) -> dict:
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": rev.stdout.strip(),
            "command": " ".join(["tma_layout_fit.py", *argv]), "card": "CPU (analysis of an H200 recording)"}


# ---- the records ------------------------------------------------------------------------------------------------------
class Rec:
    """One recorded call: inputs, driver verdict, the descriptor as a 1024-bit integer (accepted calls)."""

    def __init__(self, r: dict) -> None:
        self.raw = r
        self.inp = r["inputs"]
        self.ok = r["driver_rc"] == 0
        self.err = r.get("driver_err", "")
        self.n = int.from_bytes(bytes.fromhex(r["bytes"]), "little") if self.ok else None
        self.rank = len(self.inp["dims"])

    def numeric(self, name: str) -> int | None:
        """The input a numeric field would hold, or None where the record has no such input."""
        i = self.inp
        if name == "ADDR":
            return i["base"]
        if name == "RANK":
            return self.rank
        for stem, key in (("DIM", "dims"), ("GSTRIDE", "gstrides"), ("BOX", "box"), ("ESTRIDE", "estrides")):
            if name.startswith(stem) and name[len(stem):].isdigit():
                k = int(name[len(stem):])
                return i[key][k] if k < len(i[key]) else None
        raise KeyError(name)

    def category(self, name: str) -> int:
        return self.inp[{"DTYPE": "dtype", "INTERLEAVE": "interleave", "SWIZZLE": "swizzle", "L2PROMO": "l2promo",
                         "FILL": "fill"}[name]]


def rank1_null_strides(r: Rec) -> bool:
    """The named exclusion: a rank-1 call refused while the binding passed no globalStrides array (NULL)."""
    return not r.ok and r.rank == 1 and r.inp["gstrides"] == [] and "rank1_strides_passed" not in r.raw


NUMERIC = ["ADDR", "RANK", *[f"GSTRIDE{i}" for i in range(4)], *[f"DIM{i}" for i in range(5)],
           *[f"ESTRIDE{i}" for i in range(5)], *[f"BOX{i}" for i in range(5)]]
CATEGORICAL = ["DTYPE", "INTERLEAVE", "SWIZZLE", "FILL", "L2PROMO"]


def _stem(name: str) -> str:
    return name.rstrip("0123456789")


# ---- 1. positions and encodings ------------------------------------------------------------------------------------------
def fit_numeric(name: str, acc: list[Rec]) -> dict:
    have = [(r.n, r.numeric(name)) for r in acc if r.numeric(name) is not None]
    # most varied values first: a wrong position fails within a record or two
    have.sort(key=lambda nv: -bin(nv[1]).count("1"))
    cands = []
    for enc, (fn, pref) in ENCODINGS.items():
        stored = [(n, fn(v)) for n, v in have]
        if any(s < 0 for _, s in stored) or len({s for _, s in stored}) < 2:
            continue                  # a constant stored form says nothing about where the field is
        w = max(1, max(s for _, s in stored).bit_length())
        mask = (1 << w) - 1
        for lo in range(0, BITS - w + 1):
            if all(((n >> lo) & mask) == s for n, s in stored):
                cands.append({"lo": lo, "encoding": enc, "width_observed": w, "pref": pref})
    cands.sort(key=lambda c: (-min(_tz(c["lo"]), 10), c["pref"], c["lo"]))
    best = cands[0] if cands else None
    return {"records": len(have), "candidates": [{k: c[k] for k in ("lo", "encoding", "width_observed")}
                                                 for c in cands], "best": best}


def fit_categorical(name: str, acc: list[Rec], claimed: set[int]) -> dict:
    cats = [(r.n, r.category(name)) for r in acc]
    w = max(1, max(c for _, c in cats).bit_length())
    mask = (1 << w) - 1
    found = []
    for lo in range(0, BITS - w + 1):
        if set(range(lo, lo + w)) & claimed:
            continue
        code: dict[int, int] = {}
        if all(code.setdefault(c, (n >> lo) & mask) == ((n >> lo) & mask) for n, c in cats) and \
                len(set(code.values())) > 1:
            ident = all(k == v for k, v in code.items())
            one_to_one = len(set(code.values())) == len(code)
            found.append({"lo": lo, "width": w, "code": dict(sorted(code.items())), "identity": ident,
                          "one_to_one": one_to_one, "distinct": len(set(code.values()))})
    found.sort(key=lambda f: (not f["identity"], not f["one_to_one"], -f["distinct"], f["lo"]))
    return {"records": len(cats), "categories": sorted({c for _, c in cats}), "candidates": found[:8],
            "best": found[0] if found else None}


def _extent(lo: int, w: int, doc: int, claimed: set[int], acc: list[Rec]) -> int:
    """How far a field at lo could reach: up to its documented width, through bits zero in every record and held by
    no other fitted field."""
    width = w
    while width < doc and lo + width < BITS and lo + width not in claimed and \
            all(not (r.n >> (lo + width)) & 1 for r in acc):
        width += 1
    return width


def fit_fields(acc: list[Rec]) -> dict[str, dict]:
    fitted: dict[str, dict] = {}
    for name in NUMERIC:
        fitted[name] = fit_numeric(name, acc)
    # an array element whose values never vary in the records (e.g. globalDim[4] is 2 in every accepted rank-5 map)
    # cannot be found by the search: it is placed at its array's spacing and only CHECKED against the records
    for name in NUMERIC:
        f, stem = fitted[name], _stem(name)
        if f["best"] or name == stem:
            continue
        k = int(name[len(stem):])
        a, b = fitted.get(f"{stem}{k - 2}"), fitted.get(f"{stem}{k - 1}")
        if not (a and b and a["best"] and b["best"] and a["best"]["encoding"] == b["best"]["encoding"]):
            continue
        lo, enc = 2 * b["best"]["lo"] - a["best"]["lo"], b["best"]["encoding"]
        w = b["best"]["width_observed"]
        have = [(r.n, ENCODINGS[enc][0](r.numeric(name))) for r in acc if r.numeric(name) is not None]
        if have and all(((n >> lo) & ((1 << w) - 1)) == v for n, v in have):
            f["best"] = {"lo": lo, "encoding": enc, "pref": 0,
                         "width_observed": max(1, max(v for _, v in have).bit_length()),
                         "by_spacing": f"values constant in the records ({sorted({v for _, v in have})}): placed at "
                                       f"the array's spacing and checked"}
    claimed: set[int] = set()
    for name, f in fitted.items():
        b = f["best"]
        if b:
            claimed |= set(range(b["lo"], b["lo"] + b["width_observed"]))
    for name in CATEGORICAL:
        fitted[name] = fit_categorical(name, acc, claimed)
        b = fitted[name]["best"]
        if b:
            claimed |= set(range(b["lo"], b["lo"] + b["width"]))
    # widths: an array's elements sit a fixed spacing apart (the spacing is the width; the last element takes its
    # neighbour's); a scalar reaches through the bits zero in every record, up to its documented range
    for name, f in fitted.items():
        b = f["best"]
        if not b:
            continue
        w_obs = b.get("width_observed", b.get("width"))
        stem = _stem(name)
        mine = set(range(b["lo"], b["lo"] + w_obs))
        room = _extent(b["lo"], w_obs, DOC_WIDTH[stem], claimed - mine, acc)
        if name != stem:
            k = int(name[len(stem):])
            nxt, prv = fitted.get(f"{stem}{k + 1}"), fitted.get(f"{stem}{k - 1}")
            if nxt and nxt["best"]:
                width = nxt["best"]["lo"] - b["lo"]
            else:
                width = b["lo"] - prv["best"]["lo"]
        else:
            width = room
        f["lo"], f["width"], f["width_room"] = b["lo"], width, room
        f["encoding"] = b.get("encoding", "code table")
    return fitted


# ---- 2. the bits no input field explains ----------------------------------------------------------------------------------
def explained(r: Rec, fitted: dict[str, dict]) -> int:
    """The descriptor the fitted input fields alone predict for r (fields of absent dimensions: zero)."""
    n = 0
    for name in NUMERIC:
        v = r.numeric(name)
        f = fitted[name]
        if v is None or "lo" not in f:
            continue
        n |= ENCODINGS[f["encoding"]][0](v) << f["lo"]
    for name in CATEGORICAL:
        f = fitted[name]
        if "lo" in f:
            n |= f["best"]["code"][r.category(name)] << f["lo"]
    return n


DERIVED_HYPOTHESES: dict[str, Callable[[dict], int]] = {
    "box_bytes_floor (prod floor(box/estride) * elem)": lambda i: math.prod(
        b // s for b, s in zip(i["box"], i["estrides"])) * ELEM_BYTES[i["dtype"]],
    "box_bytes_ceil (prod ceil(box/estride) * elem)": lambda i: math.prod(
        -(-b // s) for b, s in zip(i["box"], i["estrides"])) * ELEM_BYTES[i["dtype"]],
    "box_bytes_ceil_dim0_unstrided (cuda.h's traversal)": lambda i: math.prod(
        -(-b // (s if k else 1)) for k, (b, s) in enumerate(zip(i["box"], i["estrides"]))) * ELEM_BYTES[i["dtype"]],
    "box_bytes_full (prod box * elem)": lambda i: math.prod(i["box"]) * ELEM_BYTES[i["dtype"]],
}


def fit_residual(acc: list[Rec], fitted: dict[str, dict]) -> dict:
    res = {r: r.n ^ explained(r, fitted) for r in acc}
    bits = Counter(b for x in res.values() for b in range(BITS) if x >> b & 1)
    qwords = sorted({b // 64 for b in bits})
    out: dict[str, Any] = {"residual_bits": {str(b): c for b, c in sorted(bits.items())},
                           "residual_qwords": qwords, "records": len(acc)}
    # the single bits: a function of the dtype?
    singles = {}
    for b in sorted(bits):
        if b // 64 in (8, 9):
            continue
        by: dict[int, set[int]] = {}
        for r, x in res.items():
            by.setdefault(r.category("DTYPE"), set()).add(x >> b & 1)
        if all(len(v) == 1 for v in by.values()):
            singles[str(b)] = {"function_of": "dtype", "set_for_dtypes": sorted(d for d, v in by.items() if 1 in v)}
    out["single_bits"] = singles
    # the qwords of derived values: the low 32 bits against named formulas
    for q in (8, 9):
        vals = [((x >> (64 * q)) & ((1 << 64) - 1), r) for r, x in res.items()]
        hyps = {}
        for hname, fn in DERIVED_HYPOTHESES.items():
            hyps[hname] = sum(v == fn(r.inp) for v, r in vals)
        by_sw: dict[int, set[int]] = {}
        for v, r in vals:
            by_sw.setdefault(r.category("SWIZZLE"), set()).add(v)
        hyps["function of swizzle alone"] = sum(len(by_sw[r.category("SWIZZLE")]) == 1 for _, r in vals)
        out[f"qword{q}"] = {"max": max(v for v, _ in vals), "hypotheses_matching_records": hyps,
                            "by_swizzle": {str(k): sorted(v)[:4] for k, v in sorted(by_sw.items())}}
    return out


# ---- 3. the driver's rules -------------------------------------------------------------------------------------------------
def _i(r: Rec) -> dict:
    return r.inp


RULES: list[tuple[str, str, Callable[[dict], bool]]] = [
    # (name, basis, predicate: True = the rule refuses the input)
    ("rank outside 1..5", "cuda.h", lambda i: not 1 <= len(i["dims"]) <= 5),
    ("packed sub-byte type (16U4_*, 16U6_*)", "observed: the sm_90 driver", lambda i: i["dtype"] >= 13),
    ("globalAddress not 16-B aligned (32 with INTERLEAVE_32B)", "cuda.h",
     lambda i: i["base"] % (32 if i["interleave"] == 2 else 16) != 0),
    ("globalDim outside 1..2^32", "cuda.h", lambda i: any(not 1 <= d <= 1 << 32 for d in i["dims"])),
    ("boxDim outside 1..256", "cuda.h", lambda i: any(not 1 <= b <= 256 for b in i["box"])),
    ("elementStrides outside 1..8", "cuda.h", lambda i: any(not 1 <= e <= 8 for e in i["estrides"])),
    ("globalStrides not a multiple of 16 (32) below 2^40", "cuda.h",
     lambda i: any(s % (32 if i["interleave"] == 2 else 16) or not 0 <= s < 1 << 40 for s in i["gstrides"])),
    ("interleaved with rank < 3", "cuda.h", lambda i: i["interleave"] != 0 and len(i["dims"]) < 3),
    ("boxDim[0]*elemsize not a multiple of 16 (no interleave)", "cuda.h",
     lambda i: i["interleave"] == 0 and i["dtype"] < 13 and bool(i["box"]) and
     (i["box"][0] * ELEM_BYTES[i["dtype"]]) % 16 != 0),
    ("128B_ATOM_* swizzle (4..6)", "observed: the sm_90 driver", lambda i: i["swizzle"] > 3),
    ("inner box wider than the swizzle span (no interleave)", "cuda.h",
     lambda i: i["interleave"] == 0 and 1 <= i["swizzle"] <= 3 and i["dtype"] < 13 and bool(i["box"]) and
     i["box"][0] * ELEM_BYTES[i["dtype"]] > (32, 64, 128)[i["swizzle"] - 1]),
    ("NaN OOB fill on an integer type", "cuda.h", lambda i: i["fill"] == 1 and i["dtype"] not in FLOAT_TYPES),
    (f"box bytes (prod floor(box/estride) * elem) above {tm.SMEM_BOX_MAX}", "observed: the sm_90 driver",
     lambda i: i["dtype"] < 13 and 1 <= len(i["dims"]) <= 5 and all(1 <= e <= 8 for e in i["estrides"]) and
     math.prod(b // e for b, e in zip(i["box"], i["estrides"])) * ELEM_BYTES[i["dtype"]] > tm.SMEM_BOX_MAX),
]
NOT_ENFORCED = [("INTERLEAVE_32B without SWIZZLE_32B", "cuda.h says refused",
                 lambda i: i["interleave"] == 2 and i["swizzle"] != 1)]


def fit_rules(recs: list[Rec]) -> dict:
    judged = [r for r in recs if not rank1_null_strides(r)]
    rules = []
    for name, basis, pred in RULES + NOT_ENFORCED:
        hit = [r for r in judged if pred(r.inp)]
        alone = [r for r in hit if not r.ok and sum(p(r.inp) for _, _, p in RULES) == 1]
        rules.append({"rule": name, "basis": basis, "inputs_breaking_it": len(hit),
                      "driver_refused": sum(not r.ok for r in hit), "driver_accepted": sum(r.ok for r in hit),
                      "refusals_explained_by_it_alone": len(alone)})
    predicted = Counter()
    for r in judged:
        refuse = any(p(r.inp) for _, _, p in RULES)
        predicted[("refuse" if refuse else "accept", "refused" if not r.ok else "accepted")] += 1
    # the bound on the box bytes: the bracket the records give (records no other rule refuses)
    others = [p for n, _, p in RULES if not n.startswith("box bytes")]
    bb = []
    for r in judged:
        i = r.inp
        if any(p(i) for p in others):
            continue
        bb.append((math.prod(b // e for b, e in zip(i["box"], i["estrides"])) * ELEM_BYTES[i["dtype"]], r.ok))
    acc_max = max(b for b, ok in bb if ok)
    ref_min = min((b for b, ok in bb if not ok), default=None)
    return {"records_judged": len(judged), "excluded_rank1_null_strides": len(recs) - len(judged),
            "rules": rules,
            "predicted_vs_driver": {f"predict {a} / driver {b}": c for (a, b), c in sorted(predicted.items())},
            "box_bytes_bound": {"accepted_max": acc_max, "refused_min": ref_min, "chosen": tm.SMEM_BOX_MAX,
                                "chosen_inside_bracket": acc_max <= tm.SMEM_BOX_MAX < (ref_min or 1 << 64),
                                "why_chosen": "227 KiB = 232448 B, the largest shared-memory block of an sm_90 GPU "
                                              "(cudaDevAttrMaxSharedMemoryPerBlockOptin on H100/H200)"},
            "rank1": {"calls": sum(r.rank == 1 for r in recs), "accepted": sum(r.rank == 1 and r.ok for r in recs),
                      "why_excluded": "cuda-python passes globalStrides = NULL for an empty list (checked against a "
                                      "stub libcuda.so.1 that prints the pointers: rank 1 -> (nil), ranks 2, 3 -> "
                                      "non-null); the Programming Guide's rank-1 template map passes a pointer"}}


# ---- the library against the fit and the driver -------------------------------------------------------------------------
def check_library(recs: list[Rec], fitted: dict[str, dict], residual: dict) -> dict:
    table = {}
    # the derived fields: where the residual put them, and the formula that matched every record
    n_acc = residual["records"]
    tf32 = [int(b) for b, v in residual["single_bits"].items() if v["set_for_dtypes"] == [11, 12]]
    q8 = residual["qword8"]["hypotheses_matching_records"]
    q9 = residual["qword9"]
    sw = {int(k): v for k, v in q9["by_swizzle"].items()}
    derived = {
        "TF32": tf32 == [tm.FIELD["TF32"].lo],
        "BOX_BYTES": q8["box_bytes_floor (prod floor(box/estride) * elem)"] == n_acc and tm.FIELD["BOX_BYTES"].lo == 512
        and residual["qword8"]["max"] < 1 << tm.FIELD["BOX_BYTES"].width,
        "SMEM_ALIGN": q9["hypotheses_matching_records"]["function of swizzle alone"] == n_acc
        and tm.FIELD["SMEM_ALIGN"].lo == 576 and all(sw[k] == [tm.SMEM_ALIGN_OF_SWIZZLE[k]] for k in sw),
    }
    for name, ok in derived.items():
        table[name] = {"fitted": "from the residual (see residual)", "library": {
            "lo": tm.FIELD[name].lo, "width": tm.FIELD[name].width, "encoding": tm.FIELD[name].encoding},
            "agrees": ok}
    for name, f in fitted.items():
        lib = tm.FIELD.get(name)
        if "lo" not in f:
            table[name] = {"fitted": None, "library": (lib.lo, lib.width) if lib else None, "agrees": False}
            continue
        enc_ok = lib is not None and (f["encoding"] == lib.encoding or (
            name in CATEGORICAL and f["best"]["identity"] and lib.encoding == "raw") or (
            name == "DTYPE" and lib.encoding == "desc_dtype"))
        agrees = lib is not None and lib.lo == f["lo"] and lib.width == f["width"] and enc_ok
        if name == "DTYPE" and lib is not None:
            agrees = agrees and all(f["best"]["code"][d] == tm.DESC_DTYPE[d][0] for d in f["best"]["code"])
        table[name] = {"fitted": {"lo": f["lo"], "width": f["width"], "encoding": f["encoding"],
                                  "width_room": f["width_room"]},
                       "library": {"lo": lib.lo, "width": lib.width, "encoding": lib.encoding} if lib else None,
                       "agrees": agrees}
    enc_equal = dec_equal = ours_refuse = 0
    mism: list[dict] = []
    rules = Counter()
    for r in recs:
        i = r.inp
        try:
            m = tm.TensorMap(base=i["base"], dtype=i["dtype"], dims=tuple(i["dims"]), gstrides=tuple(i["gstrides"]),
                             box=tuple(i["box"]), estrides=tuple(i["estrides"]), interleave=i["interleave"],
                             swizzle=i["swizzle"], l2promo=i["l2promo"], fill=i["fill"])
            ours, why = tm.encode(m), "OK"
        except tm.TensorMapError as e:
            m, ours, why = None, None, e.reason
        if rank1_null_strides(r):
            rules[("excluded rank-1 NULL strides", why)] += 1
            continue
        if not r.ok:
            rules[("driver refused", "refused by ours" if ours is None else "ACCEPTED by ours")] += 1
            continue
        real = r.n.to_bytes(tm.DESC_BYTES, "little")
        if ours is None:
            ours_refuse += 1
            mism.append({"inputs": i, "ours": why})
            continue
        enc_equal += ours == real
        try:
            dec_equal += tm.decode(real) == m
        except tm.TensorMapError as e:
            mism.append({"inputs": i, "decode": e.reason})
        if ours != real and len(mism) < 10:
            mism.append({"inputs": i, "xor": hex(int.from_bytes(ours, "little") ^ r.n)})
    accepted = sum(r.ok for r in recs)
    return {"table_vs_fit": table, "table_agrees_everywhere": all(v["agrees"] for v in table.values()),
            "accepted": accepted, "encode_byte_equal": enc_equal, "decode_equal": dec_equal,
            "ours_refuse_driver_accepts": ours_refuse,
            "refusals": {f"{a}: {b}": c for (a, b), c in sorted(rules.items())}, "mismatches": mism[:10],
            "layout_verified_flag": tm.LAYOUT_VERIFIED}


def old_vs_fit(fitted: dict[str, dict]) -> dict:
    out = {}
    for name in sorted(set(OLD_HYPOTHESIS) | set(fitted), key=lambda n: (n not in fitted, n)):
        old = OLD_HYPOTHESIS.get(name)
        f = fitted.get(name, {})
        new = (f["lo"], f["width"], f["encoding"]) if "lo" in f else None
        out[name] = {"old": old, "fitted": new,
                     "same_position": bool(old and new and old[0] == new[0] and old[1] == new[1])}
    return out


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", default=str(REPO / tm.FIT_FIXTURE))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "tma_layout_fit.json"))
    a = ap.parse_args()
    path = Path(a.fixture)
    if not path.exists():
        raise SystemExit(f"no fixture at {path}: record one with bench/tma_tensormap.py gpu on an sm_90 GPU")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    recs = [Rec(r) for r in doc["records"]]
    acc = [r for r in recs if r.ok]
    log.info("%d records, %d accepted by the driver", len(recs), len(acc))
    fitted = fit_fields(acc)
    residual = fit_residual(acc, fitted)
    rules = fit_rules(recs)
    lib = check_library(recs, fitted, residual)
    fields_out = {}
    for name, f in fitted.items():
        b = f["best"]
        fields_out[name] = {k: f[k] for k in ("lo", "width", "width_room", "encoding", "records") if k in f}
        fields_out[name]["candidates"] = len(f["candidates"])
        if name in CATEGORICAL and b:
            fields_out[name]["code"] = {str(k): v for k, v in b["code"].items()}
            fields_out[name]["identity"] = b["identity"]
        if name in NUMERIC and b:
            fields_out[name]["width_observed"] = b["width_observed"]
            if "by_spacing" in b:
                fields_out[name]["placed_by_spacing"] = b["by_spacing"]
            fields_out[name]["other_equivalent_descriptions"] = [c for c in f["candidates"]
                                                                 if c["lo"] != b["lo"]][:4]
    out = {**_stamp(sys.argv[1:]), "fixture": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
           "fixture_stamp": {k: doc.get(k) for k in ("date", "commit", "card", "command")},
           "driver": "580.159.04 (the H200 of these runs; docs/RESULTS.md)",
           "records": len(recs), "driver_accepted": len(acc), "driver_refused": len(recs) - len(acc),
           "fields": fields_out, "residual": residual, "rules": rules, "library": lib,
           "old_hypothesis_vs_fit": old_vs_fit(fitted)}
    atomic_write_json(a.out, out, indent=1)
    log.info("fields (lo, width, encoding): %s",
             ", ".join(f"{k} {v.get('lo')}/{v.get('width')}/{v.get('encoding')}" for k, v in fields_out.items()))
    log.info("residual bits: %s", residual["residual_bits"])
    log.info("rules: predicted vs driver %s; box-bytes bound bracket %s", rules["predicted_vs_driver"],
             rules["box_bytes_bound"])
    log.info("library: table agrees %s; encode byte-equal %d / %d accepted, decode equal %d, refusals %s",
             lib["table_agrees_everywhere"], lib["encode_byte_equal"], lib["accepted"], lib["decode_equal"],
             lib["refusals"])
    log.info("wrote %s", a.out)


if __name__ == "__main__":
    main()
