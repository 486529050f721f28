"""HBF_NATIVE_MODULE (wt/natmod15, issue 15): which function a launch that runs native launches. ``entry``: the native
entry ``<k>__hbnat`` of the instrumented module. ``plain`` (the default since stop 52): the kernel ``<k>`` of the module's
PLAIN cubin that hbfcc-ptxas kept in the artifact store (the artifact's ``native_module``), loaded once per bound module
after its sha256 is verified, readied with the instrumented entry's attributes like the native entry, counted in
``launch_selection[k]["native_module"]``, unloaded when the binding goes (unless a CUDA graph captured it). A missing or damaged plain cubin, or a plain function
that cannot be readied or launched: a warning naming the kernel (and the file), and the native entry instead (an
unrecorded one: the same, said at info) -- never the instrumented entry in its place silently, never an error. The stand-in drivers are those of
test_native_entry_launch.py and test_graph_native.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_graph_native as GN  # noqa: E402
import test_graph_selection as G  # noqa: E402
import test_native_entry_launch as N  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcommon import artifact as A  # noqa: E402
from hbfcommon.errors import ConfigError, ErrorCode, HbfError  # noqa: E402
from runtime_cuda import knobs  # noqa: E402

PLAIN_FN = 0xCAFE
CUBIN = b"\x7fELF the plain cubin of k and g"
PLAIN_MOD = 0x9000


# ---------------------------------------------------------------------------------------------------- the knob

@pytest.mark.parametrize("v,want", [(None, "plain"), ("", "plain"), ("entry", "entry"), (" ENTRY ", "entry"),
                                    ("plain", "plain"), (" PLAIN ", "plain")])
def test_knob(v, want, monkeypatch):
    if v is None:
        monkeypatch.delenv("HBF_NATIVE_MODULE", raising=False)
    else:
        monkeypatch.setenv("HBF_NATIVE_MODULE", v)
    assert knobs.native_module() == want


@pytest.mark.parametrize("v", ["1", "native", "plain,entry"])
def test_a_bad_value_is_a_config_error_naming_the_knob(v, monkeypatch):
    monkeypatch.setenv("HBF_NATIVE_MODULE", v)
    with pytest.raises(ConfigError, match="HBF_NATIVE_MODULE must be 'entry' or 'plain'") as ei:
        knobs.native_module()
    assert ei.value.fields.get("variable") == "HBF_NATIVE_MODULE"


# ---------------------------------------------------------------------------------------------------- at bind

class PlainBindDevice(N.BindDevice):
    """bind_module's driver with module loads: a loaded image is a module whose functions are ``plain``."""

    def __init__(self, plain: dict[str, int] | None = None):
        super().__init__({abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL, abi.DETACHED_GLOBAL},
                         {"k__hbnat": N.NATIVE_FN, "g__hbnat": N.NATIVE_FN + 1})
        self.plain = {"k": PLAIN_FN, "g": PLAIN_FN + 1} if plain is None else plain
        self.loaded: list[bytes] = []
        self.unloaded: list[int] = []

    def module_load_data(self, image):
        self.loaded.append(bytes(image))
        return PLAIN_MOD + len(self.loaded)

    def module_unload(self, module):
        self.unloaded.append(module)

    def module_functions(self, module, names):
        if module <= PLAIN_MOD:
            return super().module_functions(module, names)
        missing = [n for n in names if n not in self.plain]
        if missing:
            raise HbfError(f"cuModuleGetFunction({missing[0]}) failed: CUDA_ERROR_NOT_FOUND", code=ErrorCode.INTERNAL)
        return {n: self.plain[n] for n in names}


def _bind(tmp_path, monkeypatch, mode="plain", *, damage=None, record=True, dev=None):
    """bind_module of N.ART (kernels k and g with native entries, p without) with the plain cubin kept in a store."""
    store = tmp_path / "store"
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(store))
    rec = A.store_native_module(store, CUBIN)
    p = store / rec["file"]
    if damage == "missing":
        p.unlink()
    elif damage == "bytes":
        p.write_bytes(CUBIN[:-1] + b"!")
    art = dict(N.ART, native_module=rec) if record else dict(N.ART)
    dev = dev or PlainBindDevice()
    s = G._bind_session(dev)
    s.native_entry, s.native_module = True, mode
    return s, s.bind_module(0x1234, artifact=art), dev, p


