/*
 * hbf_eidola.cuh — Eidola device primitives (DESIGN.md §3.7): peers that are not there.
 *
 *  - target-kernel start:  hbf_eidola_kernel_enter() (atomicMin of %globaltimer into st->t0);
 *                          wakeups in the Write Tracking Table are relative to it.
 *  - register_write():     device-side registration into a staging area (setup kernel); the host
 *                          sorts it into the WTT (registration order is free).
 *  - flag loads:           hbf_eidola_ld_flag_u32/u64(): accounting + engine (b) virtualization
 *                          (the value the table makes visible at this instant: binary search by
 *                          address, then by time) or a real ld.acquire.sys (engine a / real peers).
 *  - monitor()/mwait():    software monitor log (masked compare) + per-warp wake word;
 *                          coarse wake-all per 128-B line (Mesa) or per-flag compare (Hoare).
 *  - accounting:           per-thread register counters, flushed once with atomics into
 *                          ctr[class][HBF_EIDOLA_C_*] (flag classes 1.., non-flag class 0).
 *  - eidolon service:      hbf_eidola_enact(): the store + monitor-log service the eidolon kernel
 *                          (eidola/src/eidola_kernels.cu) performs for each WTT entry.
 *
 * Header-only; every symbol is prefixed hbf_eidola_ / HBF_EIDOLA_. Pointers in the state are
 * stored as u64 so that the Python mirror (eidola/replay.py StateMirror) is a flat struct of
 * integers; eidola/replay.py checks it against HBF_EIDOLA_LAYOUT_VALUES (the module global
 * hbf_eidola_layout of eidola_kernels.cu; on CPU, tests/eidola compile this header as host C++:
 * everything above the __CUDACC__ part is plain C++).
 */
#ifndef HBF_EIDOLA_CUH
#define HBF_EIDOLA_CUH

#include <cstddef>
#include <cstdint>

#define HBF_EIDOLA_LAYOUT_VERSION 1u
#define HBF_EIDOLA_MAX_CLASSES 16u
#define HBF_EIDOLA_NCTR 8u
#define HBF_EIDOLA_MAX_FLAG_RANGES 8u
#define HBF_EIDOLA_MON_WAITERS 2u
#define HBF_EIDOLA_LINE_BYTES 128u

/* counters (mirrors eidola/accounting.py COUNTERS) */
#define HBF_EIDOLA_C_WARP 0u        /* warp-instructions that read global memory */
#define HBF_EIDOLA_C_THREAD 1u      /* per-thread reads */
#define HBF_EIDOLA_C_MON_ARMS 2u
#define HBF_EIDOLA_C_MWAITS 3u
#define HBF_EIDOLA_C_WAKE_READS 4u  /* polls of the per-warp wake word (not flag reads) */
#define HBF_EIDOLA_C_VLOADS 5u      /* flag reads served by engine (b) */
#define HBF_EIDOLA_C_MWAIT_NS 6u
#define HBF_EIDOLA_C_SPIN 7u

/* engines */
#define HBF_EIDOLA_ENGINE_REAL 0u   /* flag loads read memory (real peers, or engine a stores) */
#define HBF_EIDOLA_ENGINE_VIRT 1u   /* engine (b): virtualized flag loads */
/* monitor modes */
#define HBF_EIDOLA_MON_OFF 0u
#define HBF_EIDOLA_MON_MESA 1u      /* any enacted write to the line wakes every waiter on it */
#define HBF_EIDOLA_MON_HOARE 2u     /* per-flag, masked compare must match */

/* failure codes (st->failure = (code << 32) | detail) */
#define HBF_EIDOLA_FAIL_TIMEOUT 1u
#define HBF_EIDOLA_FAIL_MON_FULL 2u
#define HBF_EIDOLA_FAIL_NEVER_WAKES 3u
#define HBF_EIDOLA_FAIL_STAGING_FULL 4u
#define HBF_EIDOLA_FAIL_BAD_SIZE 5u

typedef struct hbf_eidola_flag_range {
    uint64_t base;
    uint64_t length;
    uint32_t klass;                /* 1..MAX_CLASSES-1 */
    uint32_t reserved0;
    uint64_t reserved1;
} hbf_eidola_flag_range;           /* 32 B */

typedef struct hbf_eidola_mon_waiter {
    uint32_t who;                  /* 0 = free; else (global_warp * 32 + lane) + 1 */
    uint32_t armed;
    uint64_t value;
    uint64_t mask;
} hbf_eidola_mon_waiter;           /* 24 B */

typedef struct hbf_eidola_mon_entry {  /* one per 4-byte word of the monitored range */
    hbf_eidola_mon_waiter w[HBF_EIDOLA_MON_WAITERS];
    uint64_t reserved[2];
} hbf_eidola_mon_entry;            /* 64 B */

