// Host driver of runtime_cuda/src/hbf_tensormap.cuh for tests/tma/test_tensormap.py: the header's own code,
// compiled by nvcc for the CPU. One case per input line:
//   D <hex of 128 bytes> <ncoords> <c...> <nranges> (<base> <end> <media_offset> <page_shift>)* <max_spans>
// and one JSON object per output line: rc, hash, the decoded map, the runs, oob, and the split; or
//   L <file of hb_tmap_entry> <hex of 128 bytes>   -> {"index": hb_tmap_lookup(...), ...}; or
//   R <0 | hex of a template descriptor> <n> (<field> <ord> <val>)*  -> hb_tmap_replace each, hb_tmap_from_fields
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "hbf_tensormap.cuh"

struct Printer {  // a functor (not a host lambda) so the header's __host__ __device__ template calls no host-only code
    int first = 1;
    __host__ __device__ void operator()(uint64_t a, uint32_t n) {
        printf("%s[%llu, %u]", first ? "" : ", ", (unsigned long long)a, n);
        first = 0;
    }
};

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

int main() {
    static char hex[1024], cmd[8], path[4096];
    while (scanf("%7s", cmd) == 1) {
        alignas(64) unsigned char d[128];
        if (cmd[0] == 'L') {  // L <table file> <hex>: hb_tmap_lookup in a pack_registry() table
            if (scanf("%4095s %300s", path, hex) != 2) return 2;
            for (int i = 0; i < 128; ++i) d[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
            FILE* fp = fopen(path, "rb");
            if (!fp) return 3;
            static hb_tmap_entry table[4096];
            const size_t n = fread(table, sizeof(hb_tmap_entry), 4096, fp);
            fclose(fp);
            const int i = hb_tmap_lookup(table, (uint32_t)n, d, hb_tmap_hash(d));
            printf("{\"index\": %d, \"entry_bytes\": %zu, \"map_bytes\": %zu", i, sizeof(hb_tmap_entry),
                   sizeof(hb_tmap));
            if (i >= 0)
                printf(", \"base\": %llu, \"rank\": %u, \"dtype\": %u, \"extent\": %llu, \"box1\": %u",
                       (unsigned long long)table[i].map.base, table[i].map.rank, table[i].map.dtype,
                       (unsigned long long)table[i].map.extent, table[i].map.box[1]);
            printf("}\n");
            continue;
        }
        if (cmd[0] == 'R') {  // R <start: 0 or hex of a template descriptor> <n> (<field> <ord> <val>)*
            if (scanf("%300s", hex) != 1) return 2;
            hb_tmap_fields f;
            memset(&f, 0, sizeof f);
            int trc = 0;
            if (hex[0] != '0' || hex[1] != 0) {
                for (int i = 0; i < 128; ++i) d[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
                hb_tmap t;
                trc = hb_tmap_decode(d, &t);
                if (!trc) f = hb_tmap_fields_of(t);
            }
            int n = 0;
            if (scanf("%d", &n) != 1 || n < 0 || n > 64) return 2;
            printf("{\"template_rc\": %d, \"op_rc\": [", trc);
            for (int i = 0; i < n; ++i) {
                unsigned field, ord; unsigned long long val;
                if (scanf("%u %u %llu", &field, &ord, &val) != 3) return 2;
                printf("%s%d", i ? ", " : "", hb_tmap_replace(&f, field, ord, val));
            }
            hb_tmap m;
            memset(&m, 0, sizeof m);
            const int rc = hb_tmap_from_fields(&f, &m);
            printf("], \"rc\": %d", rc);
            if (!rc)
                printf(", \"base\": %llu, \"rank\": %u, \"dtype\": %u, \"swizzle\": %u, \"interleave\": %u, "
                       "\"fill\": %u, \"l2promo\": %u, \"extent\": %llu, \"dim\": [%llu, %llu, %llu, %llu, %llu], "
                       "\"stride\": [%llu, %llu, %llu, %llu, %llu], \"box\": [%u, %u, %u, %u, %u], "
                       "\"estride\": [%u, %u, %u, %u, %u]",
                       (unsigned long long)m.base, m.rank, m.dtype, m.swizzle, m.interleave, m.fill, m.l2promo,
                       (unsigned long long)m.extent, (unsigned long long)m.dim[0], (unsigned long long)m.dim[1],
                       (unsigned long long)m.dim[2], (unsigned long long)m.dim[3], (unsigned long long)m.dim[4],
                       (unsigned long long)m.stride[0], (unsigned long long)m.stride[1],
                       (unsigned long long)m.stride[2], (unsigned long long)m.stride[3],
                       (unsigned long long)m.stride[4], m.box[0], m.box[1], m.box[2], m.box[3], m.box[4],
                       m.estride[0], m.estride[1], m.estride[2], m.estride[3], m.estride[4]);
            printf("}\n");
            continue;
        }
        if (scanf("%300s", hex) != 1) return 2;
        for (int i = 0; i < 128; ++i) d[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
        int nc = 0, nr = 0;
        int32_t c[5] = {0, 0, 0, 0, 0};
        if (scanf("%d", &nc) != 1 || nc < 0 || nc > 5) return 2;
        for (int i = 0; i < nc; ++i) if (scanf("%d", &c[i]) != 1) return 2;
        if (scanf("%d", &nr) != 1 || nr < 0 || nr > 64) return 2;
        hbf_dev_range rg[64];
        memset(rg, 0, sizeof rg);
        for (int i = 0; i < nr; ++i) {
            unsigned long long b, e, mo; unsigned ps;
            if (scanf("%llu %llu %llu %u", &b, &e, &mo, &ps) != 4) return 2;
            rg[i].base = b; rg[i].end = e; rg[i].media_offset = mo; rg[i].page_shift = (uint8_t)ps;
            rg[i].range_id = (uint32_t)i + 1u;
        }
        unsigned max_spans = 0;
        if (scanf("%u", &max_spans) != 1 || max_spans > 4096) return 2;
        hb_tmap m;
        memset(&m, 0, sizeof m);
        const int rc = hb_tmap_decode(d, &m);
        printf("{\"rc\": %d, \"hash\": %llu", rc, (unsigned long long)hb_tmap_hash(d));
        if (rc == HB_TMAP_OK) {
            printf(", \"m\": {\"base\": %llu, \"rank\": %u, \"dtype\": %u, \"elem_bytes\": %u, \"interleave\": %u, "
                   "\"swizzle\": %u, \"l2promo\": %u, \"fill\": %u, \"im2col\": %u, \"extent\": %llu, "
                   "\"box_bytes\": %llu",
                   (unsigned long long)m.base, m.rank, m.dtype, m.elem_bytes, m.interleave, m.swizzle, m.l2promo,
                   m.fill, m.im2col, (unsigned long long)m.extent, (unsigned long long)hb_tmap_box_bytes(m));
            const char* names[4] = {"dim", "stride", "box", "estride"};
            for (int a = 0; a < 4; ++a) {
                printf(", \"%s\": [", names[a]);
                for (int i = 0; i < 5; ++i) {
                    unsigned long long v = a == 0 ? m.dim[i] : a == 1 ? m.stride[i] : a == 2 ? m.box[i] : m.estride[i];
                    printf("%s%llu", i ? ", " : "", v);
                }
                printf("]");
            }
            printf("}");
            if (!m.im2col && nc == (int)m.rank) {
                printf(", \"runs\": [");
                Printer pr;
                const uint64_t oob = hb_tmap_box_runs(m, c, pr);
                printf("], \"oob\": %llu, \"unmeasured\": %d", (unsigned long long)oob, (int)hb_tmap_unmeasured(m, c));
                static hb_tmap_span sp[4096];
                hb_tmap_split_t s;
                const int src = hb_tmap_split(m, c, rg, (uint32_t)nr, sp, max_spans, &s);
                printf(", \"split\": {\"rc\": %d, \"box_bytes\": %llu, \"hbm_bytes\": %llu, \"hbf_bytes\": %llu, "
                       "\"oob_bytes\": %llu, \"nruns\": %u, \"spans\": [",
                       src, (unsigned long long)s.box_bytes, (unsigned long long)s.hbm_bytes,
                       (unsigned long long)s.hbf_bytes, (unsigned long long)s.oob_bytes, s.nruns);
                for (uint32_t i = 0; i < s.nspans; ++i)
                    printf("%s[%u, %llu, %u, %llu]", i ? ", " : "", sp[i].range_idx,
                           (unsigned long long)sp[i].first_page, sp[i].npages, (unsigned long long)sp[i].bytes);
                printf("]}");
            }
        }
        printf("}\n");
    }
    return 0;
}
