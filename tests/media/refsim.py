"""A small, slow, obviously correct reference for the media timing (semantics v2,
/work/plan/media_semantics_v2.md; hbfd/media/README.md "Timing model"): a 1 ns time-stepped
simulation of channels x dies x planes with page buffers, a per-die queue depth, a write buffer,
programs with read priority. No GC (tests use geometries where it does not run).

Requests (arrival, address, bytes[, op]) are split into page transactions in (arrival, request,
page) order = seq; an atomic is its read part, then its store part. Every tick t, in this order:
  1. finish: transfers ending at t complete their part; array ops ending at t free their plane and
     their die slot; a read sense ending at t makes its page buffer ready: its own transfer and the
     reads waiting for that buffer become channel-ready (at max(arrival + t_cmd, t));
  2. arrivals at t, in seq order. Read part: all sectors in the write buffer -> channel-ready at
     t + t_cmd; else the plane's page buffers (MRU first): hit -> MRU, channel-ready at
     max(t + t_cmd, buffer ready) (or when its sense ends); miss -> the page takes the LRU buffer
     (an empty one first) and a read command waits at the die. Store part: the page leaves the
     plane's buffers; the write buffer gets its sectors (a new page entry starts its flush timer);
     a page that is now full is programmed (the program is issued now). Write backpressure: the
     plane's B = page_buffers programs issued last hold its page buffers; with m programs issued
     on the plane before this store (m >= B), its data-in waits for the end of the (m - B + 1)-th
     (in issue order): its sectors are channel-ready at r = max(t + t_cmd, that end) (else
     r = t + t_cmd), and the program it issues reaches the die at r + xfer(store bytes).
  3. flush timers due at t: program the partial page (service tR + tPROG if it was programmed before;
     issued now, it counts among the plane's programs);
  4. array commands whose die-ready time is t wait at their die (reads and others apart);
  5. each die admits waiting commands while fewer than queue_depth are outstanding, reads first,
     each class by (ready, seq); an admitted command reaches its plane at t + t_cmd;
  6. commands reaching their plane at t join its waiting list;
  7. each free plane starts the waiting command with the smallest (class, plane-ready, seq)
     (reads first): busy for tR (read) or tPROG (+ tR) (program);
  8. each free channel starts the waiting item with the smallest (ready, seq), ready <= t.
A request completes when the last of its parts completes. Times must be small integers.
"""
from __future__ import annotations


