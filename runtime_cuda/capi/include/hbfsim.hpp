// hbfsim.hpp -- C++ RAII over hbfsim.h (docs/runtime.md "C/C++ host API").
//
//   hbfsim::Session s;                                  // attach (throws hbfsim::Error)
//   hbfsim::Range r = s.register_timing_range(d_x, n * sizeof(float), "x");
//   s.bind_all();                                        // in a .cu file (or after cuda_runtime.h)
//   kernel<<<grid, block>>>(d_x, n);
//   s.synchronize();                                     // throws hbfsim::DeviceFailure
//   hbfsim_counters c = s.counters();
//   s.write_summary("run.json");
//
// Errors are hbfsim::Error (code() is the hbfsim.h code); a recorded device failure is
// hbfsim::DeviceFailure (failure() says status and site). Destructors never throw.
#ifndef HBFSIM_HPP
#define HBFSIM_HPP

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "hbfsim.h"

namespace hbfsim {

class Error : public std::runtime_error {
public:
    Error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

class DeviceFailure : public Error {
public:
    DeviceFailure(int code, const std::string& what, const hbfsim_failure& f) : Error(code, what), f_(f) {}
    const hbfsim_failure& failure() const noexcept { return f_; }

private:
    hbfsim_failure f_;
};

inline void check(int rc) {
    if (rc != HBFSIM_OK) throw Error(rc, hbfsim_last_error());
}

class Session;

// A registered range; unregisters itself (errors in the destructor are dropped: call reset() to see them).
class Range {
public:
    Range() = default;
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;
    Range(Range&& o) noexcept : s_(std::exchange(o.s_, nullptr)), id_(o.id_) {}
    Range& operator=(Range&& o) noexcept {
        if (this != &o) {
            release_quietly();
            s_ = std::exchange(o.s_, nullptr);
            id_ = o.id_;
        }
        return *this;
    }
    ~Range() { release_quietly(); }
    hbfsim_range_id id() const noexcept { return id_; }
    void reset() {
        if (s_) {
            hbfsim_session* s = std::exchange(s_, nullptr);
            check(hbfsim_unregister_range(s, id_));
        }
    }

private:
    friend class Session;
    Range(hbfsim_session* s, hbfsim_range_id id) : s_(s), id_(id) {}
    void release_quietly() noexcept {
        if (s_) (void)hbfsim_unregister_range(std::exchange(s_, nullptr), id_);
    }
    hbfsim_session* s_ = nullptr;
    hbfsim_range_id id_ = 0;
};

class Session {
public:
    explicit Session(const char* socket = nullptr, unsigned flags = 0) { check(hbfsim_attach(socket, flags, &s_)); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    Session(Session&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    ~Session() {
        if (s_) (void)hbfsim_detach(s_);
    }
    // Every Range of this session must be gone (or reset) before the session detaches.
    void detach() {
        if (s_) check(hbfsim_detach(std::exchange(s_, nullptr)));
    }
    hbfsim_session* get() const noexcept { return s_; }

    Range register_timing_range(const void* ptr, std::size_t bytes, const char* label = nullptr,
                                unsigned perms = 0) {
        hbfsim_range_id id = 0;
        check(hbfsim_register_timing_range(s_, ptr, bytes, perms, label, &id));
        return Range(s_, id);
    }
    hbfsim_counters counters() {
        hbfsim_counters c{};
        c.struct_size = sizeof c;
        check(hbfsim_counters_get(s_, &c));
        return c;
    }
    void synchronize() {
        hbfsim_failure f{};
        int rc = hbfsim_synchronize(s_, &f);
        if (rc == HBFSIM_OK) return;
        if (f.status_name[0]) throw DeviceFailure(rc, hbfsim_last_error(), f);   // a recorded failure
        throw Error(rc, hbfsim_last_error());
    }
    void write_summary(const char* path) { check(hbfsim_write_summary(s_, path)); }
    // The macro hbfsim_bind_all passes the program's cudaGetFuncBySymbol (include cuda_runtime.h first).
    hbfsim_bind_report bind_all(const char* artifacts = nullptr, hbfsim_get_func_fn get_func_by_symbol =
#if defined(CUDART_VERSION)
        reinterpret_cast<hbfsim_get_func_fn>(&cudaGetFuncBySymbol)
#else
        nullptr
#endif
    ) {
        hbfsim_bind_report r{};
        check(hbfsim_bind_all_with(s_, artifacts, get_func_by_symbol, &r));
        return r;
    }

private:
    hbfsim_session* s_ = nullptr;
};

}  // namespace hbfsim

#endif  // HBFSIM_HPP
