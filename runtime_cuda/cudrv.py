"""Thin, checked wrappers over cuda.bindings.driver (imported lazily: the package imports on CPU).

The project's one CUDA layer: runtime_cuda's Session and eidola (eidola/replay.py, its workloads)
reach the GPU only through these functions (the driver API on the device's primary context, the one
torch and Triton use). Pointers and stream handles are plain ints.
"""
from __future__ import annotations

import ctypes
import functools
import logging
from typing import Any, Sequence

from hbfcommon.errors import CudaError

log = logging.getLogger(__name__)

CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02


@functools.lru_cache(maxsize=1)
def drv():
    try:
        from cuda.bindings import driver  # noqa: PLC0415
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise CudaError("cuda-python (cuda.bindings) is not installed", error=str(e)) from e
    return driver


def check(res: Any, what: str) -> Any:
    """cuda.bindings returns (CUresult, *outs): raise on error, return the outs."""
    d = drv()
    if isinstance(res, tuple):
        err, outs = res[0], res[1:]
    else:
        err, outs = res, ()
    if int(err) != int(d.CUresult.CUDA_SUCCESS):
        try:
            name = d.cuGetErrorName(err)[1].decode()
        except Exception:  # noqa: BLE001
            name = str(err)
        raise CudaError(f"{what} failed: {name}", call=what, cu_result=int(err), cu_name=name)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else outs


def call(name: str, *args: Any) -> Any:
    """Call the driver function ``name`` with ``args`` and check it (:func:`check`)."""
    return check(getattr(drv(), name)(*args), name)


def gpu_available() -> bool:
    """True when a CUDA driver and at least one device are present (never raises)."""
    try:
        d = drv()
        if int(d.cuInit(0)[0]) != 0:
            return False
        err, n = d.cuDeviceGetCount()
        return int(err) == 0 and n > 0
    except Exception:  # noqa: BLE001
        return False


def init_context(device: int = 0):
    """Make the device's primary context current (the one torch and Triton use)."""
    d = drv()
    check(d.cuInit(0), "cuInit")
    dev = check(d.cuDeviceGet(device), "cuDeviceGet")
    ctx = check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return dev, ctx


def device_count() -> int:
    d = drv()
    check(d.cuInit(0), "cuInit")
    return int(check(d.cuDeviceGetCount(), "cuDeviceGetCount"))