typedef struct hbf_eidola_state {
    /* --- per launch (host resets: t0 = ~0, failure = 0) --- */
    uint64_t t0;                   /* min %globaltimer at target-kernel entry */
    uint64_t failure;
    uint64_t eidolon_done;         /* entries enacted (engine a) */
    uint64_t vd_base;              /* dense direct map of the per-address index (0 = none): */
    /* --- configuration --- */
    uint32_t engine;               /* HBF_EIDOLA_ENGINE_* */
    uint32_t mon_mode;             /* HBF_EIDOLA_MON_* */
    uint32_t vload_paced;          /* engine b: also issue the real load (real timing + traffic) */
    uint32_t n_flag_ranges;
    int64_t lag_ns;                /* engine a: fire this many ns early (calibrated lag) */
    uint64_t timeout_ns;           /* every wait is bounded; 0 = 2 s */
    uint32_t sleep_ns;             /* mwait wake-word poll backoff */
    uint32_t reserved1;
    hbf_eidola_flag_range flag_ranges[HBF_EIDOLA_MAX_FLAG_RANGES];
    /* --- WTT sorted by wakeup (engine a) --- */
    uint64_t n_entries;
    uint64_t t_addr, t_value, t_size, t_wakeup;   /* u64*, u64*, u32*, u64* */
    uint64_t t_enacted;            /* u64*: %globaltimer - t0 at each store's issue (see eidola_kernels.cu) */
    /* --- per-address index (engine b; mwait hints) --- */
    uint64_t n_vaddr;
    uint64_t v_addr, v_begin, v_time, v_value, v_init;   /* u64*, u32*(n+1), u64*, u64*, u64* */
    /* --- monitor log --- */
    uint64_t mon_base;
    uint64_t mon_slots;            /* 4-byte words covered */
    uint64_t mon;                  /* hbf_eidola_mon_entry* */
    uint64_t wake;                 /* u32* per global warp of the target kernel */
    uint64_t n_wake;
    /* --- setup-kernel registration staging --- */
    uint64_t s_addr, s_value, s_size, s_wakeup;  /* u64*, u64*, u32*, u64* */
    uint64_t s_count;              /* u32* (atomic) */
    uint64_t s_cap;
    /* --- accounting --- */
    uint64_t ctr;                  /* unsigned long long [MAX_CLASSES][NCTR] */
    uint64_t arm;                  /* extern API: u64[6] per thread slot (armed monitor) */
    uint64_t n_arm;                /* thread slots in `arm` (global warp * 32 + lane) */
    uint64_t vd_n;                 /* 4-byte words covered from vd_base */
    uint64_t vd_idx;               /* u32[vd_n]: word -> v index, 0xffffffff = not in the table */
} hbf_eidola_state;

/* sizeof + the offsets the Python mirror writes (in mirror order), the layout version and the
 * monitor-entry size: eidola/replay.py compares them with StateMirror */
#define HBF_EIDOLA_LAYOUT_N 12
#define HBF_EIDOLA_LAYOUT_VALUES                                                                     \
    {(unsigned long long)sizeof(hbf_eidola_state), (unsigned long long)HBF_EIDOLA_LAYOUT_VERSION,     \
     (unsigned long long)offsetof(hbf_eidola_state, t0), (unsigned long long)offsetof(hbf_eidola_state, engine), \
     (unsigned long long)offsetof(hbf_eidola_state, lag_ns),                                          \
     (unsigned long long)offsetof(hbf_eidola_state, flag_ranges),                                     \
     (unsigned long long)offsetof(hbf_eidola_state, n_entries),                                       \
     (unsigned long long)offsetof(hbf_eidola_state, n_vaddr),                                         \
     (unsigned long long)offsetof(hbf_eidola_state, mon_base),                                        \
     (unsigned long long)offsetof(hbf_eidola_state, s_addr), (unsigned long long)offsetof(hbf_eidola_state, ctr), \
     (unsigned long long)sizeof(hbf_eidola_mon_entry)}

#ifdef __CUDACC__

#define HBF_EIDOLA_DEV static __device__ __forceinline__

#include "hbf_ptx.cuh"   // the PTX primitives shared with the timing helpers

/* Per-thread accounting, in registers; flushed once per thread. */
typedef struct hbf_eidola_acct {
    uint32_t flag_class;           /* class of the flag reads counted below (0 = none yet) */
    uint32_t flag_warp, flag_thread, nonflag_warp, nonflag_thread;
    uint32_t mon_arms, mwaits, wake_reads, vloads, spin;
    uint64_t mwait_ns;
    /* monitor armed by this thread */
    uint64_t mon_addr, mon_value, mon_mask;
    uint64_t mon_t;                /* relative time just before the monitor's flag read */
    uint32_t mon_slot, mon_widx;
    /* configuration cached in registers (acct_init with a state): one flag range, engine */
    uint32_t cached, c_engine, c_class, c_paced;
    uint64_t c_base, c_len;
    /* engine (b) table pointers cached in registers (no reloads of the state per poll) */
    uint64_t c_vd_base, c_vd_n;
    const uint32_t* c_vd_idx;
    const uint32_t* c_v_begin;
    const uint64_t* c_v_time;
    const uint64_t* c_v_value;
    const uint64_t* c_v_init;
} hbf_eidola_acct;

HBF_EIDOLA_DEV void hbf_eidola_acct_init(hbf_eidola_acct* a, const hbf_eidola_state* st = nullptr) {
    a->cached = 0;
    if (st && st->n_flag_ranges == 1) {
        a->cached = 1;
        a->c_engine = st->engine; a->c_paced = st->vload_paced;
        a->c_base = st->flag_ranges[0].base; a->c_len = st->flag_ranges[0].length;
        a->c_class = st->flag_ranges[0].klass;
        a->c_vd_base = st->vd_base; a->c_vd_n = st->vd_idx ? st->vd_n : 0;
        a->c_vd_idx = (const uint32_t*)st->vd_idx; a->c_v_begin = (const uint32_t*)st->v_begin;
        a->c_v_time = (const uint64_t*)st->v_time; a->c_v_value = (const uint64_t*)st->v_value;
        a->c_v_init = (const uint64_t*)st->v_init;
    }
    a->flag_class = 0; a->flag_warp = a->flag_thread = a->nonflag_warp = a->nonflag_thread = 0;
    a->mon_arms = a->mwaits = a->wake_reads = a->vloads = a->spin = 0;
    a->mwait_ns = 0; a->mon_addr = 0; a->mon_value = 0; a->mon_mask = 0; a->mon_t = 0;
    a->mon_slot = 0xffffffffu; a->mon_widx = 0;
}

