"""How long the controller takes to validate and plan MIG layouts for a whole fleet, offline.

A synthetic fleet of 1,000 hosts x 8 GPUs (DGX A100 40GB/80GB, HGX H100, HGX H200 and A30 nodes), each with a
named layout and an NVML-like current state: a third already match, a third have MIG off, a third carry another
layout. Prints figures; asserts nothing.

    python benchmarks/mig_plan.py [--hosts 1000] [--gpus 8] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl

MODELS = {
    "A100-SXM4-40GB": ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-SXM4-80GB": ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-SXM5-80GB": ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H200-141GB": ("1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}


def layouts_for(model: str) -> dict[str, list[dict[str, Any]]]:
    """The named layouts an operator would keep for one model."""
    if model == "A30-24GB":
        return {
            "balanced": [{"devices": "all", "gpu_instances": {"1g.6gb": 2, "2g.12gb": 1}}],
            "small": [{"devices": "all", "gpu_instances": {"1g.6gb": 4}}],
            "whole": [{"devices": "all", "gpu_instances": {"4g.24gb": 1}}],
            "disabled": [{"devices": "all", "mig_enabled": False}],
        }
    g1, g2, g3, g4, g7 = MODELS[model]
    return {
        "balanced": [{"devices": "all", "gpu_instances": {g1: 2, g2: 1, g3: 1}}],
        "small": [{"devices": "all", "gpu_instances": {g1: 7}}],
        "halves": [{"devices": "all", "gpu_instances": {g3: 2},
                    "compute_instances": {g3: [f"1c.{g3}", f"2c.{g3}"]}}],
        "mixed": [{"devices": [0, 1, 2, 3], "mig_enabled": False},
                  {"devices": [4, 5], "gpu_instances": {g4: 1, g3: 1}},
                  {"devices": [6, 7], "gpu_instances": {g7: 1}, "placements": [{"profile": g7, "start": 0}]}],
        "disabled": [{"devices": "all", "mig_enabled": False}],
    }


def nvml_state(config: ml.GpuConfig, uuid: str) -> dict[str, Any]:
    """What NVML would report once ``config`` is applied."""
    gis = [{"id": i + 1, "profile_id": gi.profile_id, "start": gi.start, "size": gi.size,
            "compute_instances": [{"id": j, "profile_id": ci.profile_id} for j, ci in enumerate(gi.compute_instances)]}
           for i, gi in enumerate(config.gpu_instances)]
    mode = int(config.mig_enabled)
    return {"index": config.index, "uuid": uuid, "model": config.model,
            "mig": {"supported": True, "current": mode, "pending": mode}, "gpu_instances": gis}


def build_fleet(hosts: int, gpus: int, seed: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                              list[dict[str, Any]]]]:
    """[(layout entries, gpus, current state)] per host."""
    rng = random.Random(seed)
    models = [*MODELS, "A30-24GB"]
    fleet = []
    for host in range(hosts):
        model = rng.choice(models)
        named = layouts_for(model)
        wanted = rng.choice(sorted(named))
        devices = [{"index": i, "model": model} for i in range(gpus)]
        if any(e.get("devices", "all") != "all" and max(e["devices"]) >= gpus for e in named[wanted]):
            wanted = "balanced"
        kind = rng.random()
        if kind < 1 / 3:
            source = wanted
        elif kind < 2 / 3:
            source = "disabled"
        else:
            source = rng.choice([n for n in sorted(named) if n != "mixed" or gpus >= 8])
        configs = ml.validate(named[source], devices)
        current = [nvml_state(c, f"GPU-{host:04d}-{c.index}") for c in configs]
        fleet.append((named[wanted], devices, current))
    return fleet


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    fleet = build_fleet(args.hosts, args.gpus, args.seed)
    ml._pack.cache_clear()  # time a cold placement cache, as a fresh controller process would have
    changed = actions = 0
    started = time.perf_counter()
    validate_s = 0.0
    for entries, devices, current in fleet:
        t0 = time.perf_counter()
        desired = ml.validate(entries, devices)
        validate_s += time.perf_counter() - t0
        for gpu_plan in mpl.plan(current, desired):
            changed += gpu_plan.changed
            actions += len(gpu_plan.actions)
    total = time.perf_counter() - started
    n_gpus = args.hosts * args.gpus
    sys.stdout.write(
        f"fleet: {args.hosts} hosts x {args.gpus} GPUs = {n_gpus} GPUs (seed {args.seed})\n"
        f"validate + plan: {total:.3f} s total (validate {validate_s:.3f} s, plan {total - validate_s:.3f} s)\n"
        f"per host: {total / args.hosts * 1e3:.3f} ms; per GPU: {total / n_gpus * 1e6:.1f} us\n"
        f"GPUs with changes: {changed}; actions planned: {actions}\n"
        f"placement cache: {ml._pack.cache_info()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
