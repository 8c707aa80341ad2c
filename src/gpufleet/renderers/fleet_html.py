"""The fleet report as one self-contained HTML page: inline CSS and SVG, no script, no external asset.

A row per host, a tile per GPU coloured by its level, each MIG GPU drawn as its memory slices with the GPU instances
where their placement puts them (profile, start, size; the MIG UUIDs in the tooltip), under them a tile per RDMA
port (state, rate, coloured by the port's checks) where the host has them, the checks that are not PASS
with their action, and the run's metadata. Stable ``data-*`` attributes name what a tile shows, for tools and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

#: Level -> (fill, text) colours of a tile; one place for the HTML page.
LEVEL_COLOURS: Mapping[str, tuple[str, str]] = {
    "PASS": ("#2e7d32", "#ffffff"),
    "INFO": ("#1565c0", "#ffffff"),
    "WARNING": ("#f9a825", "#1b1b1b"),
    "UNKNOWN": ("#6a1b9a", "#ffffff"),
    "CRITICAL": ("#c62828", "#ffffff"),
}
# Free memory slices of a MIG GPU, and the instances on them.
_FREE_SLICE = "#e0e0e0"
_INSTANCE = "#37474f"
_SLICE_W = 22
_BAR_H = 26

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;background:#fafafa;
color:#1b1b1b}
header{padding:14px 20px;background:#263238;color:#fff}
header h1{margin:0 0 4px;font-size:20px}
header dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:6px 0 0;font-size:12px}
header dt{opacity:.75}header dd{margin:0;font-family:ui-monospace,monospace}
main{padding:12px 20px}
.legend span{display:inline-block;padding:1px 8px;margin-right:6px;border-radius:3px;font-size:12px}
.host{background:#fff;border:1px solid #ddd;border-radius:6px;margin:12px 0;padding:10px 14px}
.host h2{margin:0 0 8px;font-size:16px;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.badge{padding:1px 8px;border-radius:3px;font-size:12px;font-weight:600}
.hostinfo{font-size:12px;color:#555;font-weight:400}
.gpus{display:flex;flex-wrap:wrap;gap:8px}
.gpu{width:200px;border-radius:5px;padding:6px 8px;box-sizing:border-box}
.gpu .idx{font-weight:700}.gpu .model{font-size:11px;opacity:.9;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}
.gpu .verdict{font-size:12px;font-weight:600;margin-top:2px}
.gpu .uuid{font:10px ui-monospace,monospace;opacity:.85;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.gpu svg{display:block;margin-top:4px;background:#fff;border-radius:3px}
.gpu svg text{font:10px ui-monospace,monospace;fill:#fff}
.error{color:#6a1b9a;font-weight:600}
.network{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-top:8px;font-size:12px}
.network .label{font-weight:700;margin-right:4px}
.port{border-radius:4px;padding:3px 6px;min-width:96px}
.port .name{font-weight:700}.port .state{font-size:11px;opacity:.9;white-space:nowrap}
table.problems{border-collapse:collapse;margin-top:8px;font-size:12px;width:100%}
table.problems th,table.problems td{border-top:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top}
table.problems td.level{font-weight:700}
"""


def _badge(level: str) -> str:
    fill, text = LEVEL_COLOURS[level]
    return f'<span class="badge" style="background:{fill};color:{text}">{escape(level)}</span>'


