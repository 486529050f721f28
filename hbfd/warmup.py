"""Compile (or load from numba's cache) every compiled twin hbfd has, before anything serves:
``python -m hbfd.warmup``.

hbfd warms the twins a run uses when it starts (the media engine's in ``make_engine``, the latency
histogram's in ``Server.start``, the capacity service's when it is built), so a run never compiles in
its serving threads. A cold compile takes ~35 s once per machine and checkout (numba caches beside the
source); ``make test`` runs this first, so the first daemons the tests start do not each pay it under
their readiness timeouts (docs/RESULTS.md, issue 14 item 5: the compile cost)."""
from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("hbfd.warmup")


def warm_all() -> dict[str, float]:
    """Seconds each model's warm-up took ({} when the twins are off: HBFD_ACCEL=off or no numba)."""
    from hbfd import accel
    if not accel.enabled():
        return {}
    from hbfcommon.profile import load_profile
    from hbfd.capacity import kernels as cap_kernels
    from hbfd.media import MediaGeometry, hist, warm_twins
    return {"media engine": warm_twins(MediaGeometry.from_profile(load_profile("nominal"))),
            "latency histogram": hist.warm_twin(),
            "capacity service": cap_kernels.warm()}


def main(argv: list[str] | None = None) -> int:
    import argparse
    argparse.ArgumentParser(prog="python -m hbfd.warmup", description=__doc__.split("\n\n")[0]).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    got = warm_all()
    if not got:
        log.info("hbfd warmup: the compiled twins are off (HBFD_ACCEL=off or no numba): nothing to compile")
    else:
        log.info("hbfd warmup: compiled twins ready in %.1f s (%s)", time.perf_counter() - t0,
                 ", ".join(f"{k} {v:.1f} s" for k, v in got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
