"""hbfd/accel.py: the one switch for the compiled twins of hbfd's hot loops ($HBFD_ACCEL)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon.errors import ConfigError
from hbfd import accel, knobs


def _no_numba(monkeypatch):
    monkeypatch.setattr(accel, "_numba", lambda: (None, "numba not importable: ImportError: test"))


def test_mode_parsing(monkeypatch):
    monkeypatch.delenv("HBFD_ACCEL", raising=False)
    assert knobs.accel_mode() == "auto"
    monkeypatch.setenv("HBFD_ACCEL", " OFF ")
    assert knobs.accel_mode() == "off"
    monkeypatch.setenv("HBFD_ACCEL", "fast")
    with pytest.raises(ConfigError, match="HBFD_ACCEL must be auto, on or off"):
        knobs.accel_mode()


def test_off_never_compiles(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "off")
    assert accel.enabled() is False
    assert accel.describe() == {"accel": "off"}


def test_missing_numba_auto_falls_back_on_refuses(monkeypatch):
    _no_numba(monkeypatch)
    monkeypatch.setenv("HBFD_ACCEL", "auto")
    assert accel.enabled() is False
    assert accel.describe()["accel"].startswith("unavailable: numba not importable")
    monkeypatch.setenv("HBFD_ACCEL", "on")
    with pytest.raises(ConfigError, match="HBFD_ACCEL=on but numba not importable"):
        accel.enabled()

    @accel.jit
    def twin(a):
        return a.sum()
    with pytest.raises(ConfigError, match="twin.*needs numba"):
        twin(np.arange(3))
    assert twin.py_func(np.arange(3)) == 3


def test_jit_twin_matches_python():
    pytest.importorskip("numba")

    @accel.jit
    def lindley(arrive, service):
        out = np.empty_like(arrive)
        free = np.int64(0)
        for i in range(arrive.shape[0]):
            start = arrive[i] if arrive[i] > free else free
            free = start + service[i]
            out[i] = free
        return out
    rng = np.random.default_rng(7)
    arrive = np.cumsum(rng.integers(0, 50, 1000)).astype(np.int64)
    service = rng.integers(1, 80, 1000).astype(np.int64)
    assert np.array_equal(lindley(arrive, service), lindley.py_func(arrive, service))


def test_warmup_compiles_every_twin_or_nothing(monkeypatch):
    """`python -m hbfd.warmup` (make test runs it first): with the twins off, nothing; on, every twin of
    every model is compiled afterwards (a daemon then never compiles in its serving threads)."""
    from hbfd import warmup
    from hbfd.capacity import kernels as ck
    from hbfd.media import eventsim, hist, kernels as mk
    monkeypatch.setenv("HBFD_ACCEL", "off")
    assert warmup.warm_all() == {}
    if accel._numba()[0] is None:
        pytest.skip("no numba here")
    monkeypatch.setenv("HBFD_ACCEL", "on")
    assert set(warmup.warm_all()) == {"media engine", "latency histogram", "capacity service"}
    twins = [f for mod in (mk, ck, hist, eventsim) for f in vars(mod).values()
             if callable(f) and hasattr(f, "accel_dispatcher") and f.py_func.__module__ == mod.__name__]
    nested = {n for t in twins for n in t.py_func.__code__.co_names}   # compiled inside the twin that calls them
    assert len(twins) >= 12 and "_chan_order" in nested
    assert [t.__name__ for t in twins if t.__name__ not in nested and not t.is_compiled()] == []


def test_warmup_refuses_arguments_it_does_not_take(capsys):
    from hbfd import warmup
    with pytest.raises(SystemExit) as e:
        warmup.main(["--bogus"])
    assert e.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_numba_function_ids_differ_across_processes():
    """numba names each compiled function (its own helpers too) with a per-process id; with the counter from 1,
    two processes compiling different twins gave different bodies one symbol, and a process loading both from the
    on-disk cache crashed (a segfault in ``_heap_out``'s sort). ``accel._numba`` makes the ids random: two
    processes' first ids differ and are far from the counter's range."""
    pytest.importorskip("numba")
    import subprocess
    import sys
    code = ("from hbfd import accel; accel._numba(); from numba.core.bytecode import FunctionIdentity as F; "
            "print(next(F._unique_ids), next(F._unique_ids))")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]
    ids = [int(x) for o in outs for x in o]
    assert len(set(ids)) == 4 and min(ids) > 1 << 20


_CALLEE = '''from hbfd import accel


@accel.jit
def bump(x):
    return x + {k}
'''
_CALLER = '''from hbfd import accel
from cross_b import bump


@accel.jit
def twice_bumped(x):
    return 2 * bump(x)
'''
_RUN = ("import sys; sys.path.insert(0, sys.argv[1]); import cross_a; "
        "r = cross_a.twice_bumped(1); d = cross_a.twice_bumped.accel_dispatcher(); "
        "print(r, sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values()))")


def test_cross_file_twin_call_is_cached_with_its_callee_file(tmp_path):
    """A twin may call a twin of another file (``accel.jit`` binds it to its compiled form); numba's on-disk cache
    of the caller is keyed on the caller's file alone and the cached caller holds the callee's code, so the caller's
    key also holds the callee file's contents (``accel._foreign_sources``). Fresh processes over one cache: the
    first compiles, the second loads the caller from the cache, and after the callee's file changes (same size, same
    mtime: numba's own stamp of it cannot tell) the third compiles again and gets the new callee's result -- a
    caller cached on its own file only would load the stale one (2 * (1 + 1) = 4 instead of 6)."""
    pytest.importorskip("numba")
    import os
    import subprocess
    import sys
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    cache.mkdir()
    (src / "cross_a.py").write_text(_CALLER)
    callee = src / "cross_b.py"
    callee.write_text(_CALLEE.format(k=1))
    st = callee.stat()
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "HBFD_ACCEL": "on",
           "PYTHONPATH": os.pathsep.join([str(src)] + sys.path)}

    def run():
        r = subprocess.run([sys.executable, "-c", _RUN, str(src)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return [int(x) for x in r.stdout.split()]
    assert run() == [4, 0, 1]                  # compiled
    assert run() == [4, 1, 0]                  # loaded from the cache
    callee.write_text(_CALLEE.format(k=2))
    os.utime(callee, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert callee.stat().st_size == st.st_size
    assert run() == [6, 0, 1]                  # the callee changed: compiled again, not the stale caller
    assert run() == [6, 1, 0]


def test_same_file_twin_calls_keep_numbas_own_cache_key():
    """A twin whose callees are all of its own file (or that calls none) gets no extra key: nothing foreign."""
    @accel.jit
    def inner(x):
        return x + 1
    assert accel._foreign_sources(inner.py_func) == ()
