"""hbfcommon.env: the one parser behind every knobs.py (bad values are ConfigErrors naming the variable)."""
from __future__ import annotations

import pytest

from hbfcommon.env import env_bool, env_int, env_path
from hbfcommon.errors import ConfigError


def test_unset_and_empty_are_the_default(monkeypatch):
    monkeypatch.delenv("HBF_T_X", raising=False)
    assert env_bool("HBF_T_X", True) is True and env_int("HBF_T_X", 7) == 7 and env_path("HBF_T_X") is None
    monkeypatch.setenv("HBF_T_X", "")
    assert env_bool("HBF_T_X", False) is False and env_int("HBF_T_X", 7, 0, 10) == 7


@pytest.mark.parametrize("v,want", [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)])
def test_bool(monkeypatch, v, want):
    monkeypatch.setenv("HBF_T_B", v)
    assert env_bool("HBF_T_B", not want) is want


@pytest.mark.parametrize("v", ["2", "maybe", "tru"])
def test_bad_bool_names_the_variable(monkeypatch, v):
    monkeypatch.setenv("HBF_T_B", v)
    with pytest.raises(ConfigError, match="HBF_T_B must be a boolean"):
        env_bool("HBF_T_B", False)


def test_int_forms_and_range(monkeypatch):
    monkeypatch.setenv("HBF_T_I", "0x10")
    assert env_int("HBF_T_I", 0, 0, 100) == 16
    monkeypatch.setenv("HBF_T_I", "101")
    with pytest.raises(ConfigError, match=r"HBF_T_I must be in \[0, 100\]"):
        env_int("HBF_T_I", 0, 0, 100)
    monkeypatch.setenv("HBF_T_I", "-1")
    with pytest.raises(ConfigError, match=r"must be in \[0, inf\]"):
        env_int("HBF_T_I", 0, lo=0)
    monkeypatch.setenv("HBF_T_I", "12ms")
    with pytest.raises(ConfigError, match="HBF_T_I must be an integer"):
        env_int("HBF_T_I", 0)


def test_hbfd_knobs_reject_bad_values(monkeypatch):
    from hbfd import knobs
    monkeypatch.setenv("HBFD_STALE_NS", "1s")
    with pytest.raises(ConfigError, match="HBFD_STALE_NS"):
        knobs.stale_ns()
    monkeypatch.setenv("HBFD_RING_TAGS", "yes")
    assert knobs.ring_tags() is True
    monkeypatch.setenv("HBFD_RING_TAGS", "2")
    with pytest.raises(ConfigError, match="HBFD_RING_TAGS"):
        knobs.ring_tags()
    monkeypatch.setenv("HBFD_HEARTBEAT_NS", "50000000")
    assert knobs.heartbeat_period_ns() == 10_000_000       # capped at the 10 ms promise
    monkeypatch.delenv("HBFD_CAPACITY_WORKERS", raising=False)
    import os
    assert knobs.capacity_workers() == max(1, min(64, os.cpu_count() or 1))   # the host's cores
    monkeypatch.setenv("HBFD_CAPACITY_WORKERS", "3")
    assert knobs.capacity_workers() == 3
    for bad in ("0", "65", "many"):
        monkeypatch.setenv("HBFD_CAPACITY_WORKERS", bad)
        with pytest.raises(ConfigError, match="HBFD_CAPACITY_WORKERS"):
            knobs.capacity_workers()
    monkeypatch.delenv("HBFD_MALLOC_TUNE", raising=False)
    assert knobs.malloc_tune() is True
    monkeypatch.setenv("HBFD_MALLOC_TUNE", "0")
    assert knobs.malloc_tune() is False
    monkeypatch.setenv("HBFD_MALLOC_TUNE", "sometimes")
    with pytest.raises(ConfigError, match="HBFD_MALLOC_TUNE"):
        knobs.malloc_tune()


def test_runtime_and_hbfcc_knobs_use_it(monkeypatch):
    from hbfcc import knobs as hk
    from runtime_cuda import knobs as rk
    monkeypatch.setenv("HBF_HEARTBEAT_TIMEOUT_NS", "-5")
    with pytest.raises(ConfigError, match="HBF_HEARTBEAT_TIMEOUT_NS"):
        rk.heartbeat_timeout_ns()
    monkeypatch.setenv("HBFCC_CPASYNC_WINDOW", "1")
    with pytest.raises(ConfigError, match="HBFCC_CPASYNC_WINDOW"):
        hk.load()
    monkeypatch.setenv("HBFCC_CPASYNC_WINDOW", "4")
    monkeypatch.setenv("HBFCC_DUMP_DIR", "/tmp/x")
    k = hk.load()
    assert k.cpasync_window == 4 and str(k.dump_dir) == "/tmp/x"


def test_env_set_restores_set_and_unset(monkeypatch):
    """hbfcommon.env.env_set: the values (str()) inside the block; after it, a variable that was set has its old
    value again and one that was unset is unset again, also when the block raises."""
    import os

    from hbfcommon.env import env_set
    monkeypatch.setenv("HBF_TEST_ENVSET_A", "old")
    monkeypatch.delenv("HBF_TEST_ENVSET_B", raising=False)
    with pytest.raises(RuntimeError):
        with env_set({"HBF_TEST_ENVSET_A": 1, "HBF_TEST_ENVSET_B": "x"}):
            assert os.environ["HBF_TEST_ENVSET_A"] == "1" and os.environ["HBF_TEST_ENVSET_B"] == "x"
            raise RuntimeError("inside")
    assert os.environ["HBF_TEST_ENVSET_A"] == "old" and "HBF_TEST_ENVSET_B" not in os.environ