/* One warp-instruction per calling warp (counted by its lowest active lane), one per lane. */
HBF_EIDOLA_DEV uint32_t hbf_eidola_leader() {
    return (uint32_t)(__ffs(__activemask()) - 1) == hb_laneid() ? 1u : 0u;
}

HBF_EIDOLA_DEV void hbf_eidola_count_nonflag(hbf_eidola_acct* a, uint32_t insts = 1) {
    a->nonflag_thread += insts;
    a->nonflag_warp += hbf_eidola_leader() * insts;
}

static __device__ __noinline__ void hbf_eidola_fail(hbf_eidola_state* st, uint32_t code, uint32_t detail) {
    atomicCAS((unsigned long long*)&st->failure, 0ull,
              ((unsigned long long)code << 32) | (unsigned long long)detail);
    __threadfence_system();
    asm volatile("trap;");
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_timeout(const hbf_eidola_state* st) {
    return st->timeout_ns ? st->timeout_ns : 2000000000ull;
}

HBF_EIDOLA_DEV uint32_t hbf_eidola_classify(const hbf_eidola_state* st, uint64_t addr) {
    for (uint32_t i = 0; i < st->n_flag_ranges && i < HBF_EIDOLA_MAX_FLAG_RANGES; ++i) {
        const hbf_eidola_flag_range& r = st->flag_ranges[i];
        if (addr - r.base < r.length) return r.klass;
    }
    return 0;
}

HBF_EIDOLA_DEV void hbf_eidola_count_flag(const hbf_eidola_state* st, hbf_eidola_acct* a,
                                          uint32_t klass) {
    uint32_t lead = hbf_eidola_leader();
    if (a->flag_class == 0 || a->flag_class == klass) {
        a->flag_class = klass;
        a->flag_thread += 1;
        a->flag_warp += lead;
    } else {  /* a second class in the same thread: count directly */
        unsigned long long* c = (unsigned long long*)st->ctr + klass * HBF_EIDOLA_NCTR;
        atomicAdd(&c[HBF_EIDOLA_C_THREAD], 1ull);
        if (lead) atomicAdd(&c[HBF_EIDOLA_C_WARP], 1ull);
    }
}

/* ---- target kernel start ------------------------------------------------------------------ */
/* Every block calls it (thread 0 does the work); returns the kernel start as this block sees it. */
HBF_EIDOLA_DEV uint64_t hbf_eidola_kernel_enter(hbf_eidola_state* st) {
    __shared__ uint64_t hbf_eidola_t0_sh;
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        uint64_t now = hb_now();
        uint64_t old = atomicMin((unsigned long long*)&st->t0, (unsigned long long)now);
        hbf_eidola_t0_sh = old < now ? old : now;
    }
    __syncthreads();
    return hbf_eidola_t0_sh;
}

/* ---- engine (b): value visible at (addr, t_rel) -------------------------------------------- */
/* Returns 1 and the value when addr is in the table, else 0 (caller reads memory). */
HBF_EIDOLA_DEV int hbf_eidola_vindex(const hbf_eidola_state* st, uint64_t addr, uint32_t* idx) {
    if (st->vd_idx) {  /* O(1): dense flag region */
        const uint64_t w = (addr - st->vd_base) >> 2;
        if (addr >= st->vd_base && w < st->vd_n && ((addr - st->vd_base) & 3u) == 0) {
            const uint32_t i = __ldg(&((const uint32_t*)st->vd_idx)[w]);
            if (i == 0xffffffffu) return 0;
            *idx = i;
            return 1;
        }
    }
    const uint64_t* va = (const uint64_t*)st->v_addr;
    uint64_t lo = 0, hi = st->n_vaddr;
    while (lo < hi) {
        uint64_t mid = (lo + hi) >> 1;
        if (__ldg(&va[mid]) < addr) lo = mid + 1; else hi = mid;
    }
    if (lo < st->n_vaddr && __ldg(&va[lo]) == addr) { *idx = (uint32_t)lo; return 1; }
    return 0;
}

