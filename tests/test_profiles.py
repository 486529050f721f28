"""Profiles: schema + invariants; every error names the field and the file."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from hbfcommon import ctl
from hbfcommon.errors import ErrorCode, ProfileError
from hbfcommon import profile as prof

NAMES = ["conservative", "nominal", "aggressive", "ocp-sg1", "ocp-sg2", "ocp-sg3"]


def _raw(name="nominal"):
    return json.loads((prof.PROFILE_DIR / f"{name}.json").read_text())


def _expect_error(tmp_path: Path, data, field: str, words: str = ""):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as ei:
        prof.load_profile(p)
    e = ei.value
    assert e.code == ErrorCode.PROFILE_INVALID
    assert e.fields["file"] == str(p)
    assert e.fields["field"] == field, str(e)
    assert field in str(e) and str(p) in str(e)
    assert words.lower() in str(e).lower()
    return e


def _set(d, dotted, value):
    *head, last = dotted.split(".")
    for k in head:
        d = d[k]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value


@pytest.mark.parametrize("name", NAMES)
def test_named_profiles_load(name):
    p = prof.load_profile(prof.PROFILE_DIR / f"{name}.json")
    assert p.name == name
    g = p.geometry
    assert (g.page_bytes, g.read_granularity, g.write_granularity) == (4096, 64, 4096)
    assert g.aggregate_bytes_per_s == g.channels * g.channel_bytes_per_s
    assert p.sha256 == hashlib.sha256((prof.PROFILE_DIR / f"{name}.json").read_bytes()).hexdigest()
    # every number in the file has a provenance entry, and only known kinds
    n_numbers = json.dumps(_raw(name)).count('"value"')
    assert len(p.provenance) == n_numbers
    assert {v.kind for v in p.provenance.values()} <= set(prof.PROVENANCE_KINDS)
    assert all(v.source for v in p.provenance.values())


def test_bare_name_resolves_to_profiles_dir():
    assert prof.load_profile("nominal").name == "nominal"


# OCP HBF v0.7.0 p16 Tables 2/4 (FlashLab-MBZUAI/HBServe transcription): grade -> (channels, dies, GT/s,
# payload B/s per channel, B/s per stack); payload = 64 bit x GT/s / 8 x 0.75
OCP_GRADES = {
    "ocp-sg1": (8, 8, 8, 48_000_000_000, 384_000_000_000),
    "ocp-sg2": (16, 16, 16, 96_000_000_000, 1_536_000_000_000),
    "ocp-sg3": (16, 16, 32, 192_000_000_000, 3_072_000_000_000),
}
OCP_SPEC_FIELDS = ("page_bytes", "read_granularity", "write_granularity", "channels", "channel_width_bits",
                   "channel_rate_mtps", "channel_efficiency", "page_buffers_per_plane", "stack_height",
                   "host_link_bytes_per_s")


@pytest.mark.parametrize("name", sorted(OCP_GRADES))
def test_ocp_grades_match_the_spec_bandwidth_exactly(name):
    channels, dies, gtps, per_channel, per_stack = OCP_GRADES[name]
    p = prof.load_profile(name)
    g = p.geometry
    assert (g.channels, g.dies, g.stack_height) == (channels, dies, dies)
    assert (g.channel_width_bits, g.channel_rate_mtps, g.channel_efficiency) == (64, gtps * 1000, 0.75)
    assert g.channel_bytes_per_s == per_channel                      # exact, integer B/s
    assert g.aggregate_bytes_per_s == per_stack
    assert g.host_link_bytes_per_s == per_stack
    assert g.page_buffers_per_plane == 2 and g.planes_per_die == 256
    assert p.media.queue_depth >= 2 * g.planes_per_die
    for f in OCP_SPEC_FIELDS:
        pv = p.provenance[f"geometry.{f}"]
        assert pv.kind == "spec", f
        assert "OCP HBF Architecture Specification v0.7.0" in pv.source and "not reachable" in pv.source, f
    # what the spec does not fix is not called spec
    for f in ("geometry.dies_per_channel", "geometry.planes_per_die", "geometry.blocks_per_plane",
              "geometry.pages_per_block", "timing.t_read_ns", "timing.t_prog_ns", "timing.t_erase_ns",
              "media.queue_depth"):
        assert p.provenance[f].kind != "spec", f


@pytest.mark.parametrize("name", sorted(OCP_GRADES))
def test_ocp_grades_timing_and_capacity(name):
    p = prof.load_profile(name)
    g, t = p.geometry, p.timing
    assert (t.t_cmd_ns, t.t_read_ns, t.t_prog_ns, t.t_erase_ns) == (300, 4000, 75_000, 2_000_000)
    xfer512 = -(-512 * 10**9 // g.channel_bytes_per_s)               # one 512 B warp request, ceil ns
    assert p.timing_model.timing_source == "fast"
    assert p.timing_model.fixed.read_ns == t.t_cmd_ns + t.t_read_ns + xfer512
    assert p.timing_model.fixed.write_ns == t.t_cmd_ns + xfer512 + t.t_prog_ns
    assert g.raw_bytes == g.dies * 256 * (128 << 20)                 # 128 MiB raw per bank
    assert g.raw_bytes == (256 << 30 if name == "ocp-sg1" else 512 << 30)
    # the sensing bound the planes_per_die source states: banks x 4 KiB / tR vs the channel bound
    src = p.provenance["geometry.planes_per_die"].source
    for tr in (2000, 4000, 8000, 20000):
        sense = g.planes * 4096 * 1e9 / tr
        kind = "sensing-bound" if sense < g.aggregate_bytes_per_s else "channel-bound"
        assert f"{tr // 1000} us: {sense / 1e9:,.1f} GB/s ({kind})" in src


def test_ocp_sg1_energy_is_the_papers():
    p = prof.load_profile("ocp-sg1")
    assert p.energy.idle_w == 5.0 and p.energy.j_per_byte == pytest.approx(8.4e-11)
    assert p.provenance["energy.idle_w"].kind == "literature"
    for name in ("ocp-sg2", "ocp-sg3"):             # carried over to a faster grade: an assumption
        q = prof.load_profile(name)
        assert (q.energy.idle_w, q.energy.j_per_byte) == (p.energy.idle_w, p.energy.j_per_byte)
        assert q.provenance["energy.idle_w"].kind == "assumed"


def test_provenance_exposed_next_to_plain_values():
    p = prof.load_profile("nominal")
    assert isinstance(p.timing.t_read_ns, int) and p.timing.t_read_ns == 20000
    assert p.provenance["timing.t_read_ns"].kind == "literature"


def test_profile_is_frozen():
    p = prof.load_profile("nominal")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.geometry.channels = 3


# a bad number: the error names the quantity (the entry whose "value" it is)
BAD_VALUES = [
    ("geometry.page_bytes", 8192, "4 KiB"),
    ("geometry.read_granularity", 128, "64 B"),
    ("geometry.write_granularity", 512, "4 KiB"),
    ("geometry.channels", 0, ""),
    ("geometry.channels", 1.5, "integer"),
    ("geometry.channel_width_bits", 12, "bytes"),
    ("timing.t_prog_ns", 10, "t_read_ns < t_prog_ns"),
    ("timing.t_read_ns", -5, ""),
    ("media.over_provisioning", 1.5, ""),
    ("media.gc_hard_free_fraction", 0.2, "gc_start"),
    ("media.refresh_quantum_bytes", 1000, "4096"),
    ("thermal.ltt_c", 200, "rtt_c < ltt_c"),
    ("thermal.light_q_ppm", 2_000_000, ""),
    ("thermal.hysteresis_k", 50, "hysteresis"),
    ("reliability.refresh_damage_threshold", 0, ""),
    ("reliability.ea_failure_ev_max", 0.1, "ea_failure_ev_min"),
]
# other bad entries: (the path set, the value, the field the error names, words in it)
BAD_ENTRIES = [
    ("timing_model.timing_source", "magic", "timing_model.timing_source", ""),
    ("timing_model.curve", KeyError, None, None),  # no-op sanity: nominal has no curve
    ("geometry.channels.provenance", "guess", "geometry.channels.provenance", ""),
    ("geometry.channels.source", "", "geometry.channels.source", ""),
    ("geometry.channels", 16, "geometry.channels", "object"),           # a bare number: no provenance
    ("energy.idle_w", KeyError, "energy.idle_w", "missing"),
    ("name", "Bad Name!", "name", ""),
]


@pytest.mark.parametrize("dotted,value,field,words",
                         [(f + ".value", v, f, w) for f, v, w in BAD_VALUES] + BAD_ENTRIES)
def test_each_bad_field_names_field_and_file(tmp_path, dotted, value, field, words):
    d = _raw()
    if field is None:
        assert "curve" not in d["timing_model"]
        return
    _set(d, dotted, value)
    _expect_error(tmp_path, d, field, words)


def test_curve_source_needs_a_curve(tmp_path):
    d = _raw()
    d["timing_model"]["timing_source"] = "curve"
    _expect_error(tmp_path, d, "timing_model.curve", "needs a curve")


def test_curve_is_checked_and_published(tmp_path):
    d = _raw()
    d["timing_model"]["timing_source"] = "curve"
    d["timing_model"]["curve"] = {
        "points": {"value": [[1, 20000], [8, 21000], [64, 30000]], "provenance": "measured", "source": "t"},
        "write_ns": {"value": 600000, "provenance": "assumed", "source": "t"}}
    p = tmp_path / "c.json"
    p.write_text(json.dumps(d))
    mp = prof.load_profile(p).to_media_params()
    assert mp["timing_source"] == ctl.HBF_SRC_CURVE and mp["curve_points"] == 3
    assert mp["curve_pages"][:4] == [1, 8, 64, 0] and mp["curve_cum_ns"][:3] == [20000, 21000, 30000]
    d["timing_model"]["curve"]["points"]["value"] = [[8, 20000], [1, 21000]]
    _expect_error(tmp_path, d, "timing_model.curve.points", "increase")


@pytest.mark.parametrize("where", ["root", "section", "quantity"])
def test_unknown_keys_are_errors(tmp_path, where):
    d = _raw()
    if where == "root":
        d["colour"] = "blue"
        field = "colour"
    elif where == "section":
        d["geometry"]["lanes"] = {"value": 1, "provenance": "assumed", "source": "x"}
        field = "geometry.lanes"
    else:
        d["geometry"]["channels"]["unit"] = "count"
        field = "geometry.channels.unit"
    _expect_error(tmp_path, d, field, "unknown key")


@pytest.mark.parametrize("where", [(), ("timing",), ("timing_model", "fixed")])
def test_time_scale_is_rejected(tmp_path, where):
    d = _raw()
    tgt = d
    for k in where:
        tgt = tgt[k]
    tgt["time_scale"] = {"value": 10, "provenance": "assumed", "source": "speed-up"}
    _expect_error(tmp_path, d, ".".join(where + ("time_scale",)), "no time multiplier")


def test_host_link_must_not_contradict_geometry(tmp_path):
    d = _raw("ocp-sg1")
    d["geometry"]["channel_rate_mtps"]["value"] = 8500.0   # 8 x 51 GB/s = 408 GB/s > 384 GB/s link
    e = _expect_error(tmp_path, d, "geometry.host_link_bytes_per_s", "exceeds the host link")
    assert "408000000000" in str(e)
    d["geometry"]["channel_rate_mtps"]["value"] = 6400.0   # 8 x 38.4 GB/s = 307.2 GB/s: below the link
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(d))
    assert prof.load_profile(p).geometry.aggregate_bytes_per_s == 307_200_000_000


def test_not_json_and_missing_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{nope")
    with pytest.raises(ProfileError, match="not valid JSON") as ei:
        prof.load_profile(p)
    assert ei.value.fields["file"] == str(p)
    with pytest.raises(ProfileError, match="cannot read"):
        prof.load_profile(tmp_path / "absent.json")


def test_schema_and_dataclasses_agree():
    schema = json.loads(prof.SCHEMA_PATH.read_text())
    for name, cls in prof.SECTIONS.items():
        sec = schema["properties"][name]
        assert set(sec["properties"]) == {f.name for f in dataclasses.fields(cls)}, name
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        assert set(sec["required"]) == required, name
    for (parent, fname), cls in prof._NESTED.items():
        sec = schema["properties"]["timing_model"]["properties"][fname]
        assert set(sec["properties"]) == {f.name for f in dataclasses.fields(cls)}, fname


def test_media_params_fill_every_field_of_the_c_struct():
    p = prof.load_profile("ocp-sg1")
    mp = p.to_media_params()
    names = [f[0] for f in ctl.hbf_media_params._fields_ if f[0] != "reserved"]
    assert sorted(mp) == sorted(names)
    s = ctl.hbf_media_params()
    for k, v in mp.items():
        if isinstance(v, list):
            getattr(s, k)[:] = v
        else:
            setattr(s, k, v)
    assert s.channel_bytes_per_s == 48_000_000_000 and s.timing_source == ctl.HBF_SRC_FAST
    assert s.fixed_read_ns == p.timing_model.fixed.read_ns


def test_dict_input_accepted():
    p = prof.as_profile(_raw("aggressive"))
    assert p.name == "aggressive" and p.path == "<dict>"
    with pytest.raises(ProfileError):
        prof.as_profile({**_raw(), "time_scale": 2})


# ---- issue 19: hostile values are refused, each naming the file and the field -------------------
HOSTILE = [
    ("timing.t_erase_ns", 2 ** 64, "timing.t_erase_ns", "out of range"),            # wrapped to 0 in the region
    ("timing_model.fixed.read_ns", 2 ** 64 + 5, "timing_model.fixed.read_ns", "out of range"),  # wrapped to 5
    ("geometry.channel_rate_mtps", 1e300, "geometry.channel_rate_mtps", "B/s"),       # channel rate 0 B/s
    ("geometry.channel_rate_mtps", 1e-300, "geometry.channel_rate_mtps", "B/s"),
    ("geometry.channels", 1e30, "geometry.channels", "u32"),
    ("geometry.channels", 2 ** 32, "geometry.channels", "u32"),
    ("media.queue_depth", 2 ** 32, "media.queue_depth", "u32"),
    ("media.queue_depth", 2 ** 31, "media.queue_depth", "slot"),
    ("geometry.blocks_per_plane", 1e12, "geometry.blocks_per_plane", "per block"),   # was MemoryError
    ("geometry.pages_per_block", 2 ** 62, "geometry.pages_per_block", "int64"),
    ("media.refresh_quantum_bytes", 2 ** 64, "media.refresh_quantum_bytes", "out of range"),
    ("thermal.telemetry_max_age_ms", 1e-9, "thermal.telemetry_max_age_ms", "nanoseconds"),  # was ValueError
    ("thermal.min_dwell_ticks", 2 ** 63, "thermal.min_dwell_ticks", "out of range"),
    ("reliability.ea_failure_ev_step", 1e-12, "reliability.ea_failure_ev_step", "points"),
    ("reliability.mtbf_ref_h", 10 ** 400, "reliability.mtbf_ref_h", "finite"),
    ("energy.idle_w", True, "energy.idle_w", ""),
]


@pytest.mark.parametrize("dotted,value,field,words", HOSTILE)
def test_hostile_values_are_refused(tmp_path, dotted, value, field, words):
    d = _raw()
    _set(d, dotted + ".value", value)
    _expect_error(tmp_path, d, field, words)


def test_curve_points_fit_their_c_fields(tmp_path):
    d = _raw()
    d["timing_model"]["timing_source"] = "curve"
    d["timing_model"]["curve"] = {
        "points": {"value": [[1, 20000], [2 ** 32, 21000]], "provenance": "measured", "source": "t"},
        "write_ns": {"value": 600000, "provenance": "assumed", "source": "t"}}
    _expect_error(tmp_path, d, "timing_model.curve.points.1", "u32")
    d["timing_model"]["curve"]["points"]["value"] = [[1, 20000], [2, 2 ** 64]]
    _expect_error(tmp_path, d, "timing_model.curve.points.1", "cumulative_ns")


def test_largest_values_the_layout_holds_are_accepted(tmp_path):
    d = _raw()
    d["timing"]["t_erase_ns"]["value"] = prof.NS_MAX
    p = tmp_path / "edge.json"
    p.write_text(json.dumps(d))
    mp = prof.load_profile(p).to_media_params()
    s = ctl.hbf_media_params()
    s.t_erase_ns = mp["t_erase_ns"]
    assert s.t_erase_ns == prof.NS_MAX                  # what the region holds is what the file says


def _write(tmp_path, text, name="bad.json"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _load_error(p) -> ProfileError:
    with pytest.raises(ProfileError) as ei:
        prof.load_profile(p)
    assert ei.value.fields["file"] == str(p) and str(p) in str(ei.value)
    return ei.value


@pytest.mark.parametrize("where,field", [("root", "name"), ("quantity", "timing.t_read_ns.value")])
def test_duplicate_keys_are_refused(tmp_path, where, field):
    text = (prof.PROFILE_DIR / "nominal.json").read_text()
    if where == "root":
        text = text.replace('"name": "nominal",', '"name": "nominal", "name": "other",', 1)
    else:
        text = text.replace('"value": 20000,', '"value": 20000, "value": 1,', 1)
    e = _load_error(_write(tmp_path, text))
    assert e.fields["field"] == field and "duplicate key" in str(e)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_refused(tmp_path, token):
    text = (prof.PROFILE_DIR / "nominal.json").read_text().replace('"value": 5.0,', f'"value": {token},', 1)
    e = _load_error(_write(tmp_path, text))
    assert e.fields["field"] == "energy.idle_w.value" and "finite" in str(e)


@pytest.mark.parametrize("depth", [40, 100_000])
def test_deep_nesting_is_refused(tmp_path, depth):
    e = _load_error(_write(tmp_path, "[" * depth + "]" * depth))
    assert "nested deeper" in str(e)


def test_huge_integer_literal_is_refused(tmp_path):
    e = _load_error(_write(tmp_path, '{"a": ' + "9" * 5000 + "}"))
    assert "not valid JSON" in str(e)


def test_fifo_is_refused_without_blocking(tmp_path):
    import os
    p = tmp_path / "fifo.json"
    os.mkfifo(p)
    e = _load_error(p)                   # before the fix this open() blocked forever
    assert "FIFO" in str(e) and e.fields["field"] == "<file>"


def test_directory_and_oversized_file_are_refused(tmp_path):
    from hbfcommon import fsutil
    d = tmp_path / "dir.json"
    d.mkdir()
    assert "not a regular file" in str(_load_error(d))
    big = _write(tmp_path, " " * (fsutil.JSON_MAX_BYTES + 1), "big.json")
    assert "limit" in str(_load_error(big))


# ---- the thermal geometry shares the reader and names its fields the same way -------------------
def _geometry_error(tmp_path, mutate):
    from hbfd.thermal.geometry import GEOMETRY_DIR, GeometryError, load_geometry
    d = json.loads((GEOMETRY_DIR / "hbf-package-8hi.json").read_text())
    mutate(d)
    p = _write(tmp_path, json.dumps(d), "geom.json")
    with pytest.raises(GeometryError) as ei:
        load_geometry(p)
    assert ei.value.fields["file"] == str(p) and str(p) in str(ei.value)
    return ei.value


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["layers"][0].__setitem__("name", ["x"]), "layers.0.name"),        # was: unhashable type
    (lambda d: d.__setitem__("layers", 7), "layers"),
    (lambda d: d["outputs"][0].__setitem__("block", {"a": 1}), "outputs.0.block"),
    (lambda d: next(iter(d["blocks"].values())).__setitem__("rects_mm", 1.5), None),
    (lambda d: d["cell_mm"].__setitem__("value", 1e-300), "domain_mm.x"),          # was: a grid of 1e300 cells
])
def test_geometry_loader_refuses_bad_types_and_sizes(tmp_path, mutate, field):
    e = _geometry_error(tmp_path, mutate)
    if field is not None:
        assert e.fields["field"] == field, str(e)
    else:
        assert e.fields["field"].endswith(".rects_mm"), str(e)


def test_geometry_duplicate_key_is_refused(tmp_path):
    from hbfd.thermal.geometry import GEOMETRY_DIR, GeometryError, load_geometry
    text = (GEOMETRY_DIR / "hbf-package-8hi.json").read_text()
    i = text.index('"schema"')
    p = _write(tmp_path, text[:i] + '"schema": "x", ' + text[i:], "geom.json")
    with pytest.raises(GeometryError, match="duplicate key 'schema'"):
        load_geometry(p)


# ---- the daemon's CLI: one line, exit 2, no traceback, for every hostile profile ------------------
@pytest.mark.parametrize("case", ["t_erase_2_64", "blocks_1e12", "max_age_1e-9", "duplicate", "deep", "fifo"])
def test_hbfd_cli_refuses_hostile_profiles_in_one_line(tmp_path, case):
    import os
    import subprocess
    import sys
    d = _raw()
    p = tmp_path / "p.json"
    if case == "t_erase_2_64":
        d["timing"]["t_erase_ns"]["value"] = 2 ** 64
    elif case == "blocks_1e12":
        d["geometry"]["blocks_per_plane"]["value"] = 1e12
    elif case == "max_age_1e-9":
        d["thermal"]["telemetry_max_age_ms"]["value"] = 1e-9
    if case == "duplicate":
        p.write_text(json.dumps(d).replace('"name": "nominal"', '"name": "nominal", "name": "x"', 1))
    elif case == "deep":
        p.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "fifo":
        os.mkfifo(p)
    else:
        p.write_text(json.dumps(d))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed", "HBFD_REFRESH": "none"}
    r = subprocess.run([sys.executable, "-m", "hbfd.cli", "--profile", str(p), "--socket", str(tmp_path / "s"),
                        "--summary", str(tmp_path / "sum.json")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("hbfd: ")]
    assert len(errs) == 1 and str(p) in errs[0] and "field=" in errs[0], r.stderr
    assert not (tmp_path / "s").exists()
