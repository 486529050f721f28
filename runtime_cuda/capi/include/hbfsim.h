/* hbfsim.h -- the C host API of hbfsim (libhbfsim; docs/runtime.md "C/C++ host API").
 *
 * A C or C++ program attaches to hbfd, registers the ranges to model, binds its hbfcc-built modules,
 * synchronizes with device-failure reporting, reads counters and writes its summary. The session itself
 * is runtime_cuda's (Python), run by an interpreter embedded in libhbfsim: one definition of every rule.
 *
 * Every function returns 0 (HBFSIM_OK) or an error code; hbfsim_last_error() is the message of the
 * calling thread's last error. Codes 1..26 are hbfcommon/errors.py's ErrorCode (the same numbers as
 * hbfd's protocol); HBFSIM_E_PYTHON is the library's own. Nothing is printed except the runtime's one-line
 * warnings (hbfsim: WARNING ...); no call ends the process.
 *
 * Threads: any thread may call; calls are serialized by the interpreter lock. A session must not be
 * used after hbfsim_detach. The interpreter stays loaded until the process ends.
 */
#ifndef HBFSIM_H
#define HBFSIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define HBFSIM_API
#else
#define HBFSIM_API __attribute__((visibility("default")))
#endif

#define HBFSIM_ABI_VERSION 1          /* runtime_cuda/capi/__init__.py ABI_VERSION */
#define HBFSIM_COUNTERS_VERSION 2     /* struct hbfsim_counters layout (2: inline_ns at the end) */

/* return codes (hbfcommon/errors.py ErrorCode; tests/capi checks they agree) */
enum hbfsim_status {
    HBFSIM_OK = 0,
    HBFSIM_E_INTERNAL = 1,
    HBFSIM_E_INVALID_ARGUMENT = 2,
    HBFSIM_E_PROFILE_INVALID = 3,
    HBFSIM_E_RANGE_OVERLAP = 4,
    HBFSIM_E_RANGE_ZERO_LENGTH = 5,
    HBFSIM_E_RANGE_MISALIGNED = 6,
    HBFSIM_E_RANGE_BAD_PERMISSIONS = 7,
    HBFSIM_E_RANGE_BAD_MODE = 8,
    HBFSIM_E_RANGE_NOT_FOUND = 9,
    HBFSIM_E_RANGE_ADMITTED = 10,
    HBFSIM_E_RANGE_TABLE_FULL = 11,
    HBFSIM_E_DAEMON_UNAVAILABLE = 12,
    HBFSIM_E_DAEMON_LOST = 13,
    HBFSIM_E_ABI_MISMATCH = 14,
    HBFSIM_E_CONTROL_REGION = 15,
    HBFSIM_E_PTX_PARSE = 16,
    HBFSIM_E_PTX_REWRITE = 17,
    HBFSIM_E_TOOLCHAIN = 18,
    HBFSIM_E_UNSUPPORTED = 19,
    HBFSIM_E_TIMEOUT = 20,
    HBFSIM_E_THERMAL_SHUTDOWN = 21,
    HBFSIM_E_TELEMETRY = 22,
    HBFSIM_E_LAUNCH_REFUSED = 23,
    HBFSIM_E_CUDA = 24,
    HBFSIM_E_TRACE_INVALID = 25,
    HBFSIM_E_SHUTTING_DOWN = 26,
    HBFSIM_E_RANGE_STALE = 27,
    /* the library's own: the embedded Python could not start, or cannot import runtime_cuda */
    HBFSIM_E_PYTHON = 100
};

/* hbfsim_attach flags */
#define HBFSIM_ATTACH_NO_CUDA 0x1           /* never touch CUDA (tests, CPU tools); default: CUDA when a GPU is present */
#define HBFSIM_ATTACH_ALLOW_UNMODELED 0x2   /* non-admitted kernels run unmodeled (recorded), else bind_all refuses */

/* range permissions (hbf_ctl.h HBF_PERM_*); 0 means all */
#define HBFSIM_PERM_READ 0x1u
#define HBFSIM_PERM_WRITE 0x2u
#define HBFSIM_PERM_ATOMIC 0x4u

#define HBFSIM_N_OPS 4                      /* load, store, atomic, cpasync (hbfcommon/ctl.py OP_NAMES) */
enum hbfsim_op { HBFSIM_OP_LOAD = 0, HBFSIM_OP_STORE = 1, HBFSIM_OP_ATOMIC = 2, HBFSIM_OP_CPASYNC = 3 };

typedef struct hbfsim_session hbfsim_session;
typedef uint64_t hbfsim_range_id;

typedef struct hbfsim_op_counters {
    uint64_t requests;
    uint64_t bytes;            /* media bytes (what the modeled device moved) */
    uint64_t program_bytes;    /* bytes the program's accesses asked for */
    uint64_t modeled_ns;       /* modeled service time, summed over requests */
    uint64_t wall_ns;
    uint64_t service_ns;
    uint64_t overhead_ns;      /* helper time (issue path) */
} hbfsim_op_counters;

/* The session's counters, totals over every bound kernel (docs/runtime.md): set struct_size to
 * sizeof(hbfsim_counters) before the call; the library fills min(struct_size, its size) bytes and sets
 * version. Without CUDA every device counter is 0. */
