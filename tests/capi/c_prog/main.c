/* tests/capi's C program: one scenario per argv[1], a line per step on stdout (the test reads them).
 * Host memory stands in for device memory (the session runs without CUDA: HBFSIM_ATTACH_NO_CUDA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hbfsim.h"

static int report(const char* what, int rc) {
    printf("%s rc=%d msg=%s\n", what, rc, rc ? hbfsim_last_error() : "");
    fflush(stdout);
    return rc;
}

int main(int argc, char** argv) {
    const char* scenario = argc > 1 ? argv[1] : "flow";
    const char* sock = argc > 2 ? argv[2] : NULL;
    const char* summary = argc > 3 ? argv[3] : "summary.json";
    printf("version %s abi=%d\n", hbfsim_version(), hbfsim_abi_version());
    hbfsim_session* s = NULL;
    if (!strcmp(scenario, "bad")) {
        /* bad input before any session: documented codes, no crash */
        report("attach_null_out", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, NULL));
        hbfsim_range_id id = 0;
        report("register_null_session", hbfsim_register_timing_range(NULL, (void*)0x1000, 64, 0, "x", &id));
        report("counters_null_out", hbfsim_counters_get(NULL, NULL));
        report("detach_null", hbfsim_detach(NULL));
        report("attach_bad_flags", hbfsim_attach(sock, 0x80, &s));
        if (report("attach", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, &s))) return 1;
        report("unregister_unknown", hbfsim_unregister_range(s, 987654));
        report("register_zero", hbfsim_register_timing_range(s, (void*)0x10000, 0, 0, "zero", &id));
        report("register_null_ptr", hbfsim_register_timing_range(s, NULL, 64, 0, "null", &id));
        report("register_null_out", hbfsim_register_timing_range(s, (void*)0x10000, 64, 0, "x", NULL));
        hbfsim_counters c;
        memset(&c, 0, sizeof c);
        report("counters_no_size", hbfsim_counters_get(s, &c));
        report("summary_null_path", hbfsim_write_summary(s, NULL));
        report("summary_bad_dir", hbfsim_write_summary(s, "/proc/no/such/dir/summary.json"));
        report("bind_no_artifact", hbfsim_bind_all(s, "/no/such/file.hbfcc.json", NULL));
        report("detach", hbfsim_detach(s));
        return 0;
    }
    if (!strcmp(scenario, "timing")) {
        /* bench/capi_overhead.py: the first attach (interpreter start + import + Attach RPC), then per-call
         * costs: counters, register + unregister (RPC + range snapshot), synchronize, detach */
        struct timespec t0, t1;
        int reps = argc > 3 ? atoi(argv[3]) : 100;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (report("attach", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, &s))) return 1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("first_attach_ns %lld\n", (long long)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec)));
        static char buf[4096];
        hbfsim_counters c;
        hbfsim_failure f;
        for (int k = 0; k < 3; k++) {
            const char* what = k == 0 ? "counters_ns" : k == 1 ? "register_unregister_ns" : "synchronize_ns";
            for (int i = 0; i < reps; i++) {
                clock_gettime(CLOCK_MONOTONIC, &t0);
                int rc = 0;
                if (k == 0) { memset(&c, 0, sizeof c); c.struct_size = sizeof c; rc = hbfsim_counters_get(s, &c); }
                else if (k == 1) {
                    hbfsim_range_id id;
                    rc = hbfsim_register_timing_range(s, buf, sizeof buf, 0, "t", &id);
                    if (!rc) rc = hbfsim_unregister_range(s, id);
                } else rc = hbfsim_synchronize(s, &f);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                if (rc) return report(what, rc);
                printf("%s %lld\n", what, (long long)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec)));
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        report("detach", hbfsim_detach(s));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("detach_ns %lld\n", (long long)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec)));
        return 0;
    }
    if (!strcmp(scenario, "lost")) {
        /* the daemon goes away mid-session (the test stops it, then writes a line to stdin) */
        if (report("attach", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, &s))) return 1;
        printf("waiting\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 1;
        static char buf[4096];
        hbfsim_range_id id = 0;
        report("register", hbfsim_register_timing_range(s, buf, sizeof buf, 0, "after", &id));
        hbfsim_counters c;
        memset(&c, 0, sizeof c);
        c.struct_size = sizeof c;
        report("counters", hbfsim_counters_get(s, &c));
        report("summary", hbfsim_write_summary(s, summary));
        report("detach", hbfsim_detach(s));
        return 0;
    }
    if (!strcmp(scenario, "failure")) {
        /* the test records a device failure in the control region (what hb_fail writes), then a line on stdin */
        if (report("attach", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, &s))) return 1;
        hbfsim_failure f;
        report("synchronize_before", hbfsim_synchronize(s, &f));
        printf("waiting\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 1;
        for (int i = 0; i < 2; i++) {
            report("synchronize", hbfsim_synchronize(s, &f));
            printf("failure status=%u name=%s site=%u kernel=%u site_index=%u\n", f.status, f.status_name, f.site,
                   f.kernel_index, f.site_index);
        }
        report("synchronize_null", hbfsim_synchronize(s, NULL));
        report("summary", hbfsim_write_summary(s, summary));
        report("detach", hbfsim_detach(s));
        return 0;
    }
    if (!strcmp(scenario, "nodaemon")) {
        report("attach", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, &s));
        printf("session_null=%d\n", s == NULL);
        return 0;
    }
    /* flow: attach, register two ranges, unregister one, counters, synchronize, summary, detach */
    if (report("attach", hbfsim_attach(sock, HBFSIM_ATTACH_NO_CUDA, &s))) return 1;
    size_t n = 1 << 20;
    char* buf = (char*)malloc(2 * n);
    hbfsim_range_id a = 0, b = 0;
    if (report("register_a", hbfsim_register_timing_range(s, buf, n, 0, "a", &a))) return 1;
    if (report("register_b", hbfsim_register_timing_range(s, buf + n, n, HBFSIM_PERM_READ, "b", &b))) return 1;
    printf("ids %llu %llu\n", (unsigned long long)a, (unsigned long long)b);
    report("register_overlap", hbfsim_register_timing_range(s, buf + 16, 64, 0, "overlap", &a == &b ? NULL : &b));
    if (report("unregister_a", hbfsim_unregister_range(s, a))) return 1;
    report("unregister_a_again", hbfsim_unregister_range(s, a));
    hbfsim_counters c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    if (report("counters", hbfsim_counters_get(s, &c))) return 1;
    printf("counters version=%u size=%u generation=%llu requests=%llu helper_ns=%llu\n", c.version, c.struct_size,
           (unsigned long long)c.generation, (unsigned long long)c.requests, (unsigned long long)c.helper_ns);
    hbfsim_failure f;
    report("synchronize", hbfsim_synchronize(s, &f));
    printf("failure status=%u\n", f.status);
    if (report("summary", hbfsim_write_summary(s, summary))) return 1;
    report("detach", hbfsim_detach(s));
    free(buf);
    return 0;
}
