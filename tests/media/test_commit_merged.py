"""wt/eng19: ``MediaEngine._commit_merged``, the quiet scan after a mixed burst whose deferred channel chunks' seqs
rise in each chunk but not across them (the batches' deferred reads, then the store data-in chunks that
``_release_gated`` lets go in the quiet scan): the items put in seq order, decided by one packed sort and completed
chunk by chunk. Engine runs with it and with it declining (the general path: concatenation, ``_chan_lindley``'s
lexsort order, ``_complete_parts``) give the same completions, in the same order, and the same stats, every counter
included; and it is taken in those runs (else the comparison says nothing)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media.bench import make_stream
from hbfd.media.engine import MediaEngine

from test_accel_media import _engine_run, _geometry

pytest.importorskip("numba")


@pytest.mark.parametrize("name,wf,n,b", [("nominal", 0.1, 20000, 8192), ("nominal", 0.5, 12000, 4096),
                                         ("ocp-sg1", 0.1, 16000, 5000)])
def test_merged_quiet_scan_equals_the_general_path(monkeypatch, name, wf, n, b):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g = _geometry(name, "profile")
    stream = make_stream(g, n, 4096, "mixed", 0, write_fraction=wf, seed=7)
    sizes = [b] * (n // b) + ([n % b] if n % b else [])
    adv = [True] * len(sizes)
    taken = []
    real = MediaEngine._commit_merged

    def counted(self):
        r = real(self)
        taken.append(r)
        return r

    monkeypatch.setattr(MediaEngine, "_commit_merged", counted)
    # (one collect after all batches: the quiet scan that decides the burst's deferred transfers)
    outs_m, st_m = _engine_run(g, stream, sizes, adv, every_counter=True)
    assert any(taken), "the merged quiet scan was not taken: the comparison says nothing"
    monkeypatch.setattr(MediaEngine, "_commit_merged", lambda self: False)
    outs_g, st_g = _engine_run(g, stream, sizes, adv, every_counter=True)
    assert len(outs_m) == len(outs_g)
    for a, c in zip(outs_m, outs_g):
        assert a.tobytes() == c.tobytes()
    assert st_m == st_g
    done = np.concatenate(outs_m)
    assert len(done) == n and (done["status"] == 1).all()
