"""Command-line entry points.

``hbfcc``        a drop-in nvcc (as ``CUDACXX``, ``CMAKE_CUDA_COMPILER``, ``CUDA_NVCC_EXECUTABLE``),
                 or a compiler launcher (``CMAKE_CUDA_COMPILER_LAUNCHER=hbfcc``: ``hbfcc nvcc ARGS``);
                 ``hbfcc rewrite IN.ptx -o OUT.ptx [--dump-stages DIR] [--no-link]`` standalone.
``hbfcc-ptxas``  a drop-in ptxas (``TRITON_PTXAS_PATH``); also what nvcc runs through the shadow
                 toolkit (``python -m hbfcc.cli ptxas ...``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Optional, Sequence

from hbfcommon.abi import HBF_HELPER_ABI_VERSION
from hbfcommon.errors import ConfigError, HbfError, ToolchainError
from hbfcommon.fsutil import atomic_write_text

from . import artifact, knobs
from . import helpers as H
from .ptxas_args import ACTIVE_VAR
from .ptxas_args import entered as _ptxas_entered
from .ptxas_args import out_path as _out_path
from .ptxas_args import parse as _ptxas_args
from .ptxas_args import jit_real_target, split_compile, with_arch

log = logging.getLogger("hbfcc")

EXIT_USAGE = 2
EXIT_REWRITE = 3


def _setup_logging(tool: str = "hbfcc") -> None:
    try:
        lvl = knobs.load().log_level
    except HbfError:
        lvl = "WARNING"
    logging.basicConfig(level=getattr(logging, lvl, logging.WARNING),
                        format=f"{tool}: %(levelname)s: %(message)s", stream=sys.stderr)


def _fail(e: BaseException, tool: str) -> int:
    print(f"{tool}: error: {e}", file=sys.stderr)
    if isinstance(e, ToolchainError):
        return e.returncode if e.returncode not in (None, 0) else 1
    if isinstance(e, ConfigError):
        return EXIT_USAGE
    return EXIT_REWRITE


def marker_line() -> str:
    """The line hbfcc-ptxas adds to ``--version`` (Triton hashes that output into its cache key)."""
    from .toolchain import rewriter_sha
    try:  # the helper build that rewrites link (HBFCC_HELPER_PTX, else the direct build); its sha: of its bytes
        hsha = (H.load_helper_header if knobs.load().link == "separate" else H.load_helper)().sha256[:16]
    except HbfError:
        hsha = "none"
    line = f"hbfcc {HBF_HELPER_ABI_VERSION} {rewriter_sha()[:16]} helper {hsha}"
    passes = knobs.load().passes      # HBFCC_PASSES: a different selection is a different build
    if passes != ("timing",):
        try:
            esha = H.load_eidola_helper().sha256[:16] if "flags" in passes else "none"
        except HbfError:
            esha = "none"
        line += f" passes {'+'.join(passes)} eidola {esha}"
    if knobs.load().occupancy_guard:   # HBFCC_OCCUPANCY_GUARD=1 builds differently
        line += " occupancy-guard on"
    if not knobs.load().hoist_issues:  # HBFCC_HOIST_ISSUES=0 builds differently
        line += " hoist-issues off"
    if not knobs.load().inline_issues:  # HBFCC_INLINE_ISSUE=0 builds differently
        line += " inline-issue off"
    if not knobs.load().hoist_loads:  # HBFCC_HOIST_LOADS=0 builds differently
        line += " hoist-loads off"
    if not knobs.load().group_issues:  # HBFCC_GROUP_ISSUES=0 builds differently
        line += " group-issues off"
    if not knobs.load().fast_groups:  # HBFCC_FAST_GROUPS=0 builds differently
        line += " fast-groups off"
    if not knobs.load().merge_loads:  # HBFCC_MERGE_LOADS=0 builds differently
        line += " merge-loads off"
    if not knobs.load().inline_multi:  # HBFCC_INLINE_MULTI=0 builds differently
        line += " inline-multi off"
    if not knobs.load().inline_live:  # HBFCC_INLINE_LIVE=0 builds differently
        line += " inline-live off"
    if knobs.load().inline_time:  # HBFCC_INLINE_TIME=1 builds differently
        line += " inline-time on"
    if not knobs.load().share_until:  # HBFCC_SHARE_UNTIL=0 builds differently
        line += " share-until off"
    if knobs.load().loads_first != "0":  # HBFCC_LOADS_FIRST=1|all builds differently
        line += f" loads-first {knobs.load().loads_first}"
    if knobs.load().early_clock != "0":  # HBFCC_EARLY_CLOCK=1|auto builds differently
        line += f" early-clock {knobs.load().early_clock}"
    if knobs.load().prefetch_next != 1:  # HBFCC_PREFETCH_NEXT=0|2..4 builds differently
        line += f" prefetch-next {knobs.load().prefetch_next}"
    if knobs.load().prefetch_group != "0":  # HBFCC_PREFETCH_GROUP=1|auto builds differently
        line += f" prefetch-group {knobs.load().prefetch_group}"
    if knobs.load().full_warp != "auto":  # HBFCC_FULL_WARP=0|1|all builds differently
        line += f" full-warp {knobs.load().full_warp}"
    if knobs.load().native_scope:  # HBFCC_NATIVE_SCOPE=1 builds differently
        line += " native-scope on"
    if not knobs.load().native_entry:  # HBFCC_NATIVE_ENTRY=0: no <k>__hbnat entries in the module
        line += " native-entry off"
    if knobs.load().call_isolation:  # HBFCC_CALL_ISOLATION=1 builds differently
        line += " call-isolation on"
    if not knobs.load().launch_bound:  # HBFCC_LAUNCH_BOUND=0 builds differently
        line += " launch-bound off"
    if not knobs.load().link_prune:  # HBFCC_LINK_PRUNE=0: the same kernel code, more helper text and -c code
        line += " link-prune off"
    if knobs.load().link == "separate":  # HBFCC_LINK=separate: helpers as a cached object, nvlink'd, under caps
        cap = knobs.load().separate_cap
        line += f" link separate cap {'plain' if cap is None else cap}"
    if knobs.load().cpasync_window != knobs.CPASYNC_WINDOW_DEFAULT:  # another cp.async group window
        line += f" cpasync-window {knobs.load().cpasync_window}"
    if knobs.load().defer != "0":   # HBFCC_DEFER: the output is the PLAIN cubin (the instrumented one built later)
        from hbfcommon.deferred import MARKER_WORDS
        line += f" {MARKER_WORDS[knobs.load().defer]}"
    return line


# ============================================================================================
# hbfcc-ptxas
# ============================================================================================

def _filter_info(text: str) -> str:
    """Drop the `ptxas info` lines hbfcc's own -v produced (the user did not ask for them)."""
    out = []
    skip_next = False
    for l in text.splitlines(keepends=True):
        if l.startswith("ptxas info"):
            skip_next = "Function properties" in l
            continue
        if skip_next and l.startswith("    "):
            skip_next = False
            continue
        skip_next = False
        out.append(l)
    return "".join(out)


def _relay(cp: subprocess.CompletedProcess, user_v: bool) -> None:
    """What the real ptxas printed, as the caller would see it: its ``ptxas info`` lines only when the caller
    asked for ``-v`` (hbfcc adds ``-v`` for its own facts)."""
    if user_v:
        sys.stdout.write(cp.stdout)
        sys.stderr.write(cp.stderr)
    else:
        sys.stdout.write(_filter_info(cp.stdout))
        sys.stderr.write(_filter_info(cp.stderr))


def _split_compile(args: list[str], k: knobs.Knobs, res, sass: bool) -> list[str]:
    """``-split-compile N`` for the real ptxas when it assembles a rewritten module to SASS (HBFCC_PTXAS_THREADS,
    hbfcc.ptxas_args.split_compile): N up to the module's instrumented entries; an unchanged module, and a
    ``-arch=compute_XX`` check (no code to assemble), run exactly as the caller asked."""
    if not sass or res.module is None or res.already_instrumented or res.transformed_sha256 == res.original_sha256:
        return []
    from . import occupancy
    return split_compile(args, k.ptxas_threads, len(occupancy.instrumented_entries(res.module)))


def _run_capture(argv: list[str], env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env)
    except OSError as e:
        raise ToolchainError(f"cannot run {argv[0]}: {e}", argv=argv) from e


def _stderr_is_a_log() -> bool:
    """True when stderr is a regular file and stdout is something else: how Triton runs ptxas (stderr
    into a temporary log it deletes when ptxas succeeds, stdout the Triton process's own)."""
    import stat
    try:
        err, out = os.fstat(2), os.fstat(1)
    except OSError:
        return False
    return stat.S_ISREG(err.st_mode) and (err.st_dev, err.st_ino) != (out.st_dev, out.st_ino)


def _warnings_to_stdout_too(tool: str) -> None:
    """hbfcc-ptxas under Triton: its warnings (a kernel NOT admitted, another ptxas chosen, ...) go to
    stdout as well, or the user would never see them (Triton shows ptxas's stderr only when it fails)."""
    if not _stderr_is_a_log():
        return
    h = logging.StreamHandler(sys.stdout)
    h.setLevel(logging.WARNING)
    h.setFormatter(logging.Formatter(f"{tool}: %(levelname)s: %(message)s"))
    log.addHandler(h)


def ptxas_main(argv: Optional[Sequence[str]] = None) -> int:
    _setup_logging("hbfcc-ptxas")
    _warnings_to_stdout_too("hbfcc-ptxas")
    args = list(sys.argv[1:] if argv is None else argv)
    was = os.environ.get(ACTIVE_VAR)
    loop = _ptxas_entered()
    if loop:
        return _fail(ConfigError(loop), "hbfcc-ptxas")
    try:
        return _ptxas(args)
    except HbfError as e:
        return _fail(e, "hbfcc-ptxas")
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except OSError as e:
        print(f"hbfcc-ptxas: error: {e}", file=sys.stderr)
        return 1
    finally:
        # the mark is for this call's children only: a process that calls ptxas_main in-process (a test, a build
        # tool) and later starts hbfcc-ptxas itself must not look like a loop to that child
        if was is None:
            os.environ.pop(ACTIVE_VAR, None)
        else:
            os.environ[ACTIVE_VAR] = was


