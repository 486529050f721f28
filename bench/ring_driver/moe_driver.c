/* moe_driver.c — the reference-path pattern of workloads/qwen3moe's moe_gate_up_hbf, natively, against a real
 * hbfd (issue 13; docs/RESULTS.md "Issue 13: the reference source's Qwen3 hang (CPU)").
 *
 * The pattern of the scalar-load build of moe_gate_up_hbf (compiled without the JIT's 16-divisibility marks; the
 * card's build loads with cp.async and resolves its tickets at once, two per warp-instruction -- this is the harder
 * case for the ring), 2 tiles per iteration: every warp issues PER requests (one ticket per warp-instruction: one 64 B row chunk of a 4 KiB-strided weight
 * row), meets the CTA's other warps at bar.sync, then waits for its PER tickets in order, meets again; ITERS x 2
 * tiles. hbfd's ring is 4,096 slots, the warps hold CTAS_RESIDENT x WARPS x PER tickets unconsumed: the issuers
 * steal (hbfd/hostring.py, runtime_cuda/src/hbf_helpers.cu hb_ref_steal: the claim word, the overflow table,
 * consumed written by the stealer). The GPU's warps run concurrently; here one thread steps every warp's state
 * machine round-robin as fast as it can (it yields the core when no warp moved), so hbfd, not the driver, sets
 * the pace, as on the card.
 *
 * One JSON line every second (progress) and one at the end. Exit 0: every CTA ended; 3: no warp moved for STALL_S
 * (a deadlock: the state of the ring is printed); 4: LIMIT_S passed while warps still moved (slow, not stuck).
 *
 * ARRIVAL=realtime: arrival times from CLOCK_REALTIME (the GPU's %globaltimer range) instead of CLOCK_MONOTONIC.
 *
 * usage: HBF_RING_KEY=K [ARRIVAL=realtime] moe_driver CTL_PATH CTAS CTAS_RESIDENT WARPS PER ITERS STALL_S LIMIT_S
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hbf_ctl.h"
#include "ring_common.h"

/* the arrival clock: CLOCK_MONOTONIC, or (ARRIVAL=realtime) CLOCK_REALTIME -- ns since 1970 (~1.8e18), the range
 * of the GPU's %globaltimer on the H100/H200 */