/* index of the first event of address i with time > t (upper bound), in [begin, end] */
HBF_EIDOLA_DEV uint32_t hbf_eidola_vupper(const hbf_eidola_state* st, uint32_t i, uint64_t t) {
    const uint32_t* vb = (const uint32_t*)st->v_begin;
    const uint64_t* vt = (const uint64_t*)st->v_time;
    uint32_t lo = __ldg(&vb[i]), hi = __ldg(&vb[i + 1]);
    while (lo < hi) {
        uint32_t mid = (lo + hi) >> 1;
        if (__ldg(&vt[mid]) <= t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_vvalue(const hbf_eidola_state* st, uint32_t i, uint64_t t) {
    const uint32_t* vb = (const uint32_t*)st->v_begin;
    uint32_t j = hbf_eidola_vupper(st, i, t);
    if (j == __ldg(&vb[i])) return __ldg(&((const uint64_t*)st->v_init)[i]);
    return __ldg(&((const uint64_t*)st->v_value)[j - 1]);
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_rel_now(const hbf_eidola_state* st, uint64_t t0) {
    uint64_t n = hb_now();
    return n > t0 ? n - t0 : 0;
}

/* ---- flag loads (what rewritten / hand-instrumented code calls) ----------------------------- */
HBF_EIDOLA_DEV uint64_t hbf_eidola_ld_relaxed(const void* p, uint32_t size) {
    uint64_t v;
    if (size == 8) asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else { uint32_t w; asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(w) : "l"(p) : "memory"); v = w; }
    return v;
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_ld_flag(hbf_eidola_state* st, hbf_eidola_acct* a, uint64_t t0,
                                           const void* p, uint32_t size) {
    uint64_t addr = (uint64_t)p;
    uint32_t klass;
    uint32_t engine, paced;
    if (a->cached) {
        klass = (addr - a->c_base < a->c_len) ? a->c_class : 0u;
        engine = a->c_engine; paced = a->c_paced;
    } else {
        klass = hbf_eidola_classify(st, addr);
        engine = st->engine; paced = st->vload_paced;
    }
    if (klass == 0) {  /* not a registered flag: a plain (non-flag) read, real memory */
        hbf_eidola_count_nonflag(a);
        return size == 8 ? hb_ld_acq_sys(p) : hb_ld_acq_sys32(p);
    }
    hbf_eidola_count_flag(st, a, klass);
    if (engine == HBF_EIDOLA_ENGINE_VIRT && a->cached && a->c_vd_n) {
        /* register-cached dense map: index, then the time search, no state reloads */
        const uint64_t w = (addr - a->c_vd_base) >> 2;
        if (addr >= a->c_vd_base && w < a->c_vd_n && ((addr - a->c_vd_base) & 3u) == 0) {
            const uint32_t i = __ldg(&a->c_vd_idx[w]);
            if (i != 0xffffffffu) {
                a->vloads += 1;
                uint64_t real = 0;
                if (paced) real = hbf_eidola_ld_relaxed(p, size);
                const uint64_t t = hbf_eidola_rel_now(st, t0);
                uint32_t lo = __ldg(&a->c_v_begin[i]), hi = __ldg(&a->c_v_begin[i + 1]);
                const uint32_t first = lo;
                while (lo < hi) {
                    const uint32_t mid = (lo + hi) >> 1;
                    if (__ldg(&a->c_v_time[mid]) <= t) lo = mid + 1; else hi = mid;
                }
                uint64_t v = lo == first ? __ldg(&a->c_v_init[i]) : __ldg(&a->c_v_value[lo - 1]);
                if (paced) { uint64_t zero; asm volatile("and.b64 %0, %1, 0;" : "=l"(zero) : "l"(real)); v += zero; }
                return v;
            }
        }
    }
    if (engine == HBF_EIDOLA_ENGINE_VIRT) {
        uint32_t i;
        if (hbf_eidola_vindex(st, addr, &i)) {
            a->vloads += 1;
            if (paced) {  /* the real poll's traffic and latency, overlapped with the lookup;
                             the value comes from the table (the real word only gates timing) */
                uint64_t real = hbf_eidola_ld_relaxed(p, size), zero;
                uint64_t v = hbf_eidola_vvalue(st, i, hbf_eidola_rel_now(st, t0));
                asm volatile("and.b64 %0, %1, 0;" : "=l"(zero) : "l"(real));
                return v + zero;
            }
            return hbf_eidola_vvalue(st, i, hbf_eidola_rel_now(st, t0));
        }
    }
    return size == 8 ? hb_ld_acq_sys(p) : hb_ld_acq_sys32(p);
}

HBF_EIDOLA_DEV uint32_t hbf_eidola_ld_flag_u32(hbf_eidola_state* st, hbf_eidola_acct* a, uint64_t t0,
                                               const uint32_t* p) {
    return (uint32_t)hbf_eidola_ld_flag(st, a, t0, p, 4);
}

/* ---- monitor / mwait ------------------------------------------------------------------------ */
HBF_EIDOLA_DEV uint32_t hbf_eidola_gwarp() {
    uint32_t bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    uint32_t wpb = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
    return bid * wpb + tid / 32;
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_mask(uint32_t nbytes) {
    return nbytes >= 8 ? ~0ull : ((1ull << (8 * nbytes)) - 1ull);
}

/* Arms a monitor-log entry for (addr, nbytes, wake_value) and reads the flag once (one counted
 * flag read). Returns true when the masked value already matches (no need to mwait). */
HBF_EIDOLA_DEV bool hbf_eidola_monitor(hbf_eidola_state* st, hbf_eidola_acct* a, uint64_t t0,
                                       const void* p, uint32_t nbytes, uint64_t wake_value) {
    uint64_t addr = (uint64_t)p;
    uint64_t mask = hbf_eidola_mask(nbytes);
    a->mon_arms += 1;
    a->mon_addr = addr; a->mon_value = wake_value; a->mon_mask = mask;
    a->mon_slot = 0xffffffffu;
    bool use_log = st->engine != HBF_EIDOLA_ENGINE_VIRT && st->mon_mode != HBF_EIDOLA_MON_OFF &&
                   addr >= st->mon_base && addr < st->mon_base + 4ull * st->mon_slots;
    if (use_log) {
        uint32_t gw = hbf_eidola_gwarp(), lane = hb_laneid();
        uint32_t me = gw * 32u + lane + 1u;
        uint32_t* wake = (uint32_t*)st->wake;
        atomicAnd(&wake[gw], ~(1u << lane));   /* drop stale wakes before arming */
        uint32_t slot = (uint32_t)((addr - st->mon_base) >> 2);
        hbf_eidola_mon_entry* e = (hbf_eidola_mon_entry*)st->mon + slot;
        uint32_t k = 0;
        for (; k < HBF_EIDOLA_MON_WAITERS; ++k)
            if (atomicCAS(&e->w[k].who, 0u, me) == 0u) break;
        if (k == HBF_EIDOLA_MON_WAITERS) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_MON_FULL, slot);
        e->w[k].value = wake_value;
        e->w[k].mask = mask;
        __threadfence();
        atomicExch(&e->w[k].armed, 1u);
        __threadfence();                       /* Dekker with the eidolon: arm, fence, read */
        a->mon_slot = slot; a->mon_widx = k;
    }
    a->mon_t = hbf_eidola_rel_now(st, t0);
    uint64_t v = hbf_eidola_ld_flag(st, a, t0, p, nbytes >= 8 ? 8 : 4);
    bool hit = (v & mask) == (wake_value & mask);
    if (hit && a->mon_slot != 0xffffffffu) {
        hbf_eidola_mon_entry* e = (hbf_eidola_mon_entry*)st->mon + a->mon_slot;
        atomicExch(&e->w[a->mon_widx].armed, 0u);
        atomicExch(&e->w[a->mon_widx].who, 0u);
        a->mon_slot = 0xffffffffu;
    }
    return hit;
}

/* Earliest table time (relative) > t at which the armed condition can be woken: Hoare: a write
 * whose masked value matches; Mesa: any write to the line. ~0 if the table has none. Called with
 * t = the monitor's read time, so a write that lands between the read and the mwait is not missed. */
HBF_EIDOLA_DEV uint64_t hbf_eidola_wake_hint(const hbf_eidola_state* st, const hbf_eidola_acct* a,
                                             uint64_t t) {
    const uint64_t* vt = (const uint64_t*)st->v_time;
    const uint64_t* vv = (const uint64_t*)st->v_value;
    const uint32_t* vb = (const uint32_t*)st->v_begin;
    if (st->n_vaddr == 0) return ~0ull;
    if (st->mon_mode == HBF_EIDOLA_MON_MESA) {
        uint64_t line = a->mon_addr & ~(uint64_t)(HBF_EIDOLA_LINE_BYTES - 1);
        const uint64_t* va = (const uint64_t*)st->v_addr;
        uint64_t lo = 0, hi = st->n_vaddr;
        while (lo < hi) { uint64_t m = (lo + hi) >> 1; if (va[m] < line) lo = m + 1; else hi = m; }
        uint64_t best = ~0ull;
        for (uint64_t i = lo; i < st->n_vaddr && va[i] < line + HBF_EIDOLA_LINE_BYTES; ++i) {
            uint32_t j = hbf_eidola_vupper(st, (uint32_t)i, t);
            if (j < vb[i + 1] && vt[j] < best) best = vt[j];
        }
        return best;
    }
    uint32_t i;
    if (!hbf_eidola_vindex(st, a->mon_addr, &i)) return ~0ull;
    for (uint32_t j = hbf_eidola_vupper(st, i, t); j < vb[i + 1]; ++j)
        if ((vv[j] & a->mon_mask) == (a->mon_value & a->mon_mask)) return vt[j];
    return ~0ull;
}

/* Sleep (no memory reads) until absolute %globaltimer `until`: nanosleep while far, spin on the
 * timer for the final approach (nanosleep overshoots long sleeps ~1.6x on the H200). */
HBF_EIDOLA_DEV void hbf_eidola_sleep_until(uint64_t until) {
    for (;;) {
        uint64_t now = hb_now();
        if (now >= until) return;
        uint64_t rem = until - now;
        if (rem > 1500) {
            uint64_t s = rem / 2;
            __nanosleep((unsigned)(s > 500000 ? 500000 : s));
        }
    }
}

/* Parks the calling thread's warp-lane until the armed monitor fires. Engine (b): the wake time
 * comes from the table (exact; no agent needed). Engine (a)/real: sleep until the table's hint
 * (when a table exists), then poll the per-warp wake word that the eidolon sets after its
 * masked compare; the flag itself is not read. */
HBF_EIDOLA_DEV void hbf_eidola_mwait(hbf_eidola_state* st, hbf_eidola_acct* a, uint64_t t0,
                                     const void* p) {
    (void)p;
    a->mwaits += 1;
    uint64_t start = hb_now();
    uint64_t deadline = start + hbf_eidola_timeout(st);
    uint64_t hint = hbf_eidola_wake_hint(st, a, a->mon_t);
    if (a->mon_slot == 0xffffffffu) {
        /* no log entry: engine (b) (or monitor off) -> table wake time */
        if (hint == ~0ull) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_NEVER_WAKES, (uint32_t)(a->mon_addr & 0xffffffffu));
        hbf_eidola_sleep_until(t0 + hint);
    } else {
        if (hint != ~0ull) {  /* sleep (no reads) until just before the table's wake time */
            uint64_t target = t0 + hint;
            if (target > 300) hbf_eidola_sleep_until(target - 300);
        }
        uint32_t gw = hbf_eidola_gwarp(), bit = 1u << hb_laneid();
        uint32_t* wake = (uint32_t*)st->wake;
        unsigned sl = st->sleep_ns ? st->sleep_ns : 64u;
        for (;;) {
            a->wake_reads += 1;
            if (hb_ld_acq_sys32(&wake[gw]) & bit) break;
            if (hb_now() > deadline) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, gw);
            __nanosleep(sl);
        }
        atomicAnd(&wake[gw], ~bit);
        hbf_eidola_mon_entry* e = (hbf_eidola_mon_entry*)st->mon + a->mon_slot;
        atomicExch(&e->w[a->mon_widx].armed, 0u);
        atomicExch(&e->w[a->mon_widx].who, 0u);
        a->mon_slot = 0xffffffffu;
    }
    a->mwait_ns += hb_now() - start;
}

/* ---- the eidolon's side: one store and the monitor-log service ------------------------------ */
HBF_EIDOLA_DEV void hbf_eidola_store_sized(uint64_t addr, uint64_t value, uint32_t size) {
    switch (size) {
    case 1: asm volatile("st.relaxed.sys.global.u8 [%0], %1;" ::"l"(addr), "h"((unsigned short)(value & 0xff)) : "memory"); break;
    case 2: asm volatile("st.relaxed.sys.global.u16 [%0], %1;" ::"l"(addr), "h"((unsigned short)value) : "memory"); break;
    case 4: asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(addr), "r"((uint32_t)value) : "memory"); break;
    default: asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(value) : "memory"); break;
    }
}

