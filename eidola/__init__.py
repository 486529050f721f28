"""Eidola: peers that are not there (trace format, write tracking table, link-model generator,
flag accounting, timelines). Pure: no sockets, no clocks; files only through explicit paths."""
from eidola.trace import (TRACE_FORMAT, TRACE_VERSION, BufferSpec, Trace, TraceHeader,
                               TraceWrite, make_trace, read_trace, write_trace)

__all__ = ["TRACE_FORMAT", "TRACE_VERSION", "BufferSpec", "Trace", "TraceHeader", "TraceWrite",
           "make_trace", "read_trace", "write_trace"]