PTXAS_HELP = """\
hbfcc-ptxas: a drop-in ptxas that rewrites the PTX for hbfsim (TRITON_PTXAS_PATH=hbfcc-ptxas).

It rewrites the one .ptx input into a private temporary copy (the input is never modified),
assembles that copy with the real ptxas and the same options, and writes the admission record to
the artifact store (and beside the output, see HBFCC_SIDECAR), with what built it (the --version
marker and the output's sha256: the runtime checks a Triton cubin against it when it binds it). A
kernel that is not admitted is named, with the reason, in a warning on stderr, and on stdout too when
stderr is a log file (Triton keeps ptxas's stderr in a log it deletes on success). --version prints
the real ptxas's text and a line 'hbfcc <ABI> <rewriter sha> helper <sha> ...' naming every knob that
changes a build (Triton puts the whole text in its cache key).

The real ptxas: HBFCC_REAL_PTXAS, else the one Triton would run (TRITON_PTXAS_PATH when it is
not hbfcc-ptxas, else the ptxas bundled in the Triton wheel), else ptxas on PATH / $CUDA_HOME/bin.

Environment (hbfcc/knobs.py, docs/hbfcc.md):
"""


def _ptx_version(text: str) -> Optional[tuple[int, int]]:
    m = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", text, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _ptxas(args: list[str]) -> int:
    from dataclasses import replace

    from . import occupancy, rdc, seplink
    from .rewrite import rewrite_text
    from .toolchain import build_stats, choose_ptxas, max_ptx_version, ptxas_version_text

    k = knobs.load()
    if any(a in ("--version", "-V") for a in args):
        real = choose_ptxas(None, nvcc_step=k.nvcc_step).path
        text = ptxas_version_text(real)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.write(marker_line() + "\n")
        sys.stdout.flush()
        return 0
    if any(a in ("--help", "-h") for a in args):
        sys.stdout.write(PTXAS_HELP + knobs.help_text() + "\nThe real ptxas's options follow.\n\n")
        sys.stdout.flush()
        return subprocess.call([choose_ptxas(None, nvcc_step=k.nvcc_step).path] + args)
    inputs, out_idx, arch = _ptxas_args(args)
    choice = choose_ptxas(arch, nvcc_step=k.nvcc_step)
    real = choice.path
    if any(a in ("--input-as-string", "-ias") for a in args):
        raise ConfigError("hbfcc-ptxas cannot rewrite PTX given with --input-as-string; pass a .ptx file")
    if not inputs:
        if any(not a.startswith("-") for a in args):
            raise ConfigError("hbfcc-ptxas: no .ptx input among the arguments (nothing would be "
                              "instrumented)", argv=args)
        return subprocess.call([real] + args)
    if len(inputs) > 1:
        raise ConfigError("hbfcc-ptxas rewrites one .ptx input per call", inputs=[args[i] for i in inputs])
    in_path = args[inputs[0]]
    out_path = _out_path(args, out_idx)
    user_v = "-v" in args or "--verbose" in args
    from .ptx.parser import read_ptx
    original = read_ptx(in_path)          # not UTF-8 / unreadable: an error before anything is written
    cap = max_ptx_version(real)
    got = _ptx_version(original)
    instead_of = None
    if got is not None and got > cap:
        choice, instead_of = _newer_ptx(in_path, got, choice, cap)
        real, cap = choice.path, max_ptx_version(choice.path)
    sass = arch is not None and not arch.startswith("compute_")
    # HBFCC_JIT=1, one of nvcc's PTX check steps (-arch=compute_XX): the driver assembles this PTX at the first load,
    # so the launch bound an SASS build decides is decided here, from a plain build for the real target sm_XX
    jit_target = jit_real_target(arch) if k.jit and k.nvcc_step and k.launch_bound and not k.occupancy_guard \
        else None
    # -c / --compile-only (nvcc -rdc): the linked helpers module-local, within their callers' caps (hbfcc/rdc.py)
    reloc, ucaps = rdc.relocatable(args), rdc.user_caps(args)
    # HBFCC_LINK=separate (hbfcc/seplink.py): decided here for what the call asks, after the rewrite for
    # what the module is; any reason not to goes into the artifact (link.fallback_reason), the whole
    # route builds it
    use_sep, sep_why, sep_info = False, None, None
    if k.link == "separate":
        sep_why = seplink.unsupported(args, arch, out_path, nvcc_step=k.nvcc_step,
                                      occupancy_guard=k.occupancy_guard, passes=k.passes)
        if sep_why is None and seplink.nvlink_beside(real) is None:
            sep_why = f"no nvlink beside {real} (set HBFCC_REAL_PTXAS to a CUDA toolkit's ptxas)"
        use_sep = sep_why is None
        if sep_why is not None:
            log.warning("HBFCC_LINK=separate: %s; building whole-program", sep_why)
    # the separate link needs the helper's identity only (its object is checked and built once, cached)
    helper = (H.load_helper_header if use_sep else H.load_helper)(module_text=original)
    # baseline (the original PTX, same options) runs in parallel with the rewrite and the build
    base_cp: dict = {}
    tmpdir = tempfile.mkdtemp(prefix="hbfcc-ptxas.")
    base_thread = None
    # nvcc's steps (the shadow toolkit's shim) rewrite nvcc's intermediate in place: fatbinary embeds
    # the file ptxas read. Anyone else's input is never touched: the rewrite goes to a private copy.
    work = in_path if k.nvcc_step else os.path.join(tmpdir, "in", os.path.basename(in_path))
    wargs = list(args)
    wargs[inputs[0]] = work
    try:
        # HBFCC_DEFER=1: the baseline build IS the output (the plain cubin), so it always runs
        if ((k.baseline or k.defer != "0" or (use_sep and k.separate_cap is None)) and sass) or jit_target:
            bin_ = os.path.join(tmpdir, "orig.ptx")
            Path(bin_).write_text(original)
            bargs = with_arch(args, jit_target) if jit_target else list(args)
            bargs[inputs[0]] = bin_
            if out_idx is not None:
                if bargs[out_idx].startswith("--output-file="):
                    bargs[out_idx] = "--output-file=" + os.path.join(tmpdir, "orig.o")
                else:
                    bargs[out_idx] = os.path.join(tmpdir, "orig.o")
            else:
                bargs += ["-o", os.path.join(tmpdir, "orig.o")]
            if not user_v:
                bargs.append("-v")
            base_thread = threading.Thread(target=lambda: base_cp.setdefault("cp", _run_capture([real] + bargs)))
            base_thread.start()
        res = rewrite_text(original, filename=in_path, helper=helper, max_version=cap, link=not use_sep)
        before, baseline_done = None, False

        def whole_rewrite():
            return rewrite_text(original, filename=in_path, helper=H.load_helper(module_text=original), max_version=cap)

        if use_sep:
            rewritten = not res.already_instrumented and not res.meta.get("below_helper_target") \
                and res.transformed_sha256 != res.original_sha256
            if not rewritten or not seplink.callers(res.module):
                sep_why = "the module was not instrumented (nothing to link)"
                log.info("HBFCC_LINK=separate: %s; building whole-program", sep_why)
            elif k.separate_cap is None:
                before, baseline_done = _baseline_stats(base_thread, base_cp, tmpdir), True
                if before is None:
                    sep_why = "no plain build (baseline ptxas failed): HBFCC_SEPARATE_CAP=plain has no registers"
                    log.warning("HBFCC_LINK=separate: %s; building whole-program", sep_why)
            if sep_why is not None:
                use_sep = False
                if rewritten:                 # the rewrite left the helpers out: link them (an unchanged module has none)
                    res = whole_rewrite()

        def bound_before(res):
            """The launch bound decided before the build (docs/design.md "Launch bound"): (res, unbounded)."""
            nonlocal before, baseline_done
            if k.launch_bound and not k.occupancy_guard and base_thread is not None and not res.already_instrumented \
                    and res.transformed_sha256 != res.original_sha256 \
                    and any(t is None for t in occupancy.entry_threads(res.module).values()):
                if not baseline_done:
                    before, baseline_done = _baseline_stats(base_thread, base_cp, tmpdir), True
                dec = occupancy.launch_plan_before(res.module, _entry_registers(before, res.module, reloc),
                                                   seplink.callers(res.module), ucaps["maxrregcount"]) \
                    if before is not None else None
                if dec is not None and any(d["applied"] for d in dec.values()):
                    return _with_stage(res, occupancy.LAUNCH_PASS_NAME, dec, occupancy.launch_stage), res
                if dec is not None:                      # decided: no entry needs it
                    return replace(res, meta=dict(res.meta, **{occupancy.LAUNCH_PASS_NAME: dec})), None
            return res, None

        def local_helpers(res):
            """A relocatable build: the module's linked helper functions made module-local (hbfcc/rdc.py)."""
            names = rdc.helper_functions(res.module) if reloc and not use_sep and res.module is not None \
                else frozenset()
            return _with_stage(res, rdc.STAGE_NAME, {"local": sorted(names)}, rdc.stage) if names else res

        res, unbounded = bound_before(local_helpers(res))  # unbounded: the rewrite without the bound, when it was set
        if not k.nvcc_step:
            os.makedirs(os.path.dirname(work), exist_ok=True)
        # a module exporting a device function that reaches a helper: its device functions capped (hbfcc/rdc.py)
        df_cap = rdc.device_function_cap(res.module, ucaps) if sass and rdc.STAGE_NAME in res.meta else None
        rargs = [real] + rdc.with_device_function_cap(wargs, df_cap) + ([] if user_v else ["-v"]) \
            + _split_compile(wargs, k, res, sass)
        defer_why = _defer_unsupported(k, res, sass, out_path, reloc, use_sep, unbounded, base_thread) \
            if k.defer != "0" else None
        if k.defer != "0" and defer_why is None:
            rc = _deferred(res, k, choice, args, rargs, work, in_path, out_path, arch, cap, instead_of, user_v,
                           base_thread, base_cp, tmpdir)
            if rc is not None:
                return rc
            defer_why = "the artifact store could not keep the rewritten PTX"
        if k.defer != "0":
            log.info("HBFCC_DEFER=%s: %s: assembling the rewrite now (eager)", k.defer, defer_why)
        cp = None
        if use_sep:
            try:
                body = _hot_registers(original, work, out_path, rargs, cap) \
                    if k.separate_cap == knobs.SEPARATE_CAP_BODY else None   # the body's own need: the stub build
                caps, why = seplink.entry_caps(res.module, _registers(before) if before is not None else {},
                                               k.separate_cap, seplink.callers(res.module), body)
                res = _with_stage(res, seplink.STAGE_NAME, {"caps": caps, "helper_cap": seplink.helper_cap(caps),
                                                            "cap_decisions": why}, seplink.stage)
                atomic_write_text(work, res.text, fsync=False)
                cp, sep_info = _separate_build(res, real, wargs, out_idx, arch, user_v, helper, k, tmpdir)
                log.warning("HBFCC_LINK=separate built %s: EXPERIMENTAL -- on the H100 such builds ran no faster than "
                            "whole-program ones and 3 of 32 stress cases did not end (2026-12-06), with the body's "
                            "cap and call isolation slower still and one more hang (2026-12-07; docs/hbfcc.md): "
                            "do not report modeled times from them", in_path)
            except HbfError as e:
                sep_why = str(e)
                log.warning("HBFCC_LINK=separate: %s; building whole-program", sep_why)
                use_sep = False
                res, unbounded = bound_before(local_helpers(whole_rewrite()))
        def rebuild(names, pg=(), ec=()):  # HBFCC_FULL_WARP=auto: these entries' groups all full-warp, those in `pg`
            r = rewrite_text(original, filename=in_path, helper=helper, max_version=cap, full_warp_all=names,
                             prefetch_group_in=pg, early_clock_in=ec)   # with the group prefetches, those in `ec`
            return bound_before(local_helpers(r))[0]          # with the early clock (the knobs at auto)
        extras = _auto_extras(k)
        fw_pre = None
        if cp is None:
            atomic_write_text(work, res.text, fsync=False)
            # auto's `all` build runs beside the first one (its candidates are known from the rewrite)
            if k.full_warp == "auto" and sass and not use_sep and not k.occupancy_guard and out_path is not None \
                    and not res.already_instrumented:
                fw_pre = _FullWarpPrebuild.start(res, rebuild, rargs, work, out_path, tmpdir, extras=extras)
            cp = _run_capture(rargs)
        if cp.returncode != 0 and unbounded is not None:
            fw_pre = _FullWarpPrebuild.discard(fw_pre)      # built with the bound the retry drops
            log.warning("launch bound: ptxas rejected the PTX with it (exit %d); building without it", cp.returncode)
            decs = res.meta[occupancy.LAUNCH_PASS_NAME]
            for d in decs.values():
                d["applied"], d["maxntid"] = False, None
                d["reason"] = f"launch_bound build failed (ptxas exit {cp.returncode})"
            res, unbounded = replace(unbounded, meta=dict(unbounded.meta, **{occupancy.LAUNCH_PASS_NAME: decs})), None
            atomic_write_text(work, res.text, fsync=False)
            cp = _run_capture(rargs)
        _relay(cp, user_v)
        if cp.returncode != 0:
            _FullWarpPrebuild.discard(fw_pre)     # its ptxas writes under tmpdir: done before the caller cleans it
            keep_dir = os.path.abspath(os.path.join(tmpdir, ".."))
            sha12 = res.original_sha256[:12]
            if k.nvcc_step:
                keep = os.path.join(keep_dir, f"hbfcc-failed-{sha12}.orig.ptx")
                Path(keep).write_text(original)
                what = f"rewritten: {in_path}, original kept at {keep}"
                repro = rargs
            else:
                keep = os.path.join(keep_dir, f"hbfcc-failed-{sha12}.ptx")
                Path(keep).write_text(res.text)
                what = f"rewritten PTX kept at {keep} (the input {in_path} is unchanged)"
                repro = [keep if x == work else x for x in rargs]
            print(f"hbfcc-ptxas: error: the real ptxas rejected the rewritten PTX (exit {cp.returncode}; "
                  f"{real}, chosen by {choice.source}); {what}\n  reproduce: {shlex.join(repro)}",
                  file=sys.stderr)
            return cp.returncode
        if base_thread is not None and not baseline_done:
            before = _baseline_stats(base_thread, base_cp, tmpdir)
        after = build_stats(cp.stdout + cp.stderr, out_path) if sass else None
        post_bound = bool(k.occupancy_guard)     # the guard's .maxnreg, like a post-build bound: auto keeps `1`
        if k.occupancy_guard and before is not None and after is not None and not res.already_instrumented:
            res, cp, after = _occupancy_guard(res, work, out_path, rargs, before, after, cp, user_v, original, cap)
        if occupancy.LAUNCH_PASS_NAME in res.meta:         # decided before the build: its facts
            _stage_facts(res.meta[occupancy.LAUNCH_PASS_NAME], after, LAUNCH_FACTS)
        elif k.launch_bound and before is not None and after is not None and not res.already_instrumented \
                and not use_sep:
            res, cp, after = _launch_bound(res, work, out_path, rargs, before, after, cp, user_v, ucaps["maxrregcount"],
                                           reloc)
            # a bound applied after the build: HBFCC_FULL_WARP=auto's rebuilds would lack it, so auto stays at `1`
            post_bound = any(d.get("applied") for d in (res.meta.get(occupancy.LAUNCH_PASS_NAME) or {}).values())
        if k.full_warp == "auto" and after is not None and not res.already_instrumented and not use_sep \
                and not post_bound:
            res, cp, after = _full_warp_auto(res, rebuild, work, out_path, rargs, after, cp, user_v, reloc, fw_pre,
                                             extras=extras)
        else:
            _FullWarpPrebuild.discard(fw_pre)
        ptxas_info = {"path": real, "source": choice.source, "version": ptxas_version_text(real),
                      "argv": [real] + list(args), "returncode": cp.returncode, "target": arch,
                      "max_ptx_version": f"{cap[0]}.{cap[1]}", "instead_of": instead_of}
        doc = artifact.build(path=in_path, result=res, ptxas=ptxas_info, before=before, after=after)
        # what built this output: the knobs' marker (what Triton's cache key holds when it hashes our
        # --version) and the output's own hash, by which the runtime finds the record of the very cubin
        # Triton hands it (docs/hbfcc.md, "Cache coherence")
        from .toolchain import sha256_file
        doc["build"] = {"marker": marker_line(),
                        "output_sha256": sha256_file(out_path) if out_path and os.path.isfile(out_path) else None}
        if jit_target:                   # HBFCC_JIT: the plain build that gave the launch bound's registers
            doc["build"]["jit_launch_bound"] = {"plain_target": jit_target,
                                                "plain_build": before is not None}
        if k.defer != "0":               # HBFCC_DEFER asked, this module built eagerly: why
            doc["build"]["eager_because"] = defer_why
        # the plain cubin (the baseline build) kept for the runtime's HBF_NATIVE_MODULE=plain, or why not
        bcp = base_cp.get("cp")
        _keep_native_module(k, doc, os.path.join(tmpdir, "orig.o"),
                            "HBFCC_NATIVE_ENTRY=0" if not k.native_entry else
                            "HBFCC_BASELINE=0 (no plain build)" if not k.baseline else
                            "one of nvcc's ptxas steps (not kept for nvcc builds)" if k.nvcc_step else
                            "not an sm_XX cubin build" if not sass else
                            "a relocatable build (-c)" if reloc else
                            "the input is instrumented already" if res.already_instrumented else
                            "no plain build" if base_thread is None else
                            f"the plain build failed (ptxas exit {bcp.returncode if bcp is not None else '?'})"
                            if bcp is None or bcp.returncode != 0 else None)
        if k.link == "separate":         # HBFCC_LINK=separate asked: what served this module, and why
            doc["link"] = dict({"requested": "separate", "mode": "separate" if use_sep else "whole",
                                "fallback_reason": None if use_sep else sep_why},
                               **(sep_info if use_sep else {}))
            plain_regs = _registers(before) if before is not None else {}
            for e, d in doc["link"].get("cap_decisions", {}).items():   # the plain build may have ended after the caps
                d["plain_registers"] = plain_regs.get(e, d.get("plain_registers"))
        if rdc.STAGE_NAME in res.meta:  # relocatable: what the helpers were compiled within, per entry
            doc.setdefault("link", {"requested": k.link, "mode": "whole", "fallback_reason": None})
            doc["link"][rdc.RECORD_KEY] = rdc.record(res.module, res.meta, ucaps, df_cap,
                                                     _registers(after) if after is not None else {})
        if res.already_instrumented:
            prev = _lookup_prev(k, res.original_sha256)
            if prev is not None:
                doc["kernels"], doc["functions"] = prev["kernels"], prev["functions"]
                doc["admitted"] = prev["admitted"]
                doc["input"]["original_sha256"] = prev["input"]["original_sha256"]
                doc["input"]["below_helper_target"] = prev["input"].get("below_helper_target", False)
        out = Path(out_path) if out_path else Path(in_path)
        # an input hbfcc had rewritten already is no original PTX: its record never enters the store
        _emit_artifact(doc, out, k, sidecar=_sidecar_wanted(k, out), store=not res.already_instrumented)
        if res.dumps is not None:
            res.dumps.json("artifact", doc)
        if not doc["input"]["below_helper_target"]:     # rewrite.py warned once for the module
            warn_not_admitted(doc["kernels"], f" ({artifact.image_target(doc)} image of {in_path})"
                              if k.nvcc_step else "")
        return 0
    finally:
        if base_thread is not None:
            base_thread.join()     # an error in the rewrite: let the baseline ptxas end before its dir goes
        shutil.rmtree(tmpdir, ignore_errors=True)