/* The enactment store, by kind (E0 measures them side by side; DESIGN §3.7 engine a). The flags
 * live in device memory of the same GPU as the target, so .gpu scope is morally strong with the
 * target's .sys-scope loads; .sys is what a real peer over NVLink would use. */
#define HBF_EIDOLA_ST_RELAXED_SYS 0u
#define HBF_EIDOLA_ST_RELAXED_GPU 1u
#define HBF_EIDOLA_ST_RELEASE_GPU 2u
#define HBF_EIDOLA_ST_RELEASE_SYS 3u
#define HBF_EIDOLA_ST_VOLATILE 4u
#define HBF_EIDOLA_ST_KINDS 5u

#define HBF_EIDOLA_ST_SIZED_(sem, addr, value, size)                                                      \
    switch (size) {                                                                                      \
    case 1: asm volatile("st." sem ".global.u8 [%0], %1;" ::"l"(addr), "h"((unsigned short)((value) & 0xff)) : "memory"); break; \
    case 2: asm volatile("st." sem ".global.u16 [%0], %1;" ::"l"(addr), "h"((unsigned short)(value)) : "memory"); break; \
    case 4: asm volatile("st." sem ".global.u32 [%0], %1;" ::"l"(addr), "r"((uint32_t)(value)) : "memory"); break; \
    default: asm volatile("st." sem ".global.u64 [%0], %1;" ::"l"(addr), "l"((uint64_t)(value)) : "memory"); break; \
    }