typedef struct hbfsim_counters {
    uint32_t struct_size;
    uint32_t version;                          /* HBFSIM_COUNTERS_VERSION */
    uint64_t generation;                       /* range-table generation the counters were read under */
    hbfsim_op_counters ops[HBFSIM_N_OPS];
    uint64_t requests;                         /* over all ops */
    uint64_t media_bytes;
    uint64_t program_bytes;
    uint64_t modeled_ns;
    uint64_t service_ns;
    uint64_t helper_ns;                        /* overhead_ns over all ops */
    uint64_t wait_calls;
    uint64_t exposed_wait_ns;                  /* wall time consumers waited (wait_wall_ns) */
    uint64_t lateness_ns;                      /* past the modeled deadline (wait_overhead_ns) */
    uint64_t slack_ns;
    uint64_t ready_waits;
    uint64_t inline_requests;
    uint64_t launches;
    uint64_t thermal_waits;
    uint64_t thermal_wait_ns;
    uint64_t refresh_claims;
    uint64_t refresh_bytes;
    uint64_t bias_clamps;
    uint64_t unmodeled_launches;               /* kernels allowed unmodeled (HBFSIM_ATTACH_ALLOW_UNMODELED) */
    uint64_t refused_launches;
    uint64_t inline_ns;                        /* the inline issue path's own time (builds with HBFCC_INLINE_TIME=1;
                                                  else 0): docs/runtime.md */
} hbfsim_counters;

/* A terminal failure the GPU recorded (hbfsim_synchronize). */
typedef struct hbfsim_failure {
    uint32_t status;           /* the request state (hbfcommon/status.py); status_name is "" when none was recorded */
    uint32_t site;             /* kernel_index << 16 | site_index */
    uint32_t kernel_index;
    uint32_t site_index;
    char status_name[32];
} hbfsim_failure;

/* What hbfsim_bind_all found and bound. */
typedef struct hbfsim_bind_report {
    uint32_t modules;          /* CUDA modules bound (0 in a session without CUDA) */
    uint32_t kernels;          /* kernels the program's artifacts name, each host stub found */
    uint32_t admitted;
    uint32_t not_admitted;
} hbfsim_bind_report;

/* "hbfsim <package version> (C API ABI <n>)"; never NULL, needs no session. */
HBFSIM_API const char* hbfsim_version(void);
HBFSIM_API int hbfsim_abi_version(void);

/* The calling thread's last error message ("" after a success) and code. */
HBFSIM_API const char* hbfsim_last_error(void);
HBFSIM_API int hbfsim_last_error_code(void);

/* Attach to hbfd at `socket` (NULL: HBFD_SOCKET, else the default socket). */
HBFSIM_API int hbfsim_attach(const char* socket, unsigned flags, hbfsim_session** out);

/* Model every access to [ptr, ptr + bytes) (a device pointer; any base and length). perms: HBFSIM_PERM_*,
 * 0 = all. label: shown in the summary (may be NULL). */
HBFSIM_API int hbfsim_register_timing_range(hbfsim_session* s, const void* ptr, size_t bytes, unsigned perms,
                                            const char* label, hbfsim_range_id* out);
HBFSIM_API int hbfsim_unregister_range(hbfsim_session* s, hbfsim_range_id id);

/* The program's cudaGetFuncBySymbol (cudaError_t (*)(cudaFunction_t*, const void*)), as hbfsim_bind_all passes it */
typedef int (*hbfsim_get_func_fn)(void* function_out, const void* symbol);

/* Bind the program's hbfcc-built modules (no module globals touched by the caller). artifacts: NULL to
 * use <binary>.hbfcc.json beside the executable and each loaded library (hbfcc writes it when it links),
 * else ':'-separated admission artifacts. get_func_by_symbol: the program's cudaGetFuncBySymbol; use the
 * hbfsim_bind_all macro below, which passes it from a file that includes cuda_runtime.h. */
HBFSIM_API int hbfsim_bind_all_with(hbfsim_session* s, const char* artifacts, hbfsim_get_func_fn get_func_by_symbol,
                                    hbfsim_bind_report* report);

HBFSIM_API int hbfsim_counters_get(hbfsim_session* s, hbfsim_counters* out);

/* Wait for the device (the whole context) and report a recorded device failure: HBFSIM_OK, or the
 * failure's code (HBFSIM_E_DAEMON_LOST, _TIMEOUT, _THERMAL_SHUTDOWN, ...) with `failure` filled (may be
 * NULL); the failure is reported to hbfd once. Without CUDA it checks the failure word only. */
HBFSIM_API int hbfsim_synchronize(hbfsim_session* s, hbfsim_failure* failure);

/* Write the run so far (hbfd's summary, this session's counters, the bound kernels) as JSON at `path`
 * (atomic replace). */
HBFSIM_API int hbfsim_write_summary(hbfsim_session* s, const char* path);

/* Publish the final counters, unbind every module (its kernels run native again), unmap and close.
 * `s` is freed, also when an error is returned. NULL is a no-op. */
HBFSIM_API int hbfsim_detach(hbfsim_session* s);

#ifdef __cplusplus
}
#endif

/* hbfsim_bind_all(s, artifacts, report): the program's own cudart finds its kernels (a static cudart is
 * private to the program, so libhbfsim cannot call it itself). */
#if defined(CUDART_VERSION)
#define hbfsim_bind_all(s, artifacts, report) \
    hbfsim_bind_all_with((s), (artifacts), (hbfsim_get_func_fn)&cudaGetFuncBySymbol, (report))
#else
#define hbfsim_bind_all(s, artifacts, report) hbfsim_bind_all_with((s), (artifacts), (hbfsim_get_func_fn)0, (report))
#endif

#endif /* HBFSIM_H */