def _keep_native_module(k: knobs.Knobs, doc: dict, plain: str, why: Optional[str]) -> None:
    """The module's PLAIN cubin -- hbfcc-ptxas's baseline build: the original PTX with the caller's own ptxas options,
    the machine code of its native entries without hbfcc's constants in the module -- kept in the artifact store
    (hbfcommon.artifact.store_native_module: content-addressed, written atomically) and recorded as
    ``doc["native_module"]`` for the runtime's HBF_NATIVE_MODULE=plain (docs/design.md "Native entries in graphs");
    else ``native_module`` null with ``native_module_reason`` (``why``, or what stopped it here)."""
    if why is None and not any(kk.get("native_entry") for kk in doc.get("kernels", [])):
        why = "no kernel has a native entry"
    data = b""
    if why is None:
        try:
            data = Path(plain).read_bytes()
        except OSError as e:
            why = f"the plain build's output cannot be read ({e.strerror or e})"
        else:
            if not data.startswith(b"\x7fELF"):
                why = "the plain build's output is not a cubin"
    if why is None:
        try:
            doc["native_module"] = artifact.store_native_module(_store_dir(k), data)
            return
        except OSError as e:
            why = f"the artifact store cannot keep it ({e.strerror or e})"
            log.warning("cannot keep the plain cubin in the artifact store %s: %s", _store_dir(k), e)
    doc["native_module"] = None
    doc["native_module_reason"] = why


