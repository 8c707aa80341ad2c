"""Converge 1, 4 and 16 simulated hosts, re-run idempotently, and compare with Ansible's floor.

For each fleet size: start that many throw-away hosts (presets cycle through ``inventories/sim``), converge them
with the playbook, run it again (idempotence: changed must be 0), then run a no-op playbook with as many tasks per
host as the converge executed (``ansible.builtin.ping``: one real module round trip per task, nothing else) — the
floor that Ansible, the podman connection and this machine set. Figures are printed, never asserted.

The playbook is ``playbooks/site.yml`` when it exists, else ``molecule/testhosts/converge.yml`` (after
``molecule/_shared/prepare.yml``, which adds the repository and is not timed); the output says which.

    python benchmarks/fleet.py [--sizes 1,4,16]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet import api
from gpufleet_lab import fleet as fleet_mod
from gpufleet_lab import reposerver
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import containers_conf, project_root

ROOT = project_root()


@dataclass
class Row:
    """Figures for one fleet size."""

    hosts: int
    start_s: float
    converge_s: float
    tasks_per_host: float
    changed_per_host: float
    rerun_s: float
    rerun_tasks_per_host: float
    rerun_changed: int
    noop_s: float
    failed: int


def pick_playbook() -> tuple[Path, Path | None, str]:
    """Return (playbook, setup playbook or None, description)."""
    site = ROOT / "playbooks" / "site.yml"
    if site.exists():
        return site, None, "playbooks/site.yml"
    return (ROOT / "molecule" / "testhosts" / "converge.yml", ROOT / "molecule" / "_shared" / "prepare.yml",
            "molecule/testhosts/converge.yml (playbooks/site.yml does not exist yet), after _shared/prepare.yml")


def noop_playbook(tasks: int, dest: Path) -> Path:
    """Write a playbook of ``tasks`` ping tasks on all hosts, no fact gathering."""
    lines = ["---", "- name: Ansible floor", "  hosts: all", "  gather_facts: false", "  tasks:"]
    for i in range(tasks):
        lines += [f"    - name: Ping {i}", "      ansible.builtin.ping:"]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def timed(playbook: Path, inventory: str) -> tuple[float, api.RunResult]:
    """Run a playbook through the API; return (seconds, result)."""
    start = time.monotonic()
    result = api.run(playbook, inventory)
    return time.monotonic() - start, result


def measure(size: int, playbook: Path, setup: Path | None, workdir: Path) -> Row:
    """Bring up ``size`` hosts, converge, re-run, run the floor, bring them down."""
    name = f"bench{size}"
    start = time.monotonic()
    fleet = fleet_mod.up(name, count=size, build_image=False)
    start_s = time.monotonic() - start
    try:
        if setup is not None:
            _, result = timed(setup, fleet.inventory)
            if not result.ok:
                raise SystemExit(f"setup playbook failed on {result.failed_hosts or result.unreachable_hosts}")
        converge_s, first = timed(playbook, fleet.inventory)
        executed = [h.ok + h.failed for h in first.hosts.values()]  # Ansible's ok includes changed
        tasks = max(executed) if executed else 0
        rerun_s, second = timed(playbook, fleet.inventory)
        rerun_executed = [h.ok + h.failed for h in second.hosts.values()]
        noop_s, _ = timed(noop_playbook(tasks, workdir / f"noop-{tasks}.yml"), fleet.inventory)
        return Row(
            hosts=size, start_s=start_s, converge_s=converge_s,
            tasks_per_host=sum(executed) / max(len(executed), 1),
            changed_per_host=sum(h.changed for h in first.hosts.values()) / max(len(first.hosts), 1),
            rerun_s=rerun_s, rerun_tasks_per_host=sum(rerun_executed) / max(len(rerun_executed), 1),
            rerun_changed=sum(h.changed for h in second.hosts.values()),
            noop_s=noop_s, failed=len(first.failed_hosts) + len(second.failed_hosts) + len(first.unreachable_hosts),
        )
    finally:
        fleet_mod.down(name)


HEAD = (f"{'hosts':>5} {'start s':>8} {'converge s':>10} {'tasks/host':>10} {'changed/host':>12} "
        f"{'re-run s':>8} {'re-run tasks':>12} {'re-run chg':>10} {'floor s':>8} {'conv/floor':>10} "
        f"{'re-run/floor':>12} {'failed':>6}")


def format_row(r: Row) -> str:
    """One table line for one fleet size."""
    return (f"{r.hosts:>5} {r.start_s:>8.1f} {r.converge_s:>10.1f} {r.tasks_per_host:>10.1f} "
            f"{r.changed_per_host:>12.1f} {r.rerun_s:>8.1f} {r.rerun_tasks_per_host:>12.1f} {r.rerun_changed:>10} "
            f"{r.noop_s:>8.1f} "
            f"{r.converge_s / r.noop_s:>10.2f} {r.rerun_s / r.noop_s:>12.2f} {r.failed:>6}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,16", help="comma-separated fleet sizes (default 1,4,16)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    playbook, setup, which = pick_playbook()
    print(f"playbook: {which}; machine: {os.cpu_count()} CPUs")
    ensure_image()
    repo_pid = reposerver.start()
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
            for size in sizes:
                rows.append(measure(size, playbook, setup, Path(tmp)))
                # Each size can take many minutes: print its row as soon as it is known.
                print(f"  {size} host(s) done:", flush=True)
                print(HEAD, flush=True)
                print(format_row(rows[-1]), flush=True)
    finally:
        reposerver.stop(repo_pid)
    print(HEAD)
    for r in rows:
        print(format_row(r))
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