def test_plain_loads_the_verified_cubin_once_and_looks_the_kernels_up(tmp_path, monkeypatch):
    s, b, dev, _ = _bind(tmp_path, monkeypatch)
    assert dev.loaded == [CUBIN]                                     # once per bound module, the recorded bytes
    assert b.plain_fns == {"k": PLAIN_FN, "g": PLAIN_FN + 1}          # the kernels with a native entry, by their names
    assert b.native_fns == {"k": N.NATIVE_FN, "g": N.NATIVE_FN + 1}   # kept: the fallback
    assert b.plain_modules == [PLAIN_MOD + 1]
    # bound again (the same handle): the first binding's plain module is unloaded
    b2 = s.bind_module(0x1234, artifact=dict(N.ART, native_module=A.native_module(
        {"native_module": A.store_native_module(tmp_path / "store", CUBIN)})[0]))
    assert dev.unloaded == [PLAIN_MOD + 1] and b.plain_fns == {} and b2.plain_fns == {"k": PLAIN_FN, "g": PLAIN_FN + 1}
    s._unload_plain(b2)                                              # what close() does for every binding
    assert dev.unloaded == [PLAIN_MOD + 1, PLAIN_MOD + 2] and b2.plain_fns == {} and b2.plain_modules == []


def test_entry_loads_nothing(tmp_path, monkeypatch):
    s, b, dev, _ = _bind(tmp_path, monkeypatch, mode="entry")
    assert dev.loaded == [] and b.plain_fns == {} and b.native_fns == {"k": N.NATIVE_FN, "g": N.NATIVE_FN + 1}


@pytest.mark.parametrize("damage,record,why", [("missing", True, "cannot read the plain cubin"),
                                               ("bytes", True, "is not the one recorded"),
                                               (None, False, "records no native_module")])
def test_a_missing_damaged_or_unrecorded_cubin_warns_and_keeps_the_native_entry(damage, record, why, tmp_path,
                                                                                monkeypatch, caplog):
    with caplog.at_level("INFO"):
        s, b, dev, p = _bind(tmp_path, monkeypatch, damage=damage, record=record)
    assert dev.loaded == [] and b.plain_fns == {} and b.plain_modules == []
    assert b.native_fns == {"k": N.NATIVE_FN, "g": N.NATIVE_FN + 1}   # the native launches keep the native entry
    # a recorded cubin that cannot be used is a warning; no record at all (nvcc and deferred builds, artifacts from
    # before the plain cubin was kept: the default mode meets them every day) is said at info
    level = "WARNING" if record else "INFO"
    msgs = [r.getMessage() for r in caplog.records if r.levelname == level]
    assert not record or not any(r.levelname == "INFO" and r.getMessage().startswith("kernel ") for r in caplog.records)
    assert record or not any(r.levelname == "WARNING" for r in caplog.records)
    for k in ("k", "g"):
        (m,) = [m for m in msgs if m.startswith(f"kernel {k}:")]
        assert why in m and "native entry" in m
        assert (str(p) in m) if record else ("no file recorded" in m)


def test_a_kernel_missing_from_the_plain_cubin_keeps_its_native_entry(tmp_path, monkeypatch, caplog):
    with caplog.at_level("WARNING"):
        _, b, dev, p = _bind(tmp_path, monkeypatch, dev=PlainBindDevice({"k": PLAIN_FN}))
    assert b.plain_fns == {"k": PLAIN_FN} and b.plain_modules == [PLAIN_MOD + 1]
    assert any("kernel g" in r.getMessage() and str(p) in r.getMessage() for r in caplog.records)
    _, b, dev, _ = _bind(tmp_path, monkeypatch, dev=PlainBindDevice({}))      # none of them: the module unloaded
    assert b.plain_fns == {} and b.plain_modules == [] and dev.unloaded == [PLAIN_MOD + 1]


# ---------------------------------------------------------------------------------------------------- at launch

class FailingDev(GN.Dev):
    def __init__(self, refuse: set[int] = frozenset(), no_copy: set[int] = frozenset()):
        super().__init__()
        self.refuse, self.no_copy = set(refuse), set(no_copy)

    def launch(self, function, grid, block, args, shared, stream):
        if int(function) in self.refuse:
            raise HbfError("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE", code=ErrorCode.INTERNAL)
        super().launch(function, grid, block, args, shared, stream)

    def copy_function_attributes(self, src, dst):
        if int(dst) in self.no_copy:
            raise HbfError("cuFuncSetAttribute failed", code=ErrorCode.INTERNAL)
        return super().copy_function_attributes(src, dst)


def _launch_session(mode: str, dev=None):
    s, b, dev0, hbfd = GN._session("all")
    if dev is not None:
        s._cu = dev
    b.plain_fns = {"k": PLAIN_FN, "g": PLAIN_FN + 1}
    s.native_module = mode
    return s, b, s._cu, hbfd