def _defer_unsupported(k: knobs.Knobs, res, sass: bool, out_path: Optional[str], reloc: bool, use_sep: bool,
                       unbounded, base_thread) -> Optional[str]:
    """Why HBFCC_DEFER=1 cannot defer this module's instrumented build (None: it can). Deferred is a
    plain ``sm_XX`` cubin build with ``-o`` (Triton's) whose instrumented build is one ptxas run of a text
    decided before it; anything decided after an instrumented build, or a build whose output embeds the
    PTX, is built eagerly."""
    from . import occupancy
    if k.nvcc_step:
        return "one of nvcc's ptxas steps (fatbinary embeds the PTX ptxas reads)"
    if not sass or out_path is None:
        return "not an sm_XX cubin build with -o"
    if reloc:
        return "a relocatable build (-c)"
    if use_sep or k.link == "separate":
        return "HBFCC_LINK=separate"
    if k.occupancy_guard:
        return "HBFCC_OCCUPANCY_GUARD=1 (decided after an instrumented build)"
    if res.already_instrumented:
        return "the input is instrumented already"
    if res.meta.get("below_helper_target") or res.transformed_sha256 == res.original_sha256:
        return "the module was not instrumented (its build is the plain one)"
    if unbounded is not None:
        return "a launch bound applies (a ptxas that rejects it is retried without: decided at the build)"
    if occupancy.LAUNCH_PASS_NAME not in res.meta and k.launch_bound \
            and any(t is None for t in occupancy.entry_threads(res.module).values()):
        return "an entry without a declared block size whose launch bound is decided after the build"
    if base_thread is None:
        return "no plain build"
    return None


def _deferred(res, k: knobs.Knobs, choice, args: list[str], rargs: list[str], work: str, in_path: str,
              out_path: str, arch: str, cap, instead_of, user_v: bool, base_thread, base_cp: dict,
              tmpdir: str) -> Optional[int]:
    """HBFCC_DEFER=1 (hbfcommon/deferred.py): the output is the plain build (the baseline ptxas run: the
    original PTX with the caller's options; file names do not enter a cubin), the rewrite goes to the store
    with the recipe of the eager build (``rargs``, its input and output as tokens) in the record -- or, for a module
    HBFCC_FULL_WARP=auto decides from ptxas's builds, the original PTX with an eager recipe
    (:func:`hbfcommon.deferred.eager_recipe`). Returns ptxas's exit status; None when the store cannot keep what it
    must (the caller then builds eagerly)."""
    from hbfcommon import deferred

    from .toolchain import build_stats, ptxas_version_text, sha256_file
    real = choice.path
    store = _store_dir(k)
    # HBFCC_FULL_WARP=auto keeps `all` per entry from ptxas's register counts of both builds, which assembling one
    # stored rewrite cannot decide: a module with entries it decides keeps its ORIGINAL PTX instead, and its deferred
    # build runs hbfcc-ptxas eagerly on it (as HBFCC_DEFER=rewrite's does): the eager cubin, byte for byte
    eager = _full_warp_candidates(res) if k.full_warp == "auto" else []
    try:
        if eager:
            orig_sha = deferred.keep_original(store, Path(in_path).read_bytes())   # the bytes hbfcc-ptxas read
        else:
            ptx_sha = deferred.store_ptx(store, res.text)
    except OSError as e:
        log.warning("HBFCC_DEFER=1: cannot keep the %s PTX in the artifact store %s (%s)",
                    "original" if eager else "rewritten", store, e)
        return None
    base_thread.join()
    bcp = base_cp.get("cp")
    if bcp is None:             # the thread could not run it (its error is in the thread's traceback)
        raise ToolchainError(f"cannot run the real ptxas {choice.path} on the original PTX", argv=[choice.path])
    orig_out = os.path.join(tmpdir, "orig.o")
    _relay(bcp, user_v)
    if bcp.returncode != 0:     # the real ptxas refuses the original: what it says, as it says it
        return bcp.returncode
    shutil.copyfile(orig_out, out_path)
    before = build_stats(bcp.stdout + bcp.stderr, orig_out)
    version = ptxas_version_text(real)
    plain_sha = sha256_file(out_path)
    if eager:
        recipe = deferred.eager_recipe(original_sha256=orig_sha, ptx_name=os.path.basename(in_path),
                                       argv=deferred.tokenized(args, in_path, out_path),
                                       env=deferred.builder_env(os.environ, real),
                                       plain_sha256=plain_sha, pythonpath=str(Path(__file__).resolve().parent.parent),
                                       why=f"HBFCC_FULL_WARP=auto decides {', '.join(eager)} from both builds")
        log.info("HBFCC_DEFER=1: %s: %s; its deferred build runs hbfcc-ptxas eagerly on the kept original PTX",
                 in_path, recipe["why"])
    else:
        argv = deferred.tokenized(rargs, work, out_path)
        recipe = {"ptx_sha256": ptx_sha, "ptx_name": os.path.basename(work), "argv": argv,
                  "plain_output_sha256": plain_sha, "key": deferred.recipe_key(ptx_sha, argv, version)}
    ptxas_info = {"path": real, "source": choice.source, "version": version,
                  "argv": [real] + list(args), "returncode": bcp.returncode, "target": arch,
                  "max_ptx_version": f"{cap[0]}.{cap[1]}", "instead_of": instead_of}
    doc = artifact.build(path=in_path, result=res, ptxas=ptxas_info, before=before, after=None)
    doc["build"] = {"marker": marker_line(), "output_sha256": plain_sha}
    doc["deferred"] = recipe
    out = Path(out_path)
    _emit_artifact(doc, out, k, sidecar=_sidecar_wanted(k, out), store=True)
    if res.dumps is not None:
        res.dumps.json("artifact", doc)
    if not doc["input"]["below_helper_target"]:
        warn_not_admitted(doc["kernels"])
    return 0


def _separate_build(res, real: str, wargs: list[str], out_idx: int, arch: str, user_v: bool, helper,
                    k: knobs.Knobs, tmpdir: str):
    """HBFCC_LINK=separate (hbfcc/seplink.py): ``ptxas -c`` of the rewritten module (the caller's options
    kept) into an object, the helper object (cached), ``nvlink`` into the caller's output. Returns (the
    ptxas -c process, the artifact's ``link`` facts); raises ToolchainError (the whole route then builds)."""
    from . import seplink
    from .toolchain import ptxas_version_text
    meta = res.meta[seplink.STAGE_NAME]
    out_path = _out_path(wargs, out_idx)
    obj = os.path.join(tmpdir, "kernel.o")
    cargs = list(wargs)
    cargs[out_idx] = "--output-file=" + obj if cargs[out_idx].startswith("--output-file=") else obj
    argv = [real] + cargs + ["-c"] + ([] if user_v else ["-v"])
    cp = _run_capture(argv)
    if cp.returncode != 0:
        raise ToolchainError(f"ptxas -c failed on the separate-link module (exit {cp.returncode}): "
                             f"{cp.stderr.strip()[-500:]}", argv=argv, returncode=cp.returncode)
    ho = seplink.helper_object(helper.path, helper.sha256, meta["helper_cap"], real, ptxas_version_text(real), arch,
                               k.cache_dir, tmpdir, _run_capture, check=lambda: H.load_helper(helper.path))
    hpath = os.path.join(tmpdir, "helper-link.o")
    Path(hpath).write_bytes(ho.data)
    nvlink = seplink.nvlink_beside(real)
    nv = [nvlink, f"-arch={arch}", obj, hpath, "-o", out_path]
    ncp = _run_capture(nv)
    if ncp.returncode != 0:
        raise ToolchainError(f"nvlink failed (exit {ncp.returncode}): {ncp.stderr.strip()[-500:]}", argv=nv,
                             returncode=ncp.returncode)
    sys.stderr.write(ncp.stderr)
    return cp, {"caps": dict(meta["caps"]), "helper_cap": meta["helper_cap"],
                "cap_mode": "plain" if k.separate_cap is None else "body" if k.separate_cap == knobs.SEPARATE_CAP_BODY
                else "fixed", "cap_decisions": meta.get("cap_decisions") or {},
                "helper_object": {"sha256": ho.sha256, "key": ho.key, "cached": ho.cached, "path": ho.path},
                "nvlink": nvlink, "ptxas_c_argv": argv}


def _newer_ptx(in_path: str, got: tuple[int, int], choice, cap: tuple[int, int]):
    """Input PTX newer than the chosen ptxas accepts. Chosen by a knob (or nvcc's toolkit): an error.
    Chosen as the ptxas Triton would run: this PTX cannot come from Triton with that ptxas (Triton emits
    the version its ptxas reports), so CUDA's ptxas (PATH, $CUDA_HOME) assembles it when it accepts
    it, with a warning, and the record says so (``ptxas.instead_of``); else an error."""
    from .toolchain import cuda_ptxas, max_ptx_version
    need = f"{got[0]}.{got[1]}"
    why = (f"{in_path}: PTX .version {need} is newer than {choice.path} (chosen by {choice.source}) "
           f"accepts ({cap[0]}.{cap[1]})")
    if choice.source not in ("HBFCC_REAL_PTXAS", "nvcc toolkit"):
        alt = cuda_ptxas()
        if alt is not None and alt.path != choice.path and max_ptx_version(alt.path) >= got:
            log.warning("%s; assembling with %s (%s) instead (set HBFCC_REAL_PTXAS to choose)", why, alt.path,
                        alt.source)
            return alt, {"path": choice.path, "source": choice.source, "max_ptx_version": f"{cap[0]}.{cap[1]}",
                         "why": f"input PTX .version {need}"}
    raise ConfigError(f"{why}; set HBFCC_REAL_PTXAS to a ptxas that takes this PTX", ptxas=choice.path)


