"""Default services: the fixed-latency engine and the no-op thermal/refresh services."""
from __future__ import annotations

import numpy as np

from hbfcommon import ctl
from hbfd import services
from hbfcommon.profile import load_profile


def _batch(ops, start=0):
    b = np.zeros(len(ops), services.REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(start, start + len(ops))
    b["arrival_ns"] = 1000 * b["id"]
    b["bytes"] = 4096
    b["op"] = ops
    return b


def test_fixed_latency_engine_by_op():
    e = services.FixedLatencyEngine(read_ns=20_000, write_ns=600_000)
    assert isinstance(e, services.ServiceEngine)
    e.submit(_batch([ctl.HBF_OP_LOAD, ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC, ctl.HBF_OP_CPASYNC, 9]))
    e.advance(10**9)
    out = e.collect()
    assert out.dtype == services.COMPLETION_BATCH_DTYPE
    assert out["id"].tolist() == [0, 1, 2, 3, 4]
    assert out["modeled_ns"].tolist()[:4] == [20_000, 600_000, 620_000, 20_000]
    assert out["status"].tolist() == [ctl.HBF_ST_READY] * 4 + [ctl.HBF_ST_UNSUPPORTED]
    assert len(e.collect()) == 0          # each completion is returned once
    st = e.stats()
    assert st["engine"] == "fixed-latency" and st["served"] == 5 and st["unsupported"] == 1


def test_defaults_are_built_when_no_plugin_requested():
    p = load_profile("nominal")
    eng = services.build_engine(p, force="fixed")
    assert eng.name == "fixed-latency" and eng.read_ns == p.timing_model.fixed.read_ns
    th = services.build_thermal(p, force="none")
    st = th.tick(0, 0.0)
    assert st.mode == ctl.HBF_TH_NORMAL and st.q_ppm == 1_000_000 and st.admission_open
    assert th.summary_section()["thermal"] == "none"
    assert services.build_refresh(p, force="none").tick(0, st) == 0


def test_subtool_dispatch(tmp_path, monkeypatch, capsys):
    import sys
    from hbfd import cli
    (tmp_path / "fake_subtool.py").write_text("def main(argv):\n    print('got', argv)\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.SUBTOOLS, ("bench", "media"), "fake_subtool")
    assert cli.main(["bench", "media", "--x", "1"]) == 3
    assert "got ['--x', '1']" in capsys.readouterr().out
    monkeypatch.setitem(cli.SUBTOOLS, ("thermal", "validate"), "no_such_subtool_module")
    assert cli.main(["thermal", "validate"]) == 2
    assert "not available" in capsys.readouterr().err
