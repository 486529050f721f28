/* ring_driver.c — a native stand-in for the GPU side of hbfd's request ring (bench/ring_throughput.py).
 *
 * Attaches like the GPU would (hbf_ctl.h): open + mmap the control-region path returned by Attach,
 * reserve tickets (it is the only device, so ring_head is a plain counter it owns), wait for the
 * slot-reuse rule (consumed == t - N + 1), write the payload, then store-release seq = t + 1; poll
 * completions with load-acquire, read them, write consumed = t + 1. Keeps `outstanding` tickets in
 * flight for `seconds`, then drains. Prints one JSON object.
 *
 * POLL = any (default): like independent GPU warps, every outstanding ticket is polled and a
 * completed one is replaced by a new ticket at once (the next ticket is reserved only when its
 * slot is free: the device would reserve and then wait, the effect on hbfd is the same);
 * POLL = oldest: one consumer that waits for the oldest ticket first (head-of-line blocking).
 *
 * RATE (optional, requests/s; 0 or absent = as fast as the ring allows): a new ticket is reserved only
 * while the tickets issued so far are below RATE x elapsed (an open-loop offered load for soaks,
 * bench/daemon_soak.py); with a RATE the idle poll sleeps 20 us instead of yielding, so the driver
 * does not take a core from hbfd.
 *
 * Every request carries its tag under the run's ring key (AttachReply.ring_key, given in $HBF_RING_KEY,
 * decimal): the hash of runtime_cuda/src/hbf_helpers.cu hb_req_tag / hbfcommon/ctl.py request_tag; hbfd
 * answers no record without it.
 *
 * usage: HBF_RING_KEY=K ring_driver CTL_PATH OUTSTANDING SECONDS BYTES STORE_PPM MEDIA_SPAN_BYTES SEED [POLL [RATE]]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#include <stddef.h>

#include "hbf_ctl.h"
#include "ring_common.h"



static uint64_t rng_state;
static inline uint64_t rnd(void) {   /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double p) {
    if (!n) return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv) {
    if (argc < 8 || argc > 10) {
        fprintf(stderr, "usage: %s CTL_PATH OUTSTANDING SECONDS BYTES STORE_PPM MEDIA_SPAN SEED [any|oldest [RATE]]\n", argv[0]);
        return 2;
    }
    const char *key_env = getenv("HBF_RING_KEY");
    if (!key_env || !*key_env) {
        fprintf(stderr, "ring_driver: HBF_RING_KEY (the Attach reply's ring_key) is not set\n");
        return 2;
    }
    char *key_end = 0;
    errno = 0;
    const uint64_t ring_key = strtoull(key_env, &key_end, 10);
    if (errno != 0 || *key_end != '\0' || key_env[0] == '-') {
        fprintf(stderr, "ring_driver: HBF_RING_KEY=%s is not a decimal 64-bit key (the Attach reply's ring_key)\n", key_env);
        return 2;
    }
    const char *path = argv[1];
    uint64_t outstanding = strtoull(argv[2], 0, 10);
    double seconds = atof(argv[3]);
    uint32_t nbytes = (uint32_t)strtoul(argv[4], 0, 10);
    uint64_t store_ppm = strtoull(argv[5], 0, 10);
    uint64_t span = strtoull(argv[6], 0, 10);
    rng_state = strtoull(argv[7], 0, 10);
    const int any_order = argc < 9 || strcmp(argv[8], "oldest") != 0;
    const double rate = argc > 9 ? atof(argv[9]) : 0.0;
    const uint64_t N = HBF_RING_SLOTS;
    if (rate < 0) { fprintf(stderr, "RATE must be >= 0\n"); return 2; }
    if (outstanding < 1 || outstanding > N || span < 4096) {
        fprintf(stderr, "outstanding must be 1..%llu and span >= 4096\n", (unsigned long long)N);
        return 2;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) { fprintf(stderr, "open %s: %s\n", path, strerror(errno)); return 1; }
    hbf_ctl *c = mmap(0, sizeof(hbf_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED) { perror("mmap"); return 1; }
    if (c->header.magic != HBF_CTL_MAGIC || c->header.total_bytes != sizeof(hbf_ctl)) {
        fprintf(stderr, "not an hbf control region (magic/size)\n");
        return 1;
    }
    volatile hbf_header *h = &c->header;
    uint64_t head = h->ring_head;                   /* the device owns ring_head */
    size_t cap = 1 << 20, ns = 0;
    uint64_t *svc = malloc(cap * sizeof(uint64_t)), *rtt = malloc(cap * sizeof(uint64_t));
    uint64_t *issued_at = calloc(N, sizeof(uint64_t));
    uint64_t first = head, done = 0, errors = 0, spins = 0;
    uint64_t *outq = malloc(outstanding * sizeof(uint64_t));   /* outstanding tickets */
    uint64_t k = 0, oldest_pos = 0;
    const uint64_t pages = span / 4096;
    uint64_t t0 = now_ns(), stop = t0 + (uint64_t)(seconds * 1e9), t_end = 0;
    int issuing = 1;
    for (;;) {
        uint64_t t = now_ns();
        if (issuing && t >= stop) { issuing = 0; t_end = t; }
        const uint64_t allowed = rate > 0 ? (uint64_t)(rate * (double)(t - t0) / 1e9) + 1 : UINT64_MAX;
        while (issuing && k < outstanding && head - first < allowed) {   /* issue */
            uint64_t tk = head;
            uint64_t s = tk % N;
            if (tk >= N && __atomic_load_n(&c->completions[s].consumed, __ATOMIC_ACQUIRE) != tk - N + 1)
                break;                                            /* slot reuse rule: not free yet */
            head++;
            h->ring_head = head;
            hbf_request *r = &c->ring[s];
            uint64_t a = now_ns();
            uint64_t page = rnd() % pages;
            r->arrival_ns = a;
            r->address = 0x7f0000000000ull + page * 4096;
            r->media_address = page * 4096;
            r->bytes = nbytes;
            r->op = (rnd() % 1000000) < store_ppm ? HBF_OP_STORE : HBF_OP_LOAD;
            r->range_id = 1;
            r->kernel_slot = 0;
            r->site = 0;
            r->flags = 0;
            r->thermal_q_ppm = (uint64_t)req_tag(ring_key, r, tk + 1) << 32;   /* q 0 (unthrottled) | tag */
            issued_at[s] = a;
            __atomic_store_n(&r->seq, tk + 1, __ATOMIC_RELEASE);  /* payload, then seq */
            outq[k++] = tk;
        }
        if (k == 0) {
            if (!issuing) break;
            if (rate > 0) { struct timespec z = {0, 20000}; nanosleep(&z, 0); }
            continue;
        }
        int got_any = 0;
        uint64_t i = any_order ? 0 : oldest_pos;
        while (i < k) {
            uint64_t tk = outq[i], s = tk % N;
            hbf_completion *cp = &c->completions[s];
            if (__atomic_load_n(&cp->seq, __ATOMIC_ACQUIRE) != tk + 1) {
                if (!any_order) break;
                i++;
                continue;
            }
            uint64_t got = now_ns();
            if (cp->status != HBF_ST_READY) errors++;
            if (ns == cap) {
                cap *= 2;
                svc = realloc(svc, cap * sizeof(uint64_t));
                rtt = realloc(rtt, cap * sizeof(uint64_t));
            }
            svc[ns] = cp->service_ns;
            rtt[ns] = got - issued_at[s];
            ns++;
            __atomic_store_n(&cp->consumed, tk + 1, __ATOMIC_RELEASE);
            done++;
            got_any = 1;
            if (any_order) {
                outq[i] = outq[--k];                              /* replace; re-check slot i */
            } else {
                i++;
                oldest_pos = i;
            }
        }
        if (!any_order && oldest_pos == k) { k = 0; oldest_pos = 0; }
        else if (!any_order && oldest_pos > 0 && got_any) {   /* compact the FIFO */
            memmove(outq, outq + oldest_pos, (k - oldest_pos) * sizeof(uint64_t));
            k -= oldest_pos;
            oldest_pos = 0;
        }
        if (!got_any) {
            if (h->failure) { fprintf(stderr, "hbfd failure word %#llx\n", (unsigned long long)h->failure); return 1; }
            spins++;
            if (rate > 0) { struct timespec z = {0, 20000}; nanosleep(&z, 0); }   /* paced: sleep */
            else sched_yield();       /* a GPU costs the host no CPU: leave the core to hbfd */
        }
    }
    uint64_t t1 = now_ns();
    qsort(svc, ns, sizeof(uint64_t), cmp_u64);
    qsort(rtt, ns, sizeof(uint64_t), cmp_u64);
    double el = (double)(t1 - t0) / 1e9;
    printf("{\"requests\": %llu, \"errors\": %llu, \"elapsed_s\": %.6f, \"issue_window_s\": %.6f, "
           "\"req_per_s\": %.1f, \"rate\": %.1f, \"outstanding\": %llu, \"poll\": \"%s\", \"bytes\": %u, \"store_ppm\": %llu, "
           "\"first_ticket\": %llu, \"service_ns\": {\"p50\": %llu, \"p90\": %llu, \"p99\": %llu, \"max\": %llu}, "
           "\"round_trip_ns\": {\"p50\": %llu, \"p90\": %llu, \"p99\": %llu, \"max\": %llu}, \"poll_misses\": %llu}\n",
           (unsigned long long)done, (unsigned long long)errors, el, (double)(t_end - t0) / 1e9,
           (double)done / el, rate, (unsigned long long)outstanding, any_order ? "any" : "oldest", nbytes, (unsigned long long)store_ppm,
           (unsigned long long)first,
           (unsigned long long)pct(svc, ns, .5), (unsigned long long)pct(svc, ns, .9),
           (unsigned long long)pct(svc, ns, .99), (unsigned long long)(ns ? svc[ns - 1] : 0),
           (unsigned long long)pct(rtt, ns, .5), (unsigned long long)pct(rtt, ns, .9),
           (unsigned long long)pct(rtt, ns, .99), (unsigned long long)(ns ? rtt[ns - 1] : 0),
           (unsigned long long)spins);
    return 0;
}