def warn_not_admitted(kernels: Sequence[dict], where: str = "") -> None:
    """The compile-time word on non-admission: one logged warning per kernel that is not admitted,
    naming it and the reason (module documents' kernels, or link/compile verdicts with ``reason``)."""
    for kern in kernels:
        if kern["admitted"]:
            continue
        why = kern["reason"] if "reason" in kern else artifact.kernel_reason(kern)
        log.warning("kernel %s is NOT admitted%s: %s", kern["name"], where, why or "no reason recorded")


def _sidecar_wanted(k: knobs.Knobs, out: Path) -> bool:
    """Whether hbfcc-ptxas writes ``<output>.hbfcc.json``: never for nvcc's steps under hbfcc (the
    nvcc wrapper collects the records from its sink and writes its own beside nvcc's output); else by
    HBFCC_SIDECAR; ``auto``: not when the output lies directly in the system temp directory, where
    the caller's temporary files go (Triton's ``/tmp/tmp<random>.ptx.o``: Triton removes its own files,
    a record beside them would be left behind). The artifact store always has the record."""
    if k.nvcc_step and k.sink is not None:
        return False
    if k.sidecar != "auto":
        return k.sidecar == "1"
    try:
        return os.path.realpath(out.parent or ".") != os.path.realpath(tempfile.gettempdir())
    except OSError:
        return True


def _hot_registers(original: str, in_path: str, out_path: Optional[str], rargs: list[str], cap) -> dict:
    """Registers per function of the rewrite linked with the stub helper (helpers.stub_helper: calls that
    return at once), assembled with the same ptxas options: what the kernel's own code needs (its body,
    the sites, the inline path and its counters) without the real helpers' registers. {} when that
    build fails (the guard then uses the plain build's bound alone; HBFCC_SEPARATE_CAP=body builds whole).
    Used by the occupancy guard and by HBFCC_SEPARATE_CAP=body (hbfcc/seplink.py)."""
    from .rewrite import rewrite_text
    from .toolchain import build_stats
    d = tempfile.mkdtemp(prefix="hbfcc-hot.")
    try:
        text = rewrite_text(original, filename=in_path, helper=H.stub_helper(), max_version=cap).text
        sin, sout = os.path.join(d, "hot.ptx"), os.path.join(d, "hot.o")
        Path(sin).write_text(text)
        argv = [sin if x == in_path else (sout if out_path is not None and x == out_path else x) for x in rargs]
        if out_path is None:
            argv += ["-o", sout]
        cp = _run_capture(argv)
        if cp.returncode != 0:
            log.warning("the stub-helper build (the body's own registers) failed (ptxas exit %d)", cp.returncode)
            return {}
        return _registers(build_stats(cp.stdout + cp.stderr, sout))
    except HbfError as e:
        log.warning("no stub-helper build (the body's own registers): %s", e)
        return {}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _occupancy_guard(res, in_path: str, out_path: Optional[str], rargs: list[str], before, after, cp, user_v: bool,
                     original: str, cap):
    """hbfcc/occupancy.py: where the instrumented build holds fewer blocks per SM (by registers) than
    the plain one, the ``occupancy_guard`` stage adds ``.maxnreg`` to those entries of the rewritten
    module and ptxas assembles it again: the larger of the plain build's bound and what the kernel's own
    code needs (:func:`_hot_registers`), meant to keep the spills out of the kernel's hot path (measured on
    the H200: ptxas still spills the inline counters there; the guard stays experimental and off).
    The decision, per entry, goes into the artifact (``occupancy_guard``). A failed guarded build keeps
    the unguarded one, loudly."""
    from . import occupancy
    hot = _hot_registers(original, in_path, out_path, rargs, cap)
    decisions = occupancy.plan(res.module, _registers(before), _registers(after), hot)
    if any(d.get("applied") for d in decisions.values()):
        log.warning("HBFCC_OCCUPANCY_GUARD=1 caps %s with .maxnreg: EXPERIMENTAL -- on the H200 guarded "
                    "instrumented kernels ran slower than unguarded ones (stream reduce x6.6 vs x2.5, 2026-12-02; "
                    "docs/RESULTS.md, issue 13)",
                    ", ".join(f"{n} ({d['bound']})" for n, d in decisions.items() if d.get("applied")))
    return _reassemble(res, in_path, out_path, rargs, after, cp, user_v, occupancy.PASS_NAME, decisions,
                       occupancy.guard_stage, ("guarded_registers", "guarded_spill_store_bytes",
                                               "guarded_spill_load_bytes"))


def _baseline_stats(base_thread, base_cp: dict, tmpdir: str):
    """The plain build's facts (hbfcc.toolchain.build_stats) once the baseline ptxas has ended; None
    (with a warning) when it failed."""
    from .toolchain import build_stats
    base_thread.join()
    bcp = base_cp.get("cp")
    if bcp is not None and bcp.returncode == 0:
        return build_stats(bcp.stdout + bcp.stderr, os.path.join(tmpdir, "orig.o"))
    if bcp is not None:
        log.warning("baseline ptxas on the original PTX failed (exit %d)", bcp.returncode)
    return None


def _with_stage(res, name: str, decisions: dict, stage):
    """``res`` with the named stage applied to its module (the decisions in its meta): text, hashes, dumps."""
    from dataclasses import replace as _replace

    from .rewrite import print_text
    from .toolchain import sha256_bytes
    meta = dict(res.meta, **{name: decisions})
    module = stage(res.module, meta)
    text = print_text(module)
    if res.dumps is not None:
        res.dumps.module(name, module, decisions)
        res.dumps.text("print", text)
    return _replace(res, text=text, transformed_sha256=sha256_bytes(text.encode()), meta=meta, module=module)


LAUNCH_FACTS = ("bounded_registers", "bounded_spill_store_bytes", "bounded_spill_load_bytes")


def _stage_facts(decisions: dict, after, fact_keys: tuple[str, str, str]) -> None:
    """The registers and spills (``fact_keys``) of the entries a stage applied to, from the build that
    carried it."""
    for n, d in decisions.items():
        f = after.functions.get(n) if after is not None else None
        if d["applied"] and f is not None:
            d[fact_keys[0]], d[fact_keys[1]], d[fact_keys[2]] = f.registers, f.spill_stores, f.spill_loads


def _launch_bound(res, in_path: str, out_path: Optional[str], rargs: list[str], before, after, cp, user_v: bool,
                  user_cap: Optional[int] = None, reloc: bool = False):
    """hbfcc/occupancy.py: an entry without a declared block size whose instrumented registers would
    refuse a block the plain build launches gets ``.maxntid`` (the ``launch_bound`` stage), and ptxas
    assembles it again. The decision, per entry, goes into the artifact (``launch_bound``). ``user_cap``:
    the caller's ``-maxrregcount``; ``reloc``: a relocatable build (registers over each entry's call graph)."""
    from . import occupancy
    decisions = occupancy.launch_plan(res.module, _entry_registers(before, res.module, reloc),
                                      _entry_registers(after, res.module, reloc), user_cap)
    return _reassemble(res, in_path, out_path, rargs, after, cp, user_v, occupancy.LAUNCH_PASS_NAME, decisions,
                       occupancy.launch_stage, LAUNCH_FACTS)


FULL_WARP_STAGE = "full_warp_auto"


def _full_warp_candidates(res) -> list[str]:
    """The entries HBFCC_FULL_WARP=auto decides: built with `1`, with an issue group of more than SMALL_GROUP_SITES."""
    from .passes.timing import SMALL_GROUP_SITES
    funcs = (res.meta.get("timing") or {}).get("functions") or []
    return sorted(f["name"] for f in funcs if f.get("kind") == "entry"
                  and f.get("max_group_sites", 0) > SMALL_GROUP_SITES and f.get("full_warp_scope") == SMALL_GROUP_SITES)


def _auto_extras(k) -> tuple[str, ...]:
    """The knobs at `auto` that ride on HBFCC_FULL_WARP=auto's second build (its third variant, `all` + these):
    ``pg`` HBFCC_PREFETCH_GROUP, ``ec`` HBFCC_EARLY_CLOCK."""
    return tuple(x for x, v in (("pg", k.prefetch_group), ("ec", k.early_clock)) if v == "auto")


def _variant_key(names, extras: tuple[str, ...]) -> tuple:
    """``rebuild``'s arguments for the candidates ``names`` with ``extras``: (full-warp, prefetch, early clock)."""
    names = tuple(names)
    return (names, names if "pg" in extras else (), names if "ec" in extras else ())


class _FullWarpPrebuild:
    """HBFCC_FULL_WARP=auto's `all` build of every candidate entry, started beside the first build (the candidates are
    known from the rewrite before ptxas runs), into a file of its own: the wall time of an auto build is then that of
    the slower of the two, not their sum (stop 55: the two in sequence took a Triton compile x2.0 the `1` build's CPU
    and wall time). Its text, ptxas's process once done (``result``) and its output path."""

    def __init__(self, key: tuple, out: str, thread: threading.Thread, box: dict):
        self.key, self.out, self._thread, self._box = key, out, thread, box

    @property
    def res(self):
        """The `all` rewrite (after :meth:`result`)."""
        return self._box.get("res")

    @classmethod
    def start(cls, first, rebuild, rargs: list[str], work: str, out_path: str, tmpdir: str,
              extras: tuple[str, ...] = ()):
        """The rewrite and its ptxas run in a thread (the first build's ptxas is a process: no GIL contention but the
        rewrite's own); None when there is nothing to build or the output cannot be redirected. ``extras``: the
        knobs at auto the candidates get too (``_auto_extras``: the third variant, in a folder of its own)."""
        names = tuple(_full_warp_candidates(first))
        if not names:
            return None
        key = _variant_key(names, extras)
        d = os.path.join(tmpdir, "fwall" + "".join(extras))
        wpath, opath = os.path.join(d, os.path.basename(work)), os.path.join(d, "out.o")
        argv = [wpath if a == work else opath if a == out_path else
                ("--output-file=" + opath if a == "--output-file=" + out_path else a) for a in rargs]
        if wpath not in argv or not any(opath in a for a in argv):
            return None                       # an output form not recognized: never two ptxas on one file
        box: dict = {}

        def run():
            try:
                os.makedirs(d, exist_ok=True)
                r = rebuild(*key)
                atomic_write_text(wpath, r.text, fsync=False)
                box["res"] = r
                box["cp"] = _run_capture(argv)
            except Exception as e:  # noqa: BLE001 - any failure here: the sequential path builds it and says so
                box["error"] = e
        t = threading.Thread(target=run, name="hbfcc-fullwarp-all" + "".join(extras), daemon=True)
        t.start()
        return cls(key, opath, t, box)

    def result(self) -> Optional[subprocess.CompletedProcess]:
        self._thread.join()
        if "error" in self._box:
            log.info("HBFCC_FULL_WARP=auto: the `all` build beside the first failed to run (%s); building it now",
                     self._box["error"])
            return None
        return self._box.get("cp")

    @staticmethod
    def discard(pre) -> None:
        """Not used: wait for its ptxas (its files live in the call's temporary folder)."""
        if pre is not None:
            pre._thread.join()
        return None


