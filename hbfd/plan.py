"""EQ3 capacity planning: HBM/HBF package layouts under one area budget (`hbfctl plan`).

Every parameter is data with its provenance (hbfd/eq3_plan.json): the area budget, device areas and
capacities, the served model's expert set and per-token KV bytes, and the HBM terms not available to experts
or KV. The computation is the one the HBFSim paper's §6.4 / Figure 5 describes:

- installed capacity = HBM stacks x HBM GiB + HBF units x HBF GiB;
- HBM available = HBM installed - pinned non-expert weights - workspace/reserve - metadata
  (- transfer staging, only when an HBF unit is present);
- with the whole expert set resident in HBM (when it fits), KV tokens = (available - experts) / KV bytes per
  token; when it does not fit, full expert residency is infeasible (no KV token count), and the plan says what
  fraction of the experts HBM holds;
- the per-stack expert-residency threshold = experts + the non-available terms (the HBM a one-stack layout
  would need to hold every expert).

Nothing here is measured: the output says which numbers are assumptions (see the data file).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hbfcommon.errors import ConfigError

GIB = 1 << 30
DATA = Path(__file__).with_name("eq3_plan.json")   # package data (pyproject: "*" = ["*.json"])


@dataclass(frozen=True)
class Layout:
    name: str
    hbm_stacks: int
    hbf_units: int

    def __post_init__(self) -> None:
        if self.hbm_stacks < 0 or self.hbf_units < 0 or self.hbm_stacks + self.hbf_units == 0:
            raise ConfigError(
                           f"layout {self.name!r}: stacks must be >= 0 and at least one device "
                           f"(got {self.hbm_stacks} HBM, {self.hbf_units} HBF)")


def _value(params: dict, key: str) -> float:
    try:
        v = params[key]["value"]
    except (KeyError, TypeError):
        raise ConfigError(f"plan parameters: {key!r} missing (need {{value, provenance}})")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"plan parameters: {key!r} must be a number >= 0 (got {v!r})")
    return float(v)


def load_params(path: str | Path | None = None) -> dict[str, Any]:
    p = Path(path) if path else DATA
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise ConfigError(f"plan parameters {p}: {e.strerror or e}")
    except json.JSONDecodeError as e:
        raise ConfigError(f"plan parameters {p}: not JSON ({e.msg}, line {e.lineno})")
    if not isinstance(d, dict) or not isinstance(d.get("parameters"), dict):
        raise ConfigError(f"plan parameters {p}: no 'parameters' object")
    return d


def kv_bytes_per_token(params: dict) -> int:
    """K and V of every layer's KV heads, in the KV dtype."""
    return int(2 * _value(params, "layers") * _value(params, "kv_heads") * _value(params, "head_dim")
               * _value(params, "kv_dtype_bytes"))


def _not_for_experts_gib(params: dict, *, with_hbf: bool) -> float:
    """HBM that holds neither experts nor KV: pinned non-expert weights, workspace + reserve, metadata, and the
    transfer staging that exists only when an HBF unit is present."""
    return (_value(params, "pinned_nonexpert_gib") + _value(params, "workspace_reserve_gib")
            + _value(params, "metadata_gib") + (_value(params, "staging_gib") if with_hbf else 0.0))


