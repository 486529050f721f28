"""Inputs of `hbfctl trace` / `hbfctl report` for tests/report: the committed real demo summary, a variant
of it written before the timeline existed, and the runtime's kernel counters built with the runtime's own
dict maker (runtime_cuda.devstate)."""
from __future__ import annotations

import copy
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "report" / "demo-summary.json"
GLOBALTIMER_BASE = 1_764_000_000_123_456_789     # a %globaltimer value (ns since the epoch): far past 2**53 / 1000


def old_summary(doc: dict) -> dict:
    """The same run as a summary written before hbfd kept a timeline and the demo its CDF."""
    d = copy.deepcopy(doc)
    d["hbfd_summary"].pop("timeline")
    d["hbfd_summary"].pop("hbfsim_version")
    d["numbers"].pop("cdf")
    return d


def kernel_counters() -> dict:
    """What `json.dump(session.counters(), f)` writes for two kernels (values set on the real struct)."""
    from runtime_cuda import devstate as D
    kernels = {}
    for i, (name, reqs) in enumerate((("gemv_instr", 4096), ("rate_instr", 20480))):
        k = D.hbf_kernel_counters()
        k.launches = 2 + i
        k.kstart_ns = GLOBALTIMER_BASE + i * 3_000_001
        k.kend_ns = k.kstart_ns + 1_234_567 + i
        k.ops[0].requests, k.ops[0].bytes, k.ops[0].modeled_ns = reqs, reqs * 128, reqs * 20_000
        k.ops[1].requests, k.ops[1].bytes, k.ops[1].program_bytes = 16, 65536, 65536
        k.ops[0].overhead_ns = reqs * 300
        k.wait_calls, k.wait_wall_ns, k.wait_overhead_ns = reqs // 32, 9_000_000 + i, 1_000
        k.ready_waits, k.slack_ns = 5, 77_000
        k.inline_requests, k.inline_ns = (reqs // 2, 3_456_789) if i else (7, 0)   # timed in one build only
        kernels[name] = D.kernel_counters_dict(k)
    return {"kernels": kernels, "totals": D.kernel_counters_dict(D.hbf_kernel_counters()), "generation": 3,
            "unmodeled_launches": [], "refused_launches": [], "launch_selection": {}}
