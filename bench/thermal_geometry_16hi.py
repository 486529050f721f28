#!/usr/bin/env python3
"""Write the 16-high package geometry (hbfcommon/profiles/thermal/hbf-package-16hi.json) from the 8-high one.

OCP speed grades 2 and 3 are 16-high parts (16 dies, one per channel); the 8-high geometry put their heat into
8 layers. This derives a 16-high stack from hbf-package-8hi.json and changes only the HBF/HBM stack's die tier:

* the stack keeps the 8-high stack's height (60 um base + 600 um of dies and bonds = 660 um, the compute die's
  height): JEDEC keeps 16-high HBM4 stacks within the same 720/775 um envelope as 8/12-high ones by thinning the
  dies and the bonds, and the lid/TIM1 sit on top of all dies of the package;
* so 16 x (12.5 um bond + 25 um NAND die) instead of 8 x (20 + 55) (assumed: thinned dies and thinner bonds,
  the same materials: bond k_eff 5 W/mK, NAND die 30 W/mK);
* sources/outputs hbf_l0 .. hbf_l15 (layer 0 the bottom die, next to the base die), everything else (floorplan,
  materials, lid, cold plate, board path) unchanged: every number keeps its provenance, the new ones say why.

    .venv/bin/python bench/thermal_geometry_16hi.py            # rewrites the file (deterministic)
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "hbfcommon/profiles/thermal/hbf-package-8hi.json"
DST = ROOT / "hbfcommon/profiles/thermal/hbf-package-16hi.json"
LAYERS = 16
DIE_UM, BOND_UM = 25.0, 12.5
WHY = ("16-high in the 8-high stack's 660 um envelope (base 60 um + 16 x (12.5 + 25) um; JEDEC 16-high HBM4 "
       "stays within the 720/775 um stack height of 8/12-high parts by thinning dies and bonds): assumed, "
       "bench/thermal_geometry_16hi.py")


def build() -> dict:
    d = json.loads(SRC.read_text())
    g = copy.deepcopy(d)
    g["name"] = "hbf-package-16hi"
    g["description"] = (d["description"].replace("8 NAND dies", "16 NAND dies").replace("layer 7", "layer 15")
                        + " 16-high: derived from hbf-package-8hi by bench/thermal_geometry_16hi.py (die tier "
                        "only: 16 x (12.5 um bond + 25 um die) in the same 660 um).")
    layers = d["layers"]
    i0 = next(i for i, L in enumerate(layers) if L["name"] == "bond0")
    i1 = next(i for i, L in enumerate(layers) if L["name"] == "die7")
    bond_t, die_t = copy.deepcopy(layers[i0]), copy.deepcopy(layers[i0 + 1])
    new = []
    for k in range(LAYERS):
        b = copy.deepcopy(bond_t)
        b["name"] = f"bond{k}"
        b["thickness_um"] = {"value": BOND_UM, "provenance": "assumed", "source": WHY}
        new.append(b)
        t = copy.deepcopy(die_t)
        t["name"] = f"die{k}"
        t["thickness_um"] = {"value": DIE_UM, "provenance": "assumed", "source": WHY}
        for r in t["regions"]:
            if r.get("source", "").startswith("hbf_l"):
                r["source"] = f"hbf_l{k}"
        new.append(t)
    g["layers"] = layers[:i0] + new + layers[i1 + 1:]
    g["sources"] = [s for s in d["sources"] if not s.startswith("hbf_l")] + [f"hbf_l{k}" for k in range(LAYERS)]
    outs = [o for o in d["outputs"] if not o["name"].startswith("hbf_l")]
    outs += [{"name": f"hbf_l{k}", "layer": f"die{k}", "block": "hbf", "limit": "hbf"} for k in range(LAYERS)]
    g["outputs"] = outs
    return g


def main() -> int:
    g = build()
    def tot(ls):
        return sum(L["thickness_um"]["value"] for L in ls
                   if L["name"] == "base" or L["name"].startswith(("bond", "die")))
    old = json.loads(SRC.read_text())["layers"]
    assert abs(tot(g["layers"]) - tot(old)) < 1e-9, (tot(g["layers"]), tot(old))
    DST.write_text(json.dumps(g, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {DST} ({len(g['layers'])} layers, stack {tot(g['layers']):.1f} um)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