def plan_layout(params: dict, lay: Layout) -> dict[str, Any]:
    hbm_area, hbf_area = _value(params, "hbm_stack_area_mm2"), _value(params, "hbf_unit_area_mm2")
    budget = _value(params, "area_budget_mm2")
    hbm_gib, hbf_gib = _value(params, "hbm_stack_gib"), _value(params, "hbf_unit_gib")
    experts = _value(params, "expert_set_gib")
    reserved = _not_for_experts_gib(params, with_hbf=lay.hbf_units > 0)
    area = lay.hbm_stacks * hbm_area + lay.hbf_units * hbf_area
    hbm_total = lay.hbm_stacks * hbm_gib
    avail = max(0.0, hbm_total - reserved)
    fits = avail >= experts
    kvb = kv_bytes_per_token(params)
    if kvb <= 0:
        raise ConfigError("plan parameters: KV bytes per token is 0 (layers, kv_heads, head_dim, kv_dtype_bytes)")
    return {
        "layout": lay.name, "hbm_stacks": lay.hbm_stacks, "hbf_units": lay.hbf_units,
        "area_mm2": round(area, 3), "area_budget_mm2": budget, "fits_budget": area <= budget + 1e-9,
        "area_left_mm2": round(budget - area, 3),
        "installed_gib": hbm_total + lay.hbf_units * hbf_gib, "hbm_gib": hbm_total,
        "hbm_not_for_experts_gib": round(reserved, 4), "hbm_available_gib": round(avail, 4),
        "experts_fit_in_hbm": fits, "expert_fraction_in_hbm": round(min(1.0, avail / experts), 4) if experts else 1.0,
        "kv_tokens_in_hbm": int((avail - experts) * GIB // kvb) if fits else None,
        "kv_bytes_per_token": kvb,
    }


def expert_residency_threshold_gib(params: dict) -> float:
    """HBM one stack needs to hold the whole expert set with an HBF unit present (the paper's 59.012 GiB)."""
    return _value(params, "expert_set_gib") + _not_for_experts_gib(params, with_hbf=True)


def parse_layout(spec: str) -> Layout:
    """NAME=HBMxHBF, e.g. D=2x3 (two HBM stacks, three HBF units)."""
    try:
        name, rest = spec.split("=", 1)
        h, f = rest.lower().split("x", 1)
        return Layout(name.strip() or spec, int(h), int(f))
    except ValueError:
        raise ConfigError(f"layout {spec!r}: expected NAME=HBMxHBF (e.g. D=2x3)")


def plan(params_doc: dict, layouts: list[Layout] | None = None) -> dict[str, Any]:
    params = params_doc["parameters"]
    try:
        lays = layouts or [Layout(str(x["name"]), int(x["hbm_stacks"]), int(x["hbf_units"]))
                           for x in params_doc.get("layouts", [])]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"plan parameters: a layout needs name, hbm_stacks, hbf_units (integers): {e!r}")
    if not lays:
        raise ConfigError("plan: no layouts (give --layout NAME=HBMxHBF)")
    return {
        "layouts": [plan_layout(params, lay) for lay in lays],
        "expert_residency_threshold_gib": round(expert_residency_threshold_gib(params), 4),
        "parameters": params, "source": params_doc.get("source", ""),
    }


def format_plan(p: dict) -> str:
    rows = [f"{'layout':8s} {'HBM':>3s} {'HBF':>3s} {'area mm2':>9s} {'fits':>5s} {'installed GiB':>13s} "
            f"{'HBM avail GiB':>13s} {'experts in HBM':>14s} {'KV tokens in HBM':>16s}"]
    for r in p["layouts"]:
        kv = f"{r['kv_tokens_in_hbm']:,}" if r["kv_tokens_in_hbm"] is not None else "infeasible"
        rows.append(f"{r['layout']:8s} {r['hbm_stacks']:3d} {r['hbf_units']:3d} {r['area_mm2']:9.1f} "
                    f"{'yes' if r['fits_budget'] else 'NO':>5s} {r['installed_gib']:13,.0f} "
                    f"{r['hbm_available_gib']:13.4f} {100 * r['expert_fraction_in_hbm']:13.1f}% {kv:>16s}")
    rows.append(f"expert-residency threshold per stack: {p['expert_residency_threshold_gib']:.3f} GiB")
    rows.append("KV tokens assume the whole expert set resident in HBM; an aggregate resident mix, not one "
                "request's context. Parameters and their provenance: hbfctl plan --json")
    return "\n".join(rows)