def _full_warp_auto(res, rebuild, in_path: str, out_path: Optional[str], rargs: list[str], after, cp, user_v: bool,
                    reloc: bool, pre: Optional[_FullWarpPrebuild] = None, extras: tuple[str, ...] = ()):
    """HBFCC_FULL_WARP=auto: the module was built with `1` (the full-mask copies in single sites and groups of at most
    SMALL_GROUP_SITES); each entry with a larger group is built again with `all` (``rebuild(names)``: the rewrite with
    those entries' groups all full-warp, the same stages after it) and keeps `all` where ptxas gives it no more
    registers and no more spill bytes than `1` -- on an H100 (stop 53) `all` took the stream copies x1.36 -> x1.29 at
    the same registers and cost the unrolled reduce 168 -> 214 registers (x1.75 -> x2.08), and no static rule told
    the two apart. ``extras`` (the knobs at auto, :func:`_auto_extras`): a third variant, `all` with the candidates'
    group prefetches (`pg`, HBFCC_PREFETCH_GROUP) and/or early clock (`ec`, HBFCC_EARLY_CLOCK), preferred where it too
    gives no more registers or spills than `1` -- on an H100 (stop 58) the prefetches took the copies x1.29 -> x0.98 at
    the same registers and the unrolled reduce 168 -> 212 registers (x1.74 -> x2.02); the early clock (stop 53) a
    Little round x1.062 -> x1.055 and the unrolled reduce 168 -> 212 (x2.34). With extras the variant is the build
    started beside the first, and `all` is built (after it) only when some entry's variant does not fit
    (``registers_all`` null where it was not built). Where the entries choose differently,
    one more build holds exactly the choices; where none keeps a variant, the first build's output is put back. A
    variant ptxas rejects is not chosen, loudly. The decision per entry goes into the artifact (``full_warp_auto``:
    ``chosen`` `1`, `all` or the variant, e.g. `all+pg+ec`; ``variant`` and ``registers_variant`` with extras)."""
    from .toolchain import build_stats

    cands = _full_warp_candidates(res)
    if not cands or out_path is None or not os.path.isfile(out_path):
        _FullWarpPrebuild.discard(pre)
        return res, cp, after
    saved = {"1": out_path + ".hbfcc-fw1"}
    shutil.copyfile(out_path, saved["1"])

    def build(tag: str, key: tuple):
        """One variant (``rebuild``'s arguments ``key``) into out_path and its own copy (saved[tag]): the one built
        beside the first if there is one."""
        p = pre if pre is not None and pre.key == key else None
        c = p.result() if p is not None else None
        if c is not None:               # built beside the first build: its output into place
            r = p.res
            atomic_write_text(in_path, r.text, fsync=False)
            if c.returncode == 0:
                shutil.copyfile(p.out, out_path)
        else:
            r = rebuild(*key)
            atomic_write_text(in_path, r.text, fsync=False)
            c = _run_capture(rargs)
        st = build_stats(c.stdout + c.stderr, out_path) if c.returncode == 0 else None
        if st is not None:
            saved[tag] = f"{out_path}.hbfcc-fw{tag.replace('+', '')}"
            shutil.copyfile(out_path, saved[tag])
        return r, c, st

    def put(tag: str, r) -> None:
        atomic_write_text(in_path, r.text, fsync=False)
        shutil.copyfile(saved[tag], out_path)

    def first(why: Optional[str] = None):
        put("1", res)
        if why:
            log.warning("HBFCC_FULL_WARP=auto: %s; keeping the `1` build", why)
        return res

    def spills(st, n):
        f = st.functions.get(n)
        return 0 if f is None else (f.spill_stores or 0) + (f.spill_loads or 0)

    try:
        r1 = _entry_registers(after, res.module, reloc)
        vtag = "+".join(("all",) + tuple(extras)) if extras else None
        built: dict = {}
        regs: dict = {}

        def run(tag, key):
            built[tag] = r, c, st = build(tag, key)
            regs[tag] = _entry_registers(st, r.module, reloc) if st is not None else {}
            if st is None:
                log.warning("HBFCC_FULL_WARP=auto: ptxas rejected the `%s` build (exit %d)", tag, c.returncode)

        def fits(tag, n):
            st = built[tag][2]
            rv = regs[tag].get(n)
            return st is not None and r1.get(n) is not None and rv is not None and rv <= r1[n] \
                and spills(st, n) <= spills(after, n)
        # the variant first (built beside the first build); `all` only where it does not fit: the common case
        # stays at two ptxas runs (stop 58: a third beside them took a Triton compile x1.57 on two cores)
        if vtag:
            run(vtag, _variant_key(cands, extras))
        if not vtag or not all(fits(vtag, n) for n in cands):
            run("all", _variant_key(cands, ()))
        dec = {}
        for n in cands:
            chosen = next((tag for tag in (vtag, "all") if tag in built and fits(tag, n)), "1")
            d = {"chosen": chosen, "registers_1": r1.get(n), "registers_all": regs.get("all", {}).get(n)}
            if vtag:
                d["variant"], d["registers_variant"] = vtag, regs[vtag].get(n)
            bad = [f"`{t}`: ptxas exit {built[t][1].returncode}" for t in built if built[t][2] is None]
            if bad and chosen == "1":
                d["reason"] = "; ".join(bad)
            dec[n] = d
        chosen = {d["chosen"] for d in dec.values()}
        if chosen == {"1"}:
            final, fcp, fafter = first(), cp, after
        elif len(chosen) == 1:
            tag = chosen.pop()
            final, fcp, fafter = built[tag]
            put(tag, final)
        else:
            fw = tuple(n for n in cands if dec[n]["chosen"] != "1")
            xv = tuple(n for n in cands if dec[n]["chosen"] == vtag)
            r3, cp3, after3 = build("mixed", (fw, *_variant_key(xv, extras)[1:]))
            if after3 is None:
                for d in dec.values():
                    d["chosen"], d["reason"] = "1", f"the mixed build failed (ptxas exit {cp3.returncode})"
                final, fcp, fafter = first(f"ptxas rejected the mixed build (exit {cp3.returncode})"), cp, after
            else:
                final, fcp, fafter = r3, cp3, after3
        if user_v and fcp is not cp:
            sys.stdout.write(fcp.stdout)
            sys.stderr.write(fcp.stderr)
        log.info("HBFCC_FULL_WARP=auto: %s", ", ".join(
            f"{n} {d['chosen']} ({d['registers_1']} / {d['registers_all']}"
            + (f" / {d['registers_variant']}" if vtag else "") + " registers)" for n, d in dec.items()))
        return _with_decisions(final, dec), fcp, fafter
    finally:
        for f in saved.values():
            try:
                os.unlink(f)
            except OSError:
                pass


def _with_decisions(res, dec: dict):
    from dataclasses import replace as _replace
    return _replace(res, meta=dict(res.meta, **{FULL_WARP_STAGE: dec}))


def _registers(st) -> dict:
    return {n: f.registers for n, f in st.functions.items()}


def _entry_registers(st, module, reloc: bool) -> dict:
    """Registers per function; in a relocatable build an entry's is the largest over the functions it
    reaches in the module (hbfcc.rdc.graph_registers: what nvlink gives it), as a whole-program build has it."""
    regs = _registers(st)
    if not reloc:
        return regs
    from .rdc import graph_registers
    return {**regs, **{n: r for n, r in graph_registers(module, regs).items() if r is not None}}


def _reassemble(res, in_path: str, out_path: Optional[str], rargs: list[str], after, cp, user_v: bool,
                name: str, decisions: dict, stage, fact_keys: tuple[str, str, str]):
    """Apply the named stage to the rewritten module when any decision applies, assemble again, record
    the new register/spill facts in the decisions (``fact_keys``); a build ptxas rejects keeps the
    previous one, loudly (the decisions then say so)."""
    from dataclasses import replace as _replace

    from .toolchain import build_stats

    if not any(d["applied"] for d in decisions.values()):
        if res.dumps is not None:
            res.dumps.json(name, decisions)
        return _replace(res, meta=dict(res.meta, **{name: decisions})), cp, after
    staged = _with_stage(res, name, decisions, stage)
    atomic_write_text(in_path, staged.text, fsync=False)
    cp2 = _run_capture(rargs)
    if cp2.returncode != 0:
        log.warning("%s: ptxas rejected the PTX with it (exit %d); keeping the build without it",
                    name.replace("_", " "), cp2.returncode)
        atomic_write_text(in_path, res.text, fsync=False)
        cp3 = _run_capture(rargs)
        for d in decisions.values():
            if d["applied"]:
                d["applied"], d["reason"] = False, f"{name} build failed (ptxas exit {cp2.returncode})"
        return _replace(res, meta=staged.meta), cp3, build_stats(cp3.stdout + cp3.stderr, out_path)
    if user_v:
        sys.stdout.write(cp2.stdout)
        sys.stderr.write(cp2.stderr)
    after2 = build_stats(cp2.stdout + cp2.stderr, out_path)
    _stage_facts(decisions, after2, fact_keys)
    return staged, cp2, after2


def _store_dir(k: knobs.Knobs) -> Path:
    return k.artifact_dir if k.artifact_dir is not None else k.cache_dir / "artifacts"


