"""``hbfd thermal validate``: fit the ROM on a geometry and print its error against the full-order
model on held-out inputs (step, square wave, burst), with the sample alignment made explicit.

    hbfd thermal validate [--geometry F] [--seconds S] [--hankel-blocks M] [--json] [--progress-s S]

A fresh fit on the packaged 8-high geometry takes about 3 minutes on a 2-core machine (the unit-step
responses, the held-out full-order runs and the python-control comparison dominate): each phase is
announced on stderr (the log); while it runs, a progress bar shows on a terminal and, when stderr is not
one (a log file, CI), a progress line follows every ``--progress-s`` seconds (5; 0 = neither), with steps done
and the time left where the phase counts steps. stdout keeps only the result.

Exit status 0 when the worst aligned error is within ``--tolerance-k`` (0.02 K), 1 otherwise,
2 on bad input.
"""
from __future__ import annotations

import json
import logging
import contextlib
import sys
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from hbfcommon.cliargs import Parser, parse
from hbfcommon.errors import HbfError

from .fom import PackageModel, build_model
from .geometry import GEOMETRY_DIR, load_geometry
from .limits import hbf_power_vector
from .rom import DEFAULT_DT_S, DEFAULT_HANKEL_BLOCKS, ThermalROM, compare_with_python_control, fit_rom

log = logging.getLogger(__name__)
DEFAULT_GEOMETRY = GEOMETRY_DIR / "hbf-package-8hi.json"
# Held-out amplitudes (W): a 700 W compute die (H200 power limit, notes §6), 50 W over the HBM
# stacks, the HBF stack at the OCP SG1 read point (5 W + 8.4e-11 J/B × 384 GB/s).
GPU_W, HBM_W = 700.0, 50.0
SG1_IDLE_W, SG1_J_PER_BYTE, SG1_BYTES_PER_S = 5.0, 8.4e-11, 384e9


class Progress:
    """Progress of a long validation: a line on the log when each phase starts and ends and, while it
    runs, a progress bar (tqdm) on a terminal, else (a log file, CI) a line every ``every_s`` seconds
    (from a ticker thread, so a phase inside one long solver call is still reported):
    ``[2/4] full-order model on the held-out traces: step 1200/3000 (40 %), 36 s, ~54 s left``.
    ``every_s`` 0 turns the periodic lines and the bar off (the start and end lines stay). ``bar``:
    True / False, or None for "when stderr is a terminal"; ``bar_file`` where the bar is drawn."""

    def __init__(self, n_phases: int, *, every_s: float = 5.0, logger: logging.Logger = log,
                 clock: Callable[[], float] = time.monotonic, bar: bool | None = None,
                 bar_file: Any = None) -> None:
        if every_s < 0:
            raise ValueError("every_s must be >= 0")
        self.n_phases, self.every_s, self.log, self.clock = n_phases, float(every_s), logger, clock
        self.bar_file = bar_file if bar_file is not None else sys.stderr
        self.bar = _isatty(self.bar_file) if bar is None else bool(bar)
        self._i = 0
        self._done = self._total = 0
        self._t0 = self._t_start = clock()

    def _step(self, done: int, total: int) -> None:     # the models' on_step callback: two stores, no I/O
        self._done, self._total = done, total

    def line(self, name: str) -> str:
        el = self.clock() - self._t_start
        if not self._total:
            return f"[{self._i}/{self.n_phases}] {name}: running, {el:.0f} s"
        frac = self._done / self._total
        left = f", ~{el / frac - el:.0f} s left" if self._done else ""
        return (f"[{self._i}/{self.n_phases}] {name}: step {self._done}/{self._total} ({100 * frac:.0f} %), "
                f"{el:.0f} s{left}")

    def _bar(self, name: str):
        """A tqdm bar for the phase (None: no bar); its total is set once the phase counts steps."""
        if not self.bar or self.every_s == 0:
            return None
        from tqdm import tqdm
        return tqdm(total=None, desc=f"[{self._i}/{self.n_phases}] {name}", unit="step", file=self.bar_file,
                    leave=False, dynamic_ncols=True, mininterval=0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Callable[[int, int], None]]:
        """Run one phase; yields the step callback (``on_step(done, total)``) for stepping loops."""
        self._i += 1
        self._done = self._total = 0
        self._t_start = self.clock()
        self.log.info("[%d/%d] %s ...", self._i, self.n_phases, name)
        stop = threading.Event()
        bar = self._bar(name)

        def tick() -> None:
            while not stop.wait(self.every_s if bar is None else min(self.every_s, 0.25)):
                if bar is None:
                    self.log.info("%s", self.line(name))
                    continue
                if self._total and bar.total != self._total:
                    bar.total = self._total
                bar.n = self._done
                bar.refresh()
        t = threading.Thread(target=tick, name="validate-progress", daemon=True) if self.every_s > 0 else None
        if t is not None:
            t.start()
        try:
            yield self._step
        finally:
            stop.set()
            if t is not None:
                t.join()
            if bar is not None:
                bar.close()
        self.log.info("[%d/%d] %s: done in %.1f s (%.0f s in all)", self._i, self.n_phases, name,
                      self.clock() - self._t_start, self.clock() - self._t0)


