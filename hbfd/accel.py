"""Compiled kernels for hbfd's hot loops: one switch, numba when it is installed.

The numpy code of each model (media engine, capacity service) is the definition. Where a loop cannot be
made fast enough in numpy (a per-die scheduling loop, an event loop, a per-page hash), a module may add
a loop-form twin written in plain Python over numpy arrays and compile it with :func:`jit`; its tests
then check that the twin and the numpy definition give the same outputs, bit for bit, on the inputs
that matter (golden streams, randomized ones, the edge cases).

``$HBFD_ACCEL`` (hbfd/knobs.py) decides whether the twins run:

- ``auto`` (default): compiled when numba imports, else the numpy definition;
- ``on``: compiled, and a clear ConfigError when numba is missing (a benchmark that must not measure the
  fallback by accident);
- ``off``: the numpy definition always (what the equality tests compare against).

numba is the ``accel`` extra (``pip install 'hbfsim[accel]'``; ``make venv`` installs it). Compiled
functions are cached on disk (numba's own cache: ``__pycache__`` beside the source, or
``$NUMBA_CACHE_DIR``), so a process pays the compile once per machine, not once per run. Whether a run
used the compiled path is part of what it reports (:func:`describe`).
"""
from __future__ import annotations

import functools
import hashlib
import logging
import secrets
import time
import types
from typing import Callable, Optional

from hbfcommon.errors import ConfigError
from hbfd import knobs

log = logging.getLogger("hbfd.accel")


class _RandomIds:
    """numba's per-process function ids (``FunctionIdentity._unique_ids``, a counter from 1) as random 62-bit
    numbers. The id is in every compiled function's symbol name (``[abi:v<id>]``), numba's own helpers included
    (its sort's ``partition``): two processes that compile different twins give different bodies the same
    symbol, and a process that loads both from numba's on-disk cache links one body for both and crashes (seen
    here: ``_heap_out``'s ``np.sort`` calling ``_simulate_loop``'s argsort partition, a segfault; numba issues
    #10486, #10128). Random ids make those names differ across processes; the cache's keys do not use them."""

    def __iter__(self):
        return self

    def __next__(self) -> int:
        return secrets.randbits(62) | 1


@functools.lru_cache(maxsize=1)
def _numba():
    try:
        import numba  # noqa: F401  (the optional accel extra)
    except Exception as e:  # ImportError, or a numba that cannot load its llvmlite
        return None, f"numba not importable: {type(e).__name__}: {e}"
    try:
        from numba.core.bytecode import FunctionIdentity
        if not isinstance(FunctionIdentity._unique_ids, _RandomIds):
            FunctionIdentity._unique_ids = _RandomIds()
    except (ImportError, AttributeError):     # (a numba without the counter: nothing to change)
        pass
    return numba, None


def enabled() -> bool:
    """Whether the compiled twins run (``$HBFD_ACCEL``; read at each call, so tests can switch it)."""
    mode = knobs.accel_mode()
    if mode == "off":
        return False
    nb, why = _numba()
    if nb is None:
        if mode == "on":
            raise ConfigError(f"HBFD_ACCEL=on but {why} (install the accel extra: pip install 'hbfsim[accel]')",
                              variable="HBFD_ACCEL", value="on")
        return False
    return True


def describe() -> dict:
    """What a run reports about its engine: ``{"accel": "numba 0.68.1" | "off" | "unavailable: ..."}``."""
    mode = knobs.accel_mode()
    nb, why = _numba()
    if mode == "off":
        return {"accel": "off"}
    if nb is None:
        return {"accel": f"unavailable: {why}"}
    return {"accel": f"numba {nb.__version__}"}


def _twin_callees(fn: Callable) -> dict:
    """The twins ``fn`` calls by global name: {name: lazy wrapper}."""
    g = fn.__globals__
    return {k: g[k] for k in fn.__code__.co_names if getattr(g.get(k), "accel_dispatcher", None)}


def _foreign_sources(fn: Callable) -> tuple:
    """The source files of every twin ``fn`` reaches through its callees (transitively), other than ``fn``'s own
    file, each with the SHA-256 of its contents, sorted: ``((path, hexdigest), ...)``; empty when every callee is of
    ``fn``'s file. What the cache key of a twin with callees in other files includes (:func:`jit`)."""
    own = fn.__code__.co_filename
    files: set = set()
    seen: set = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        for w in _twin_callees(f).values():
            callee = w.py_func
            if id(callee) in seen:
                continue
            seen.add(id(callee))
            files.add(callee.__code__.co_filename)
            todo.append(callee)
    files.discard(own)
    out = []
    for path in sorted(files):
        with open(path, "rb") as fh:
            out.append((path, hashlib.sha256(fh.read()).hexdigest()))
    return tuple(out)


