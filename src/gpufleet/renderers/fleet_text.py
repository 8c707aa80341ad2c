"""The fleet report for a terminal: one line per host, a coloured cell per GPU, MIG GPUs as their slices.

::

    gpu-c  PASS      driver 570.172.08  0[22·13333] 1[77777777]
    gpu-b  CRITICAL  drain  0■ 1■ 2■ 3■ 4■ 5■ 6■ 7■
      network  mlx5_0■ mlx5_1■ mlx5_2■ mlx5_3■  nvidia_peermem loaded
      GPU 3 CRITICAL nvlink [action: drain]: NVLink 5 down (17/18 up)
      mlx5_2 port 1 CRITICAL rdma_port_state [action: drain]: mlx5_2 port 1 is DOWN (physical state Polling) ...

A MIG GPU's cell has one character per memory slice: the instance's compute slices (``2`` for 2g.10gb) where an
instance sits, ``·`` where the slice is free. A host whose report has RDMA checks gets a ``network`` line: a cell
per HCA port coloured by its checks (the port number follows the HCA's name when it has more than one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from gpufleet.renderers.health import LEVEL_STYLES


def mig_cells(mig: Mapping[str, Any]) -> str:
    """One character per memory slice: the instance's compute-slice count where it sits, ``·`` where free."""
    cells = ["·"] * int(mig["slots"])
    for inst in mig["instances"]:
        mark = str(inst["profile"] or "?").split("g", 1)[0][-1:] or "?"
        for slot in range(inst["start"], min(inst["start"] + inst["size"], len(cells))):
            cells[slot] = mark
    return "".join(cells)


def host_line(host: Mapping[str, Any]) -> Text:
    """The host's line: name, level, action, then one cell per GPU."""
    style = LEVEL_STYLES.get(host["level"], "")
    line = Text(f"{host['name']}  ")
    line.append(f"{host['level']:<8}", style=style)
    if host["action"] != "none":
        line.append(f"  {host['action']}", style="bold")
    if host.get("error"):
        line.append(f"  {host['error']}", style=style)
        return line
    line.append("  ")
    for gpu in host["gpus"]:
        cell_style = LEVEL_STYLES.get(gpu["level"], "")
        mig = gpu.get("mig")
        line.append(f" {gpu['index']}")
        line.append(f"[{mig_cells(mig)}]" if mig else "■", style=cell_style)
    if host.get("virtualization"):
        line.append(f"  VM: {host['virtualization']}")
    return line


def network_line(network: Mapping[str, Any]) -> Text:
    """The host's RDMA ports, one coloured cell each, and whether nvidia_peermem is loaded."""
    line = Text("  network ")
    line.append(f"{network['level']:<8}", style=LEVEL_STYLES.get(network["level"], ""))
    several = {p["hca"] for p in network["ports"] if p["port"] not in (1, "1")}
    for port in network["ports"]:
        label = f"{port['hca']}:{port['port']}" if port["hca"] in several else str(port["hca"])
        line.append(f" {label}")
        line.append("■", style=LEVEL_STYLES.get(port["level"], ""))
    if not network["ports"]:
        line.append(" no HCA port")
    line.append(f"  nvidia_peermem {network['peermem']}")
    return line


def render_fleet_text(fleet: Mapping[str, Any], console: Console) -> None:
    """Print the fleet: its verdict, a line per host and, under it, each check that is not PASS."""
    meta = fleet["meta"]
    gpus = sum(len(h["gpus"]) for h in fleet["hosts"])
    head = Text(f"fleet {len(fleet['hosts'])} hosts, {gpus} GPUs: ")
    head.append(fleet["level"], style=LEVEL_STYLES.get(fleet["level"], ""))
    head.append(f"  (run {meta.get('status')}, {meta.get('started_at')} - {meta.get('ended_at')})")
    console.print(head)
    for host in fleet["hosts"]:
        console.print(host_line(host))
        if host.get("network"):
            console.print(network_line(host["network"]))
        for problem in host["problems"]:
            where = problem.get("port") or ("host" if problem["gpu"] is None else f"GPU {problem['gpu']}")
            line = Text(f"  {where} ")
            line.append(f"{problem['level']} {problem['check']}", style=LEVEL_STYLES.get(problem["level"], ""))
            if problem["action"] != "none":
                line.append(f" [action: {problem['action']}]", style="bold")
            line.append(f": {problem['message']}")
            console.print(line)
