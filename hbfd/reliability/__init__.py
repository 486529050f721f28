"""Retention, refresh and wear: per-block damage (Arrhenius), read disturb, PEC, deterministic refresh
plans in their own request-ID namespace, published byte debt, and the failure-hazard sweep.

Daemon plug-in: :func:`make_refresh_service` (the composition root ``hbfd.services.compose`` calls it).
Implements ``hbfd.contracts.RefreshService``. Pure.
"""
from __future__ import annotations


def make_refresh_service(profile):
    from .hazard import HazardSweep
    from .refresh import RefreshScheduler
    from .service import ReliabilityService, make_ledger
    logical = profile.logical_pages        # the host registers only the usable (after-OP) capacity
    led = make_ledger(profile, logical_pages=logical)
    svc = ReliabilityService(led, RefreshScheduler(led, page_bytes=profile.geometry.page_bytes),
                             HazardSweep.from_profile(profile.reliability),
                             media_bytes_per_s=float(profile.geometry.aggregate_bytes_per_s))
    svc.logical_pages = logical
    return svc
