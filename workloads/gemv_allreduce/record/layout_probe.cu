// Host-only probe: prints sizeof/offsetof of GarParams as JSON (compiled by nvcc, run on the CPU).
#include <cstddef>
#include <cstdio>
#include "gar_record.h"
#include "hbf_eidola.cuh"

#define F(name) printf("\"%s\": %zu,", #name, offsetof(GarParams, name))
int main() {
    printf("{");
    F(W); F(x); F(y); F(inbox); F(flags); F(wg_log); F(flag_release); F(flag_seen); F(flag_polls);
    F(counters); F(error); F(M); F(K); F(rank); F(n); F(rows_per_block); F(call); F(seq_base);
    F(timeout_ns); F(slow_ppm); F(replay); F(st);
#define S(name) printf("\"st.%s\": %zu,", #name, offsetof(hbf_eidola_state, name))
    S(t0); S(failure); S(engine); S(mon_mode); S(n_flag_ranges); S(timeout_ns); S(flag_ranges); S(ctr);
    printf("\"st.sizeof\": %zu, \"st.flag_range_sizeof\": %zu, \"st.layout_version\": %u, \"st.nctr\": %u, \"st.max_classes\": %u,",
           sizeof(hbf_eidola_state), sizeof(hbf_eidola_flag_range), HBF_EIDOLA_LAYOUT_VERSION,
           HBF_EIDOLA_NCTR, HBF_EIDOLA_MAX_CLASSES);
    printf("\"GAR_MAX_RANKS\": %d, \"WG_FIELDS\": %d, \"sizeof\": %zu}\n", GAR_MAX_RANKS, (int)WG_FIELDS,
           sizeof(GarParams));
    return 0;
}
