"""Default services: the fixed-latency engine and the no-op thermal/refresh services."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.errors import ConfigError, ErrorCode, HbfError
from hbfcommon.profile import load_profile
from hbfd import contracts, services


def _batch(ops, start=0):
    b = np.zeros(len(ops), contracts.REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(start, start + len(ops))
    b["arrival_ns"] = 1000 * b["id"]
    b["bytes"] = 4096
    b["op"] = ops
    return b


def test_fixed_latency_engine_by_op():
    e = contracts.FixedLatencyEngine(read_ns=20_000, write_ns=600_000)
    assert isinstance(e, contracts.ServiceEngine)
    e.submit(_batch([ctl.HBF_OP_LOAD, ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC, ctl.HBF_OP_CPASYNC, 9]))
    e.advance(10**9)
    out = e.collect()
    assert out.dtype == contracts.COMPLETION_BATCH_DTYPE
    assert out["id"].tolist() == [0, 1, 2, 3, 4]
    assert out["modeled_ns"].tolist()[:4] == [20_000, 600_000, 620_000, 20_000]
    assert out["status"].tolist() == [ctl.HBF_ST_READY] * 4 + [ctl.HBF_ST_UNSUPPORTED]
    assert len(e.collect()) == 0          # each completion is returned once
    st = e.stats()
    assert st["engine"] == "fixed-latency" and st["served"] == 5 and st["unsupported"] == 1


def test_defaults_are_built_when_no_plugin_requested():
    p = load_profile("nominal")
    eng = services.build_engine(p, "fixed")
    assert eng.name == "fixed-latency" and eng.read_ns == p.timing_model.fixed.read_ns
    th = services.build_thermal(p, "none")
    st = th.tick(0, 0.0)
    assert st.mode == ctl.HBF_TH_NORMAL and st.q_ppm == 1_000_000 and st.admission_open
    assert th.summary_section()["thermal"] == "none"
    rf = services.build_refresh(p, "none")
    assert rf.tick(0, st) == 0 and rf.media_work(0) is None and not rf.counts_reads
    with pytest.raises(HbfError) as ei:           # the server calls set_override on every thermal service
        th.set_override({"mode": "Light", "q_ppm": 5})
    assert ei.value.code == ErrorCode.INVALID_ARGUMENT and "override" in str(ei.value)


def test_compose_wires_the_model_packages_explicitly():
    p = load_profile("nominal")
    s = services.compose(p, engine="auto", thermal="none", refresh="auto")
    from hbfd.media import MediaEngine
    from hbfd.reliability.service import ReliabilityService
    assert isinstance(s.engine, MediaEngine) and isinstance(s.refresh, ReliabilityService)
    assert s.refresh_engine is s.engine and s.refresh.media_attached and s.refresh.range_mode
    s = services.compose(p, engine="fixed", thermal="none", refresh="auto")
    assert s.refresh_engine is None and not s.refresh.media_attached and s.refresh.range_mode
    s = services.compose(p, engine="auto", thermal="none", refresh="none")
    assert s.refresh_engine is None                 # no plan to run through the media model
    for proto, obj in ((contracts.ServiceEngine, s.engine), (contracts.ThermalService, s.thermal),
                       (contracts.RefreshService, s.refresh)):
        assert isinstance(obj, proto)


def test_every_service_provides_what_its_protocol_declares():
    """The defaults and the models implement every member the server calls (no probing in the server)."""
    from hbfd.thermal.override import OperatorOverrideThermal
    from hbfd.thermal.service import PackageThermalService
    from hbfd.reliability.service import ReliabilityService
    from hbfd.media import MediaEngine
    for cls, proto in ((contracts.FixedLatencyEngine, contracts.ServiceEngine),
                       (MediaEngine, contracts.RefreshingEngine),
                       (contracts.NoThermal, contracts.ThermalService),
                       (PackageThermalService, contracts.ThermalService),
                       (OperatorOverrideThermal, contracts.ThermalService),
                       (contracts.NoRefresh, contracts.RefreshService),
                       (ReliabilityService, contracts.RefreshService)):
        members = contracts.protocol_members(proto)
        missing = [m for m in members if not hasattr(cls, m) and m not in ("name", "background_drained_bytes")]
        assert not missing, (cls.__name__, missing)
    assert {"set_override", "tick", "summary_section", "name"} <= set(contracts.protocol_members(contracts.ThermalService))
    assert {"register_range", "unregister_range", "count_reads", "media_work", "media_done", "attach_media",
            "use_range_registrations", "background_drained_bytes", "counts_reads"} <= \
        set(contracts.protocol_members(contracts.RefreshService))
    assert "refresh" in contracts.protocol_members(contracts.RefreshingEngine)


not_callable = 42


@pytest.mark.parametrize("choice,words", [
    ("engines:lacking_collect", ["lacks", "ServiceEngine", "collect", "lacking_collect"]),
    (f"{__name__}:no_such_factory", ["cannot load", "no_such_factory"]),
    ("no_such_module_hbf:make", ["cannot load", "no_such_module_hbf"]),
    (f"{__name__}:not_callable", ["not callable"]),
    ("media", ["HBFD_ENGINE", "auto, fixed or module:factory"]),
    (":make", ["module:factory"]),
])
def test_a_bad_engine_choice_is_a_config_error_naming_it(choice, words):
    p = load_profile("nominal")
    with pytest.raises(ConfigError) as ei:
        services.compose(p, engine=choice, thermal="none", refresh="none")
    msg = str(ei.value)
    assert all(w in msg for w in words), msg


def test_a_thermal_factory_without_set_override_is_refused(monkeypatch, tmp_path):
    (tmp_path / "thermal_plugin_hbf.py").write_text(
        "from hbfd.contracts import ThermalState\n"
        "class T:\n    name = 't'\n    def tick(self, now_ns, e): return ThermalState()\n"
        "    def summary_section(self): return {}\n"
        "def make(profile): return T()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as ei:
        services.build_thermal(load_profile("nominal"), "thermal_plugin_hbf:make")
    assert "set_override" in str(ei.value) and "HBFD_THERMAL" in str(ei.value)


def test_subtool_dispatch(tmp_path, monkeypatch, capsys):
    import sys
    from hbfd import cli
    (tmp_path / "fake_subtool.py").write_text("def main(argv):\n    print('got', argv)\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.SUBTOOLS["bench"], "media", ("fake_subtool", "a fake tool"))
    assert cli.main(["bench", "media", "--x", "1"]) == 3
    assert "got ['--x', '1']" in capsys.readouterr().out
    monkeypatch.setitem(cli.SUBTOOLS["thermal"], "validate", ("no_such_subtool_module", "a missing tool"))
    assert cli.main(["thermal", "validate"]) == 2
    assert "not available" in capsys.readouterr().err
