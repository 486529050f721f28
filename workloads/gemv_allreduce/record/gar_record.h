// gar_record.h — parameter block and log layout of the recording kernel (gemv_ar_record.cu).
// Mirrored by GarParamsC in record.py; tests/eidola_record checks the mirror with an offsetof probe.
#ifndef GAR_RECORD_H
#define GAR_RECORD_H
#include <stdint.h>

#ifndef GAR_MAX_RANKS
#define GAR_MAX_RANKS 8
#endif
#define GAR_MAX_ROWS_PER_BLOCK 256
#define GAR_THREADS 256
#define GAR_WARPS (GAR_THREADS / 32)

// Per-call log record of one block (u64 %globaltimer stamps of this rank's clock).
enum { WG_START = 0, WG_DATA_RELEASE = 1, WG_RELEASE = 2, WG_WAIT_START = 3, WG_WAIT_END = 4,
       WG_END = 5, WG_FIELDS = 6 };

struct GarParams {
    const float* W;            // M x K row-major (this rank's shard)
    const float* x;            // K
    float* y;                  // M (output)
    float* inbox[GAR_MAX_RANKS];          // inbox base of every rank (peer pointers); [2][nb][n][R]
    unsigned int* flags[GAR_MAX_RANKS];   // flag region of every rank (peer pointers); [nb][n]
    unsigned long long* wg_log;          // [calls][nb][WG_FIELDS]
    unsigned long long* flag_release;    // [calls][nb][n]  stamp of st.release to rank q
    unsigned long long* flag_seen;       // [calls][nb][n]  first-seen of flag from rank q
    unsigned int* flag_polls;            // [calls][nb][n]
    unsigned long long* counters;        // [calls][2]: flag reads, non-flag reads (warp-instr)
    unsigned int* error;                 // nonzero: 1 = timeout waiting for a flag
    int M, K, rank, n, rows_per_block;
    int call;                  // launch index (log slot); seq = seq_base + call + 1
    unsigned int seq_base;
    unsigned long long timeout_ns;
    unsigned int slow_ppm;     // extra busy-work, parts per million of the measured compute time
    int replay;                // 1: peers absent; inbox/flags pointers of peers are local sinks
    unsigned long long st;     // hbf_eidola_state* (GAR_EIDOLA builds): kernel start t0, flag loads
                               // through hbf_eidola_ld_flag_u32 (real memory, or engine b)
};

#endif