def _lookup_prev(k: knobs.Knobs, transformed_sha: str) -> Optional[dict]:
    """The record of the rewrite that produced this (already instrumented) PTX: from this nvcc run's
    sink (its pre-rewritten .ptx inputs and earlier ptxas steps), else the store's by-transformed entry."""
    cands: list[Path] = []
    if k.sink is not None:
        cands.append(k.sink / "pre" / f"{transformed_sha}.hbfcc.json")
        cands += sorted(k.sink.glob(f"{transformed_sha}.*.json"))
    cands.append(_store_dir(k) / "by-transformed" / f"{transformed_sha}.hbfcc.json")
    for p in cands:
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not d.get("input", {}).get("already_instrumented"):
            return d
    return None


def _emit_artifact(doc: dict, out: Path, k: knobs.Knobs, *, sidecar: bool = True, store: bool = True) -> None:
    if sidecar:
        artifact.write(doc, out.with_name(out.name + ".hbfcc.json"))
    store_d = _store_dir(k)
    if store:
        try:
            artifact.write(doc, artifact.store_path(store_d, doc["input"]["original_sha256"]))
            artifact.write(doc, store_d / "by-transformed" / f"{doc['input']['transformed_sha256']}.hbfcc.json")
            out_sha = (doc.get("build") or {}).get("output_sha256")
            if out_sha:
                artifact.write(doc, artifact.output_store_path(store_d, out_sha))
        except OSError as e:
            log.warning("cannot write to the artifact store %s: %s", store_d, e)
    if k.sink is not None:
        artifact.write(doc, k.sink / f"{doc['input']['transformed_sha256']}.{os.getpid()}.json")


# ============================================================================================
# hbfcc (nvcc)
# ============================================================================================

def _lto_reason(args: Sequence[str]) -> Optional[str]:
    for i, a in enumerate(args):
        if a in ("-dlto", "--dlink-time-opt", "-dlink-time-opt") or a.startswith("--dlink-time-opt="):
            return f"{a}: link-time optimisation runs no ptxas, so hbfcc never sees the final PTX"
        if "lto_" in a and (a.startswith("-") or (i > 0 and args[i - 1] in ("-gencode", "--generate-code",
                                                                            "-code", "--gpu-code", "-arch",
                                                                            "--gpu-architecture"))):
            return f"{a}: LTO targets (lto_*) run no ptxas, so hbfcc never sees the final PTX"
        if a in ("--dont-use-profile", "-noprof"):
            return f"{a}: hbfcc intercepts ptxas through nvcc.profile; this option would bypass it"
    return None


def _nvcc_output(args: Sequence[str]) -> Optional[str]:
    for i, a in enumerate(args):
        if a in ("-o", "--output-file") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--output-file=") or a.startswith("-o="):
            return a.split("=", 1)[1]
    srcs = [a for a in args if not a.startswith("-") and a.endswith((".cu", ".ptx"))]
    if len(srcs) == 1:
        stem = Path(srcs[0]).stem
        for flag, ext in (("-c", ".o"), ("--compile", ".o"), ("-cubin", ".cubin"),
                          ("-fatbin", ".fatbin"), ("-ptx", ".ptx")):
            if flag in args:
                return stem + ext
    return None


def _prerewrite_ptx_inputs(args: list[str], tmp: Path) -> list[str]:
    """nvcc hands a .ptx *input* to ptxas by its own path, and the shim rewrites in place: that
    would modify the user's source file. So .ptx inputs are rewritten into copies first (the shim
    then sees instrumented PTX and leaves it; fatbinary embeds the copy)."""
    from .rewrite import rewrite_file

    out = list(args)
    for i, a in enumerate(args):
        if a.startswith("-") or not a.endswith(".ptx") or not os.path.isfile(a):
            continue
        if i > 0 and args[i - 1] in ("-o", "--output-file"):
            continue
        d = tmp / f"in{i}"
        d.mkdir()
        copy = d / os.path.basename(a)
        res = rewrite_file(a, copy)
        doc = artifact.build(path=a, result=res, ptxas=None, before=None, after=None)
        k = knobs.load()
        _emit_artifact(doc, copy, _nosink(k), sidecar=False, store=not res.already_instrumented)
        # where the ptxas steps that assemble the copy find this record (_lookup_prev), even when
        # the store cannot be written; not a module of the build itself (the steps' records are)
        artifact.write(doc, tmp / "pre" / f"{res.transformed_sha256}.hbfcc.json")
        if res.dumps is not None:
            res.dumps.json("artifact", doc)
        out[i] = str(copy)
    return out


def _nosink(k: knobs.Knobs) -> knobs.Knobs:
    import dataclasses
    return dataclasses.replace(k, sink=None)


