"""hbfcc-ptxas's console entry. With ``HBFCC_DEFER=rewrite`` a Triton-style compile (one ``.ptx``, an ``sm_XX``
cubin with ``-o``) is served here without importing the rewriter (:func:`record_only`): the real ptxas assembles
the original PTX, the store keeps that PTX and the command line for a later rewrite and build
(:mod:`hbfcommon.deferred`). Everything else goes to :func:`hbfcc.cli.ptxas_main`."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from . import knobs
from . import ptxas_args as PA

def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    loop = PA.entered()
    if loop:
        print(f"hbfcc-ptxas: error: {loop}", file=sys.stderr)
        return 2
    try:
        rewrite_later = knobs.load().defer == "rewrite"
    except Exception:  # noqa: BLE001 - a bad knob: the full path reports it
        rewrite_later = False
    if rewrite_later and not any(a in ("--version", "-V", "--help", "-h") for a in args):
        rc = record_only(args)
        if rc is not None:
            return rc
    from .cli import ptxas_main  # noqa: PLC0415 - the rewriter, only where it is needed
    return ptxas_main(args)


def record_only(args: list[str]) -> Optional[int]:
    """HBFCC_DEFER=rewrite for one compile: the plain cubin from the real ptxas, the original PTX and a pending
    record (:data:`hbfcommon.deferred.PENDING_SCHEMA`, by the plain cubin's sha256) in the store. None when this
    compile is not one it serves (the full path then builds it, deferring the assembly only)."""
    from hbfcommon import artifact as A
    from hbfcommon import deferred as DF

    from .toolchain import choose_ptxas
    k = knobs.load()
    inputs, out_idx, arch = PA.parse(args)
    out = PA.out_path(args, out_idx)
    if k.nvcc_step or len(inputs) != 1 or out is None or arch is None or arch.startswith("compute_") \
            or PA.relocatable(args) or k.link != "whole" or k.occupancy_guard \
            or any(a in ("--input-as-string", "-ias") for a in args):
        return None
    choice = choose_ptxas(arch, nvcc_step=False)
    in_path = args[inputs[0]]
    try:
        data = Path(in_path).read_bytes()
    except OSError:
        return None                       # the full path says what is wrong with the input
    cp = subprocess.run([choice.path] + args, capture_output=True)
    if cp.returncode != 0:                # e.g. PTX newer than this ptxas: the full path decides (and reports)
        return None
    store = k.artifact_dir if k.artifact_dir is not None else k.cache_dir / "artifacts"
    try:
        sha = DF.keep_original(store, data)
        plain = Path(out).read_bytes()
    except OSError:
        return None                       # a store that cannot keep it: the full path (with the rewrite now)
    argv = DF.tokenized(args, in_path, out)
    env = DF.builder_env(os.environ, choice.path)     # nvcc's internal knobs never get here (refused above)
    plain_sha = hashlib.sha256(plain).hexdigest()
    entries = re.findall(rb"\.entry\s+([A-Za-z_$][\w$]*)", data)
    rec = DF.pending_record(mode="rewrite", entries=[e.decode() for e in entries], original_sha256=sha,
                            ptx_name=os.path.basename(in_path), argv=argv, env=env,
                            ptxas={"path": choice.path, "source": choice.source, "argv": [choice.path] + args},
                            plain_sha256=plain_sha, pythonpath=str(Path(__file__).resolve().parent.parent),
                            input_path=in_path)
    try:
        A.write(rec, A.output_store_path(store, plain_sha))
    except OSError:
        return None
    sys.stdout.buffer.write(cp.stdout)
    sys.stderr.buffer.write(cp.stderr)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
