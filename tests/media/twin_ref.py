"""The device fast model, one request at a time: the slow, literal reference of media semantics v2
(/work/plan/media_semantics_v2.md) that ``hbfd.media.twin.DeviceModelTwin`` (numpy) must equal
exactly, and that the CUDA ``hb_fast_model`` follows.

``state`` (a dict, updated in place) carries sense_free, prog_free, chan_free and the page buffers
between calls. Reads have priority over programs at the plane (non-preemptive): a sense waits for the
reads ahead of it and for the program running at its arrival, not for the programs queued behind that
one, which move back by its tR (the queued programs end at prog_free - k tPROG). ``requests``: (arrival, media_address, bytes, op[, q_ppm]) with op 0 load, 1 store, 2 atomic,
3 cp.async. Returns each request's completion time (ns), in input order.

``channel_order="calendar"`` (hbfd/media/chancal.py, docs/design.md §3.9): instead of one tail per channel,
each channel's time in quanta of Q ns (``quantum_ns``), a ring of ``ring_words``
words of 64 quanta (state "rings": per channel {slot: [word, set of taken quanta]}), taken first-fit at the
data-ready time: a read at its data ready, a store's data-in at its buffer-free time, an atomic's data-in at
its read's completion + t_cmd; the transfer starts at the first quantum taken. Written one quantum at a time.
"""
from __future__ import annotations


