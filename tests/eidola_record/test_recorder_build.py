"""The recorder's CUDA builds for sm_90a; its Python mirror matches the C layout; the harness refuses
to run without enough GPUs (CPU CI has none) and keeps multicast off."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess

import pytest

from hbfcommon.errors import ConfigError
from workloads.gemv_allreduce.record import build, knobs
from workloads.gemv_allreduce.record.record import (GarParamsC, RecordConfig, eidola_state_bytes,
                                                    gpu_count, main, plan, record)

needs_nvcc = pytest.mark.skipif(shutil.which(knobs.NVCC) is None, reason="nvcc not on PATH")


@needs_nvcc
@pytest.mark.parametrize("eidola", [True, False])
def test_recording_kernel_compiles_for_sm90a(tmp_path, eidola):
    cubin = build.build_cubin(tmp_path, eidola=eidola)
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF"
    for k in build.KERNELS:
        assert k.encode() in data, k
    if shutil.which("cuobjdump"):
        out = subprocess.run(["cuobjdump", "-lelf", str(cubin)], capture_output=True, text=True)
        assert out.returncode == 0
    # cached by source hash: the second build is the same file
    assert build.build_cubin(tmp_path, eidola=eidola) == cubin


@needs_nvcc
def test_ptx_uses_system_scope_release_acquire_and_globaltimer(tmp_path):
    ptx = tmp_path / "k.ptx"
    argv = build.nvcc_argv(ptx, fmt="-ptx")
    subprocess.run(argv, check=True, capture_output=True)
    text = ptx.read_text()
    assert "st.release.sys.global.u32" in text
    assert "ld.acquire.sys.global.u32" in text
    assert "%globaltimer" in text
    assert "multimem" not in text  # never multicast


@needs_nvcc
def test_python_mirror_matches_c_layout(tmp_path):
    lay = build.layout_probe(tmp_path)
    assert lay["sizeof"] == __import__("ctypes").sizeof(GarParamsC)
    for name, off in lay.items():
        if name in ("sizeof", "GAR_MAX_RANKS", "WG_FIELDS") or name.startswith("st."):
            continue
        assert getattr(GarParamsC, name).offset == off, name
    assert lay["GAR_MAX_RANKS"] == 8 and lay["WG_FIELDS"] == 6
    # the Eidola state written for real-peer launches lands on the C fields
    raw = eidola_state_bytes(lay, flags_base=0x7000_0000_0080, flags_len=4096, timeout_ns=2_000_000_000,
                             ctr=0x7000_0001_0000)
    assert len(raw) == lay["st.sizeof"]
    u64 = lambda off: struct.unpack_from("<Q", raw, off)[0]
    u32 = lambda off: struct.unpack_from("<I", raw, off)[0]
    assert u64(lay["st.t0"]) == (1 << 64) - 1 and u64(lay["st.failure"]) == 0
    assert u32(lay["st.engine"]) == 0 and u32(lay["st.mon_mode"]) == 0
    assert u32(lay["st.n_flag_ranges"]) == 1
    assert u64(lay["st.timeout_ns"]) == 2_000_000_000
    fr = lay["st.flag_ranges"]
    assert (u64(fr), u64(fr + 8), u32(fr + 16)) == (0x7000_0000_0080, 4096, 1)
    assert u64(lay["st.ctr"]) == 0x7000_0001_0000


def test_no_multicast_environment_is_forced():
    for k, v in knobs.NO_MULTICAST_ENV.items():
        assert os.environ[k] == v
        assert knobs.child_env()[k] == v
    assert knobs.check_no_multicast() == knobs.NO_MULTICAST_ENV


def test_dry_run_prints_plan_and_reports_missing_gpus(capsys):
    have, _ = gpu_count()
    rc = main(["--gpus", "4", "--dry-run", "--runs", "7", "--blocks", "64", "--M", "4096"])
    out = capsys.readouterr()
    p = json.loads(out.out)
    assert p["gpus"] == 4 and p["launches"]["recorded"] == 7 and p["rows_per_block"] == 64
    assert p["flags_per_launch"] == 64 * 4 * 3
    assert p["pingpong"]["pairs"] == 6
    assert p["env"]["NCCL_NVLS_ENABLE"] == "0"
    if have < 4:
        assert rc == 3 and "NOT READY" in out.err
    else:
        assert rc == 0


def test_record_refuses_without_enough_gpus():
    have, _ = gpu_count()
    if have >= 2:
        pytest.skip("this machine has several GPUs")
    with pytest.raises(ConfigError, match="needs 2 GPUs"):
        record(RecordConfig(gpus=2, M=256, K=256, blocks=4, runs=1, warmup=0))


@pytest.mark.parametrize("kw,field", [({"gpus": 1}, "gpus"), ({"gpus": 9}, "gpus"),
                                      ({"M": 100000, "blocks": 4}, "blocks"),
                                      ({"slow_frac": 0.1, "slow_rank": 5}, "slow_rank"),
                                      ({"pingpong_rounds": 2}, "pingpong_rounds"),
                                      ({"gpus": 2, "devices": (0,)}, "devices")])
def test_config_validation_names_the_field(kw, field):
    with pytest.raises(ConfigError) as ei:
        RecordConfig(**kw)
    assert ei.value.fields["field"] == field
    assert plan(RecordConfig())["bytes_per_rank"]["W"] == 8192 * 8192 * 4


def test_shared_gpu_plan_for_one_gpu_smoke():
    cfg = RecordConfig(gpus=2, devices=[0, 0], blocks=64, M=4096)
    assert cfg.devices == (0, 0) and cfg.shared_gpu and cfg.physical_gpus == 1
    p = plan(cfg)
    assert p["devices"] == [0, 0] and p["one_gpu_smoke"] is True
    assert not RecordConfig(gpus=2).shared_gpu and RecordConfig(gpus=3).device_map == (0, 1, 2)
