"""How long the controller takes to validate and plan MIG layouts for a whole fleet, offline.

A synthetic fleet of 10,000 hosts x 8 GPUs of every model in the MIG catalogue (A100 SXM4/PCIe 40/80GB, A30,
H100 SXM5/PCIe/NVL, GH200 96/144GB, H200 SXM/NVL, B200, GB200, RTX PRO 6000 Blackwell), a tenth of the hosts with
two models side by side (device filters pick each half's layout) and a tenth of the GB200 layouts written with the
early boards' profile names (1g.24gb for 1g.23gb). Each host has a named layout and a current state in gpu_facts'
shape (UUIDs and MIG device UUIDs of its own, temperatures and power that differ from GPU to GPU): a third already
match, a third have MIG off, a third carry another layout. Prints figures; asserts nothing.

    python benchmarks/mig_plan.py [--hosts 10000] [--gpus 8] [--seed 7]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_profiles as mp

MODELS = [m.name for m in mp.MODELS]


def _plain(model: mp.GpuModel) -> dict[int, str]:
    """Compute slices -> the plain (attribute-free) GI profile with the least memory: 1g.10gb, not 1g.20gb."""
    found: dict[int, mp.GiProfile] = {}
    for p in model.gi_profiles:
        if "+" in p.name or "-" in p.name:
            continue
        if p.compute_slices not in found or p.memory_slices < found[p.compute_slices].memory_slices:
            found[p.compute_slices] = p
    return {g: p.name for g, p in found.items()}


def layouts_for(name: str, early_names: bool = False) -> dict[str, list[dict[str, Any]]]:
    """The named layouts an operator would keep for one model (gpu-operator's all-balanced shape and friends)."""
    model = mp.get_model(name)
    g = _plain(model)
    if early_names:  # a layout written for the early GB200 driver: its alias names, same slices
        back = {canonical: alias for alias, canonical in model.profile_aliases}
        g = {k: back.get(v, v) for k, v in g.items()}
    small = {g[1]: model.profile(g[1]).instance_count}  # type: ignore[union-attr]
    if model.compute_slices == 4:  # A30, RTX PRO 6000: 1g / 2g / 4g
        return {
            "balanced": [{"devices": "all", "gpu_instances": {g[1]: 2, g[2]: 1}}],
            "small": [{"devices": "all", "gpu_instances": small}],
            "halves": [{"devices": "all", "gpu_instances": {g[2]: 2},
                        "compute_instances": {g[2]: [f"1c.{g[2]}", f"1c.{g[2]}"]}}],
            "mixed": [{"devices": [0, 1, 2, 3], "mig_enabled": False},
                      {"devices": [4, 5, 6, 7], "gpu_instances": {g[4]: 1},
                       "placements": [{"profile": g[4], "start": 0}]}],
            "disabled": [{"devices": "all", "mig_enabled": False}],
        }
    return {
        "balanced": [{"devices": "all", "gpu_instances": {g[1]: 2, g[2]: 1, g[3]: 1}}],
        "small": [{"devices": "all", "gpu_instances": small}],
        "halves": [{"devices": "all", "gpu_instances": {g[3]: 2},
                    "compute_instances": {g[3]: [f"1c.{g[3]}", f"2c.{g[3]}"]}}],
        "mixed": [{"devices": [0, 1, 2, 3], "mig_enabled": False},
                  {"devices": [4, 5], "gpu_instances": {g[4]: 1, g[3]: 1}},
                  {"devices": [6, 7], "gpu_instances": {g[7]: 1}, "placements": [{"profile": g[7], "start": 0}]}],
        "disabled": [{"devices": "all", "mig_enabled": False}],
    }


def _filtered(entries: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The layout's entries for ``model`` on a two-model host: devices all, one PCI device filter."""
    pci = mp.format_pci_id(mp.get_model(model).pci_device_ids[0])
    first = dict(next(e for e in entries if e.get("devices", "all") == "all"))
    return [{**first, "device_filter": pci}]


def nvml_state(config: ml.GpuConfig, uuid: str, rng: random.Random) -> dict[str, Any]:
    """What gpu_facts would report once ``config`` is applied: nvml.Nvml.mig_state's shape (MIG device UUIDs of
    their own, names and slices) beside readings that differ from GPU to GPU."""
    gis = [{"id": i + 1, "profile_id": gi.profile_id, "profile_name": gi.profile, "start": gi.start, "size": gi.size,
            "slices": gi.compute_slices,
            "compute_instances": [{"id": j, "profile_id": ci.profile_id, "name": ci.profile,
                                   "uuid": f"MIG-{uuid[4:]}-{i}-{j}", "start": ci.start, "size": ci.slices,
                                   "slices": ci.slices} for j, ci in enumerate(gi.compute_instances)]}
           for i, gi in enumerate(config.gpu_instances)]
    mode = bool(config.mig_enabled)
    return {"index": config.index, "uuid": uuid, "model": config.model, "temperature_c": rng.randint(30, 80),
            "power_draw_w": round(rng.uniform(60, 700), 1), "memory_used_mib": rng.randint(0, 4096),
            "mig": {"supported": True, "current": mode, "pending": mode, "gpu_instances": gis}}


def build_fleet(hosts: int, gpus: int, seed: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                              list[dict[str, Any]]]]:
    """[(layout entries, gpus, current state)] per host."""
    rng = random.Random(seed)
    fleet = []
    plain = ("balanced", "small", "halves", "disabled")
    for host in range(hosts):
        model = rng.choice(MODELS)
        if rng.random() < 0.1:  # two models in one host: one entry per model, matched by device filter
            other = rng.choice([m for m in MODELS if m != model])
            half = gpus // 2
            devices = [{"index": i, "model": model if i < half else other,
                        "pci_device_id": mp.get_model(model if i < half else other).pci_device_ids[0]}
                       for i in range(gpus)]
            wanted = [*_filtered(layouts_for(model)[rng.choice(plain)], model),
                      *_filtered(layouts_for(other)[rng.choice(plain)], other)]
            source = wanted if rng.random() < 0.5 else [{"devices": "all", "mig_enabled": False}]
        else:
            early = bool(mp.get_model(model).profile_aliases) and rng.random() < 0.1
            named = layouts_for(model, early_names=early)
            devices = [{"index": i, "model": model} for i in range(gpus)]
            names = sorted(named) if gpus >= 8 else [n for n in sorted(named) if n != "mixed"]
            wanted = named[rng.choice(names)]
            kind = rng.random()
            source = wanted if kind < 1 / 3 else named["disabled"] if kind < 2 / 3 else named[rng.choice(names)]
        configs = ml.validate(source, devices)
        current = [nvml_state(c, f"GPU-{host:05d}-{c.index}", rng) for c in configs]
        fleet.append((wanted, devices, current))
    return fleet


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    fleet = build_fleet(args.hosts, args.gpus, args.seed)
    # time cold caches (placements, verdicts, plans), as a fresh controller process would have them
    ml.clear_caches()
    mpl._PLANNED.clear()
    gc.collect()  # the fleet's construction is not the planner's: settle its garbage before the clock starts
    changed = actions = 0
    collections = [generation["collections"] for generation in gc.get_stats()]
    started, cpu_started = time.perf_counter(), time.process_time()
    validate_s = 0.0
    for entries, devices, current in fleet:
        t0 = time.perf_counter()
        desired = ml.validate(entries, devices)
        validate_s += time.perf_counter() - t0
        for gpu_plan in mpl.plan(current, desired):
            changed += gpu_plan.changed
            actions += len(gpu_plan.actions)
    total, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    collections = [after["collections"] - before for after, before in zip(gc.get_stats(), collections, strict=True)]
    n_gpus = args.hosts * args.gpus
    sys.stdout.write(
        f"fleet: {args.hosts} hosts x {args.gpus} GPUs = {n_gpus} GPUs (seed {args.seed})\n"
        f"validate + plan: {total:.3f} s total (validate {validate_s:.3f} s, plan {total - validate_s:.3f} s); "
        f"CPU time {cpu:.3f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs\n"
        f"garbage collections while timed (generations 0/1/2): {'/'.join(map(str, collections))}\n"
        f"per host: {total / args.hosts * 1e3:.3f} ms; per GPU: {total / n_gpus * 1e6:.1f} us\n"
        f"GPUs with changes: {changed}; actions planned: {actions}\n"
        f"placement cache: {ml._pack.cache_info()}\n"
        f"distinct host verdicts: {len(ml._VALIDATED)}; distinct GPU plans: {len(mpl._PLANNED)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
