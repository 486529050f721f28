"""Small geometries so thermal tests run in well under a second each."""
from __future__ import annotations

import copy

import pytest


def num(v, kind="assumed", src="test geometry"):
    return {"value": v, "provenance": kind, "source": src}


SMALL = {
    "schema": "hbfsim.thermal.geometry/1",
    "name": "test-small",
    "domain_mm": {"x": num(12.0), "y": num(8.0)},
    "cell_mm": num(2.0),
    "ambient_c": num(30.0),
    "materials": {
        "si": {"k_w_mk": num(130.0), "cv_j_m3k": num(1.628e6)},
        "bond": {"k_w_mk": num(5.0), "cv_j_m3k": num(2.0e6)},
        "mold": {"k_w_mk": num(0.9), "cv_j_m3k": num(1.7e6)},
        "cu": {"k_w_mk": num(390.0), "cv_j_m3k": num(3.45e6)},
    },
    "blocks": {"gpu": {"rects_mm": [[0, 0, 6, 8]], "source": "test"},
               "hbf": {"rects_mm": [[8, 2, 12, 6]], "source": "test"}},
    "layers": [
        {"name": "base", "thickness_um": num(100.0), "material": "mold",
         "regions": [{"block": "gpu", "material": "si", "source": "gpu"},
                     {"block": "hbf", "material": "si", "source": "hbf_base"}]},
        {"name": "bond0", "thickness_um": num(20.0), "material": "mold",
         "regions": [{"block": "gpu", "material": "si"}, {"block": "hbf", "material": "bond"}]},
        {"name": "die0", "thickness_um": num(60.0), "material": "mold",
         "regions": [{"block": "gpu", "material": "si"}, {"block": "hbf", "material": "si", "source": "hbf_l0"}]},
        {"name": "lid", "thickness_um": num(1000.0), "material": "cu"},
    ],
    "sources": ["gpu", "hbf_base", "hbf_l0"],
    "outputs": [{"name": "gpu", "layer": "base", "block": "gpu", "limit": "gpu"},
                {"name": "hbf_base", "layer": "base", "block": "hbf", "limit": "hbf"},
                {"name": "hbf_l0", "layer": "die0", "block": "hbf", "limit": "hbf"}],
    "heat_sink": {"h_top_w_m2k": num(20000.0), "sink_capacitance_j_k": num(5.0),
                  "sink_to_ambient_k_w": num(0.5), "h_bottom_w_m2k": num(30.0)},
}


@pytest.fixture
def small_geometry_dict():
    return copy.deepcopy(SMALL)


@pytest.fixture(scope="session")
def small_model():
    from hbfd.thermal.fom import build_model
    from hbfd.thermal.geometry import as_geometry
    return build_model(as_geometry(copy.deepcopy(SMALL)))


@pytest.fixture(scope="session")
def small_rom(small_model):
    from hbfd.thermal.rom import fit_rom
    return fit_rom(small_model, dt_s=0.01, hankel_blocks=60)