def _keyed_cache(py_func: Callable, foreign: tuple):
    """numba's on-disk cache of ``py_func`` (``njit(cache=True)``'s, in the same place) with ``foreign``
    (:func:`_foreign_sources`) in every entry's key: a caller compiled against other callee files' contents is
    never loaded for these. None where this numba has no such cache class (the twin is then not cached on disk)."""
    try:
        from numba.core.caching import FunctionCache
    except ImportError:
        return None
    if not hasattr(FunctionCache, "_index_key"):
        return None

    class _CalleeKeyedCache(FunctionCache):
        def _index_key(self, sig, codegen):
            return super()._index_key(sig, codegen) + (("accel.callee_sources",) + foreign,)

    return _CalleeKeyedCache(py_func)


def jit(fn: Callable) -> Callable:
    """Decorate a loop-form twin: returns a lazy wrapper that compiles ``fn`` with ``numba.njit(cache=True,
    nogil=True)`` at its first call. Call it only where :func:`enabled` said yes (calling it without numba
    raises a ConfigError naming what is missing, never runs the slow Python loop silently).

    A twin may call other twins by their global names (a whole-batch pass built from smaller twins): at compile
    time those names are bound to the callees' compiled forms. numba's on-disk cache of a twin is keyed on its own
    file (the index holds that file's stamp) and the compiled caller holds its callees' code, so a callee changed
    in another file would leave a stale cached caller: a twin whose callees (transitively) live in other files is
    cached with those files' contents in its cache key (:func:`_foreign_sources`, :func:`_keyed_cache`), so a
    changed callee file misses the cache and compiles afresh (a numba without that hook: no on-disk cache for such
    a twin, it compiles once per process). Same-file callees need nothing: the caller's file is the callee's."""
    compiled: list = []

    def dispatcher():
        if not compiled:
            nb, why = _numba()
            if nb is None:
                raise ConfigError(f"{fn.__qualname__}: the compiled twin needs numba ({why})",
                                  variable="HBFD_ACCEL", value=knobs.accel_mode())
            subs = _twin_callees(fn)
            f = fn
            if subs:
                g2 = dict(fn.__globals__)
                g2.update({k: w.accel_dispatcher() for k, w in subs.items()})
                f = types.FunctionType(fn.__code__, g2, fn.__name__, fn.__defaults__, fn.__closure__)
                functools.update_wrapper(f, fn)
            foreign = _foreign_sources(fn)
            if not foreign:
                compiled.append(nb.njit(cache=True, nogil=True)(f))
            else:
                d = nb.njit(nogil=True)(f)
                cache = _keyed_cache(f, foreign)
                if cache is not None and hasattr(d, "_cache"):   # (else: no on-disk cache, compiled per process)
                    d._cache = cache
                compiled.append(d)
        return compiled[0]

    @functools.wraps(fn)
    def wrapper(*args):
        return (compiled[0] if compiled else dispatcher())(*args)

    wrapper.py_func = fn  # the plain-Python form, for tests of the twin's logic without compiling
    wrapper.accel_dispatcher = dispatcher
    wrapper.is_compiled = lambda: bool(compiled) and bool(compiled[0].signatures)
    return wrapper


def warm(name: str, run: Callable[[], None], twins: tuple) -> float:
    """Compile (or load from numba's cache) a model's twins before it serves: ``run()`` drives the model
    through the paths that call ``twins`` (so each is compiled for the argument types it really gets, not
    for a guess); returns the seconds it took, 0.0 when the twins are off. Logged, since a cold compile
    takes seconds (once per machine and checkout: numba's cache keeps them); a twin ``run`` did not reach
    is named in a warning (its first real call would compile while serving)."""
    if not enabled():
        return 0.0
    log.info("%s: loading its compiled twins (numba; the first start on a machine compiles them, up to ~40 s)", name)
    t0 = time.perf_counter()
    run()
    dt = time.perf_counter() - t0
    missed = [t.__name__ for t in twins if not t.is_compiled()]
    if missed:
        log.warning("%s: the warm-up did not reach the compiled twin(s) %s: they compile at first use",
                    name, ", ".join(missed))
    log.log(logging.INFO if dt >= 2.0 else logging.DEBUG,
            "%s: %d compiled twin(s) ready in %.1f s (%s; numba's cache makes later starts fast)",
            name, len(twins) - len(missed), dt, describe()["accel"])
    return dt

