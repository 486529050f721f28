"""Small line plots as inline SVG text: axes with round-number ticks (linear or log), one polyline per
series (``class="series"``, ``data-points`` = how many points it draws), optional horizontal
reference lines, a legend. No JavaScript, no fonts or images from anywhere: the page stays one file."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
W, H = 760, 300
ML, MR, MT, MB = 70, 20, 30, 48


@dataclass(frozen=True)
class Series:
    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    step: bool = False              # draw as a step function (a CDF of quantiles, a rate over intervals)


@dataclass(frozen=True)
class HLine:
    y: float
    label: str


@dataclass(frozen=True)
class Plot:
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    hlines: tuple[HLine, ...] = ()
    log_x: bool = False
    x_fmt: Callable[[float], str] = field(default=lambda v: f"{v:g}")
    y_fmt: Callable[[float], str] = field(default=lambda v: f"{v:g}")
    y_min: float | None = None
    y_max: float | None = None


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0 ** e for e in range(a, b + 1) if lo <= 10.0 ** e * (1 + 1e-9) and 10.0 ** e <= hi * (1 + 1e-9)] \
        or [lo, hi]


def _points(s: Series) -> list[tuple[float, float]]:
    pts = [(float(x), float(y)) for x, y in zip(s.xs, s.ys)
           if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
    return pts


def render(p: Plot) -> str:
    """The plot as one ``<svg>`` element. At least one series must have a point (the caller says
    in words when there is nothing to plot)."""
    data = [(s, _points(s)) for s in p.series]
    allp = [pt for _, pts in data for pt in pts]
    if not allp:
        raise ValueError(f"plot {p.title!r}: no finite points")
    xs = [x for x, _ in allp if not p.log_x or x > 0]
    ys = [y for _, y in allp] + [h.y for h in p.hlines]
    x0, x1 = min(xs), max(xs)
    y0 = min(ys) if p.y_min is None else p.y_min
    y1 = max(ys) if p.y_max is None else p.y_max
    if p.log_x:
        x0, x1 = 10 ** math.floor(math.log10(x0)), 10 ** math.ceil(math.log10(x1 if x1 > x0 else x0 * 10))
        xt = log_ticks(x0, x1)
        fx = lambda x: ML + (math.log10(max(x, x0)) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (W - ML - MR)  # noqa: E731
    else:
        xt = nice_ticks(x0, x1)
        x0, x1 = min([x0] + xt), max([x1] + xt)
        if x1 == x0:
            x1 = x0 + 1
        fx = lambda x: ML + (x - x0) / (x1 - x0) * (W - ML - MR)  # noqa: E731
    yt = nice_ticks(y0, y1)
    y0, y1 = min([y0] + yt), max([y1] + yt)
    if y1 == y0:
        y1 = y0 + 1
    fy = lambda y: H - MB - (y - y0) / (y1 - y0) * (H - MT - MB)  # noqa: E731
    e = html.escape
    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
           f'role="img" aria-label="{e(p.title)}">',
           f'<title>{e(p.title)}</title>',
           f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="#fff" stroke="#999"/>']
    for v in xt:
        X = fx(v)
        out.append(f'<line x1="{X:.1f}" y1="{MT}" x2="{X:.1f}" y2="{H - MB}" stroke="#eee"/>'
                   f'<text x="{X:.1f}" y="{H - MB + 16}" text-anchor="middle" font-size="11">{e(p.x_fmt(v))}</text>')
    for v in yt:
        Y = fy(v)
        out.append(f'<line x1="{ML}" y1="{Y:.1f}" x2="{W - MR}" y2="{Y:.1f}" stroke="#eee"/>'
                   f'<text x="{ML - 6}" y="{Y + 4:.1f}" text-anchor="end" font-size="11">{e(p.y_fmt(v))}</text>')
    out.append(f'<text x="{(ML + W - MR) / 2}" y="{H - 8}" text-anchor="middle" font-size="12">{e(p.x_label)}</text>')
    out.append(f'<text x="14" y="{(MT + H - MB) / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 14 {(MT + H - MB) / 2})">{e(p.y_label)}</text>')
    for h in p.hlines:
        if y0 <= h.y <= y1:
            Y = fy(h.y)
            out.append(f'<line class="ref" x1="{ML}" y1="{Y:.1f}" x2="{W - MR}" y2="{Y:.1f}" stroke="#888" '
                       f'stroke-dasharray="4 3"/><text x="{W - MR - 4}" y="{Y - 3:.1f}" text-anchor="end" '
                       f'font-size="10" fill="#555">{e(h.label)}</text>')
    for i, (s, pts) in enumerate(data):
        if not pts:
            continue
        if p.log_x:
            pts = [(x, y) for x, y in pts if x > 0]
        c = PALETTE[i % len(PALETTE)]
        xy = []
        for j, (x, y) in enumerate(pts):
            if s.step and j:
                xy.append((fx(x), fy(pts[j - 1][1])))
            xy.append((fx(x), fy(y)))
        coords = " ".join(f"{X:.1f},{Y:.1f}" for X, Y in xy)
        out.append(f'<polyline class="series" data-series="{e(s.name)}" data-points="{len(pts)}" fill="none" '
                   f'stroke="{c}" stroke-width="1.6" points="{coords}"/>')
        if len(pts) == 1:
            X, Y = xy[0]
            out.append(f'<circle class="point" cx="{X:.1f}" cy="{Y:.1f}" r="3" fill="{c}"/>')
    out.append(f'<text x="{ML}" y="{MT - 10}" font-size="13" font-weight="bold">{e(p.title)}</text>')
    out.append("</svg>")
    return "".join(out)


def legend(p: Plot) -> str:
    """The plot's legend as an HTML list (colour swatch, series name, point count)."""
    items = []
    for i, s in enumerate(p.series):
        n = len(_points(s))
        items.append(f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
                     f'{html.escape(s.name)} <span class="n">({n} point{"s" if n != 1 else ""})</span></li>')
    return '<ul class="legend">' + "".join(items) + "</ul>"
