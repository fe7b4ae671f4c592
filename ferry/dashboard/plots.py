"""Server-side SVG plots: no JavaScript library to ship, nothing from a CDN (these hosts have no internet).

A line chart is all the dashboard needs (counts per tier over time, lag over time); drawing it here keeps
the pages working in any browser and the numbers testable as text.
"""

from __future__ import annotations

import datetime as dt
from html import escape

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 240, 56, 150, 16, 28
PALETTE = {"producer": "#1f77b4", "mirror": "#ff7f0e", "warehouse": "#2ca02c"}
# equal counts draw the lines on top of each other: a dash pattern per tier keeps each one visible
DASHES = {"producer": "", "mirror": "6 4", "warehouse": "2 3"}
EXTRA = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _clock(ms: float) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%m-%d %H:%M")


def line_chart(series: dict[str, list[tuple[float, float]]], x0: float, x1: float, title: str,
               y_label: str) -> str:
    """One polyline per series over [x0, x1] (x in ms); series names become the legend."""
    ymax = max((y for pts in series.values() for _, y in pts), default=0) or 1
    span = (x1 - x0) or 1
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + (x - x0) / span * iw

    def py(y: float) -> float:
        return PAD_T + ih - y / ymax * ih

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="sans-serif" font-size="11" role="img"><title>{escape(title)}</title>',
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{iw}" height="{ih}" fill="#fafafa" stroke="#ccc"/>']
    for i in range(5):
        y = ymax * i / 4
        out.append(f'<text x="{PAD_L - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
        out.append(f'<line x1="{PAD_L}" x2="{PAD_L + iw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>')
    for i in range(5):
        x = x0 + span * i / 4
        out.append(f'<text x="{px(x):.1f}" y="{H - 8}" text-anchor="middle">{_clock(x)}</text>')
    out.append(f'<text x="12" y="{PAD_T + ih / 2}" transform="rotate(-90 12 {PAD_T + ih / 2})" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    extra = iter(EXTRA * 50)
    for n, (name, pts) in enumerate(sorted(series.items())):
        colour = PALETTE.get(name) or next(extra)
        pts = sorted(pts)
        if pts:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline class="series" data-name="{escape(name)}" fill="none" stroke="{colour}" '
                       f'stroke-width="2" stroke-dasharray="{DASHES.get(name, "")}" points="{path}"/>')
            out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"><title>{escape(name)} '
                    f'{_clock(x)}: {y:.0f}</title></circle>' for x, y in pts]
        ly = PAD_T + 14 * n + 10
        out.append(f'<rect x="{W - PAD_R + 10}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{W - PAD_R + 24}" y="{ly + 1}">{escape(name[:22])}</text>')
    if not series:
        out.append(f'<text x="{PAD_L + iw / 2}" y="{PAD_T + ih / 2}" text-anchor="middle" fill="#888">'
                   'no data in this range</text>')
    out.append("</svg>")
    return "".join(out)


def flow_svg(tiers: dict[str, dict[str, int]], since: int, until: int, topic: str) -> str:
    """Counts per tier per 10-minute bucket of one topic: the lines part where a tier lags or loses."""
    series = {tier: [(int(b), float(n)) for b, n in buckets.items()] for tier, buckets in tiers.items()}
    return line_chart(series, since, until, f"{topic}: messages per 10 minutes, per tier", "messages")


def lag_svg(history: list[tuple[float, dict[str, int]]]) -> str:
    """Mirror lag per partition over the samples the dashboard took (one per poll)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for t, sample in history:
        for key, lag in sample.items():
            series.setdefault(key.split(" ", 1)[-1], []).append((t * 1000, float(lag)))
    x0 = history[0][0] * 1000 if history else 0
    x1 = history[-1][0] * 1000 if history else 1
    return line_chart(series, x0, max(x1, x0 + 1), "mirror lag per partition", "messages behind")