static int arrival_realtime;
static inline uint64_t arrival_ns(void) {
    if (!arrival_realtime) return now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


#define OVF_LOG2 20
#define OVF (1u << OVF_LOG2)
enum { ISSUE, BAR1, WAIT, BAR2, DONE };
typedef struct { int phase, it, tile, j, cta_slot; uint64_t t; uint64_t tickets[64]; } warp_t;
typedef struct { int cta, arrived, gen; } cta_t;

static hbf_ctl *c;
static uint64_t claim[HBF_RING_SLOTS];
static uint64_t ovf_tick1[OVF], ovf_taken[OVF];
static uint64_t head, steals, ovf_takes, slot_spins, poll_spins, done_req, bad;

static uint64_t ld_acq(const volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void st_rel(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* the slot-reuse rule for ticket t, stealing the occupant's posted completion (hb_ref_slot_wait / hb_ref_steal) */
static int slot_ready(uint64_t t) {
    const uint64_t N = HBF_RING_SLOTS;
    if (t < N) return 1;
    const uint64_t s = t % N, need = t - N + 1;
    hbf_completion *cp = &c->completions[s];
    if (ld_acq(&cp->consumed) >= need) return 1;
    if (ld_acq(&cp->seq) != need) return 0;                 /* not posted: only hbfd's service frees it */
    if (claim[s] >= 2 * need) return 0;                     /* its owner claimed it: it writes consumed */
    claim[s] = 2 * need + 1;
    const uint64_t i = (need - 1) & (OVF - 1);
    if (ovf_tick1[i] && ovf_taken[i] != ovf_tick1[i]) { fprintf(stderr, "RING_OVERFLOW at %llu\n", (unsigned long long)need); exit(5); }
    ovf_tick1[i] = need;
    ovf_taken[i] = 0;
    st_rel(&cp->consumed, need);
    steals++;
    return 1;
}

/* the owner's take (hb_ticket_deadline): 1 done, 0 not posted yet */
static int take(uint64_t t) {
    const uint64_t N = HBF_RING_SLOTS, s = t % N, want = t + 1;
    hbf_completion *cp = &c->completions[s];
    const uint64_t sq = ld_acq(&cp->seq);
    if (sq == want) {
        const uint64_t old = claim[s];
        if (old < 2 * want) {
            claim[s] = 2 * want;
            if (cp->status != HBF_ST_READY) bad++;
            st_rel(&cp->consumed, want);
            return 1;
        }
    } else if (sq < want) {
        return 0;
    }
    const uint64_t i = t & (OVF - 1);                       /* stolen: the overflow entry */
    if (ovf_tick1[i] != want) { fprintf(stderr, "ticket %llu in no overflow entry\n", (unsigned long long)t); exit(6); }
    ovf_taken[i] = want;
    ovf_takes++;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: HBF_RING_KEY=K %s CTL_PATH CTAS CTAS_RESIDENT WARPS PER ITERS STALL_S LIMIT_S\n", argv[0]);
        return 2;
    }
    const char *key_env = getenv("HBF_RING_KEY");
    if (!key_env || !*key_env) { fprintf(stderr, "HBF_RING_KEY is not set\n"); return 2; }
    const uint64_t key = strtoull(key_env, 0, 10);
    arrival_realtime = getenv("ARRIVAL") && strcmp(getenv("ARRIVAL"), "realtime") == 0;
    const int ctas = atoi(argv[2]), resident = atoi(argv[3]), warps = atoi(argv[4]), per = atoi(argv[5]);
    const int iters = atoi(argv[6]);
    const double stall_s = atof(argv[7]), limit_s = atof(argv[8]);
    if (ctas < 1 || resident < 1 || warps < 1 || per < 1 || per > 64 || iters < 1) { fprintf(stderr, "bad sizes\n"); return 2; }
    int fd = open(argv[1], O_RDWR | O_CLOEXEC);
    if (fd < 0) { fprintf(stderr, "open %s: %s\n", argv[1], strerror(errno)); return 1; }
    c = mmap(0, sizeof(hbf_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED || c->header.magic != HBF_CTL_MAGIC) { fprintf(stderr, "not an hbf control region\n"); return 1; }
    head = c->header.ring_head;
    const int live_ctas = resident < ctas ? resident : ctas;
    warp_t *W = calloc((size_t)live_ctas * warps, sizeof(warp_t));
    cta_t *C = calloc((size_t)live_ctas, sizeof(cta_t));
    int next_cta = 0, ended = 0;
    for (int k = 0; k < live_ctas; ++k) { C[k].cta = next_cta++; }
    const uint64_t H = 2048, F = 768, total = (uint64_t)ctas * warps * iters * 2 * per;
    const uint64_t t0 = now_ns();
    uint64_t last_move = t0, last_print = t0;
    int rc = 0;
    while (ended < ctas) {
        int moved = 0;
        for (int k = 0; k < live_ctas; ++k) {
            cta_t *ct = &C[k];
            if (ct->cta < 0) continue;
            int cta_done = 1;
            for (int w = 0; w < warps; ++w) {
                warp_t *x = &W[k * warps + w];
                if (x->phase == ISSUE) {
                    if (x->t == 0) x->t = head++ + 1;          /* reserved (t + 1: 0 = none) */
                    const uint64_t t = x->t - 1;
                    if (!slot_ready(t)) { slot_spins++; cta_done = 0; continue; }
                    const uint64_t e = (uint64_t)(ct->cta % 8) * 16 + 3, fb = (uint64_t)ct->cta / 8 % 24;
                    const uint64_t i = (uint64_t)x->j / 4, cc = (uint64_t)x->j % 4;
                    const uint64_t row = fb * 32 + (uint64_t)w + 4 * i + (uint64_t)x->tile * F;
                    const uint64_t media = (e * 2 * F + row) * H * 2 + ((uint64_t)x->it * 128 + 32 * cc) * 2;
                    hbf_request *r = &c->ring[t % HBF_RING_SLOTS];
                    r->arrival_ns = arrival_ns();
                    r->address = 0x7f0000000000ull + media;
                    r->media_address = media;
                    r->bytes = 64;
                    r->op = HBF_OP_LOAD;
                    r->range_id = 1;
                    r->kernel_slot = 0;
                    r->site = (uint32_t)x->j;
                    r->flags = HBF_OP_LOAD;
                    r->thermal_q_ppm = (uint64_t)req_tag(key, r, t + 1) << 32;
                    st_rel(&r->seq, t + 1);
                    x->tickets[x->j++] = t;
                    x->t = 0;
                    moved = 1;
                    if (x->j == per) { x->j = 0; x->phase = BAR1; ct->arrived++; }
                    cta_done = 0;
                } else if (x->phase == WAIT) {
                    if (!take(x->tickets[x->j])) { poll_spins++; cta_done = 0; continue; }
                    done_req++;
                    moved = 1;
                    if (++x->j == per) { x->j = 0; x->phase = BAR2; ct->arrived++; }
                    cta_done = 0;
                } else if (x->phase != DONE) {
                    cta_done = 0;
                }
            }
            if (ct->arrived == warps) {                         /* the CTA's bar.sync completes */
                ct->arrived = 0;
                moved = 1;
                for (int w = 0; w < warps; ++w) {
                    warp_t *x = &W[k * warps + w];
                    if (x->phase == BAR1) x->phase = WAIT;
                    else if (x->phase == BAR2) {
                        if (++x->tile == 2) { x->tile = 0; x->it++; }
                        x->phase = x->it == iters ? DONE : ISSUE;
                    }
                }
                cta_done = 0;
                int all = 1;
                for (int w = 0; w < warps; ++w) all &= W[k * warps + w].phase == DONE;
                if (all) cta_done = 1;
            }
            if (cta_done) {                                     /* the CTA ended: the next one takes its SM */
                ended++;
                moved = 1;
                memset(&W[k * warps], 0, sizeof(warp_t) * (size_t)warps);
                ct->arrived = 0;
                ct->cta = next_cta < ctas ? next_cta++ : -1;
            }
        }
        const uint64_t t = now_ns();
        if (moved) last_move = t;
        if (t - last_print > 1000000000ull || ended == ctas) {
            last_print = t;
            printf("{\"t_s\": %.3f, \"issued\": %llu, \"done\": %llu, \"total\": %llu, \"ctas_ended\": %d, \"steals\": %llu, "
                   "\"hbfd_served\": %llu, \"slot_spins\": %llu, \"poll_spins\": %llu}\n", (double)(t - t0) / 1e9,
                   (unsigned long long)(head - c->header.ring_head), (unsigned long long)done_req,
                   (unsigned long long)total, ended, (unsigned long long)steals,
                   (unsigned long long)c->counters.daemon[HBF_OP_LOAD].requests,
                   (unsigned long long)slot_spins, (unsigned long long)poll_spins);
            fflush(stdout);
        }
        if (c->header.failure) { fprintf(stderr, "hbfd failure word %#llx\n", (unsigned long long)c->header.failure); return 1; }
        if ((double)(t - last_move) / 1e9 > stall_s) { rc = 3; break; }
        if ((double)(t - t0) / 1e9 > limit_s) { rc = 4; break; }
        if (!moved) sched_yield();
    }
    const double el = (double)(now_ns() - t0) / 1e9;
    printf("{\"result\": \"%s\", \"elapsed_s\": %.3f, \"requests\": %llu, \"req_per_s\": %.0f, \"steals\": %llu, "
           "\"overflow_takes\": %llu, \"not_ready\": %llu, \"ctas\": %d, \"resident\": %d, \"warps\": %d, \"per\": %d, \"iters\": %d}\n",
           rc == 0 ? "ended" : rc == 3 ? "stalled" : "limit", el, (unsigned long long)done_req, (double)done_req / el,
           (unsigned long long)steals, (unsigned long long)ovf_takes, (unsigned long long)bad, ctas, live_ctas, warps, per, iters);
    if (rc == 3) {   /* the ring as it stands: published but not posted, posted but not consumed */
        uint64_t pub = 0, unc = 0;
        for (uint64_t s = 0; s < HBF_RING_SLOTS; ++s) {
            if (c->ring[s].seq > c->completions[s].seq) pub++;
            if (c->completions[s].seq > c->completions[s].consumed) unc++;
        }
        printf("{\"stall\": {\"published_not_posted\": %llu, \"posted_not_consumed\": %llu, \"head\": %llu}}\n",
               (unsigned long long)pub, (unsigned long long)unc, (unsigned long long)head);
    }
    /* ring_head for hbfd's lower bound, as the session writes it at a sync point */
    c->header.ring_head = head;
    return rc;
}