/* kind is a compile-time constant at every call site in the eidolon kernels (templates), so the
 * switch folds away. */
HBF_EIDOLA_DEV void hbf_eidola_store_kind(uint32_t kind, uint64_t addr, uint64_t value, uint32_t size) {
    switch (kind) {
    case HBF_EIDOLA_ST_RELAXED_GPU: HBF_EIDOLA_ST_SIZED_("relaxed.gpu", addr, value, size) break;
    case HBF_EIDOLA_ST_RELEASE_GPU: HBF_EIDOLA_ST_SIZED_("release.gpu", addr, value, size) break;
    case HBF_EIDOLA_ST_RELEASE_SYS: HBF_EIDOLA_ST_SIZED_("release.sys", addr, value, size) break;
    case HBF_EIDOLA_ST_VOLATILE: HBF_EIDOLA_ST_SIZED_("volatile", addr, value, size) break;
    default: HBF_EIDOLA_ST_SIZED_("relaxed.sys", addr, value, size) break;
    }
}

HBF_EIDOLA_DEV void hbf_eidola_wake_waiter(hbf_eidola_state* st, uint32_t who) {
    uint32_t gw = (who - 1u) >> 5, lane = (who - 1u) & 31u;
    if (gw < st->n_wake) atomicOr(&((uint32_t*)st->wake)[gw], 1u << lane);
}

HBF_EIDOLA_DEV void hbf_eidola_mon_service(hbf_eidola_state* st, uint64_t addr, uint64_t value) {
    if (st->mon_mode == HBF_EIDOLA_MON_OFF || st->mon == 0) return;
    if (addr < st->mon_base || addr >= st->mon_base + 4ull * st->mon_slots) return;
    __threadfence();                           /* store, fence, read the log (Dekker) */
    uint64_t slot = (addr - st->mon_base) >> 2;
    hbf_eidola_mon_entry* mon = (hbf_eidola_mon_entry*)st->mon;
    if (st->mon_mode == HBF_EIDOLA_MON_HOARE) {
        hbf_eidola_mon_entry* e = mon + slot;
        for (uint32_t k = 0; k < HBF_EIDOLA_MON_WAITERS; ++k) {
            uint32_t armed = hb_ld_acq_sys32(&e->w[k].armed);
            uint32_t who = hb_ld_acq_sys32(&e->w[k].who);
            if (!(armed && who)) continue;
            const uint64_t m = hb_ld_vol(&e->w[k].mask);
            const uint64_t wv = hb_ld_vol(&e->w[k].value);
            if ((value & m) == (wv & m)) hbf_eidola_wake_waiter(st, who);
        }
    } else {  /* Mesa: every armed waiter on the 128-B line */
        uint64_t first = slot & ~(uint64_t)(HBF_EIDOLA_LINE_BYTES / 4 - 1);
        for (uint64_t s = first; s < first + HBF_EIDOLA_LINE_BYTES / 4 && s < st->mon_slots; ++s) {
            hbf_eidola_mon_entry* e = mon + s;
            for (uint32_t k = 0; k < HBF_EIDOLA_MON_WAITERS; ++k) {
                uint32_t armed = hb_ld_acq_sys32(&e->w[k].armed);
                uint32_t who = hb_ld_acq_sys32(&e->w[k].who);
                if (armed && who) hbf_eidola_wake_waiter(st, who);
            }
        }
    }
}

/* Legacy per-entry enactment (entry loaded when due, stamped after the store); the eidolon kernels
 * in eidola_kernels.cu prefetch the entry and stamp the issue instant instead (E0 compares both). */