def test_plain_launches_the_plain_function_on_host_launches_and_captures():
    s, b, dev, _ = _launch_session("plain")
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=7) == PLAIN_FN                # a host launch
    assert (N.FN, PLAIN_FN) in dev.copied                                        # readied as the native entry is
    dev.capturing.add(9)
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=9) == PLAIN_FN                # a capture (HBF_GRAPH_NATIVE=all)
    assert GN._launch(s, dev, GN.FN_G, [GN.A1], stream=9) == PLAIN_FN + 1         # addresses from memory, "all"
    dev.capturing.discard(9)
    sel = s.launch_selection["k"]
    assert sel["native_module"] == {"plain": 2, "entry": 0} and sel["native_entry"] == 2
    assert sel["captured_native"] == 1
    assert s.launch_selection["g"]["native_module"] == {"plain": 1, "entry": 0}


def test_a_graph_that_captured_a_plain_function_keeps_its_module_loaded():
    """HBF_GRAPH_NATIVE captures the plain cubin's function into the caller's graph, which may outlive the session:
    its module is never unloaded (a replay must not run an unloaded function); a binding whose plain functions ran
    on host launches only unloads it as before."""
    s, b, dev, _ = _launch_session("plain")
    b.plain_modules = [PLAIN_MOD + 7]
    dev.unloaded = []
    dev.module_unload = lambda m: dev.unloaded.append(m)
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=7) == PLAIN_FN                # a host launch: nothing kept
    assert b.plain_captured is False
    dev.capturing.add(9)
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=9) == PLAIN_FN                # captured
    dev.capturing.discard(9)
    assert b.plain_captured is True
    s._unload_plain(b)
    assert dev.unloaded == [] and b.plain_fns == {}                              # not unloaded; not launched again
    s2, b2, dev2, _ = _launch_session("plain")
    b2.plain_modules = [PLAIN_MOD + 8]
    dev2.unloaded = []
    dev2.module_unload = lambda m: dev2.unloaded.append(m)
    assert GN._launch(s2, dev2, N.FN, [GN.A0], stream=7) == PLAIN_FN
    s2._unload_plain(b2)
    assert dev2.unloaded == [PLAIN_MOD + 8]


def test_entry_is_unchanged_with_the_plain_functions_there():
    s, b, dev, _ = _launch_session("entry")
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=7) == N.NATIVE_FN
    dev.capturing.add(9)
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=9) == N.NATIVE_FN
    assert s.launch_selection["k"]["native_module"] == {"plain": 0, "entry": 2}
    assert not any(dst == PLAIN_FN for _, dst in getattr(dev, "copied", []))


def test_a_launch_that_may_reach_a_range_stays_instrumented():
    s, b, dev, hbfd = _launch_session("plain")
    s.register_timing_range(GN.A0, 4096, label="r")
    assert GN._launch(s, dev, N.FN, [GN.A0 + 8], stream=7) == N.FN
    assert GN._launch(s, dev, N.FN, [GN.A2 + 8], stream=7) == PLAIN_FN            # reaches no range: native
    assert s.launch_selection["k"]["native_module"] == {"plain": 1, "entry": 0}


def test_a_plain_function_that_cannot_be_readied_falls_back_to_the_native_entry(caplog):
    s, b, dev, _ = _launch_session("plain", FailingDev(no_copy={PLAIN_FN}))
    with caplog.at_level("WARNING"):
        assert GN._launch(s, dev, N.FN, [GN.A0], stream=7) == N.NATIVE_FN
    assert "k" not in b.plain_fns and "k" in b.native_fns
    assert any("kernel k" in r.getMessage() and "plain cubin" in r.getMessage() for r in caplog.records)
    assert s.launch_selection["k"]["native_module"] == {"plain": 0, "entry": 1}


def test_a_refused_plain_launch_runs_instrumented_then_the_native_entry(caplog):
    s, b, dev, _ = _launch_session("plain", FailingDev(refuse={PLAIN_FN}))
    with caplog.at_level("WARNING"):
        assert GN._launch(s, dev, N.FN, [GN.A0], stream=7) == N.FN               # this launch: instrumented
    assert "k" not in b.plain_fns and b.native_fns.get("k") == N.NATIVE_FN and b.native_failures == {"k": 1}
    assert GN._launch(s, dev, N.FN, [GN.A0], stream=7) == N.NATIVE_FN            # the next: the native entry
    assert any("kernel k" in r.getMessage() and "plain cubin failed" in r.getMessage() for r in caplog.records)
