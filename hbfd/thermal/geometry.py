"""Package thermal geometry: layers, materials, footprints, heat sink — every number with provenance.

A geometry is a JSON file in ``profiles/thermal/``. Every number is written as
``{"value": v, "provenance": "spec|literature|measured|assumed", "source": "..."}``; the loader
keeps the plain value and a provenance map. Unknown keys are errors naming the file and field.

Coordinates: the package is a rectangle ``domain_mm = [x, y]`` cut into square lateral cells of
``cell_mm``; each block (compute die, HBM stacks, HBF stack) is a union of rectangles
``[x0, y0, x1, y1]`` in mm whose edges lie on the cell grid. Layers are listed bottom (board side)
to top (lid side); a layer has a background material and optional per-block regions with their own
material and heat source. A heat source may cover several (layer, block) regions; its power is
spread over them in proportion to cell volume.

This module is pure: ``geometry_from_dict`` takes parsed JSON; ``load_geometry`` reads one file.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hbfcommon.profile import PROFILE_DIR
from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import read_json_document

GEOMETRY_DIR = PROFILE_DIR / "thermal"
# grid bounds, checked before the thermal model allocates its (nx x ny x sum nz) network
MAX_LATERAL_CELLS = 1024              # per axis (the bundled package is 28 x 22)
MAX_CELLS = 1 << 18                   # nx x ny x sum(nz) (the bundled package: 15,400)
SCHEMA = "hbfsim.thermal.geometry/1"
PROVENANCE_KINDS = ("spec", "literature", "measured", "assumed")


class GeometryError(ConfigError):
    """A thermal geometry file is invalid; ``fields`` names the file and the field."""


@dataclass(frozen=True)
class Material:
    name: str
    k_w_mk: float          # thermal conductivity, W/(m·K)
    cv_j_m3k: float        # volumetric heat capacity, J/(m³·K)


@dataclass(frozen=True)
class Region:
    block: str
    material: str
    source: str | None = None


@dataclass(frozen=True)
class Layer:
    name: str
    thickness_um: float
    material: str                      # background material
    nz: int = 1                        # cells through the thickness
    regions: tuple[Region, ...] = ()


@dataclass(frozen=True)
class Output:
    name: str
    layer: str
    block: str
    limit: str | None = None           # "gpu" | "hbm" | "hbf": which profile limit applies


@dataclass(frozen=True)
class HeatSink:
    h_top_w_m2k: float                 # lid top -> sink node (3D-ICE Robin series form)
    sink_capacitance_j_k: float        # lumped cold plate; 0 = lid top ties straight to ambient
    sink_to_ambient_k_w: float         # sink node -> ambient (coolant); unused when capacitance 0
    h_bottom_w_m2k: float              # substrate bottom -> ambient (board path); 0 = adiabatic


@dataclass(frozen=True)
class Geometry:
    name: str
    description: str
    domain_mm: tuple[float, float]
    cell_mm: float
    ambient_c: float
    materials: Mapping[str, Material]
    blocks: Mapping[str, tuple[tuple[float, float, float, float], ...]]
    layers: tuple[Layer, ...]
    sources: tuple[str, ...]
    outputs: tuple[Output, ...]
    heat_sink: HeatSink
    path: str = "<dict>"
    sha256: str = ""
    provenance: Mapping[str, tuple[str, str]] = field(default_factory=dict, repr=False)

    @property
    def nx(self) -> int:
        return int(round(self.domain_mm[0] / self.cell_mm))

    @property
    def ny(self) -> int:
        return int(round(self.domain_mm[1] / self.cell_mm))


def _err(where: str, fieldname: str, msg: str) -> GeometryError:
    return GeometryError(f"{where}: field {fieldname!r}: {msg}", file=where, field=fieldname)


def _keys(obj: Any, allowed: set[str], required: set[str], where: str, prefix: str) -> None:
    if not isinstance(obj, Mapping):
        raise _err(where, prefix or "<root>", "must be an object")
    extra = sorted(set(obj) - allowed)
    if extra:
        name = f"{prefix}.{extra[0]}" if prefix else extra[0]
        raise GeometryError(f"{where}: unknown key {name!r} (allowed here: {', '.join(sorted(allowed))})",
                            file=where, field=name)
    missing = sorted(required - set(obj))
    if missing:
        name = f"{prefix}.{missing[0]}" if prefix else missing[0]
        raise GeometryError(f"{where}: missing required field {name!r}", file=where, field=name)


def _name(v: Any, where: str, fieldname: str) -> str:
    """A name (of a layer, block, material, source, output): a non-empty string."""
    if not isinstance(v, str) or not v:
        raise _err(where, fieldname, f"must be a non-empty string, got {v!r}")
    return v


def _list(v: Any, where: str, fieldname: str) -> list:
    if not isinstance(v, list):
        raise _err(where, fieldname, f"must be a list, got {type(v).__name__}")
    return v


def _num(obj: Any, where: str, name: str, prov: dict, *, positive: bool = False,
         nonneg: bool = False) -> float:
    _keys(obj, {"value", "provenance", "source"}, {"value", "provenance", "source"}, where, name)
    v = obj["value"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _err(where, name, f"value must be a finite number, got {v!r}")
    if obj["provenance"] not in PROVENANCE_KINDS:
        raise _err(where, name, f"provenance must be one of {', '.join(PROVENANCE_KINDS)}")
    if not isinstance(obj["source"], str) or not obj["source"]:
        raise _err(where, name, "source must be a non-empty string")
    if positive and not v > 0:
        raise _err(where, name, f"must be > 0, got {v}")
    if nonneg and v < 0:
        raise _err(where, name, f"must be >= 0, got {v}")
    prov[name] = (obj["provenance"], obj["source"])
    return float(v)


def geometry_from_dict(data: Mapping[str, Any], *, where: str = "<dict>", sha256: str = "") -> Geometry:
    prov: dict[str, tuple[str, str]] = {}
    _keys(data, {"schema", "name", "description", "domain_mm", "cell_mm", "ambient_c", "materials",
                 "blocks", "layers", "sources", "outputs", "heat_sink"},
          {"schema", "name", "domain_mm", "cell_mm", "ambient_c", "materials", "blocks", "layers",
           "sources", "outputs", "heat_sink"}, where, "")
    if data["schema"] != SCHEMA:
        raise _err(where, "schema", f"must be {SCHEMA!r}")
    dom = data["domain_mm"]
    _keys(dom, {"x", "y"}, {"x", "y"}, where, "domain_mm")
    dx = _num(dom["x"], where, "domain_mm.x", prov, positive=True)
    dy = _num(dom["y"], where, "domain_mm.y", prov, positive=True)
    cell = _num(data["cell_mm"], where, "cell_mm", prov, positive=True)
    for nm, v in (("domain_mm.x", dx), ("domain_mm.y", dy)):
        if not v / cell <= MAX_LATERAL_CELLS:
            raise _err(where, nm, f"{v} mm is more than {MAX_LATERAL_CELLS} cells of {cell} mm")
        if abs(v / cell - round(v / cell)) > 1e-9:
            raise _err(where, nm, f"{v} mm is not a whole number of {cell} mm cells")
    ambient = _num(data["ambient_c"], where, "ambient_c", prov)

    mats: dict[str, Material] = {}
    if not isinstance(data["materials"], Mapping) or not data["materials"]:
        raise _err(where, "materials", "must be a non-empty object")
    for mname, m in data["materials"].items():
        p = f"materials.{mname}"
        _keys(m, {"k_w_mk", "cv_j_m3k"}, {"k_w_mk", "cv_j_m3k"}, where, p)
        mats[mname] = Material(mname, _num(m["k_w_mk"], where, f"{p}.k_w_mk", prov, positive=True),
                               _num(m["cv_j_m3k"], where, f"{p}.cv_j_m3k", prov, positive=True))

    blocks: dict[str, tuple] = {}
    if not isinstance(data["blocks"], Mapping):
        raise _err(where, "blocks", "must be an object")
    for bname, b in data["blocks"].items():
        p = f"blocks.{bname}"
        _keys(b, {"rects_mm", "source"}, {"rects_mm", "source"}, where, p)
        rects = []
        for i, r in enumerate(_list(b["rects_mm"], where, f"{p}.rects_mm")):
            if (not isinstance(r, list) or len(r) != 4
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               for v in r)):
                raise _err(where, f"{p}.rects_mm.{i}", "a rectangle is [x0, y0, x1, y1] in mm")
            x0, y0, x1, y1 = map(float, r)
            if not (0 <= x0 < x1 <= dx and 0 <= y0 < y1 <= dy):
                raise _err(where, f"{p}.rects_mm.{i}", f"{r} is empty or outside the {dx}×{dy} mm domain")
            for v in r:
                if abs(v / cell - round(v / cell)) > 1e-9:
                    raise _err(where, f"{p}.rects_mm.{i}", f"edge {v} mm is not on the {cell} mm cell grid")
            rects.append((x0, y0, x1, y1))
        if not isinstance(b["source"], str) or not b["source"]:
            raise _err(where, f"{p}.source", "a non-empty string saying where the floorplan comes from")
        prov[f"{p}.rects_mm"] = ("assumed", b["source"])
        blocks[bname] = tuple(rects)

    sources = data["sources"]
    if (not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources)
            or len(set(sources)) != len(sources)):
        raise _err(where, "sources", "a non-empty list of distinct heat-source names")

    layers: list[Layer] = []
    seen_layers: set[str] = set()
    used_sources: set[str] = set()
    for i, L in enumerate(_list(data["layers"], where, "layers")):
        p = f"layers.{i}"
        _keys(L, {"name", "thickness_um", "material", "nz", "regions"}, {"name", "thickness_um", "material"},
              where, p)
        _name(L["name"], where, f"{p}.name")
        _name(L["material"], where, f"{p}.material")
        if L["name"] in seen_layers:
            raise _err(where, f"{p}.name", f"duplicate layer {L['name']!r}")
        seen_layers.add(L["name"])
        if L["material"] not in mats:
            raise _err(where, f"{p}.material", f"unknown material {L['material']!r}")
        nz = L.get("nz", 1)
        if not isinstance(nz, int) or isinstance(nz, bool) or not 1 <= nz <= 8:
            raise _err(where, f"{p}.nz", "an integer in 1..8")
        regs = []
        for j, r in enumerate(_list(L.get("regions", []), where, f"{p}.regions")):
            rp = f"{p}.regions.{j}"
            _keys(r, {"block", "material", "source"}, {"block", "material"}, where, rp)
            _name(r["block"], where, f"{rp}.block")
            _name(r["material"], where, f"{rp}.material")
            if r.get("source") is not None:
                _name(r["source"], where, f"{rp}.source")
            if r["block"] not in blocks:
                raise _err(where, f"{rp}.block", f"unknown block {r['block']!r}")
            if r["material"] not in mats:
                raise _err(where, f"{rp}.material", f"unknown material {r['material']!r}")
            src = r.get("source")
            if src is not None:
                if src not in sources:
                    raise _err(where, f"{rp}.source", f"{src!r} is not listed in sources")
                used_sources.add(src)
            regs.append(Region(r["block"], r["material"], src))
        layers.append(Layer(L["name"], _num(L["thickness_um"], where, f"{p}.thickness_um", prov, positive=True),
                            L["material"], nz, tuple(regs)))
    if not layers:
        raise _err(where, "layers", "at least one layer")
    cells = round(dx / cell) * round(dy / cell) * sum(L.nz for L in layers)
    if cells > MAX_CELLS:
        raise _err(where, "cell_mm", f"the grid has {cells} cells (nx x ny x sum of nz); at most {MAX_CELLS}")
    unused = [s for s in sources if s not in used_sources]
    if unused:
        raise _err(where, "sources", f"source {unused[0]!r} heats no region")

    outputs: list[Output] = []
    for i, o in enumerate(_list(data["outputs"], where, "outputs")):
        p = f"outputs.{i}"
        _keys(o, {"name", "layer", "block", "limit"}, {"name", "layer", "block"}, where, p)
        for k in ("name", "layer", "block"):
            _name(o[k], where, f"{p}.{k}")
        if o.get("limit") is not None:
            _name(o["limit"], where, f"{p}.limit")
        if o["layer"] not in seen_layers:
            raise _err(where, f"{p}.layer", f"unknown layer {o['layer']!r}")
        if o["block"] not in blocks:
            raise _err(where, f"{p}.block", f"unknown block {o['block']!r}")
        if o.get("limit") not in (None, "gpu", "hbm", "hbf"):
            raise _err(where, f"{p}.limit", "one of gpu, hbm, hbf")
        outputs.append(Output(o["name"], o["layer"], o["block"], o.get("limit")))
    if not outputs or len({o.name for o in outputs}) != len(outputs):
        raise _err(where, "outputs", "a non-empty list with distinct names")

    hs = data["heat_sink"]
    _keys(hs, {"h_top_w_m2k", "sink_capacitance_j_k", "sink_to_ambient_k_w", "h_bottom_w_m2k"},
          {"h_top_w_m2k", "sink_capacitance_j_k", "sink_to_ambient_k_w", "h_bottom_w_m2k"}, where, "heat_sink")
    sink = HeatSink(_num(hs["h_top_w_m2k"], where, "heat_sink.h_top_w_m2k", prov, positive=True),
                    _num(hs["sink_capacitance_j_k"], where, "heat_sink.sink_capacitance_j_k", prov, nonneg=True),
                    _num(hs["sink_to_ambient_k_w"], where, "heat_sink.sink_to_ambient_k_w", prov, positive=True),
                    _num(hs["h_bottom_w_m2k"], where, "heat_sink.h_bottom_w_m2k", prov, nonneg=True))
    return Geometry(name=str(data["name"]), description=str(data.get("description", "")),
                    domain_mm=(dx, dy), cell_mm=cell, ambient_c=ambient, materials=mats, blocks=blocks,
                    layers=tuple(layers), sources=tuple(sources), outputs=tuple(outputs), heat_sink=sink,
                    path=where, sha256=sha256, provenance=prov)


def load_geometry(path: str | Path) -> Geometry:
    """Read a geometry file; a bare name is looked up in profiles/thermal/."""
    doc = read_json_document(path, what="thermal geometry", error=GeometryError, search_dir=GEOMETRY_DIR)
    return geometry_from_dict(doc.data, where=doc.where, sha256=hashlib.sha256(doc.raw).hexdigest())


def as_geometry(g: Geometry | Mapping[str, Any] | str | Path) -> Geometry:
    if isinstance(g, Geometry):
        return g
    if isinstance(g, Mapping):
        raw = json.dumps(g, sort_keys=True).encode()
        return geometry_from_dict(g, sha256=hashlib.sha256(raw).hexdigest())
    return load_geometry(g)
