"""Capacity mode's host half (issue 16; docs/design.md §3.6, docs/capacity.md).

* ``frames``: the frame pool and page tables in the device layout (hbf_capacity.h), both sides of the protocol;
* ``service``: :class:`~hbfd.capacity.service.CapacityService`, the miss service (eviction, exact out-of-place
  write-back, media-model timing, prefetch, the four times, terminal failures);
* ``prefetch``: the policy interface and the shipped policies;
* ``backing``: the sparse-file and generated stores;
* ``dispatch``: hbfd's ring dispatch of capacity requests, one service and one shared capacity region per range;
* ``device``: the GPU's side, on the CPU (tests, benches): in process, or through hbfd's ring (``RingHost``);
* ``streams``: access streams (the paper's synthetic MoE stream).
"""
