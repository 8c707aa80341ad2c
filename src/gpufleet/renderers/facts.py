"""``gpufleet facts``: per host, one row per GPU from gpu_facts (identity, memory, MIG mode and instances)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufleet._output import register_renderer
from gpufleet.results import RunResult


def facts_table(name: str, data: Mapping[str, Any]) -> Table:
    """The GPUs of one host."""
    if not data.get("nvml_available", True):
        error = data.get("nvml_error") or {}
        table = Table(title=Text(f"{name}: NVML unavailable - {error.get('message', '?')}", style="bold red"),
                      title_justify="left")
        return table
    title = (f"{name}: {data.get('gpu_count', 0)} GPU(s), driver {data.get('driver_version')}, "
             f"CUDA {data.get('cuda_version')}")
    table = Table(title=title, title_justify="left")
    for header in ("gpu", "name", "uuid", "pci bus id", "memory", "virtualization", "mig", "instances"):
        table.add_column(header, justify="right" if header in ("gpu", "memory") else "left")
    for gpu in data.get("gpus") or []:
        mig = gpu.get("mig") or {}
        if not mig.get("supported"):
            mode = "n/a"
        else:
            mode = "on" if mig.get("current") else "off"
            if mig.get("current") != mig.get("pending"):
                mode += " (pending " + ("on" if mig.get("pending") else "off") + ")"
        instances = ", ".join(f"{gi.get('profile')}@{gi.get('start')}" for gi in gpu.get("gpu_instances") or [])
        table.add_row(str(gpu.get("index")), str(gpu.get("name")), str(gpu.get("uuid")), str(gpu.get("pci_bus_id")),
                      f"{gpu.get('memory_total_mib')} MiB", str(gpu.get("virtualization_mode") or "-"), mode,
                      instances or "-")
    return table


@register_renderer("facts")
def render_facts(result: RunResult, console: Console) -> None:
    """Print each host's GPU table; hosts without facts are named."""
    missing = []
    for name, host in result.hosts.items():
        data = host.facts
        if not isinstance(data, Mapping) or "gpus" not in data:
            missing.append(name)
            continue
        console.print(facts_table(name, data))
    if missing:
        console.print(Text(f"no GPU facts from: {', '.join(missing)}", style="bold red"))
