"""The C side of the capacity region for the host-compiled device-code tests: the region header as hbfcommon.capacity
lays it out (HEADER_DTYPE: the one definition; this struct mirrors it) and how a test driver maps a region file
and fills the hbf_cap_range the device helpers take. Text to paste after `#include "hbf_capacity.cuh"`."""

OPEN_REGION = r"""
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
struct hdr { uint64_t magic; uint32_t ver, range_id; uint64_t pages; uint32_t n_frames, perms; uint64_t media_offset,
             off_frames, off_table, off_data, total; };
// argv[1]: the region file (mapped shared), argv[2]: the range's device base address
static hbf_cap_range open_region(char** argv) {
    int fd = open(argv[1], O_RDWR);
    struct stat sb; fstat(fd, &sb);
    char* m = (char*)mmap(nullptr, sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const hdr* h = (const hdr*)m;
    hbf_cap_range r{};
    r.base = strtoull(argv[2], nullptr, 0); r.pages = h->pages; r.n_frames = h->n_frames; r.range_id = h->range_id;
    r.page_table = (uint64_t)(m + h->off_table); r.frames = (uint64_t)(m + h->off_frames);
    r.frame_data = (uint64_t)(m + h->off_data); r.media_offset = h->media_offset; r.perms = h->perms;
    return r;
}
"""