def _mig_svg(mig: Mapping[str, Any]) -> str:
    slots = int(mig["slots"])
    width = max(slots, 1) * _SLICE_W
    parts = [
        f'<svg class="mig" data-slots="{slots}" width="{width}" height="{_BAR_H}" viewBox="0 0 {width} {_BAR_H}" '
        f'role="img" aria-label="MIG memory slices">'
    ]
    for slot in range(slots):
        parts.append(
            f'<rect class="slice" data-slot="{slot}" x="{slot * _SLICE_W + 1}" y="1" width="{_SLICE_W - 2}" '
            f'height="{_BAR_H - 2}" fill="{_FREE_SLICE}"/>'
        )
    for inst in mig["instances"]:
        uuids = [str(c["uuid"]) for c in inst["compute"] if c.get("uuid")]
        tip = (
            f"MIG {inst['profile']} (GPU instance {inst['gi_id']}): placement start {inst['start']}, size "
            f"{inst['size']}" + "".join(f"\n{c['name']}: {c['uuid']}" for c in inst["compute"])
        )
        x = inst["start"] * _SLICE_W + 1
        w = inst["size"] * _SLICE_W - 2
        parts.append(
            f'<g class="mig-instance" data-profile="{escape(str(inst["profile"]))}" data-start="{inst["start"]}" '
            f'data-size="{inst["size"]}" data-gi-id="{inst["gi_id"]}" data-uuid="{escape(" ".join(uuids))}">'
            f"<title>{escape(tip)}</title>"
            f'<rect x="{x}" y="1" width="{w}" height="{_BAR_H - 2}" rx="3" fill="{_INSTANCE}"/>'
            f'<text x="{x + 3}" y="{_BAR_H / 2 + 4}">{escape(str(inst["profile"]).split(".")[0])}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _gpu_tile(gpu: Mapping[str, Any]) -> str:
    level = gpu["level"]
    fill, text = LEVEL_COLOURS[level]
    action = gpu["action"]
    tip = [
        f"GPU {gpu['index']} {gpu.get('name') or ''}",
        f"UUID {gpu.get('uuid')}",
        f"PCI {gpu.get('pci_bus_id')}",
        f"{level}, action {action}",
    ]
    tip += [f"{p['level']} {p['check']} [action {p['action']}]: {p['message']}" for p in gpu["problems"]]
    mig = gpu.get("mig")
    body = (
        f'<div class="idx">GPU {escape(str(gpu["index"]))}</div>'
        f'<div class="model">{escape(str(gpu.get("name") or "?"))}</div>'
        f'<div class="verdict" data-level="{level}">{escape(level)}'
        + (f' · <span class="action">{escape(action)}</span>' if action != "none" else "")
        + "</div>"
        f'<div class="uuid">{escape(str(gpu.get("uuid")))}</div>'
    )
    if mig is not None:
        body += _mig_svg(mig)
    return (
        f'<div class="gpu" data-gpu-index="{escape(str(gpu["index"]))}" data-uuid="{escape(str(gpu.get("uuid")))}" '
        f'data-level="{level}" data-action="{escape(action)}" data-mig="{"on" if mig else "off"}" '
        f'style="background:{fill};color:{text}" title="{escape(chr(10).join(tip))}">{body}</div>'
    )


def _network(network: Mapping[str, Any] | None) -> str:
    """The host's RDMA ports beside its GPUs: a tile per port coloured by its checks, and nvidia_peermem."""
    if not network:
        return ""
    tiles = []
    for port in network["ports"]:
        fill, text = LEVEL_COLOURS[port["level"]]
        state = f"{port.get('state')} / {port.get('phys_state')} · {port.get('rate')}"
        tiles.append(
            f'<div class="port" data-hca="{escape(str(port["hca"]))}" data-port="{escape(str(port["port"]))}" '
            f'data-level="{port["level"]}" data-state="{escape(str(port.get("state")))}" '
            f'data-rate="{escape(str(port.get("rate")))}" style="background:{fill};color:{text}" '
            f'title="{escape(port["name"] + " " + state + " (" + str(port.get("link_layer")) + ")")}">'
            f'<div class="name">{escape(port["name"])}</div><div class="state">{escape(state)}</div></div>'
        )
    if not tiles:
        tiles.append('<span class="port-none">no HCA port</span>')
    return (
        f'<div class="network" data-level="{network["level"]}" data-peermem="{escape(network["peermem"])}">'
        f'<span class="label">network</span>{_badge(network["level"])}{"".join(tiles)}'
        f'<span class="peermem">nvidia_peermem {escape(network["peermem"])}</span></div>'
    )


def _problem_rows(host: Mapping[str, Any]) -> str:
    if not host["problems"]:
        return ""
    rows = []
    for p in host["problems"]:
        fill, _text = LEVEL_COLOURS[p["level"]]
        where = p.get("port") or ("host" if p["gpu"] is None else f"GPU {p['gpu']}")
        rows.append(
            f'<tr class="problem" data-level="{p["level"]}" data-check="{escape(str(p["check"]))}" '
            f'data-gpu="{"" if p["gpu"] is None else p["gpu"]}" data-action="{escape(str(p["action"]))}">'
            f'<td class="level" style="color:{fill}">{escape(p["level"])}</td><td>{escape(where)}</td>'
            f'<td>{escape(str(p["check"]))}</td><td class="action">{escape(str(p["action"]))}</td>'
            f"<td>{escape(str(p['message']))}</td>"
            f"<td>{escape(repr(p['value']))} / {escape(repr(p['threshold']))}</td></tr>"
        )
    return (
        '<table class="problems"><thead><tr><th>level</th><th>where</th><th>check</th><th>action</th>'
        "<th>message</th><th>value / threshold</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _host_section(host: Mapping[str, Any]) -> str:
    info = []
    if host.get("driver_version"):
        info.append(f"driver {host['driver_version']}")
    if host.get("gpu_count") is not None:
        info.append(f"{host['gpu_count']} GPUs")
    if host.get("virtualization"):
        info.append(f"VM: {host['virtualization']}")
    if host["action"] != "none":
        info.append(f"action {host['action']}")
    head = (
        f'<h2><span class="hostname">{escape(host["name"])}</span>{_badge(host["level"])}'
        f'<span class="hostinfo">{escape(" · ".join(info))}</span></h2>'
    )
    body = (
        f'<p class="error">{escape(str(host["error"]))}</p>'
        if host.get("error")
        else '<div class="gpus">'
        + "".join(_gpu_tile(g) for g in host["gpus"])
        + "</div>"
        + _network(host.get("network"))
        + _problem_rows(host)
    )
    return (
        f'<section class="host" data-host="{escape(host["name"])}" data-level="{host["level"]}" '
        f'data-action="{escape(host["action"])}">{head}{body}</section>'
    )


def _meta(fleet: Mapping[str, Any]) -> str:
    meta = fleet["meta"]
    rows = [
        ("verdict", fleet["level"]),
        ("run", f"{meta.get('status')} (exit {meta.get('exit_code')})"),
        ("started", meta.get("started_at")),
        ("ended", meta.get("ended_at")),
        ("inventory", ", ".join(meta.get("inventory") or [])),
        ("limit", meta.get("limit") or "-"),
        ("playbook", meta.get("playbook")),
        ("report written", meta.get("generated_at")),
        ("gpufleet", meta.get("gpufleet_version")),
    ]
    if meta.get("error"):
        rows.append(("error", meta["error"]))
    catalogues = {str((h.get("xid_catalogue") or {}).get("url")) for h in fleet["hosts"] if h.get("xid_catalogue")}
    if catalogues:
        rows.append(("XID catalogue", ", ".join(sorted(catalogues))))
    return (
        '<dl class="meta">'
        + "".join(f'<dt>{escape(k)}</dt><dd data-meta="{escape(k)}">{escape(str(v))}</dd>' for k, v in rows)
        + "</dl>"
    )


def render_html(fleet: Mapping[str, Any]) -> str:
    """The whole page for a fleet model of :func:`gpufleet.fleet_report.fleet_from_result`."""
    gpus = sum(len(h["gpus"]) for h in fleet["hosts"])
    legend = "".join(
        f'<span style="background:{LEVEL_COLOURS[lv][0]};color:{LEVEL_COLOURS[lv][1]}">{lv} '
        f"{fleet['gpu_levels'][lv]}</span>"
        for lv in LEVEL_COLOURS
    )
    hosts = "".join(_host_section(h) for h in fleet["hosts"]) or '<p class="error">no host in this result</p>'
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        f"<title>gpufleet report: {escape(fleet['level'])}</title><style>{_CSS}</style></head>"
        f'<body data-level="{fleet["level"]}"><header><h1>gpufleet fleet report {_badge(fleet["level"])}</h1>'
        f"{len(fleet['hosts'])} hosts, {gpus} GPUs {_meta(fleet)}</header>"
        f'<main><p class="legend">{legend}</p>{hosts}</main></body></html>\n'
    )
