"""Every environment variable the recorder reads or sets, in one place.

Multi-GPU runs here must never use NVLink multicast / NVLS: the three switches below are forced
off in this process at import time (before any CUDA, NCCL, NVSHMEM or torch initialization), and
``child_env()`` returns an environment with them set for any subprocess (nvcc, a worker).
"""
from __future__ import annotations

import os

NO_MULTICAST_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

for _k, _v in NO_MULTICAST_ENV.items():
    os.environ[_k] = _v

#: nvcc used to build the recording kernel (default: the one on PATH).
NVCC = os.environ.get("HBF_NVCC") or "nvcc"
#: where built cubins are cached (keyed by source hash).
CACHE_DIR = os.environ.get("HBF_RECORD_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hbfsim", "record")
#: CUDA_VISIBLE_DEVICES as seen at start (reported in the recording, never changed).
CUDA_VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(NO_MULTICAST_ENV)
    if extra:
        env.update(extra)
    return env


def check_no_multicast() -> dict[str, str]:
    """The three switches as they are now; raises if something turned them back on."""
    from hbfcommon.errors import ConfigError

    now = {k: os.environ.get(k, "") for k in NO_MULTICAST_ENV}
    bad = {k: v for k, v in now.items() if v != NO_MULTICAST_ENV[k]}
    if bad:
        raise ConfigError("NVLink multicast switches are not off", env=bad)
    return now