def simulate(requests, *, C, D, P, t_cmd, t_read, xfer_ns, queue_depth, page_buffers=2, t_prog=200,
             flush_timeout=10**9):
    """requests: list of (arrival, media_address, bytes[, op]); op 0 load, 1 store, 2 atomic,
    3 cp.async. xfer_ns(nbytes) -> int. Returns each request's completion time."""
    order = sorted(range(len(requests)), key=lambda i: (requests[i][0], i))
    tx = []
    for i in order:
        r = requests[i]
        a, addr, nb = r[0], r[1], r[2]
        op = r[3] if len(r) > 3 else 0
        first, last = addr // 4096, (addr + nb - 1) // 4096
        for page in range(first, last + 1):
            lo = (max(addr, page * 4096) - page * 4096) // 64
            hi = (min(addr + nb, page * 4096 + 4096) - page * 4096 + 63) // 64
            ch = page % C
            die = ch * D + (page // C) % D
            plane = die * P + (page // (C * D)) % P
            tx.append(dict(req=i, a=a, op=op, page=page, ch=ch, die=die, plane=plane, lo=lo, hi=hi,
                           x=xfer_ns((hi - lo) * 64), seq=len(tx)))
    done_req = [None] * len(requests)
    parts_left = [0] * len(requests)
    for c in tx:
        parts_left[c["req"]] += 2 if c["op"] == 2 else 1
    full = (1 << 64) - 1
    bufs = {}            # plane -> list of [page, entry] MRU first; entry = {"ready": t or None, "waiters": []}
    wbuf = {}            # page -> [mask, first store time]
    programmed = set()
    timers = []          # (due, page, first)
    pend_cmds = []       # array commands not at their die yet: dict(ready, seq, kind, die, plane, svc, ...)
    die_wait = {}        # die -> {"r": [...], "o": [...]}
    outstanding = {}
    to_plane = []
    plane_wait = {}
    plane_busy = {}      # plane -> (end, cmd)
    chan_wait = {}       # ch -> list of (ready, seq, part)
    chan_busy = {}
    cmd_seq = [0]
    plane_progs = {}     # plane -> its programs in issue order: {"end": t or None, "waiters": [...]}
    nxt = 0
    remaining = sum(parts_left)
    t = 0

    def chan_add(ch, ready, seq, req):
        chan_wait.setdefault(ch, []).append((ready, seq, req))

    def new_cmd(kind, ready, die, plane, svc, entry=None, c=None, seq=None, prog=None):
        if seq is None:
            seq = cmd_seq[0]
            cmd_seq[0] += 1
        pend_cmds.append(dict(kind=kind, ready=ready, die=die, plane=plane, svc=svc, entry=entry, tx=c,
                              seq=seq, prog=prog))

    def program(page):
        """Issue a program of ``page``: its entry in the plane's program list and its command seq."""
        ch = page % C
        die = ch * D + (page // C) % D
        plane = die * P + (page // (C * D)) % P
        programmed.add(page)
        pe = {"end": None, "waiters": [], "seq": cmd_seq[0], "die": die, "plane": plane}
        cmd_seq[0] += 1
        plane_progs.setdefault(plane, []).append(pe)
        return pe

    def store_ready(c, a, ready, pe):
        """The store's data-in is ready at ``ready``: its channel item, its program (``pe``)."""
        chan_add(c["ch"], ready, 2 * c["seq"] + 1, c["req"])
        if pe is not None:
            new_cmd("prog", ready + c["x"], pe["die"], pe["plane"], t_prog, seq=pe["seq"], prog=pe)

    while remaining:
        # 1. finish
        for ch, (end, req) in list(chan_busy.items()):
            if end == t:
                del chan_busy[ch]
                remaining -= 1
                done_req[req] = t if done_req[req] is None else max(done_req[req], t)
        for pl, (end, cmd) in list(plane_busy.items()):
            if end == t:
                del plane_busy[pl]
                outstanding[cmd["die"]] -= 1
                if cmd["prog"] is not None:
                    pe = cmd["prog"]
                    pe["end"] = t
                    for (c, a, pe2) in pe["waiters"]:
                        store_ready(c, a, max(a + t_cmd, t), pe2)
                    pe["waiters"] = []
                if cmd["kind"] == "read":
                    ent = cmd["entry"]
                    ent["ready"] = t
                    c = cmd["tx"]
                    chan_add(c["ch"], t, 2 * c["seq"], c["req"])
                    for w in ent["waiters"]:
                        chan_add(w["ch"], max(w["a"] + t_cmd, t), 2 * w["seq"], w["req"])
                    ent["waiters"] = []
        # 2. arrivals
        while nxt < len(tx) and tx[nxt]["a"] == t:
            c = tx[nxt]
            nxt += 1
            want = ((1 << (c["hi"] - c["lo"])) - 1) << c["lo"]
            if c["op"] != 1:                         # read part
                e = wbuf.get(c["page"])
                if e is not None and (e[0] & want) == want:
                    chan_add(c["ch"], t + t_cmd, 2 * c["seq"], c["req"])
                else:
                    lst = bufs.setdefault(c["plane"], [])
                    k = next((i for i, b in enumerate(lst) if b[0] == c["page"]), -1)
                    if k >= 0:
                        b = lst.pop(k)
                        lst.insert(0, b)
                        ent = b[1]
                        if ent["ready"] is None:
                            ent["waiters"].append(c)
                        else:
                            chan_add(c["ch"], max(t + t_cmd, ent["ready"]), 2 * c["seq"], c["req"])
                    else:
                        ent = {"ready": None, "waiters": []}
                        lst.insert(0, [c["page"], ent])
                        del lst[page_buffers:]
                        new_cmd("read", t, c["die"], c["plane"], t_read, entry=ent, c=c)
            if c["op"] in (1, 2):                    # store part
                lst = bufs.get(c["plane"], [])
                bufs[c["plane"]] = [b for b in lst if b[0] != c["page"]]
                progs = plane_progs.get(c["plane"], [])
                gate = progs[len(progs) - page_buffers] if len(progs) >= page_buffers else None
                e = wbuf.get(c["page"])
                if e is None:
                    e = wbuf[c["page"]] = [0, t]
                    timers.append((t + flush_timeout, c["page"], t))
                e[0] |= want
                pe = None
                if e[0] == full:
                    del wbuf[c["page"]]
                    pe = program(c["page"])
                if gate is None or gate["end"] is not None:
                    store_ready(c, t, t + t_cmd, pe)
                else:
                    gate["waiters"].append((c, t, pe))
        # 3. flush timers
        for due, page, first in [x for x in timers if x[0] == t]:
            e = wbuf.get(page)
            if e is not None and e[1] == first:
                del wbuf[page]
                svc = t_prog + (t_read if page in programmed else 0)
                pe = program(page)
                new_cmd("prog", t, pe["die"], pe["plane"], svc, seq=pe["seq"], prog=pe)
        timers = [x for x in timers if x[0] != t]
        # 4. commands reaching their die
        now = sorted([m for m in pend_cmds if m["ready"] == t], key=lambda m: (m["ready"], m["seq"]))
        pend_cmds = [m for m in pend_cmds if m["ready"] != t]
        for m in now:
            die_wait.setdefault(m["die"], {"r": [], "o": []})["r" if m["kind"] == "read" else "o"].append(m)
        # 5. admissions
        for d, q in die_wait.items():
            for cls in ("r", "o"):
                q[cls].sort(key=lambda m: (m["ready"], m["seq"]))
            while (q["r"] or q["o"]) and outstanding.get(d, 0) < queue_depth:
                m = q["r"].pop(0) if q["r"] else q["o"].pop(0)
                outstanding[d] = outstanding.get(d, 0) + 1
                to_plane.append((t + t_cmd, m))
        # 6. plane arrivals
        for (rt, m) in [x for x in to_plane if x[0] == t]:
            plane_wait.setdefault(m["plane"], []).append((0 if m["kind"] == "read" else 1, rt, m["seq"], m))
        to_plane = [x for x in to_plane if x[0] != t]
        # 7. planes
        for pl, q in plane_wait.items():
            if q and pl not in plane_busy:
                q.sort(key=lambda x: x[:3])
                m = q.pop(0)[3]
                plane_busy[pl] = (t + m["svc"], m)
        # 8. channels
        for ch, q in chan_wait.items():
            if ch not in chan_busy:
                ready = [x for x in q if x[0] <= t]
                if ready:
                    best = min(ready, key=lambda x: (x[0], x[1]))
                    q.remove(best)
                    chan_busy[ch] = (t + xfer_ns_of(best, tx, xfer_ns), best[2])
        t += 1
        if t > 10_000_000:
            raise RuntimeError("reference simulation did not finish")
    return done_req


def xfer_ns_of(item, tx, xfer_ns):
    """Channel occupancy of a part: its transaction's sectors."""
    return tx[item[1] // 2]["x"]