def ctx_set_current(ctx) -> None:
    check(drv().cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def enable_peer_access(dev, peer_dev, peer_ctx) -> None:
    """Let the CURRENT context (device ``dev``'s) access ``peer_ctx``'s memory (device ``peer_dev``);
    already enabled is fine. Raises CudaError when the devices cannot be peers."""
    d = drv()
    if not int(check(d.cuDeviceCanAccessPeer(dev, peer_dev), "cuDeviceCanAccessPeer")):
        raise CudaError(f"device {int(dev)} cannot access peer device {int(peer_dev)}",
                        device=int(dev), peer=int(peer_dev))
    err = d.cuCtxEnablePeerAccess(peer_ctx, 0)
    err = err[0] if isinstance(err, tuple) else err
    if int(err) != int(d.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
        check(err, "cuCtxEnablePeerAccess")


def device_attr(dev, attr_name: str) -> int:
    d = drv()
    return int(check(d.cuDeviceGetAttribute(getattr(d.CUdevice_attribute, attr_name), dev),
                     f"cuDeviceGetAttribute({attr_name})"))


def host_register(ptr: int, nbytes: int) -> int:
    """cuMemHostRegister(DEVICEMAP|PORTABLE) and return the device pointer."""
    d = drv()
    check(d.cuMemHostRegister(ptr, nbytes, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE),
          "cuMemHostRegister")
    return int(check(d.cuMemHostGetDevicePointer(ptr, 0), "cuMemHostGetDevicePointer"))


def host_unregister(ptr: int) -> None:
    check(drv().cuMemHostUnregister(ptr), "cuMemHostUnregister")


VA_ALIGN = 2 << 20   # cuMemAddressReserve granularity used for capacity spans (2 MiB: the VMM minimum on H200)


def address_reserve(nbytes: int) -> tuple[int, int]:
    """cuMemAddressReserve: a span of device virtual addresses with NO physical memory behind it (capacity
    ranges, NOT GPU-verified). Returns (base, reserved bytes: nbytes rounded up to VA_ALIGN)."""
    size = -(-int(nbytes) // VA_ALIGN) * VA_ALIGN
    return int(check(drv().cuMemAddressReserve(size, VA_ALIGN, 0, 0), "cuMemAddressReserve")), size


def address_free(base: int, size: int) -> None:
    check(drv().cuMemAddressFree(base, size), "cuMemAddressFree")


def mem_alloc(nbytes: int) -> int:
    return int(check(drv().cuMemAlloc(nbytes), "cuMemAlloc"))


def mem_free(dptr: int) -> None:
    check(drv().cuMemFree(dptr), "cuMemFree")


def memset_d8(dptr: int, byte: int, nbytes: int) -> None:
    """Set nbytes of device memory to ``byte`` (the NULL stream, like cudaMemset)."""
    check(drv().cuMemsetD8(dptr, int(byte) & 0xFF, nbytes), "cuMemsetD8")


def stream_create(non_blocking: bool = True) -> int:
    d = drv()
    flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else d.CUstream_flags.CU_STREAM_DEFAULT
    return int(check(d.cuStreamCreate(int(flags)), "cuStreamCreate"))


def stream_synchronize(stream: int) -> None:
    d = drv()
    check(d.cuStreamSynchronize(d.CUstream(int(stream))), "cuStreamSynchronize")


def stream_destroy(stream: int) -> None:
    d = drv()
    check(d.cuStreamDestroy(d.CUstream(int(stream))), "cuStreamDestroy")


def _host_address(obj: Any) -> Any:
    """The host address of a ctypes object, or obj itself (an int address or a buffer the binding takes). The
    caller keeps obj referenced until its copy returns: never rebind the parameter holding it."""
    if isinstance(obj, (ctypes._SimpleCData, ctypes.Structure, ctypes.Array)):
        return ctypes.addressof(obj)
    return obj


def htod(dptr: int, src: Any, nbytes: int) -> None:
    """Copy nbytes from a host object (ctypes object / buffer / int address) to device memory.

    The object stays referenced (``src``) until the copy has returned: rebinding the parameter to its address
    dropped the last reference to a temporary argument (on CPython 3.11 the callee's parameter is its only
    reference), so the copy read freed memory -- on the H200 on 2026-12-05 descriptor 0 of the device-decode input
    arrived as malloc's free-list words and decoded RESERVED (reproduced on the CPU:
    tests/runtime/test_cudrv_lifetime.py)."""
    addr = _host_address(src)
    check(drv().cuMemcpyHtoD(dptr, addr, nbytes), "cuMemcpyHtoD")


def dtoh(dst: Any, dptr: int, nbytes: int) -> None:
    """Copy nbytes from device memory into a host object (ctypes object / buffer / int address); ``dst`` stays
    referenced until the copy has returned (see htod)."""
    addr = _host_address(dst)
    check(drv().cuMemcpyDtoH(addr, dptr, nbytes), "cuMemcpyDtoH")


def ctx_synchronize() -> None:
    check(drv().cuCtxSynchronize(), "cuCtxSynchronize")


def stream_synchronize(stream: int) -> None:
    check(drv().cuStreamSynchronize(drv().CUstream(int(stream))), "cuStreamSynchronize")


def memset_u64_async(dptr: int, value: int, stream: int) -> None:
    """Write one aligned u64 in stream order (two 32-bit memsets: the caller makes sure no kernel reads
    the word meanwhile)."""
    d = drv()
    st = d.CUstream(int(stream))
    check(d.cuMemsetD32Async(dptr, int(value) & 0xFFFFFFFF, 1, st), "cuMemsetD32Async")
    check(d.cuMemsetD32Async(dptr + 4, (int(value) >> 32) & 0xFFFFFFFF, 1, st), "cuMemsetD32Async")


def _capture_status(stream: int) -> int | None:
    """cuStreamIsCapturing's status of ``stream`` (CUstreamCaptureStatus: 0 none, 1 active, 2 invalidated), None
    when the call failed (the legacy stream while another thread captures in global mode,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)."""
    d = drv()
    res = d.cuStreamIsCapturing(d.CUstream(int(stream)))
    if int(res[0]) != int(d.CUresult.CUDA_SUCCESS):
        return None
    return int(res[1])


def stream_capturing(stream: int) -> bool:
    """Whether work queued on ``stream`` is being captured into a CUDA graph (cuStreamIsCapturing). An error counts
    as capturing: the caller then takes its capture-safe choice."""
    st = _capture_status(stream)
    return st is None or st != int(drv().CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


def stream_capture_active(stream: int) -> bool:
    """Whether ``stream`` is certainly capturing (cuStreamIsCapturing answered ACTIVE): what a launch must know before
    it captures a kernel's native entry (HBF_GRAPH_NATIVE). An error or an invalidated capture is False: the launch
    keeps the instrumented entry (the fail-safe of stream_capturing)."""
    return _capture_status(stream) == int(drv().CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE)


def address_range(ptr: int) -> tuple[int, int] | None:
    """(base, size) of the device allocation containing ptr (cuMemGetAddressRange), None when ptr is not
    a device address of this context."""
    d = drv()
    res = d.cuMemGetAddressRange(d.CUdeviceptr(int(ptr)))
    if int(res[0]) != int(d.CUresult.CUDA_SUCCESS):
        return None
    return int(res[1]), int(res[2])


def function_local_bytes(function) -> int:
    """The static per-thread local memory (stack frame + spills) of a kernel (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)."""
    d = drv()
    fn = function if isinstance(function, d.CUfunction) else d.CUfunction(int(function))
    return int(check(d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn),
                     "cuFuncGetAttribute(LOCAL_SIZE_BYTES)"))


def ensure_stack_limit(nbytes: int) -> int:
    """Raise the context's per-thread stack (CU_LIMIT_STACK_SIZE) to at least nbytes; returns the limit."""
    d = drv()
    cur = int(check(d.cuCtxGetLimit(d.CUlimit.CU_LIMIT_STACK_SIZE), "cuCtxGetLimit(STACK_SIZE)"))
    if cur >= nbytes:
        return cur
    check(d.cuCtxSetLimit(d.CUlimit.CU_LIMIT_STACK_SIZE, int(nbytes)), "cuCtxSetLimit(STACK_SIZE)")
    return int(nbytes)


def module_load_data(image: bytes):
    return check(drv().cuModuleLoadData(image), "cuModuleLoadData")


def module_function(module, name: str):
    return check(drv().cuModuleGetFunction(_module(module), name.encode()), f"cuModuleGetFunction({name})")


def module_unload(module) -> None:
    check(drv().cuModuleUnload(_module(module)), "cuModuleUnload")


def module_functions(module, names: Sequence[str]) -> dict[str, Any]:
    """The named kernels of a module, each loaded now (cuFuncLoad where the driver has it): with
    lazy module loading a kernel's first launch may wait for kernels already running, which
    deadlocks kernels that wait on each other (eidola's eidolon and its target)."""
    d = drv()
    out = {}
    for name in names:
        fn = module_function(module, name)
        if hasattr(d, "cuFuncLoad"):
            check(d.cuFuncLoad(fn), f"cuFuncLoad({name})")
        out[name] = fn
    return out


def func_set_max_dynamic_shared(function, nbytes: int) -> None:
    """Allow a kernel ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
    d = drv()
    check(d.cuFuncSetAttribute(function, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               int(nbytes)), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")


# The function attributes a loader may set on a kernel after loading it (Triton's loadBinary: the dynamic shared
# memory above 48 KiB; its launcher: the non-portable cluster size), which a second entry of the same kernel (its
# native entry, <k>__hbnat) must carry too, or a launch with the kernel's dynamic shared memory is an invalid argument.
FUNC_ATTRIBUTES_COPIED = ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
                          "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT",
                          "CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH", "CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT",
                          "CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH",
                          "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
                          "CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE")


def copy_function_attributes(src, dst) -> dict[str, int]:
    """Give ``dst`` the settable function attributes of ``src`` (FUNC_ATTRIBUTES_COPIED, read back with
    cuFuncGetAttribute) where they differ, and the shared-memory cache preference Triton sets with them; returns
    what was set. MAX_DYNAMIC_SHARED_SIZE_BYTES must copy (raises CudaError); another attribute the driver lacks or
    refuses (a cluster size compiled into the kernel) is skipped, logged."""
    d = drv()
    fa = d.CUfunction_attribute
    s = src if isinstance(src, d.CUfunction) else d.CUfunction(int(src))
    t = dst if isinstance(dst, d.CUfunction) else d.CUfunction(int(dst))
    done: dict[str, int] = {}
    for an in FUNC_ATTRIBUTES_COPIED:
        a = getattr(fa, an, None)
        if a is None:
            continue
        must = an == "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"
        try:
            want = int(check(d.cuFuncGetAttribute(a, s), f"cuFuncGetAttribute({an})"))
            have = int(check(d.cuFuncGetAttribute(a, t), f"cuFuncGetAttribute({an})"))
            if want != have:
                check(d.cuFuncSetAttribute(t, a, want), f"cuFuncSetAttribute({an})")
                done[an] = want
        except CudaError as e:
            if must:
                raise
            log.debug("copy_function_attributes: %s skipped (%s)", an, e)
    if done.get("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 0) > 48 * 1024:
        res = d.cuFuncSetCacheConfig(t, d.CUfunc_cache.CU_FUNC_CACHE_PREFER_SHARED)
        if int(res[0] if isinstance(res, tuple) else res) != int(d.CUresult.CUDA_SUCCESS):
            log.debug("copy_function_attributes: cuFuncSetCacheConfig(PREFER_SHARED) failed")
    return done


def _module(module):
    d = drv()
    return module if isinstance(module, d.CUmodule) else d.CUmodule(int(module))


def module_global(module, name: str) -> tuple[int, int] | None:
    """(device address, size) of a module global, or None when the module has no such symbol."""
    d = drv()
    res = d.cuModuleGetGlobal(_module(module), name.encode())
    if int(res[0]) == int(d.CUresult.CUDA_ERROR_NOT_FOUND):
        return None
    dptr, size = check(res, f"cuModuleGetGlobal({name})")
    return int(dptr), int(size)


def launch(function, grid: Sequence[int], block: Sequence[int],
           args: Sequence[ctypes._SimpleCData | ctypes.Structure], shared: int = 0, stream: int = 0) -> None:
    """cuLaunchKernel with arguments given as ctypes values of the kernel's parameter types
    (c_uint64 for pointers, c_uint32/c_int32/c_int64 for scalars, a Structure for a struct by value)."""
    d = drv()
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    holders = list(args)
    arr = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.addressof(a) for a in holders])
    fn = function if isinstance(function, d.CUfunction) else d.CUfunction(int(function))
    st = d.CUstream(int(stream)) if not isinstance(stream, d.CUstream) else stream
    check(d.cuLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], shared, st, ctypes.addressof(arr), 0),
          "cuLaunchKernel")
    del holders