def _isatty(f: Any) -> bool:
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):
        return False


def _phase(progress: Progress | None, name: str):
    return progress.phase(name) if progress is not None else contextlib.nullcontext(None)


def operating_power(input_names: Sequence[str]) -> np.ndarray:
    p = hbf_power_vector(input_names, idle_w=SG1_IDLE_W, j_per_byte=SG1_J_PER_BYTE,
                         read_bytes_per_s=SG1_BYTES_PER_S)
    names = list(input_names)
    if "gpu" in names:
        p[names.index("gpu")] = GPU_W
    if "hbm" in names:
        p[names.index("hbm")] = HBM_W
    return p


def held_out_traces(input_names: Sequence[str], n_steps: int, dt_s: float, seed: int = 7) -> dict[str, np.ndarray]:
    """Three input shapes never used in the fit (the fit saw only 1 W unit steps)."""
    full = operating_power(input_names)
    names = list(input_names)
    hbf = np.array([n.startswith("hbf") for n in names])
    k = np.arange(n_steps)
    t = k * dt_s
    step = np.tile(full, (n_steps, 1))
    # square wave: compute die 300 <-> 700 W (10 s period), HBF idle <-> full read (4 s period)
    square = np.tile(full, (n_steps, 1))
    if "gpu" in names:
        square[:, names.index("gpu")] = np.where((t // 5.0) % 2 == 0, 700.0, 300.0)
    hbf_on = ((t // 2.0) % 2 == 0)
    idle = hbf_power_vector(input_names, idle_w=SG1_IDLE_W, j_per_byte=0.0, read_bytes_per_s=0.0)
    square[:, hbf] = np.where(hbf_on[:, None], full[hbf][None, :], idle[hbf][None, :])
    # bursts: 200 ms full-rate HBF bursts at random starts, compute die 500 W with 1 s 700 W bursts,
    # HBM random piecewise constant (100 ms)
    rng = np.random.default_rng(seed)
    burst = np.tile(idle, (n_steps, 1))
    starts = rng.choice(n_steps, size=max(1, n_steps // 150), replace=False)
    on = np.zeros(n_steps, bool)
    for s in starts:
        on[s:s + int(round(0.2 / dt_s))] = True
    burst[:, hbf] = np.where(on[:, None], full[hbf][None, :], idle[hbf][None, :])
    if "gpu" in names:
        g = np.full(n_steps, 500.0)
        for s in rng.choice(n_steps, size=max(1, n_steps // 500), replace=False):
            g[s:s + int(round(1.0 / dt_s))] = 700.0
        burst[:, names.index("gpu")] = g
    if "hbm" in names:
        seg = int(round(0.1 / dt_s))
        levels = rng.uniform(10.0, HBM_W, size=n_steps // seg + 1)
        burst[:, names.index("hbm")] = np.repeat(levels, seg)[:n_steps]
    return {"step": step, "square": square, "burst": burst}


def validate(model: PackageModel, rom: ThermalROM, *, seconds: float = 30.0,
             progress: Progress | None = None) -> dict[str, Any]:
    """ROM vs FOM on held-out inputs. Aligned: ROM T[k] vs FOM field at (k+1)Δt. Misaligned (to show
    the paper's one-sample feedthrough effect): ROM T[k] vs FOM field at kΔt. ``progress`` reports the
    two runs as two phases."""
    dt = rom.dt_s
    n = int(round(seconds / dt))
    traces = held_out_traces(model.input_names, n, dt)
    names = list(traces)
    P = np.stack([traces[k] for k in names])
    with _phase(progress, f"full-order model ({model.n_nodes} nodes) on {len(names)} held-out traces "
                          f"of {seconds:g} s") as on_step:
        t0 = time.perf_counter()
        fom = model.stepper(dt).run_many(P, on_step=on_step)  # n_tr×K×q, row k = end of step k
        t_fom = time.perf_counter() - t0
    with _phase(progress, f"ROM ({rom.order} states) on the same traces") as on_step:
        t0 = time.perf_counter()
        roms = []
        for i in range(len(names)):
            rom.reset()
            roms.append(rom.run(P[i]))
            if on_step is not None:
                on_step(i + 1, len(names))
        rom.reset()
        t_rom = time.perf_counter() - t0
    rows = []
    for i, name in enumerate(names):
        err = np.abs(roms[i] - fom[i])                        # K×q
        fom_start = np.vstack([np.full((1, fom.shape[2]), model.ambient_c), fom[i][:-1]])
        mis = np.abs(roms[i] - fom_start)
        d_u0 = rom.D @ P[i][0]
        swing = float(fom[i].max() - model.ambient_c)
        rows.append({
            "trace": name,
            "max_error_k": float(err.max()),
            "max_error_by_output_k": {o: float(err[:, j].max()) for j, o in enumerate(rom.output_names)},
            "p95_error_k": float(np.percentile(err, 95)),
            "swing_k": swing,
            "misaligned_first_sample_error_k": float(mis[0].max()),
            "feedthrough_d_u0_k": float(np.abs(d_u0).max()),
            "misaligned_minus_feedthrough_k": float(np.abs((roms[i][0] - fom_start[0]) - d_u0).max()),
            "misaligned_max_error_k": float(mis.max()),
        })
    R_fom = model.resistance_matrix()
    return {
        "geometry": model.geometry.name, "geometry_sha256": model.geometry.sha256,
        "fom_nodes": model.n_nodes, "rom_states": rom.order, "dt_s": dt, "seconds": seconds,
        "rom_meta": rom.meta, "traces": rows,
        "worst_error_k": max(r["max_error_k"] for r in rows),
        "dc_gain_max_diff_k_per_w": float(np.abs(rom.dc_gain() - R_fom).max()),
        "fom_seconds": t_fom, "rom_seconds": t_rom,
    }


def format_table(res: dict[str, Any]) -> str:
    lines = [f"geometry {res['geometry']} ({res['geometry_sha256'][:12]}): FOM {res['fom_nodes']} nodes, "
             f"ROM {res['rom_states']} states, Δt {res['dt_s'] * 1e3:.0f} ms, {res['seconds']:.0f} s per trace",
             f"{'trace':<8} {'max err K':>10} {'p95 err K':>10} {'swing K':>8} {'1st-sample misaligned K':>24} "
             f"{'D·u[0] K':>9}"]
    for r in res["traces"]:
        lines.append(f"{r['trace']:<8} {r['max_error_k']:>10.5f} {r['p95_error_k']:>10.5f} {r['swing_k']:>8.2f} "
                     f"{r['misaligned_first_sample_error_k']:>24.4f} {r['feedthrough_d_u0_k']:>9.4f}")
    worst = max(res["traces"], key=lambda r: r["max_error_k"])
    by = worst["max_error_by_output_k"]
    o = max(by, key=by.get)
    lines.append(f"worst aligned error {res['worst_error_k']:.5f} K ({worst['trace']}, output {o}); "
                 f"DC gain vs FOM R: {res['dc_gain_max_diff_k_per_w']:.2e} K/W")
    pc = res.get("python_control")
    if pc is not None and "skipped" in pc:
        lines.append(f"python-control comparison skipped: {pc['skipped']}")
    elif pc is not None:
        lines.append(f"python-control eigensys_realization, same data, r={pc['order']}: max Markov diff "
                     f"{pc['max_markov_diff_k_per_w']:.1e} K/W, DC diff {pc['max_dc_gain_diff_k_per_w']:.1e} K/W, "
                     f"{pc['seconds_python_control']:.2f} s vs ours {pc['seconds_ours']:.2f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = Parser(prog="hbfd thermal validate", description=__doc__.split("\n\n")[0].replace("``", "`"))
    ap.add_argument("--geometry", default=str(DEFAULT_GEOMETRY), metavar="FILE",
                    help="package geometry JSON (default: the packaged 8-high HBF package)")
    ap.add_argument("--seconds", type=float, default=30.0, metavar="S",
                    help="length of each held-out trace: step, square wave, bursts (default 30)")
    ap.add_argument("--hankel-blocks", type=int, default=DEFAULT_HANKEL_BLOCKS, metavar="M",
                    help=f"ERA Hankel blocks m of a fresh fit: 2m+2 unit-step samples "
                         f"(default {DEFAULT_HANKEL_BLOCKS})")
    ap.add_argument("--dt-ms", type=float, default=DEFAULT_DT_S * 1e3, metavar="MS",
                    help=f"ROM sample period (default {DEFAULT_DT_S * 1e3:g} ms)")
    ap.add_argument("--tolerance-k", type=float, default=0.02, metavar="K",
                    help="pass when the worst aligned error is at most this (default 0.02 K); exit 1 otherwise")
    ap.add_argument("--no-python-control", action="store_true", help="skip the python-control comparison")
    ap.add_argument("--committed", action="store_true",
                    help="validate the ROM the daemon loads (profiles/thermal/<name>.rom.npz) instead of a fresh fit")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--progress-s", type=float, default=5.0, metavar="S",
                    help="seconds between progress lines on stderr when it is not a terminal, where a progress "
                         "bar shows instead (default 5; 0 = only a line per phase, no bar)")
    args = parse(ap, sys.argv[1:] if argv is None else argv)
    if args.progress_s < 0:
        ap.fail(f"--progress-s must be >= 0 (got {args.progress_s})")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        geom = load_geometry(args.geometry)
        model = build_model(geom)
        dt = args.dt_ms / 1e3
        compare = not args.committed and not args.no_python_control
        pr = Progress(2 + (0 if args.committed else 2) + int(compare), every_s=args.progress_s)
        if args.committed:
            from . import ROM_DIR
            rom = ThermalROM.load(ROM_DIR / f"{geom.name}.rom.npz", geometry_sha256=geom.sha256)
            steps = None
        else:
            n = 2 * args.hankel_blocks + 2
            with pr.phase(f"fit: {n} unit-step samples on each of {len(model.input_names)} inputs of the "
                          f"full-order model") as on_step:
                steps = model.stepper(dt).unit_step_responses(n, on_step=on_step)
            with pr.phase(f"fit: ERA on a {args.hankel_blocks}-block Hankel matrix"):
                rom = fit_rom(model, dt_s=dt, hankel_blocks=args.hankel_blocks, steps=steps)
        res = validate(model, rom, seconds=args.seconds, progress=pr)
        if compare:
            with pr.phase("python-control eigensys_realization on the same data (the reference ERA)"):
                res["python_control"] = compare_with_python_control(steps, m=args.hankel_blocks, r=rom.order,
                                                                    dt_s=dt)
    except HbfError as e:
        print(f"hbfd thermal validate: {e}", file=sys.stderr)
        return 2
    res["tolerance_k"] = args.tolerance_k
    res["pass"] = res["worst_error_k"] <= args.tolerance_k
    if args.json:
        print(json.dumps(res, indent=1, default=float))
    else:
        print(format_table(res))
        print("PASS" if res["pass"] else f"FAIL: worst error above {args.tolerance_k} K")
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
