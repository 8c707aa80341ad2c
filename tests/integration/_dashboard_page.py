"""Draw a Grafana dashboard's panels from what Prometheus answered, as one self-contained HTML page (no Grafana).

Grafana is not packaged in Debian and no registry this project reaches ships it, so the monitoring test draws the
``gpufleet / Fleet`` dashboard itself: every panel where the dashboard's ``gridPos`` puts it (24 columns, rows of
30 px), its title, and its data as Grafana shows each panel type - ``stat``: the last value of each series with its
legend; ``table``: one row per series with its labels; ``timeseries``: one SVG line per series over the range
queried, with a legend (``legendFormat``'s ``{{label}}`` filled in) and the panel's unit. Inline CSS and SVG, no
script and nothing fetched. Each panel is a ``section[data-panel][data-series]``, so a reader (or a test) can see how
many series it drew.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

COLOURS = ("#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#96D98D")
UNITS = {"percent": "%", "percentunit": "", "celsius": " °C", "watt": " W"}
ROW_PX = 30


@dataclass
class Panel:
    """One panel: its dashboard JSON and the series Prometheus returned for its first target."""

    spec: dict[str, Any]
    series: list[dict[str, Any]] = field(default_factory=list)

    @property
    def target(self) -> dict[str, Any]:
        return dict(self.spec["targets"][0])


def legend(target: dict[str, Any], metric: dict[str, str]) -> str:
    """Grafana's legend of a series: ``legendFormat`` with ``{{label}}`` filled in, else the label set."""
    fmt = target.get("legendFormat") or "__auto"
    if fmt != "__auto":
        return re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)
    shown = {k: v for k, v in metric.items() if k != "__name__"}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else "value"


def _number(text: str, unit: str) -> str:
    value = float(text)
    shown = f"{value:.0f}" if value == int(value) and abs(value) < 1e12 else f"{value:.2f}"
    return shown + UNITS.get(unit, "")


def _stat(panel: Panel) -> str:
    unit = panel.spec.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    cells = []
    for i, series in enumerate(panel.series):
        value = series["values"][-1][1] if "values" in series else series["value"][1]
        cells.append(f'<div class="stat" style="color:{COLOURS[i % len(COLOURS)]}"><b>'
                     f'{html.escape(_number(value, unit))}</b><span>'
                     f'{html.escape(legend(panel.target, series["metric"]))}</span></div>')
    return '<div class="stats">' + "".join(cells) + "</div>"


def _table(panel: Panel) -> str:
    names = sorted({k for s in panel.series for k in s["metric"] if k != "__name__"})
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names) + "<th>Value</th>"
    rows = []
    for series in panel.series:
        value = series["values"][-1][1] if "values" in series else series["value"][1]
        cells = "".join(f"<td>{html.escape(series['metric'].get(n, ''))}</td>" for n in names)
        rows.append(f"<tr>{cells}<td>{html.escape(value)}</td></tr>")
    return f'<div class="table"><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def _timeseries(panel: Panel, width: int, height: int, start: float, end: float) -> str:
    unit = panel.spec.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    points = [[(float(t), float(v)) for t, v in s["values"]] for s in panel.series]
    values = [v for line in points for _t, v in line]
    low, high = min([*values, 0.0]), max([*values, 1.0])
    high = high + (high - low) * 0.1
    plot_w, plot_h = width - 60, height - 20

    def xy(t: float, v: float) -> str:
        x = 55 + (t - start) / max(end - start, 1.0) * plot_w
        y = 5 + (1 - (v - low) / (high - low)) * plot_h
        return f"{x:.1f},{y:.1f}"

    axis = "".join(f'<text x="50" y="{5 + (1 - f) * plot_h + 4:.0f}" text-anchor="end">'
                   f'{html.escape(_number(str(low + (high - low) * f), unit))}</text>'
                   f'<line x1="55" x2="{width - 5}" y1="{5 + (1 - f) * plot_h:.0f}" '
                   f'y2="{5 + (1 - f) * plot_h:.0f}" class="grid"/>' for f in (0.0, 0.5, 1.0))
    lines = "".join(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="2" '
                    f'points="{" ".join(xy(t, v) for t, v in line)}"/>' for i, line in enumerate(points))
    keys = "".join(f'<span><i style="background:{COLOURS[i % len(COLOURS)]}"></i>'
                   f'{html.escape(legend(panel.target, s["metric"]))}</span>' for i, s in enumerate(panel.series))
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}">{axis}{lines}</svg>'
            f'<div class="legend">{keys}</div>')


def render(dashboard: dict[str, Any], panels: list[Panel], start: float, end: float, caption: str,
           page_width: int = 1400) -> str:
    """The page: the dashboard's title, ``caption`` (say what drew it), and every panel at its grid position."""
    column = page_width / 24
    parts = []
    for panel in panels:
        grid = panel.spec["gridPos"]
        width, height = int(grid["w"] * column) - 14, grid["h"] * ROW_PX - 8
        kind = panel.spec["type"]
        if kind == "stat":
            body = _stat(panel)
        elif kind == "table":
            body = _table(panel)
        else:
            body = _timeseries(panel, width - 16, height - 70, start, end)
        if not panel.series:
            body = '<div class="nodata">No data</div>'
        parts.append(
            f'<section data-panel="{html.escape(panel.spec["title"])}" data-series="{len(panel.series)}" '
            f'style="grid-column:{grid["x"] + 1} / span {grid["w"]};grid-row:{grid["y"] + 1} / span {grid["h"]}">'
            f'<h2>{html.escape(panel.spec["title"])}</h2>{body}'
            f'<code>{html.escape(panel.target["expr"])}</code></section>')
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{html.escape(dashboard["title"])}</title><style>
body{{margin:0;padding:10px;background:#111217;color:#ccccdc;font:13px sans-serif;width:{page_width}px}}
h1{{font-size:18px;margin:4px 4px 0}} p.caption{{margin:2px 4px 10px;color:#8e8e9e}}
main{{display:grid;grid-template-columns:repeat(24,1fr);grid-auto-rows:{ROW_PX}px;gap:0}}
section{{background:#181b1f;border:1px solid #2c3235;border-radius:3px;margin:3px;padding:6px 8px;overflow:hidden;
position:relative}}
h2{{font-size:13px;margin:0 0 6px;color:#d8d9da}}
.stats{{display:flex;gap:18px;flex-wrap:wrap}} .stat b{{font-size:30px;display:block}} .stat span{{font-size:12px}}
table{{border-collapse:collapse;font-size:11px;width:100%}} th,td{{border-bottom:1px solid #2c3235;padding:2px 4px;
text-align:left;white-space:nowrap}} th{{color:#6e9fff}} .table{{overflow:hidden;max-height:170px}}
svg text{{fill:#8e8e9e;font-size:10px}} .grid{{stroke:#2c3235}}
.legend span{{margin-right:12px;font-size:11px}} .legend i{{display:inline-block;width:10px;height:3px;
margin-right:4px;vertical-align:middle}}
code{{position:absolute;bottom:3px;left:8px;font-size:10px;color:#5a5f66}} .nodata{{color:#8e8e9e;font-size:16px}}
</style></head><body><h1>{html.escape(dashboard["title"])}</h1><p class="caption">{html.escape(caption)}</p>
<main>{"".join(parts)}</main></body></html>
"""
