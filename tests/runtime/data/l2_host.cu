// The device L2 model's one-line access (runtime_cuda/src/hbf_l2.cuh, hb_l2_access) compiled for the host:
// tests/runtime/test_l2_model.py feeds it the stream it feeds the CPU twin (hbfd/media/l2twin.py) and compares.
// stdin: "sets ways policy", then per access "line need now_ns race" (race: a word written to the CAS's target
// between the read and the CAS, 0: none). stdout: per access "miss ev", then "words", then every word in hex.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
static uint64_t g_race = 0;
#define HB_L2_HOST 1
#define HB_L2_RACE(p) do { if (g_race) *(p) = g_race; } while (0)
#include "hbf_l2.cuh"

int main(int argc, char** argv) {
    unsigned sets, ways, policy;
    if (argc > 1 && argv[1][0] == 'g') {
        /* "group": stdin "sets ways policy lshift gsh pshift", then per request "page_media granules now_ns"
         * (granules: the page's 64-bit mask); hb_l2_line for L = 0 .. lines-1 (what the group's lanes do, in the
         * twin's order); stdout per request "missed lines merged lost", then "words" and every word in hex */
        unsigned lshift, gsh, pshift;
        if (scanf("%u %u %u %u %u %u", &sets, &ways, &policy, &lshift, &gsh, &pshift) != 6) return 2;
        uint64_t* words = (uint64_t*)calloc((size_t)sets * ways, 8);
        unsigned long long page, gran, now;
        while (scanf("%llu %llu %llu", &page, &gran, &now) == 3) {
            uint32_t cnt = 0;
            const uint32_t now_u = (uint32_t)(now >> HBF_L2_STAMP_SHIFT) & HBF_L2_STAMP_MASK;
            for (uint32_t L = 0; L < (1u << (pshift - lshift)); ++L)
                cnt += hb_l2_line(words, sets, ways, hb_l2_magic(sets), policy, page >> lshift, lshift - gsh, gran, L,
                                  now_u);
            printf("%u %u %u %u\n", cnt & 0xFFu, (cnt >> 8) & 0xFFu, (cnt >> 16) & 0xFFu, cnt >> 24);
        }
        printf("words\n");
        for (size_t i = 0; i < (size_t)sets * ways; ++i) printf("%llx\n", (unsigned long long)words[i]);
        return 0;
    }
    if (argc > 1) {   /* "locate": stdin "sets", then lines; stdout "set tag1" per line (hb_l2_locate) */
        unsigned long long line;
        if (scanf("%u", &sets) != 1) return 2;
        while (scanf("%llu", &line) == 1) {
            uint32_t tag1;
            const uint32_t set = hb_l2_locate(line, sets, hb_l2_magic(sets), &tag1);
            printf("%u %u\n", set, tag1);
        }
        return 0;
    }
    if (scanf("%u %u %u", &sets, &ways, &policy) != 3) return 2;
    uint64_t* words = (uint64_t*)calloc((size_t)sets * ways, 8);
    unsigned long long line, now, race;
    unsigned need;
    while (scanf("%llu %u %llu %llu", &line, &need, &now, &race) == 4) {
        g_race = race;
        uint32_t ev = 0;
        const uint32_t now_u = (uint32_t)(now >> HBF_L2_STAMP_SHIFT) & HBF_L2_STAMP_MASK;
        uint32_t tag1;
        const uint32_t set = hb_l2_locate(line, sets, hb_l2_magic(sets), &tag1);
        const uint32_t miss = hb_l2_access(words + (uint64_t)set * ways, ways, tag1, need, now_u, policy, &ev);
        printf("%u %u\n", miss, ev);
    }
    printf("words\n");
    for (size_t i = 0; i < (size_t)sets * ways; ++i) printf("%llx\n", (unsigned long long)words[i]);
    free(words);
    return 0;
}