def device_model(g, requests, state=None, channel_order="arrival", ring_words=16384, quantum_ns=1):
    C, D, B = g.channels, g.dies_per_channel, g.planes_per_die
    if state is None:
        state = {}
    Q = quantum_ns                                                     # the calendar's quantum (ns)
    rings = state.setdefault("rings", [{} for _ in range(C)])          # per channel: slot -> [word, taken]

    def free(c, k):                            # quantum k of channel c: its word's slot stale, or not taken
        word = k // 64
        tag, taken = rings[c].get(word % ring_words, [-1, set()])
        return tag < word or (tag == word and k % 64 not in taken)   # a newer word there: k reads as taken

    def claim(c, ready, xfer):                 # first fit at ready: the transfer's start
        n = max(1, min(-(-xfer // Q), 64 * (ring_words - 1)))
        k = -(-ready // Q)
        j = 0
        while j < n:                           # (a taken quantum k + j: no start in k .. k + j fits)
            if free(c, k + j):
                j += 1
            else:
                k, j = k + j + 1, 0
        for j in range(k, k + n):
            word = j // 64
            e = rings[c].get(word % ring_words)
            if e is None or e[0] != word:
                e = rings[c][word % ring_words] = [word, set()]
            e[1].add(j % 64)
        return k * Q
    sense_free = state.setdefault("sense_free", [0] * (C * D * B))   # the plane's latest sense end
    prog_free = state.setdefault("prog_free", [0] * (C * D * B))     # its queued programs' end
    chan_free = state.setdefault("chan_free", [0] * C)
    bufs = state.setdefault("bufs", [[] for _ in range(C * D * B)])  # per plane: [page, ready], MRU first

    def scaled(x, q):                          # thermal: ceil(x * 1e6 / q), q clipped to [1, 1e6]
        q = min(max(q, 1), 1_000_000)
        return -(-x * 1_000_000 // q)

    done = [0] * len(requests)
    for i in sorted(range(len(requests)), key=lambda i: (requests[i][0], i)):   # arrival order, ties: input
        a, addr, nbytes, op = requests[i][:4]
        q = requests[i][4] if len(requests[i]) > 4 else 1_000_000
        done[i] = a
        for page in range(addr // 4096, (addr + nbytes - 1) // 4096 + 1):      # one page transaction each
            lo = max(addr, page * 4096) - page * 4096
            hi = min(addr + nbytes, page * 4096 + 4096) - page * 4096
            xbytes = 64 * ((hi + 63) // 64 - lo // 64)                           # only the touched 64 B sectors
            ch = page % C                                                        # static interleave
            plane = (ch * D + (page // C) % D) * B + (page // (C * D)) % B
            xfer = scaled(-(-xbytes * 1_000_000_000 // g.channel_bytes_per_s), q)   # xfer(b), thermal-scaled
            buf = bufs[plane]
            e = next((x for x in buf if x[0] == page), None)
            t = a
            if op != 1:                                                          # READ (load, cp.async, atomic)
                if e is not None:                                                # hit (buffered or being sensed)
                    ready = max(a + g.t_cmd_ns, e[1])                            #   no tR, waits for that sense
                    nowait = min(ready, a + g.t_cmd_ns + scaled(g.t_read_ns, q))  #   at most a sense's no-wait
                    buf.remove(e)
                    buf.insert(0, e)                                             #   the page becomes MRU
                else:                                                            # miss: sense
                    cmd, s_end, p_end = a + g.t_cmd_ns, sense_free[plane], prog_free[plane]
                    tr = scaled(g.t_read_ns, q)
                    if p_end > max(cmd, s_end):                                  # programs queued past cmd: read
                        if s_end >= cmd:                                         #   priority (non-preemptive):
                            start = s_end                                        #   after the reads ahead, or
                        elif g.t_prog_ns:                                        #   after the program running at
                            start = p_end - (p_end - cmd) // g.t_prog_ns * g.t_prog_ns   # cmd (they end at
                        else:                                                    #   p_end - k tPROG)
                            start = p_end
                        prog_free[plane] = p_end + tr                            #   the programs wait for it
                    else:
                        start = max(cmd, s_end)
                    ready = sense_free[plane] = start + tr                       #   sense_end
                    nowait = a + g.t_cmd_ns + scaled(g.t_read_ns, q)             #   ... on an idle plane
                    buf.insert(0, [page, ready])                                 #   into the MRU buffer
                    del buf[g.page_buffers_per_plane:]                           #   the LRU one is replaced
                if channel_order == "calendar":                                  # first fit at data ready
                    t = claim(ch, ready, xfer) + xfer
                    slot = None
                else:
                    slot = max(nowait, chan_free[ch])                            # channel slot: arrival order, at
                    chan_free[ch] = slot + xfer                                  #   the no-wait ready time;
                    t = max(slot, ready) + xfer                                  #   the transfer when data is ready
            if op in (1, 2):                                                     # WRITE (store; atomic's 2nd half)
                # data-in over the channel; a store's slot in the senses' frame (a + t_cmd + tR), its data-in
                # tR before it; an atomic's slot at its read's slot end + t_cmd (no-wait), the data-in itself
                # at its read's completion + t_cmd
                if channel_order == "calendar":                                  # data-in at data ready: a
                    rdy = (max(a + g.t_cmd_ns, prog_free[plane] - (g.page_buffers_per_plane - 1) * g.t_prog_ns)
                           if op == 1 else t + g.t_cmd_ns)                        #   store's buffer free, an
                    t = claim(ch, rdy, xfer) + xfer                              #   atomic's read done + t_cmd
                elif op == 1:                                                    # once a page buffer is free:
                    # the B buffers hold the running and queued programs' data (they end at P - k tPROG)
                    rdy = max(a + g.t_cmd_ns,
                              prog_free[plane] - (g.page_buffers_per_plane - 1) * g.t_prog_ns)
                    tr = scaled(g.t_read_ns, q)
                    slot = max(a + g.t_cmd_ns + tr, chan_free[ch])              # (the no-wait time: a store
                    #   waiting for a buffer does not hold the channel for the reads behind it)
                    chan_free[ch] = slot + xfer
                    t = max(slot - tr, rdy) + xfer                               # ack at the end of the data-in
                else:
                    slot = max(chan_free[ch] + g.t_cmd_ns, chan_free[ch])
                    chan_free[ch] = slot + xfer
                    t = max(slot, t + g.t_cmd_ns) + xfer
                prog_free[plane] = (max(prog_free[plane], sense_free[plane], t)  # amortized tPROG, after the
                                    + -(-g.t_prog_ns * xbytes // 4096))          #   queued programs and senses
                buf[:] = [x for x in buf if x[0] != page]                        # the buffer holding the page is
                                                                                 #   emptied (refilled first)
            done[i] = max(done[i], t)                                            # the request: its last page
    return done