HBF_EIDOLA_DEV void hbf_eidola_enact(hbf_eidola_state* st, uint64_t i, uint64_t t0) {
    uint64_t addr = ((const uint64_t*)st->t_addr)[i];
    uint64_t value = ((const uint64_t*)st->t_value)[i];
    uint32_t size = ((const uint32_t*)st->t_size)[i];
    hbf_eidola_store_sized(addr, value, size);
    uint64_t now = hb_now();
    if (st->t_enacted) ((uint64_t*)st->t_enacted)[i] = now - t0;
    hbf_eidola_mon_service(st, addr, value);
}

/* ---- device-side register_write (setup kernel) -------------------------------------------- */
HBF_EIDOLA_DEV void hbf_eidola_register_write(hbf_eidola_state* st, uint64_t addr, uint64_t value,
                                              uint32_t size, uint64_t wakeup_ns) {
    if (size != 1 && size != 2 && size != 4 && size != 8) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_BAD_SIZE, size);
    uint32_t i = atomicAdd((uint32_t*)st->s_count, 1u);
    if (i >= st->s_cap) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_STAGING_FULL, i);
    ((uint64_t*)st->s_addr)[i] = addr;
    ((uint64_t*)st->s_value)[i] = value;
    ((uint32_t*)st->s_size)[i] = size;
    ((uint64_t*)st->s_wakeup)[i] = wakeup_ns;
}

/* ---- accounting flush ---------------------------------------------------------------------- */
HBF_EIDOLA_DEV void hbf_eidola_acct_flush(hbf_eidola_state* st, const hbf_eidola_acct* a) {
    unsigned long long* c0 = (unsigned long long*)st->ctr;
    if (!c0) return;
    if (a->nonflag_thread) {
        atomicAdd(&c0[HBF_EIDOLA_C_THREAD], (unsigned long long)a->nonflag_thread);
        if (a->nonflag_warp) atomicAdd(&c0[HBF_EIDOLA_C_WARP], (unsigned long long)a->nonflag_warp);
    }
    uint32_t k = a->flag_class ? a->flag_class : 1u;
    unsigned long long* c = c0 + k * HBF_EIDOLA_NCTR;
    if (a->flag_thread) atomicAdd(&c[HBF_EIDOLA_C_THREAD], (unsigned long long)a->flag_thread);
    if (a->flag_warp) atomicAdd(&c[HBF_EIDOLA_C_WARP], (unsigned long long)a->flag_warp);
    if (a->mon_arms) atomicAdd(&c[HBF_EIDOLA_C_MON_ARMS], (unsigned long long)a->mon_arms);
    if (a->mwaits) atomicAdd(&c[HBF_EIDOLA_C_MWAITS], (unsigned long long)a->mwaits);
    if (a->wake_reads) atomicAdd(&c[HBF_EIDOLA_C_WAKE_READS], (unsigned long long)a->wake_reads);
    if (a->vloads) atomicAdd(&c[HBF_EIDOLA_C_VLOADS], (unsigned long long)a->vloads);
    if (a->mwait_ns) atomicAdd(&c[HBF_EIDOLA_C_MWAIT_NS], (unsigned long long)a->mwait_ns);
    if (a->spin) atomicAdd(&c[HBF_EIDOLA_C_SPIN], (unsigned long long)a->spin);
}

#endif /* __CUDACC__ */

/* ============================================================================================
 * Extern API (callable from hbfcc-rewritten PTX and from Triton through extern/inline asm).
 * Emitted only when HBF_EIDOLA_EXTERN_API is defined before the include: the eidola helper module
 * hbfcc links when its flags pass runs (eidola/src/hbf_eidola_helpers.cu -> hbf_eidola_helpers.ptx),
 * or a separate `nvcc -rdc -ptx -DHBF_EIDOLA_EXTERN_API` module for Triton's extern_libs.
 * State comes from the module global __hb_eidola_state (set by the runtime after module load;
 * 0 = detached: flag loads read memory, nothing is counted). Counting is warp-aggregated atomics
 * (no per-thread registers survive an extern call). Prototypes (PTX):
 *   .weak .func (.param .b32 v) __hb_eidola_ld_flag_u32(.param .b64 addr);
 *   .weak .func (.param .b64 v) __hb_eidola_ld_flag_u64(.param .b64 addr);
 *   .weak .func (.param .b32 hit) __hb_eidola_monitor(.param .b64 addr, .param .b32 nbytes, .param .b64 wake);
 *   .weak .func __hb_eidola_mwait(.param .b64 addr);
 *   .weak .func __hb_eidola_register_write(.param .b64 addr, .param .b64 value, .param .b32 size, .param .b64 wakeup);
 *   .weak .func __hb_eidola_kernel_enter();
 *   .weak .func __hb_eidola_count_nonflag(.param .b32 insts);
 * Flag ranges live only here (hbf_eidola_state.flag_ranges, filled by eidola/replay.py FlagTable,
 * to which runtime_cuda's Session.register_flag_range adds once a Replay is attached); the timing
 * helper's range table never holds them (runtime_cuda/devstate.py device_ranges).
 * ============================================================================================ */
#if defined(__CUDACC__) && defined(HBF_EIDOLA_EXTERN_API)
extern "C" {
__device__ unsigned long long __hb_eidola_state;
}

HBF_EIDOLA_DEV hbf_eidola_state* hbf_eidola_gstate() {
    return (hbf_eidola_state*)*(volatile unsigned long long*)&__hb_eidola_state;
}

