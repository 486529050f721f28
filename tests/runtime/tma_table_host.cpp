// The TMA completion table's code (runtime_cuda/src/hbf_tma_table.cuh) on the CPU: a command interpreter that
// tests/runtime/test_tma_table.py drives. One table of HBF_TMA_TABLE_BYTES at offset 0 (several CTAs' tables:
// at 1024 * cta). Commands (stdin, one per line), each answered by one line:
//   put CTA MBAR PAR DL   -> "phases consumed stale" of that put
//   take CTA MBAR PAR     -> the deadline the waiter waits for (0: none)
//   exit CTA              -> "consumed leaked"
//   word CTA MBAR PAR     -> the raw word (hex)
#include <cstdio>
#include <cstring>
#include <cstdint>
#include "../../runtime_cuda/src/hbf_tma_table.cuh"

uint8_t* hb_tw_host_mem;

int main() {
    static uint8_t mem[1024 * 16];
    memset(mem, 0, sizeof mem);
    hb_tw_host_mem = mem;
    char cmd[16];
    unsigned cta, mbar, par;
    unsigned long long dl;
    while (scanf("%15s", cmd) == 1) {
        if (!strcmp(cmd, "put") && scanf("%u %u %u %llu", &cta, &mbar, &par, &dl) == 4) {
            hb_tw_counts c = {0u, 0u, 0u};
            const uint32_t e = hb_tw_find(1024u * cta, mbar + 1u, true);
            if (e == 0u) { printf("full\n"); fflush(stdout); continue; }
            hb_tw_put(e, par, dl, c);
            printf("%u %u %u\n", c.phases, c.consumed, c.stale);
        } else if (!strcmp(cmd, "take") && scanf("%u %u %u", &cta, &mbar, &par) == 3) {
            printf("%llu\n", (unsigned long long)hb_tw_take(1024u * cta, mbar, par));
        } else if (!strcmp(cmd, "exit") && scanf("%u", &cta) == 1) {
            uint32_t c, l;
            hb_tw_exit_scan(1024u * cta, &c, &l);
            printf("%u %u\n", c, l);
        } else if (!strcmp(cmd, "word") && scanf("%u %u %u", &cta, &mbar, &par) == 3) {
            const uint32_t e = hb_tw_find(1024u * cta, mbar + 1u, false);
            printf("%llx\n", e ? (unsigned long long)hb_smc_ld64(e + 8u + 8u * (par & 1u)) : 0ull);
        } else {
            printf("bad\n");
            return 1;
        }
        fflush(stdout);
    }
    return 0;
}