def _jit_targets(args: list[str], env: dict) -> tuple[list[str], dict]:
    """HBFCC_JIT=1 (hbfcc/nvcc_targets.py): every real GPU target of the command line and of NVCC_PREPEND_FLAGS /
    NVCC_APPEND_FLAGS (rewritten in ``env``, nvcc's environment) made virtual, so nvcc embeds the rewritten PTX
    only and the driver JIT-compiles it at the first load; where that cannot apply, a warning and the command line
    as it was. HBFCC_JIT in ``env`` then says whether it applied (hbfcc-ptxas decides the launch bound of nvcc's
    PTX check steps by it). (arguments, the nvcc record's ``jit`` field)."""
    from . import nvcc_targets
    if not knobs.load().jit:
        return args, nvcc_targets.not_requested()
    pre, app = (shlex.split(env.get(v, "")) for v in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"))
    plan = nvcc_targets.jit_plan(args, pre, app)
    env["HBFCC_JIT"] = "1" if plan.applied else "0"
    if not plan.applied:
        log.warning("HBFCC_JIT=1: %s; building the SASS as without it", plan.reason)
        return args, plan.record()
    for var, old, new in (("NVCC_PREPEND_FLAGS", pre, plan.prepend), ("NVCC_APPEND_FLAGS", app, plan.append)):
        if list(new) != old:
            env[var] = shlex.join(new)
    log.info("HBFCC_JIT=1: PTX only for %s", ", ".join(plan.targets))
    return list(plan.args), plan.record()


def _is_ptx_mode(args: Sequence[str]) -> bool:
    return "-ptx" in args or "--ptx" in args


def nvcc_main(args: list[str]) -> int:
    from .shadow import shadow_nvcc
    from .toolchain import find_real_nvcc

    real = None
    # launcher mode: `hbfcc /path/to/nvcc ARGS` (CMAKE_CUDA_COMPILER_LAUNCHER)
    if args and not args[0].startswith("-") and os.path.isfile(args[0]) and os.access(args[0], os.X_OK) \
            and not args[0].endswith((".cu", ".ptx", ".o", ".c", ".cpp")):
        base = os.path.basename(args[0])
        if base in ("hbfcc",) or "hbfcc" in base:
            args = args[1:]            # CUDACXX=hbfcc and launcher=hbfcc together
        elif base.startswith("nvcc"):
            real = args[0]
            args = args[1:]
        else:
            raise ConfigError("hbfcc as a compiler launcher supports nvcc only", compiler=args[0])
    if any(a in ("--help", "-h", "--version", "-V") for a in args):
        return _nvcc_query(args, real)
    env_flags = shlex.split(os.environ.get("NVCC_PREPEND_FLAGS", "")) + \
        shlex.split(os.environ.get("NVCC_APPEND_FLAGS", ""))
    why = _lto_reason(list(args) + env_flags)
    if why:
        raise ConfigError(f"hbfcc refuses this build: {why}. Build without -dlto / lto_* targets "
                          "(use sm_XX or compute_XX targets).")
    if real is None:
        real = find_real_nvcc()
    nvcc = shadow_nvcc(real)
    env = dict(os.environ)
    args, jit = _jit_targets(args, env)
    sink = Path(tempfile.mkdtemp(prefix="hbfcc-sink."))
    env[knobs.ENV_SINK] = str(sink)
    try:
        args = _prerewrite_ptx_inputs(args, sink)
        rc = subprocess.call([nvcc] + list(args), env=env)
        if rc != 0:
            return rc
        docs = []
        for p in sorted(sink.glob("*.json")):
            try:
                docs.append(json.loads(p.read_text()))
            except ValueError:
                pass
        if _is_ptx_mode(args):
            _ptx_mode_artifact(args, docs)
            return 0
        if not any(a in _COMPILE_ONLY for a in args):     # a link step (maybe compile + link)
            _link_artifact(args, real, docs, jit)
            return 0
        out = _nvcc_output(args)
        if docs and out:
            kernels, targets = artifact.resolve_compile(docs)
            combined = {"schema": artifact.SCHEMA_ID + ".nvcc", "schema_version": artifact.SCHEMA_VERSION,
                        "nvcc_argv": [real] + list(args), "output": out,
                        "admitted": all(kk["admitted"] for kk in kernels), "kernels": kernels,
                        "targets": targets, "jit": jit, "modules": docs}
            artifact.write(combined, Path(out + ".hbfcc.json"))
            warn_not_admitted(kernels, f" in {out}")
        return 0
    finally:
        shutil.rmtree(sink, ignore_errors=True)


def _ptx_mode_artifact(args: Sequence[str], docs: list[dict]) -> None:
    """``hbfcc -ptx``: nvcc checks the PTX it writes with ``ptxas -arch=compute_XX`` on the output
    file itself, so the shim has already rewritten it in place and recorded it (``docs``); that record
    goes beside the output. Without one (no ptxas step ran), hbfcc rewrites the output here. An
    output that is already instrumented is never recorded as a new (empty) module."""
    from .ptx.parser import parse_module, read_ptx
    from .rewrite import is_instrumented, rewrite_text

    out = _nvcc_output(args)
    if not out or not os.path.isfile(out):
        return
    mine = [d for d in docs if os.path.abspath(d["input"]["path"]) == os.path.abspath(out)]
    mine.sort(key=lambda d: bool(d["input"]["already_instrumented"]))
    if mine:
        doc = mine[0]
    else:
        k = knobs.load()
        text = read_ptx(out)
        if is_instrumented(parse_module(text, filename=out)):
            from .toolchain import sha256_bytes
            doc = _lookup_prev(k, sha256_bytes(text.encode()))
            if doc is None:
                res = rewrite_text(text, filename=out)
                doc = artifact.build(path=out, result=res, ptxas=None, before=None, after=None)
        else:
            res = rewrite_text(text, filename=out)
            atomic_write_text(out, res.text, fsync=False)
            log.info("rewrote nvcc -ptx output %s", out)
            doc = artifact.build(path=out, result=res, ptxas=None, before=None, after=None)
            _emit_artifact(doc, Path(out), _nosink(k), sidecar=False)
            if res.dumps is not None:
                res.dumps.json("artifact", doc)
            if not doc["input"]["below_helper_target"]:
                warn_not_admitted(doc["kernels"])
    artifact.write(doc, Path(out + ".hbfcc.json"))


NVCC_HELP = """\
hbfcc: nvcc that instruments every kernel for hbfsim (docs/hbfcc.md).

Use it wherever nvcc goes: CUDACXX=hbfcc / CMAKE_CUDA_COMPILER=hbfcc / CUDA_NVCC_EXECUTABLE=hbfcc,
CMAKE_CUDA_COMPILER_LAUNCHER=hbfcc (then: hbfcc nvcc ARGS), or on the command line:
    hbfcc -arch=sm_90a -c k.cu -o k.o          any nvcc command line; every ptxas step nvcc runs
                                               rewrites the PTX (a shadow toolkit's ptxas)
    hbfcc rewrite IN.ptx -o OUT.ptx [--dump-stages DIR] [--no-link] [--helper H.ptx] [--passes LIST]
    hbfcc prebuild [--store DIR] [--triton-cache DIR] [-j N] [--force]
                                               assemble the instrumented builds HBFCC_DEFER=1 deferred
    hbfcc --hbfcc-version                      the version marker only
Each output gets <output>.hbfcc.json: which kernels are admitted (modeled) and why not, per
-gencode target; the artifact store keeps each module's record by its original PTX's sha256.
Refused: -dlto / lto_* targets (no ptxas runs) and --dont-use-profile. A kernel that is not
admitted is named, with the reason, in a warning on stderr. Triton: TRITON_PTXAS_PATH=hbfcc-ptxas.

Environment (hbfcc/knobs.py):
"""


def version_lines() -> str:
    """hbfcc's own --version text: the package version and the marker line (helper ABI, rewriter
    and helper sha), which holds no ``release X.Y`` (tools that parse nvcc's version find nvcc's)."""
    from importlib import metadata
    try:
        ver = metadata.version("hbfsim")
    except metadata.PackageNotFoundError:
        ver = "unknown (not installed)"
    return f"hbfcc (hbfsim {ver})\n{marker_line()}\n"


def _nvcc_query(args: list[str], real: Optional[str]) -> int:
    """``--help`` / ``--version``: hbfcc's own text, then the real nvcc's."""
    from .toolchain import find_real_nvcc
    if any(a in ("--help", "-h") for a in args):
        sys.stdout.write(NVCC_HELP + knobs.help_text() + "\n")
    else:
        sys.stdout.write(version_lines())
    try:
        real = real or find_real_nvcc()
    except ConfigError as e:
        sys.stdout.flush()
        print(f"hbfcc: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(f"wrapping {real}:\n" if "--version" in args or "-V" in args else
                     f"The options of the nvcc it wraps ({real}) follow.\n\n")
    sys.stdout.flush()
    return subprocess.call([real] + list(args))


_COMPILE_ONLY = ("-c", "--compile", "-ptx", "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin", "-E",
                 "--preprocess", "-M", "-MM", "--generate-dependencies", "-lib", "--lib")


def _link_inputs(args: Sequence[str]) -> list[str]:
    """Object files an nvcc link command consumes (including those in --options-file files)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--options-file", "-optf") and i + 1 < len(args):
            try:
                out += _link_inputs(shlex.split(Path(args[i + 1]).read_text()))
            except OSError:
                pass
            i += 2
            continue
        if not a.startswith("-") and a.endswith((".o", ".obj")):
            out.append(a)
        i += 1
    return out


def _link_artifact(args: Sequence[str], real: str, docs: list, jit: Optional[dict] = None) -> None:
    """After an nvcc link (or compile + link): resolve admission across the modules compiled by
    this command (``docs``) and those of the input objects' artifacts."""
    out = _nvcc_output(args) or "a.out"
    docs = list(docs)
    for o in _link_inputs(args):
        p = Path(o + ".hbfcc.json")
        if p.is_file():
            try:
                d = json.loads(p.read_text())
            except ValueError:
                continue
            docs += d.get("modules", [d])
    if docs:
        doc = artifact.resolve_link(docs, output=out, argv=[real] + list(args))
        if jit is not None:
            doc["jit"] = jit
        artifact.write(doc, Path(out + ".hbfcc.json"))
        warn_not_admitted(doc["kernels"], f" in {out}")
        refused_in_a_module = {x["name"] for m in docs for x in m.get("kernels", []) if not x["admitted"]}
        for kk in doc["kernels"]:
            if kk["admitted"] and kk["name"] in refused_in_a_module:
                log.info("kernel %s is admitted by the device link of %s", kk["name"], out)


def rewrite_main(args: list[str]) -> int:
    from .rewrite import rewrite_file
    ap = argparse.ArgumentParser(prog="hbfcc rewrite", description="Rewrite one PTX module (timing pass "
                                 "+ helper linking); writes OUT and OUT.hbfcc.json")
    ap.add_argument("input")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--dump-stages", metavar="DIR", help="write every stage of the pipeline here")
    ap.add_argument("--no-link", action="store_true", help="leave helper prototypes unresolved")
    ap.add_argument("--helper", help="helper PTX module (default: HBFCC_HELPER_PTX or the build tree)")
    ap.add_argument("--no-artifact", action="store_true")
    ap.add_argument("--passes", metavar="LIST", help="pass selection, e.g. timing,flags or timing,flags,mwait "
                    "(default: HBFCC_PASSES, else timing; see docs/hbfcc.md)")
    ns = ap.parse_args(args)
    passes = knobs.parse_passes(ns.passes, "--passes") if ns.passes is not None else None
    helper = None if ns.no_link else H.load_helper(ns.helper)   # the input is read (checked) by rewrite_file
    res = rewrite_file(ns.input, ns.output, helper=helper, link=not ns.no_link, dump_dir=ns.dump_stages,
                       passes=passes)
    if not ns.no_artifact:
        doc = artifact.build(path=ns.input, result=res, ptxas=None, before=None, after=None)
        artifact.write(doc, Path(ns.output + ".hbfcc.json"))
        if res.dumps is not None:
            res.dumps.json("artifact", doc)
        for kern in doc["kernels"]:
            state = "admitted" if kern["admitted"] else "NOT admitted: " + "; ".join(kern["not_admitted_reasons"])
            print(f"{kern['name']}: {kern['sites']} sites, {kern['waits']} waits, {state}", file=sys.stderr)
    return 0


def prebuild_main(args: list[str]) -> int:
    """``hbfcc prebuild``: assemble the deferred (HBFCC_DEFER=1) instrumented builds now, so no attached run
    pays for them at a kernel's load (the runtime then reads them back from the store)."""
    import concurrent.futures as cf

    from hbfcommon import artifact as A
    from hbfcommon import deferred
    ap = argparse.ArgumentParser(prog="hbfcc prebuild", description="Assemble the instrumented builds that "
                                 "hbfcc-ptxas deferred (HBFCC_DEFER=1) and cache them in the artifact store; "
                                 "exit 1 when any fails (each failure named)")
    ap.add_argument("--store", type=Path, default=None, help="artifact store (default: HBFCC_ARTIFACT_DIR, "
                    "else $HBFCC_CACHE_DIR/artifacts)")
    ap.add_argument("--triton-cache", type=Path, default=None, metavar="DIR",
                    help="only the kernels whose cubins lie in this Triton cache (TRITON_CACHE_DIR); a cubin there "
                         "compiled with HBFCC_DEFER=1 whose record is gone fails")
    ap.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--force", action="store_true", help="assemble again even where a build is cached")
    ns = ap.parse_args(args)
    store = ns.store or A.store_dir()
    errors: list[str] = []
    unknown: list[Path] = []
    ok = 0
    if ns.triton_cache is not None:
        recs = []
        for c in sorted(ns.triton_cache.rglob("*.cubin")):
            data = c.read_bytes()
            p = A.output_store_path(store, hashlib.sha256(data).hexdigest())
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                unknown.append(c)     # a plain ptxas's cubin, or a record gone: the runtime refuses it at load
                continue
            if deferred.recipe(rec) is not None:
                recs.append(rec)
    else:
        recs = deferred.records(store)
    todo = {deferred.recipe(r)["key"]: r for r in recs}    # one build per recipe
    with cf.ThreadPoolExecutor(max_workers=max(1, ns.jobs)) as ex:
        futs = {ex.submit(deferred.build, r, store=store, force=ns.force): r for r in todo.values()}
        for f in cf.as_completed(futs):
            names = ", ".join(deferred.kernel_names(futs[f]))
            try:
                b = f.result()
            except HbfError as e:
                errors.append(str(e))
                continue
            ok += 1
            print(f"{names}: {'cached' if b.cached else f'built in {b.build_ns / 1e9:.2f} s'} -> {b.path}")
    for e in errors:
        print(f"hbfcc prebuild: error: {e}", file=sys.stderr)
    if unknown:
        print(f"hbfcc prebuild: {len(unknown)} cubin(s) in {ns.triton_cache} have no record in {store} (compiled by a "
              f"plain ptxas, or their records are gone: the runtime refuses to model those): "
              + ", ".join(str(u) for u in unknown[:5]), file=sys.stderr)
    print(f"hbfcc prebuild: {ok} of {len(todo)} deferred build(s) ready in {store}", file=sys.stderr)
    return 1 if errors else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    _setup_logging()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "rewrite":
            return rewrite_main(args[1:])
        if args and args[0] == "prebuild":       # HBFCC_DEFER=1's instrumented builds, now
            return prebuild_main(args[1:])
        if args and args[0] == "ptxas":          # what the shadow toolkit's shim runs
            return _ptxas_entry(args[1:])
        if args and args[0] == "--hbfcc-version":
            print(marker_line())
            return 0
        return nvcc_main(args)
    except HbfError as e:
        return _fail(e, "hbfcc")
    except BrokenPipeError:          # `hbfcc --help | head`: the reader left; no traceback
        _quiet_stdout()
        return 141


def _quiet_stdout() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass


def _ptxas_entry(args: list[str]) -> int:
    try:
        return _ptxas(args)
    except HbfError as e:
        return _fail(e, "hbfcc-ptxas")


if __name__ == "__main__":
    sys.exit(main())
