"""RangeTable (pure): unaligned timing/capacity ranges and their media pages."""
import pytest

from hbfcommon import ctl
from hbfcommon.errors import ErrorCode, HbfError
from hbfd.ranges import PAGE, RangeTable

T, K, F = ctl.HBF_MODE_TIMING, ctl.HBF_MODE_CAPACITY, ctl.HBF_MODE_FLAG


def media_pages(r):
    return set(range(r.media_offset // PAGE, (r.media_offset + r.length - 1) // PAGE + 1))


def test_media_address_keeps_device_page_structure():
    t = RangeTable(1 << 30)
    r = t.register(0x1234_5A00, 3 * PAGE + 0x900, T, 1)        # 512 B aligned, spans 5 device pages
    assert r.media_offset % PAGE == r.base % PAGE
    for addr in (r.base, r.base + 0x5FF, r.base + 0x600, r.end - 1):
        media = r.media_offset + (addr - r.base)
        assert media % PAGE == addr % PAGE                      # in-page offset preserved
        # two bytes share a media page iff they share a device page
        assert (media // PAGE - r.media_offset // PAGE) == (addr // PAGE - r.base // PAGE)
    assert len(media_pages(r)) == 5 and r.media_extent == (r.media_offset - r.base % PAGE,
                                                            r.media_offset - r.base % PAGE + 5 * PAGE)


def test_neighbours_in_one_device_page_get_distinct_media_pages():
    t = RangeTable(1 << 30)
    rs = [t.register(0x10000 + 0x200 * i, 0x200, T, 3) for i in range(8)]   # 8 tensors in one page
    seen: set[int] = set()
    for r in rs:
        assert r.media_offset % PAGE == r.base % PAGE
        assert not media_pages(r) & seen
        seen |= media_pages(r)
    # odd byte boundaries and lengths are accepted too
    o = t.register(0x20001, 7, K, 1)
    assert o.media_offset % PAGE == 1 and not media_pages(o) & seen


def test_capacity_counts_touched_pages_and_reuses_freed_space():
    t = RangeTable(2 * PAGE)
    a = t.register(0xF00, 0x200, T, 1)                          # 512 B touching 2 pages: all of it
    assert a.media_extent == (0, 2 * PAGE)
    with pytest.raises(HbfError) as ei:
        t.register(0x100000, 1, T, 1)
    assert ei.value.code == ErrorCode.RANGE_TABLE_FULL
    t.unregister(a.range_id)
    b = t.register(0x100000 + 0x10, PAGE, T, 1)                 # 4 KiB at offset 16: 2 pages again
    assert b.media_offset == 0x10
    t.unregister(b.range_id)
    c = t.register(0x300000, PAGE, T, 1)
    d = t.register(0x400000 + 0x80, 0x10, T, 1)
    assert c.media_extent == (0, PAGE) and d.media_extent == (PAGE, 2 * PAGE) and d.media_offset == PAGE + 0x80


@pytest.mark.parametrize("base,length,mode,code", [
    (0x1000, 0, T, ErrorCode.RANGE_ZERO_LENGTH),
    (0x1002, 8, F, ErrorCode.RANGE_MISALIGNED),                 # flag words are 4-byte aligned
    (0x1000, 6, F, ErrorCode.RANGE_MISALIGNED),
    (0x1000, 8, 9, ErrorCode.RANGE_BAD_MODE),
])
def test_still_invalid(base, length, mode, code):
    t = RangeTable(1 << 30)
    with pytest.raises(HbfError) as ei:
        t.register(base, length, mode, 1)
    assert ei.value.code == code


def test_byte_overlap_refused_touching_allowed():
    t = RangeTable(1 << 30)
    t.register(0x1000, 0x123, T, 1)
    t.register(0x1123, 0x10, T, 1)                              # starts where the other ends
    with pytest.raises(HbfError) as ei:
        t.register(0x1122, 2, T, 1)
    assert ei.value.code == ErrorCode.RANGE_OVERLAP
