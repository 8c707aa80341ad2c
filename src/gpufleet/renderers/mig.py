"""``gpufleet mig plan`` and ``gpufleet mig apply``: per host, per GPU tables of the nvidia_mig module's result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufleet._output import register_renderer
from gpufleet.results import HostResult, RunResult


def mig_result(host: HostResult) -> Mapping[str, Any] | None:
    """The host's last nvidia_mig result (plan or apply), or None."""
    data = host.mig
    return data if isinstance(data, Mapping) and "plan" in data else None


def describe_action(action: Mapping[str, Any]) -> str:
    """One planned action in words: ``create 3g.40gb @4``, ``destroy GI 2 (3g.40gb @0)``..."""
    kind = str(action.get("action"))
    if kind == "set_mig_mode":
        text = "enable MIG" if action.get("mode") else "disable MIG"
        return text + (" (reset)" if action.get("reset_required") else "")
    if kind == "create_gi":
        return f"create {action.get('profile')} @{action.get('start')}"
    if kind == "destroy_gi":
        return f"destroy GI {action.get('gi_id')} ({action.get('profile')} @{action.get('start')})"
    if kind == "create_ci":
        return f"  + CI {action.get('profile')}"
    if kind == "destroy_ci":
        return f"  - CI {action.get('ci_id')} of GI {action.get('gi_id')}"
    if kind == "reset":
        return f"reset GPUs {', '.join(str(g) for g in action.get('gpus') or [])}"
    return kind


def plan_table(name: str, data: Mapping[str, Any]) -> Table:
    """One row per GPU: model, whether it changes, reset needed, the actions."""
    changed = [g for g in data.get("plan") or [] if g.get("changed")]
    title = Text(f"{name}: {len(changed)} GPU(s) to change", style="yellow" if changed else "green")
    table = Table(title=title, title_justify="left")
    for header, justify in (("gpu", "right"), ("model", "left"), ("change", "center"), ("reset", "center"),
                            ("actions", "left")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for gpu in data.get("plan") or []:
        actions: Sequence[Mapping[str, Any]] = gpu.get("actions") or []
        text = "\n".join(describe_action(a) for a in actions) or (gpu.get("note") or "no change")
        table.add_row(str(gpu.get("index")), str(gpu.get("model") or "?"),
                      Text("yes", style="yellow") if gpu.get("changed") else Text("no", style="green"),
                      "yes" if gpu.get("reset_required") else "", text)
    return table


def layout_table(name: str, data: Mapping[str, Any]) -> Table:
    """One row per GPU: MIG mode and the instances it shows (profile @start, MIG device UUIDs)."""
    changed = data.get("changed_gpus") or []
    title = f"{name}: changed GPU(s) {', '.join(str(g) for g in changed)}" if changed else f"{name}: no change"
    if data.get("reboot_required"):
        title += " - reboot required"
    table = Table(title=Text(title, style="yellow" if data.get("reboot_required") else ""), title_justify="left")
    for header in ("gpu", "model", "mig", "instances", "MIG devices"):
        table.add_column(header, justify="right" if header == "gpu" else "left")
    for gpu in data.get("layout") or []:
        mode = "on" if gpu.get("enabled") else "off"
        if gpu.get("enabled") != gpu.get("pending"):
            mode += " (pending " + ("on" if gpu.get("pending") else "off") + ")"
        gis = gpu.get("gpu_instances") or []
        table.add_row(str(gpu.get("index")), str(gpu.get("model") or "?"), mode,
                      "\n".join(f"{gi.get('profile_name')} @{gi.get('start')}" for gi in gis) or "-",
                      "\n".join(str(ci.get("uuid")) for gi in gis for ci in gi.get("compute_instances") or []) or "-")
    return table


def _missing(console: Console, missing: list[str]) -> None:
    if missing:
        console.print(Text(f"no MIG result from: {', '.join(missing)}", style="bold red"))


@register_renderer("mig plan")
def render_mig_plan(result: RunResult, console: Console) -> None:
    """Per host: the planned actions of every GPU."""
    missing = []
    for name, host in result.hosts.items():
        data = mig_result(host)
        if data is None:
            if name != "localhost":
                missing.append(name)
            continue
        console.print(plan_table(name, data))
    _missing(console, missing)


@register_renderer("mig apply")
def render_mig_apply(result: RunResult, console: Console) -> None:
    """Per host: what changed and the layout every GPU shows now; failed hosts with their reason."""
    missing = []
    for name, host in result.hosts.items():
        data = mig_result(host)
        if data is None:
            if name != "localhost":
                missing.append(name)
            continue
        console.print(layout_table(name, data))
    _missing(console, missing)
