"""The README's main job: provision a simulated GPU fleet with ``playbooks/site.yml`` and summarise it.

Steps: build/import the host image if needed, start the sim fleet (repository server + one host per
``inventories/sim`` host), run the playbook through :func:`gpufleet.api.provision` with live per-host progress,
print a per-host summary (GPUs, what changed, health when the playbook reports it), then stop everything this
run started unless ``keep``. When ``playbooks/site.yml`` does not exist yet, the testhosts scenario's
``prepare.yml`` + ``converge.yml`` run instead (plain tasks that install the simulated driver), and the demo says so.

    python tools/demo.py [--keep]        (what ``bash scripts/demo.sh`` runs, in build/venv)

It lives with the product, not in the simulator's distribution: it is the one place that drives the product
(``gpufleet.api``) against the lab (``gpufleet_lab``), so that neither package imports the other (issue 32).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpufleet import api
from gpufleet_lab import fleet as fleet_mod
from gpufleet_lab.hosts import exec_in
from gpufleet_lab.podman import containers_conf, project_root


@dataclass
class Progress:
    """Prints each play, and a line per host for every task result that is not plain ``ok`` or ``skipped``
    (changed, failed, ignored, unreachable) as the run goes; remembers what changed per host."""

    out: TextIO = sys.stdout
    changed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: per host: role (or ``playbook`` for a play's own tasks) -> changed task count, in the order first seen
    changed_by_role: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    done: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    width: int = 12

    def __call__(self, event: Any) -> None:
        """``on_event`` callback for :func:`gpufleet.api.run`."""
        if event.kind == "playbook_on_play_start":
            print(f"PLAY {event.data.get('play', '')}", file=self.out, flush=True)
            return
        if event.status is None or event.host is None:
            return
        self.done[event.host] += 1
        if event.status == "changed":
            self.changed[event.host].append(event.task or "?")
            roles = self.changed_by_role[event.host]
            role = str(event.data.get("role") or "playbook")
            roles[role] = roles.get(role, 0) + 1
        if event.status in ("ok", "skipped"):
            return
        marker = {"changed": "changed", "failed": "FAILED", "ignored": "ignored",
                  "unreachable": "UNREACHABLE"}[event.status]
        print(f"  {event.host:<{self.width}} {marker:<11} {event.task or ''}", file=self.out, flush=True)


def pick_playbooks(root: Path) -> tuple[list[Path], str]:
    """Return the playbooks the demo runs and a sentence saying which and why."""
    site = root / "playbooks" / "site.yml"
    if site.exists():
        return [site], "playbooks/site.yml"
    scenario = root / "molecule"
    return ([scenario / "_shared" / "prepare.yml", scenario / "testhosts" / "converge.yml"],
            "playbooks/site.yml does not exist yet: running molecule/_shared/prepare.yml + "
            "molecule/testhosts/converge.yml (plain tasks installing the simulated 550 driver) instead")


def gpus_from_facts(facts: Any) -> list[str] | None:
    """Return GPU names from a ``gpu_facts`` module result, or ``None`` when it has none."""
    if not isinstance(facts, Mapping):
        return None
    for container in (facts, facts.get("ansible_facts") or {}):
        for key in ("gpus", "gpufleet_gpus", "nvidia_gpus"):
            value = container.get(key) if isinstance(container, Mapping) else None
            if isinstance(value, list):
                return [str(g.get("name", "?")) if isinstance(g, Mapping) else str(g) for g in value]
    return None


def gpus_from_nvidia_smi(host: str) -> list[str]:
    """Return GPU names as ``nvidia-smi -L`` prints them on ``host`` (empty when it fails)."""
    try:
        text = exec_in(host, ["nvidia-smi", "-L"])
    except RuntimeError:
        return []
    return [line.split(": ", 1)[1].split(" (UUID", 1)[0] for line in text.splitlines() if line.startswith("GPU ")]


def health_summary(health: Any) -> str:
    """One phrase from a ``gpu_health`` module result (``-`` when the playbook reported none).

    The module returns its report under ``health``: ``status`` (ok/warn/fail) and ``counts`` per status; the
    first checks that did not pass are named with their GPU and message.
    """
    report = health.get("health") if isinstance(health, Mapping) else None
    if not isinstance(report, Mapping) or "status" not in report:
        return "-"
    counts = report.get("counts") or {}
    text = f"{report['status']} ({', '.join(f'{n} {k}' for k, n in counts.items() if n)})"
    bad = [c for c in report.get("checks", []) if isinstance(c, Mapping) and c.get("status") != "ok"]
    for check in bad[:3]:
        gpu = check.get("gpu") or {}
        where = f" gpu {gpu.get('index')}" if gpu else ""
        text += f"; {check.get('status')} {check.get('name')}{where}: {check.get('message')}"
    return text


def mig_summary(mig: Any) -> str:
    """The MIG layout a ``nvidia_mig`` result reports: GPU instance profiles per GPU (empty when none)."""
    if not isinstance(mig, Mapping) or not isinstance(mig.get("layout"), list):
        return ""
    per_gpu: dict[str, list[int]] = defaultdict(list)
    for gpu in mig["layout"]:
        if not isinstance(gpu, Mapping) or not gpu.get("enabled"):
            continue
        names = sorted(str(gi.get("profile_name")) for gi in gpu.get("gpu_instances", []))
        per_gpu[" + ".join(names) or "MIG on, no instances"].append(int(gpu.get("index", -1)))
    return "; ".join(f"GPUs {','.join(map(str, idx))}: {layout}" for layout, idx in per_gpu.items())


def summarise(results: list[Any], progress: Progress, out: TextIO = sys.stdout) -> None:
    """Print the per-host summary table (task counts summed over the playbooks that ran)."""
    print("\nSUMMARY", file=out)
    print(f"  {'host':<12} {'status':<11} {'ok':>3} {'chg':>3} {'fail':>4}  {'GPUs':<34} health", file=out)
    last = results[-1]
    for name, host in last.hosts.items():
        runs = [r.hosts[name] for r in results if name in r.hosts]
        ok, changed, failed = (sum(getattr(h, f) for h in runs) for f in ("ok", "changed", "failed"))
        status = next(word for word, hit in (("unreachable", any(h.unreachable for h in runs)), ("failed", failed),
                                             ("changed", changed), ("ok", True)) if hit)
        gpus = gpus_from_facts(host.facts)
        source = "facts"
        if gpus is None:
            gpus, source = gpus_from_nvidia_smi(name), "nvidia-smi -L"
        counts: dict[str, int] = defaultdict(int)
        for gpu in gpus:
            counts[gpu] += 1
        gpu_text = ", ".join(f"{n}x {g}" for g, n in counts.items()) or "none found"
        print(f"  {name:<12} {status:<11} {ok:>3} {changed:>3} {failed:>4}  "
              f"{gpu_text:<34} {health_summary(host.health)}  [{source}]", file=out)
        mig = mig_summary(host.mig)
        if mig:
            print(f"  {'':<12} MIG: {mig}", file=out)
        by_role = progress.changed_by_role.get(name, {})
        if by_role:
            # the tasks themselves were printed as they changed; here only where the changes came from
            print(f"  {'':<12} changed by role: {', '.join(f'{r} {n}' for r, n in by_role.items())}", file=out)
        for run in runs:
            for task in run.failed_tasks:
                print(f"  {'':<12} FAILED {task.task}: {task.msg}", file=out)


def main(keep: bool = False, out: TextIO = sys.stdout) -> int:
    """Run the demo; return the exit code of the provisioning run (0 when every host is fine)."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    root = project_root()
    playbooks, which = pick_playbooks(root)
    start = time.monotonic()
    print("Starting the simulated fleet (image, repository server, hosts)...", file=out, flush=True)
    fleet = fleet_mod.up(fleet_mod.SIM_FLEET)
    try:
        for host in fleet.hosts:
            print(f"  {host['name']:<12} {host['preset']:<16} {host['gpus']} GPUs, {host['pci_devices']} PCI devices, "
                  f"{host['loopback']}", file=out)
        print(f"Fleet up in {time.monotonic() - start:.1f} s. Playbook: {which}\n", file=out, flush=True)
        progress = Progress(out=out)
        results = []
        run_start = time.monotonic()
        for playbook in playbooks:
            if playbook.name == "site.yml":
                results.append(api.provision(fleet.inventory, on_event=progress))
            else:
                results.append(api.run(playbook, fleet.inventory, on_event=progress))
            if not results[-1].ok:
                break
        result = results[-1]
        print(f"\nRun {result.status} (rc {result.rc}) in {time.monotonic() - run_start:.1f} s", file=out)
        summarise(results, progress, out)
        return int(result.exit_code)
    finally:
        if keep:
            print(f"\n--keep: the fleet keeps running. Inventory: {fleet.inventory}. Try `podman exec -it "
                  f"{fleet.hosts[0]['name'] if fleet.hosts else 'sim-h100-1'} nvidia-smi`; stop it with "
                  "`gpufleet-lab fleet down`.", file=out)
        else:
            removed = fleet_mod.down(fleet_mod.SIM_FLEET)
            server = ("stopped the repository server it started" if fleet.repo_pid is not None
                      else "left the repository server that was already running")
            print(f"\nCleaned up: removed {len(removed)} host(s); {server}.", file=out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the main job: site.yml against the simulated fleet, then a summary")
    parser.add_argument("--keep", action="store_true", help="leave the fleet running afterwards")
    sys.exit(main(keep=parser.parse_args().keep))
