"""Bring a named simulated fleet up and down: the repository server plus one host per inventory host.

The ``sim`` fleet is ``inventories/sim/hosts.yml``. Other fleets (benchmarks) are made of ``count`` hosts
cycling through the sim inventory's presets; their inventory is written under ``build/lab/fleets/<name>/``
and shares ``inventories/sim/group_vars``. What a fleet started is recorded in ``build/lab/fleets/<name>.json``
so that ``down`` (in another process) stops exactly that and nothing else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import HostSpec, list_hosts, loopback_address, start_hosts, stop_hosts
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import LAB_OWNER, build_dir, project_root

SIM_FLEET = "sim"
PRESET_VAR = "gpufleet_sim_preset"
LOOPBACK_VAR = "gpufleet_sim_loopback"


class FleetError(RuntimeError):
    """The fleet's inventory is unusable or the fleet could not be started."""


@dataclass
class Fleet:
    """A running fleet: its inventory, hosts and the repository server it started (if any)."""

    name: str
    inventory: str
    hosts: list[dict[str, Any]] = field(default_factory=list)
    repo_pid: int | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def host_names(self) -> list[str]:
        """The inventory host names."""
        return [h["name"] for h in self.hosts]


def sim_inventory_dir() -> Path:
    """Return ``inventories/sim``."""
    return project_root() / "inventories" / "sim"


def _walk_hosts(group: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for name, hostvars in (group.get("hosts") or {}).items():
        yield name, hostvars or {}
    for child in (group.get("children") or {}).values():
        yield from _walk_hosts(child or {})


def specs_from_inventory(path: Path, owner: str = LAB_OWNER, fleet: str = SIM_FLEET) -> list[HostSpec]:
    """Read the host specs (name, preset, loopback) from a YAML inventory file.

    Raises:
        FleetError: a host lacks ``gpufleet_sim_preset``, or two hosts share a name or loopback address.
    """
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    specs: dict[str, HostSpec] = {}
    for number, (name, hostvars) in enumerate(_walk_hosts(doc.get("all") or {}), start=1):
        if name in specs:
            raise FleetError(f"{path}: host {name} is listed twice")
        preset = hostvars.get(PRESET_VAR)
        if not preset:
            raise FleetError(f"{path}: host {name} has no {PRESET_VAR}")
        loopback = str(hostvars.get(LOOPBACK_VAR) or loopback_address(number))
        specs[name] = HostSpec(name=name, preset=str(preset), loopback=loopback, owner=owner, fleet=fleet)
    loopbacks = [s.loopback for s in specs.values()]
    if len(set(loopbacks)) != len(loopbacks):
        raise FleetError(f"{path}: two hosts share a loopback address ({sorted(loopbacks)})")
    if not specs:
        raise FleetError(f"{path}: no hosts")
    return list(specs.values())


def synthetic_specs(count: int, name: str, presets: list[str], owner: str = LAB_OWNER) -> list[HostSpec]:
    """Return ``count`` host specs named ``<name>-NN`` cycling through ``presets``."""
    if not presets:
        raise FleetError("no presets to build a fleet from")
    return [HostSpec(name=f"{name}-{i:02d}", preset=presets[(i - 1) % len(presets)], loopback=loopback_address(i),
                     owner=owner, fleet=name) for i in range(1, count + 1)]


def write_inventory(specs: list[HostSpec], dest: Path) -> Path:
    """Write a YAML inventory for ``specs`` under ``dest`` that shares ``inventories/sim/group_vars``."""
    dest.mkdir(parents=True, exist_ok=True)
    doc = {"all": {"children": {"gpu_nodes": {"hosts": {
        s.name: {PRESET_VAR: s.preset, LOOPBACK_VAR: s.loopback} for s in specs}}}}}
    hosts_file = dest / "hosts.yml"
    hosts_file.write_text("---\n" + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    link = dest / "group_vars"
    if not link.is_symlink():
        link.symlink_to(sim_inventory_dir() / "group_vars")
    return dest


def _record_path(name: str) -> Path:
    return build_dir() / "fleets" / f"{name}.json"


def load_record(name: str) -> Fleet | None:
    """Return what ``up`` recorded for fleet ``name``, or ``None``."""
    path = _record_path(name)
    if not path.exists():
        return None
    return Fleet(**json.loads(path.read_text(encoding="utf-8")))


def up(name: str = SIM_FLEET, count: int | None = None, *, build_image: bool = True) -> Fleet:
    """Start fleet ``name`` (the sim inventory, or ``count`` synthetic hosts) and its repository server.

    Returns the :class:`Fleet` with the inventory path to run playbooks against. On failure everything
    started here is stopped again.
    """
    timings: dict[str, float] = {}
    start = time.monotonic()
    if build_image:
        ensure_image()
        timings["image_s"] = time.monotonic() - start
    if count is None:
        inventory = sim_inventory_dir()
        specs = specs_from_inventory(inventory / "hosts.yml", fleet=name)
    else:
        presets = [s.preset for s in specs_from_inventory(sim_inventory_dir() / "hosts.yml")]
        specs = synthetic_specs(count, name, presets)
        inventory = write_inventory(specs, build_dir() / "fleets" / name)
    step = time.monotonic()
    repo_pid = reposerver.start()
    previous = load_record(name)
    if repo_pid is None and previous is not None and previous.repo_pid and reposerver.pid_alive(previous.repo_pid):
        repo_pid = previous.repo_pid  # `up` again: the server the first `up` started is still this fleet's
    timings["repo_s"] = time.monotonic() - step
    fleet = Fleet(name=name, inventory=str(inventory), repo_pid=repo_pid, timings=timings)
    _record_path(name).parent.mkdir(parents=True, exist_ok=True)
    _record_path(name).write_text(json.dumps(asdict(fleet), indent=1), encoding="utf-8")
    try:
        step = time.monotonic()
        hosts = start_hosts(specs)
        timings["hosts_s"] = time.monotonic() - step
    except BaseException:
        down(name)
        raise
    fleet.hosts = [{"name": h.name, "preset": h.spec.preset, "loopback": h.spec.loopback, "gpus": h.gpus,
                    "pci_devices": len(h.pci_devices)} for h in hosts]
    _record_path(name).write_text(json.dumps(asdict(fleet), indent=1), encoding="utf-8")
    return fleet


def down(name: str = SIM_FLEET) -> list[str]:
    """Stop fleet ``name``: its hosts (by label) and the repository server it started; return hosts removed."""
    record = load_record(name)
    names = [row["name"] for row in list_hosts(LAB_OWNER, fleet=name)]
    removed = stop_hosts(names, owners=(LAB_OWNER,))
    if record is not None:
        reposerver.stop(record.repo_pid)
        _record_path(name).unlink(missing_ok=True)
    return removed
