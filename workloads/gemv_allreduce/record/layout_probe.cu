// Host-only probe: prints sizeof/offsetof of GarParams as JSON (compiled by nvcc, run on the CPU).
#include <cstddef>
#include <cstdio>
#include "gar_record.h"

#define F(name) printf("\"%s\": %zu,", #name, offsetof(GarParams, name))
int main() {
    printf("{");
    F(W); F(x); F(y); F(inbox); F(flags); F(wg_log); F(flag_release); F(flag_seen); F(flag_polls);
    F(counters); F(error); F(M); F(K); F(rank); F(n); F(rows_per_block); F(call); F(seq_base);
    F(timeout_ns); F(slow_ppm); F(replay);
    printf("\"GAR_MAX_RANKS\": %d, \"WG_FIELDS\": %d, \"sizeof\": %zu}\n", GAR_MAX_RANKS, (int)WG_FIELDS,
           sizeof(GarParams));
    return 0;
}
