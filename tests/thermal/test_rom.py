from __future__ import annotations

import numpy as np
import pytest

from hbfd.thermal.rom import RomError, ThermalROM, cached_rom, compare_with_python_control, era, \
    markov_from_steps
from hbfd.thermal.validate import held_out_traces, validate


def test_rom_error_bound_on_held_out_inputs(small_model, small_rom):
    res = validate(small_model, small_rom, seconds=8.0)
    assert small_rom.order <= 256
    assert res["worst_error_k"] <= 0.02, res["traces"]
    assert res["dc_gain_max_diff_k_per_w"] < 1e-4
    for row in res["traces"]:
        # the misaligned comparison's first-sample error is exactly the feedthrough D·u[0]
        assert row["misaligned_minus_feedthrough_k"] < 1e-9
        assert row["misaligned_first_sample_error_k"] > 10 * row["max_error_k"]


def test_rom_is_stable_with_real_poles(small_rom):
    ev = np.linalg.eigvals(small_rom.A)
    assert np.abs(ev).max() < 1
    assert np.abs(ev.imag).max() < 1e-6
    assert ((ev.real > 0) & (ev.real < 1)).all()


def test_modal_fast_path_matches_step_by_step(small_rom):
    modal = small_rom.modal()
    p = np.array([300.0, 5.0, 30.0])
    small_rom.reset()
    ref = small_rom.run(np.tile(p, (400, 1)))
    fast = modal.outputs_constant(p, 400)
    np.testing.assert_allclose(fast, ref, atol=1e-8)
    modal.advance_constant(p, 400)
    np.testing.assert_allclose(modal.step(p), small_rom.step(p), atol=1e-8)
    small_rom.reset()


def test_unstable_order_refused():
    # Markov data of a marginally unstable scalar system
    Y = np.array([[[0.0]]] + [[[1.05 ** k]] for k in range(40)])
    fit = era(Y, m=10, r=1)
    assert fit.spectral_radius > 1
    rom = ThermalROM(A=fit.A, B=fit.B, C=fit.C, D=fit.D, b=np.zeros(1), d=np.zeros(1), dt_s=0.01,
                     input_names=("a",), output_names=("b",), geometry_sha256="x")
    with pytest.raises(RomError, match="unstable"):
        ThermalROM.load(_save(rom))


def _save(rom):
    import tempfile, os
    fd, path = tempfile.mkstemp(suffix=".npz")
    os.close(fd)
    rom.save(path)
    return path


def test_cache_roundtrip_is_bound_to_geometry(small_model, tmp_path):
    rom = cached_rom(small_model, tmp_path, dt_s=0.01, hankel_blocks=40)
    files = list(tmp_path.glob("rom-*.npz"))
    assert len(files) == 1
    again = ThermalROM.load(files[0], geometry_sha256=small_model.geometry.sha256)
    np.testing.assert_array_equal(again.A, rom.A)
    with pytest.raises(RomError, match="fit on geometry"):
        ThermalROM.load(files[0], geometry_sha256="0" * 64)


def test_python_control_agrees_on_same_data(small_model, small_rom):
    steps = small_model.stepper(0.01).unit_step_responses(2 * 40 + 2)
    res = compare_with_python_control(steps, m=40, r=min(20, small_rom.order), dt_s=0.01)
    assert res["max_markov_diff_k_per_w"] < 1e-9
    assert res["max_dc_gain_diff_k_per_w"] < 1e-6


def test_held_out_traces_differ_from_training(small_model):
    tr = held_out_traces(small_model.input_names, 1500, 0.01)
    assert set(tr) == {"step", "square", "burst"}
    assert len({tuple(v[:, 0]) for v in tr.values()}) == 3
    Y = markov_from_steps(np.cumsum(np.ones((5, 1, 1)), axis=0))
    np.testing.assert_array_equal(Y[:, 0, 0], [1, 1, 1, 1, 1])