HBF_EIDOLA_DEV void hbf_eidola_count_atomic(hbf_eidola_state* st, uint32_t klass, uint32_t counter_thread,
                                            uint32_t counter_warp, uint32_t n) {
    unsigned long long* c = (unsigned long long*)st->ctr;
    if (!c) return;
    const uint32_t mask = __activemask();
    if ((uint32_t)(__ffs(mask) - 1) == hb_laneid()) {
        atomicAdd(&c[klass * HBF_EIDOLA_NCTR + counter_thread], (unsigned long long)(__popc(mask) * n));
        atomicAdd(&c[klass * HBF_EIDOLA_NCTR + counter_warp], (unsigned long long)n);
    }
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_gt0(hbf_eidola_state* st) {
    return hb_ld_vol(&st->t0);
}

HBF_EIDOLA_DEV uint64_t hbf_eidola_ext_ld(uint64_t addr, uint32_t size) {
    if (!__isGlobal((const void*)addr)) {   /* a generic load of shared/local memory: not a flag */
        hbf_eidola_state* st0 = hbf_eidola_gstate();
        if (st0) hbf_eidola_count_atomic(st0, 0, HBF_EIDOLA_C_THREAD, HBF_EIDOLA_C_WARP, 1);
        return size == 8 ? *(volatile const uint64_t*)addr : *(volatile const uint32_t*)addr;
    }
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (!st) return size == 8 ? hb_ld_acq_sys((const void*)addr) : hb_ld_acq_sys32((const void*)addr);
    uint32_t k = hbf_eidola_classify(st, addr);
    hbf_eidola_count_atomic(st, k, HBF_EIDOLA_C_THREAD, HBF_EIDOLA_C_WARP, 1);
    if (k && st->engine == HBF_EIDOLA_ENGINE_VIRT) {
        uint32_t i;
        if (hbf_eidola_vindex(st, addr, &i)) {
            const uint32_t m = __activemask();
            if ((uint32_t)(__ffs(m) - 1) == hb_laneid() && st->ctr)
                atomicAdd((unsigned long long*)st->ctr + k * HBF_EIDOLA_NCTR + HBF_EIDOLA_C_VLOADS,
                          (unsigned long long)__popc(m));
            return hbf_eidola_vvalue(st, i, hbf_eidola_rel_now(st, hbf_eidola_gt0(st)));
        }
    }
    return size == 8 ? hb_ld_acq_sys((const void*)addr) : hb_ld_acq_sys32((const void*)addr);
}

extern "C" __device__ __noinline__ unsigned int __hb_eidola_ld_flag_u32(unsigned long long addr) {
    return (unsigned int)hbf_eidola_ext_ld(addr, 4);
}
extern "C" __device__ __noinline__ unsigned long long __hb_eidola_ld_flag_u64(unsigned long long addr) {
    return hbf_eidola_ext_ld(addr, 8);
}
extern "C" __device__ __noinline__ void __hb_eidola_kernel_enter() {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (st && threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
        atomicMin((unsigned long long*)&st->t0, (unsigned long long)hb_now());
}
extern "C" __device__ __noinline__ void __hb_eidola_count_nonflag(unsigned int insts) {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (st) hbf_eidola_count_atomic(st, 0, HBF_EIDOLA_C_THREAD, HBF_EIDOLA_C_WARP, insts);
}
extern "C" __device__ __noinline__ void __hb_eidola_register_write(unsigned long long addr, unsigned long long value,
                                                                   unsigned int size, unsigned long long wakeup) {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (st) hbf_eidola_register_write(st, addr, value, size, wakeup);
}
/* monitor/mwait through the extern API: the armed condition lives in st->arm (per thread slot),
 * since no register survives between the two calls. */
HBF_EIDOLA_DEV uint64_t* hbf_eidola_arm_slot(hbf_eidola_state* st) {
    uint64_t slot = (uint64_t)hbf_eidola_gwarp() * 32u + hb_laneid();
    if (!st->arm || slot >= st->n_arm) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_MON_FULL, (uint32_t)slot);
    return (uint64_t*)st->arm + 6 * slot;
}
extern "C" __device__ __noinline__ unsigned int __hb_eidola_monitor(unsigned long long addr, unsigned int nbytes,
                                                                    unsigned long long wake) {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (!st) return 1u;   /* detached: no monitor hardware; the caller's loop re-reads the flag */
    hbf_eidola_acct a;
    hbf_eidola_acct_init(&a);
    uint64_t t0 = hbf_eidola_gt0(st);
    bool hit = hbf_eidola_monitor(st, &a, t0, (const void*)addr, nbytes, wake);
    uint64_t* s = hbf_eidola_arm_slot(st);
    s[0] = a.mon_addr; s[1] = a.mon_value; s[2] = a.mon_mask;
    s[3] = ((uint64_t)a.mon_slot << 32) | a.mon_widx; s[4] = a.mon_t;
    hbf_eidola_acct_flush(st, &a);
    return hit ? 1u : 0u;
}
extern "C" __device__ __noinline__ void __hb_eidola_mwait(unsigned long long addr) {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (!st) return;
    hbf_eidola_acct a;
    hbf_eidola_acct_init(&a);
    uint64_t* s = hbf_eidola_arm_slot(st);
    a.mon_addr = s[0]; a.mon_value = s[1]; a.mon_mask = s[2];
    a.mon_slot = (uint32_t)(s[3] >> 32); a.mon_widx = (uint32_t)(s[3] & 0xffffffffu); a.mon_t = s[4];
    a.flag_class = hbf_eidola_classify(st, addr);
    hbf_eidola_mwait(st, &a, hbf_eidola_gt0(st), (const void*)addr);
    hbf_eidola_acct_flush(st, &a);
}
#endif /* extern API */
#endif /* HBF_EIDOLA_CUH */
