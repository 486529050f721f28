// tests/capi's C++ program: the RAII wrapper (hbfsim.hpp) end to end, and its exceptions.
#include <cstdio>
#include <vector>

#include "hbfsim.hpp"

int main(int argc, char** argv) {
    const char* sock = argc > 1 ? argv[1] : nullptr;
    try {
        hbfsim::Session s(sock, HBFSIM_ATTACH_NO_CUDA);
        std::vector<char> buf(1 << 16);
        {
            hbfsim::Range r = s.register_timing_range(buf.data(), buf.size(), "cxx");
            std::printf("range %llu\n", (unsigned long long)r.id());
            try {
                hbfsim::Range again = s.register_timing_range(buf.data(), 64, "overlap");
                std::printf("overlap accepted\n");
            } catch (const hbfsim::Error& e) {
                std::printf("overlap error code=%d\n", e.code());
            }
        }  // unregistered here
        hbfsim_counters c = s.counters();
        std::printf("counters version=%u generation=%llu\n", c.version, (unsigned long long)c.generation);
        s.synchronize();
        s.detach();
        std::printf("ok\n");
    } catch (const hbfsim::Error& e) {
        std::printf("error code=%d %s\n", e.code(), e.what());
        return 1;
    }
    return 0;
}
