// The TMA completion table's code (runtime_cuda/src/hbf_tma_table.cuh) on the CPU: a command interpreter that
// tests/runtime/test_tma_table.py drives. Shared memory is the header's host twin: CTA r of a cluster at
// hb_tw_host_mem + r * HB_TW_HOST_CTA_BYTES, its shared::cta addresses (r << 24) + offset (the sm_90 layout).
// Commands (stdin, one per line), each answered by one line:
//   put CTA MBAR PAR DL   -> "phases consumed stale" of that put (CTA rank 0's memory, table at 1024 * CTA,
//                            barrier address MBAR: independent tables of one address space)
//   take CTA MBAR PAR     -> the deadline the waiter waits for (0: none)
//   exit CTA              -> "consumed leaked"
//   word CTA MBAR PAR     -> the raw word (hex)
//   cput RANK MASK OFF PAR DL -> cluster rank RANK (table at offset CTABLE, barrier at offset OFF, both as RANK's
//                            own shared::cta addresses) records a copy multicast to the ranks of MASK (0: not
//                            multicast, its own table): "phases consumed stale", or "full"
//   ctake RANK OFF PAR    -> rank RANK's waiter of its barrier at offset OFF: the deadline
//   cexit RANK            -> "consumed leaked" of rank RANK's table
#include <cstdio>
#include <cstring>
#include <cstdint>
#include "../../runtime_cuda/src/hbf_tma_table.cuh"

uint8_t* hb_tw_host_mem;
static const uint32_t CTABLE = 0x2000u;          // the table's offset in every CTA of the cluster
static uint32_t own(uint32_t rank, uint32_t off) { return (rank << 24) | off; }

int main() {
    static uint8_t mem[4 * HB_TW_HOST_CTA_BYTES];
    memset(mem, 0, sizeof mem);
    hb_tw_host_mem = mem;
    char cmd[16];
    unsigned cta, mbar, par, mask;
    unsigned long long dl;
    while (scanf("%15s", cmd) == 1) {
        if (!strcmp(cmd, "put") && scanf("%u %u %u %llu", &cta, &mbar, &par, &dl) == 4) {
            hb_tw_counts c = {0u, 0u, 0u};
            if (!hb_tw_record_into(1024u * cta, mbar, par, dl, false, 0u, c)) { printf("full\n"); fflush(stdout); continue; }
            printf("%u %u %u\n", c.phases, c.consumed, c.stale);
        } else if (!strcmp(cmd, "take") && scanf("%u %u %u", &cta, &mbar, &par) == 3) {
            printf("%llu\n", (unsigned long long)hb_tw_take(1024u * cta, mbar, par));
        } else if (!strcmp(cmd, "exit") && scanf("%u", &cta) == 1) {
            uint32_t c, l;
            hb_tw_exit_scan(1024u * cta, &c, &l);
            printf("%u %u\n", c, l);
        } else if (!strcmp(cmd, "word") && scanf("%u %u %u", &cta, &mbar, &par) == 3) {
            const uint32_t e = hb_tw_find(1024u * cta, hb_tw_key(1024u * cta, mbar), false);
            printf("%llx\n", e ? (unsigned long long)hb_smc_ld64(e + 8u + 8u * (par & 1u)) : 0ull);
        } else if (!strcmp(cmd, "cput") && scanf("%u %u %u %u %llu", &cta, &mask, &mbar, &par, &dl) == 5) {
            hb_tw_counts c = {0u, 0u, 0u};
            if (!hb_tw_record_into(own(cta, CTABLE), own(cta, mbar), par, dl, mask != 0u, mask, c)) {
                printf("full\n"); fflush(stdout); continue;
            }
            printf("%u %u %u\n", c.phases, c.consumed, c.stale);
        } else if (!strcmp(cmd, "ctake") && scanf("%u %u %u", &cta, &mbar, &par) == 3) {
            printf("%llu\n", (unsigned long long)hb_tw_take(own(cta, CTABLE), own(cta, mbar), par));
        } else if (!strcmp(cmd, "cexit") && scanf("%u", &cta) == 1) {
            uint32_t c, l;
            hb_tw_exit_scan(own(cta, CTABLE), &c, &l);
            printf("%u %u\n", c, l);
        } else {
            printf("bad\n");
            return 1;
        }
        fflush(stdout);
    }
    return 0;
}
