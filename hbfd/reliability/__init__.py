"""Retention, refresh and wear: per-block damage (Arrhenius), read disturb, PEC, deterministic refresh
plans in their own request-ID namespace, published byte debt, and the failure-hazard sweep.

Daemon plug-in: :func:`make_refresh_service` (``hbfd.services.build_refresh`` calls it). Pure.
"""
from __future__ import annotations


def make_refresh_service(profile):
    from .hazard import HazardSweep
    from .refresh import RefreshScheduler
    from .service import ReliabilityService, make_ledger
    logical = None
    try:                                   # the host can register only the media's logical capacity
        from hbfd.media import MediaGeometry
        logical = MediaGeometry.from_profile(profile).logical_pages
    except Exception:  # noqa: BLE001 - no media model for this profile: every physical block
        logical = None
    led = make_ledger(profile, logical_pages=logical)
    svc = ReliabilityService(led, RefreshScheduler(led, page_bytes=profile.geometry.page_bytes),
                             HazardSweep.from_profile(profile.reliability),
                             media_bytes_per_s=float(profile.geometry.aggregate_bytes_per_s))
    svc.logical_pages = logical
    return svc
