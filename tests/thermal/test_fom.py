from __future__ import annotations

import numpy as np
import pytest

from hbfd.thermal.fom import build_model, robin_conductance
from hbfd.thermal.geometry import GeometryError, as_geometry, load_geometry
from tests.thermal.conftest import num


def two_cell_geometry(k1, k2, h_top=0.0):
    """Two stacked cells (1 lateral cell, 2 layers) of different materials."""
    return {
        "schema": "hbfsim.thermal.geometry/1", "name": "two-cells",
        "domain_mm": {"x": num(1.0), "y": num(1.0)}, "cell_mm": num(1.0), "ambient_c": num(25.0),
        "materials": {"a": {"k_w_mk": num(k1), "cv_j_m3k": num(1e6)}, "b": {"k_w_mk": num(k2), "cv_j_m3k": num(2e6)}},
        "blocks": {"all": {"rects_mm": [[0, 0, 1, 1]], "source": "t"}},
        "layers": [{"name": "bottom", "thickness_um": num(100.0), "material": "a",
                    "regions": [{"block": "all", "material": "a", "source": "p"}]},
                   {"name": "top", "thickness_um": num(300.0), "material": "b"}],
        "sources": ["p"],
        "outputs": [{"name": "bottom", "layer": "bottom", "block": "all"}, {"name": "top", "layer": "top", "block": "all"}],
        "heat_sink": {"h_top_w_m2k": num(h_top or 1000.0), "sink_capacitance_j_k": num(0.0),
                      "sink_to_ambient_k_w": num(1.0), "h_bottom_w_m2k": num(0.0)},
    }


def test_conduction_between_two_cells_matches_hand_calculation():
    k1, k2, h = 10.0, 2.0, 1000.0
    m = build_model(as_geometry(two_cell_geometry(k1, k2, h)))
    A = 1e-3 * 1e-3
    dz1, dz2 = 100e-6, 300e-6
    g12 = A / (dz1 / (2 * k1) + dz2 / (2 * k2))                 # half cells in series
    g_top = 2 * k2 * h * A / (dz2 * h + 2 * k2)                 # 3D-ICE Robin form
    assert m.G[0, 1] == pytest.approx(-g12, rel=1e-12)
    assert m.G[0, 0] == pytest.approx(g12, rel=1e-12)
    assert m.G[1, 1] == pytest.approx(g12 + g_top, rel=1e-12)
    assert m.C[0] == pytest.approx(1e6 * A * dz1) and m.C[1] == pytest.approx(2e6 * A * dz2)
    assert robin_conductance(k2, h, A, dz2) == pytest.approx(g_top)
    # 1 W into the bottom cell: both series resistances carry it all
    theta = m.steady_rise(np.array([1.0]))
    assert theta[1] == pytest.approx(1 / g_top, rel=1e-10)
    assert theta[0] == pytest.approx(1 / g_top + 1 / g12, rel=1e-10)


def test_energy_balance_at_steady_state(small_model):
    p = np.array([300.0, 5.0, 20.0])
    theta = small_model.steady_rise(p)
    assert small_model.heat_out_w(theta) == pytest.approx(p.sum(), rel=1e-9)
    # and in transient: stored + out = in, step by step (backward Euler is conservative)
    be = small_model.stepper(0.01)
    stored_prev = 0.0
    for _ in range(50):
        th_prev = be.theta.copy()
        be.step(p)
        stored = float(small_model.C @ (be.theta - th_prev)) / 0.01
        assert stored + small_model.heat_out_w(be.theta) == pytest.approx(p.sum(), rel=1e-9)
        stored_prev = stored
    assert stored_prev > 0


def test_cross_talk_matrix_is_positive_and_reciprocal(small_model):
    R = small_model.resistance_matrix()
    assert (R > 0).all()
    # each source heats its own output most
    assert np.argmax(R[:, 0]) == 0


def test_geometry_errors_name_the_field(small_geometry_dict):
    d = small_geometry_dict
    d["materials"]["si"]["k_w_mk"]["value"] = -1
    with pytest.raises(GeometryError) as e:
        as_geometry(d)
    assert e.value.fields["field"] == "materials.si.k_w_mk"
    d["materials"]["si"]["k_w_mk"]["value"] = 130
    d["layers"][0]["colour"] = "red"
    with pytest.raises(GeometryError, match="unknown key 'layers.0.colour'"):
        as_geometry(d)
    del d["layers"][0]["colour"]
    d["blocks"]["hbf"]["rects_mm"] = [[7, 2, 12, 6]]
    with pytest.raises(GeometryError, match="cell grid"):
        as_geometry(d)


def test_shipped_geometry_loads_with_provenance():
    g = load_geometry("hbf-package-8hi")
    assert len(g.sha256) == 64
    assert [s for s in g.sources if s.startswith("hbf_l")] == [f"hbf_l{i}" for i in range(8)]
    assert all(kind in ("spec", "literature", "measured", "assumed") for kind, _ in g.provenance.values())
    assert "heat_sink.h_top_w_m2k" in g.provenance
