"""A small, slow, obviously correct reference for the media timing: a 1 ns time-stepped
simulation of page reads on channels x dies x planes with a per-die queue depth.

Every tick t, in this order:
  1. finish: transfers ending at t complete their command; senses ending at t free their plane
     and their die slot, and put the data in the channel's waiting list (ready = t);
  2. arrivals at t wait at their die (FIFO);
  3. each die admits waiting commands while fewer than queue_depth are outstanding; an admitted
     command reaches its plane's waiting list at admit + t_cmd;
  4. commands whose plane-ready time is t join the plane's waiting list;
  5. each free plane starts the waiting command with the smallest (ready, seq): busy tR;
  6. each free channel starts the waiting transfer with the smallest (ready, seq).
A request completes when the last of its pages completes. Times must be small integers.
"""
from __future__ import annotations


def simulate(requests, *, C, D, P, t_cmd, t_read, xfer_ns, queue_depth):
    """requests: list of (arrival, media_address, bytes). xfer_ns(nbytes) -> int.
    Returns each request's completion time."""
    # expand to page commands, in (arrival, request, page) order = seq
    order = sorted(range(len(requests)), key=lambda i: (requests[i][0], i))
    cmds = []   # dicts
    for i in order:
        a, addr, nb = requests[i]
        first, last = addr // 4096, (addr + nb - 1) // 4096
        for page in range(first, last + 1):
            lo = max(addr, page * 4096) - page * 4096
            hi = min(addr + nb, page * 4096 + 4096) - page * 4096
            nbytes = ((hi + 63) // 64 - lo // 64) * 64
            ch = page % C
            die = ch * D + (page // C) % D
            plane = die * P + (page // (C * D)) % P
            cmds.append(dict(req=i, a=a, ch=ch, die=die, plane=plane, x=xfer_ns(nbytes), seq=len(cmds)))
    done_req = [None] * len(requests)
    remaining = len(cmds)
    die_wait = {}
    outstanding = {}
    plane_wait = {}
    chan_wait = {}
    plane_busy_until = {}
    chan_busy = {}        # ch -> (end, cmd)
    sensing = {}          # plane -> (end, cmd)
    to_plane = []         # (time, cmd)
    t = 0
    while remaining:
        # 1. finish
        for ch, (end, c) in list(chan_busy.items()):
            if end == t:
                del chan_busy[ch]
                remaining -= 1
                r = c["req"]
                done_req[r] = t if done_req[r] is None else max(done_req[r], t)
        for pl, (end, c) in list(sensing.items()):
            if end == t:
                del sensing[pl]
                outstanding[c["die"]] -= 1
                chan_wait.setdefault(c["ch"], []).append((t, c["seq"], c))
        # 2. arrivals
        for c in cmds:
            if c["a"] == t:
                die_wait.setdefault(c["die"], []).append(c)
        # 3. admissions
        for d, q in die_wait.items():
            while q and outstanding.get(d, 0) < queue_depth:
                c = q.pop(0)
                outstanding[d] = outstanding.get(d, 0) + 1
                to_plane.append((t + t_cmd, c))
        # 4. plane arrivals
        for (rt, c) in [x for x in to_plane if x[0] == t]:
            plane_wait.setdefault(c["plane"], []).append((rt, c["seq"], c))
        to_plane = [x for x in to_plane if x[0] != t]
        # 5. planes
        for pl, q in plane_wait.items():
            if q and pl not in sensing:
                q.sort(key=lambda x: (x[0], x[1]))
                _, _, c = q.pop(0)
                sensing[pl] = (t + t_read, c)
        # 6. channels
        for ch, q in chan_wait.items():
            if q and ch not in chan_busy:
                q.sort(key=lambda x: (x[0], x[1]))
                _, _, c = q.pop(0)
                chan_busy[ch] = (t + c["x"], c)
        t += 1
        if t > 10_000_000:
            raise RuntimeError("reference simulation did not finish")
    return done_req
