"""Start a Molecule scenario's hosts, from the base image or from a prepared baseline image.

    python molecule/_shared/lab_hosts.py --owner molecule --first-loopback 101 --platforms JSON

``JSON`` is the scenario's platform list (``molecule_yml.platforms``): ``name``, ``preset`` and, for scenarios
whose subject is not the node baseline, ``baseline`` (a key of :data:`BASELINES`). A baseline image is a host
converged with ``molecule/_shared/baseline.yml`` (the nvml_python and nvidia_driver roles, the simulated
repository) and committed with ``podman commit``; its tag carries a hash of everything that decides its content
(the roles, the collection's plugins, the sim inventory's variables, the repository's signed index, the base
image's recipe), so a change to any of them builds it again. When one is missing, every missing baseline is
built in one ansible-playbook run (the hosts converge side by side), under a lock. Prints the hosts as JSON,
like ``gpufleet-lab hosts up --json``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufleet_lab import hosts as hosts_mod
from gpufleet_lab import image as image_mod
from gpufleet_lab import reposerver
from gpufleet_lab.podman import MOLECULE_OWNER, build_dir, podman, project_root

ROOT = project_root()
PLAYBOOK = ROOT / "molecule" / "_shared" / "baseline.yml"
#: everything that decides what a baseline image holds (with the base image's recipe, the preset and the branch)
INPUTS = [ROOT / "roles" / "gpufleet", ROOT / "roles" / "nvml_python", ROOT / "roles" / "nvidia_driver",
          ROOT / "plugins", ROOT / "inventories" / "sim" / "group_vars", PLAYBOOK,
          ROOT / "molecule" / "nvidia_driver" / "vars", ROOT / "ansible.cfg"]
#: baseline name -> (preset the image is converged on, NVIDIA driver branch). A platform may use a baseline
#: built on another preset of the same kind (with or without NVSwitches: that decides the fabric manager).
BASELINES = {
    "nvswitch-570": ("8xH100-NVSwitch", "570"),
    "plain-570": ("4xA30", "570"),
    "nvswitch-550": ("8xH100-NVSwitch", "550"),
    "plain-550": ("8xA100", "550"),
}
#: loopback numbers of the hosts that build the images (Molecule's own hosts start at 101)
BUILD_LOOPBACK = 230


class LabHostsError(Exception):
    """A platform or a baseline build that cannot work; the message says what to do."""


def _has_nvswitch(preset: str) -> bool:
    return "nvswitch" in hosts_mod.preset_state(preset, "probe")


def baseline_digest(name: str) -> str:
    """The recipe hash of baseline ``name``."""
    preset, branch = BASELINES[name]
    repo_index = reposerver.repo_dir() / "InRelease"
    return image_mod.tree_digest([*INPUTS, repo_index], base=ROOT, extra={
        "base_image": image_mod.image_recipe_label() or "", "preset": preset, "branch": branch, "name": name})


def _build(missing: dict[str, str], log: Path) -> None:
    """Converge one host per missing baseline with the baseline playbook, then commit each as its image."""
    specs = [hosts_mod.HostSpec(name=f"prepared-{name}", preset=BASELINES[name][0],
                                loopback=hosts_mod.loopback_address(BUILD_LOOPBACK + i), owner=MOLECULE_OWNER)
             for i, name in enumerate(sorted(missing))]
    hosts_mod.start_hosts(specs)
    try:
        with tempfile.TemporaryDirectory(prefix="gpufleet-prepared-") as tmp:
            inventory = Path(tmp) / "hosts.yml"
            inventory.write_text(json.dumps({"all": {"hosts": {
                s.name: {**hosts_mod.ANSIBLE_HOST_VARS,
                         "gpufleet_baseline_branch": BASELINES[s.name.removeprefix("prepared-")][1]}
                for s in specs}}}), encoding="utf-8")
            (Path(tmp) / "group_vars").symlink_to(ROOT / "inventories" / "sim" / "group_vars")
            env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_PIPELINING": "True", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
            with log.open("w", encoding="utf-8") as out:
                proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
                                       str(PLAYBOOK)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      check=False, timeout=1500)
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(encoding="utf-8").splitlines()[-40:])
            raise LabHostsError(f"building the prepared baseline images failed (ansible-playbook rc "
                                f"{proc.returncode}; full log {log}):\n{tail}")
        for spec in specs:
            name = spec.name.removeprefix("prepared-")
            image_mod.commit_host(spec.name, image_mod.prepared_image(name, missing[name]), missing[name])
    finally:
        hosts_mod.stop_hosts([s.name for s in specs], owners=(MOLECULE_OWNER,))


def _remove_stale(current: set[str]) -> None:
    """Remove prepared images of older recipes (each is a few hundred MB)."""
    listed = podman(["images", "--format", "{{.Repository}}:{{.Tag}}", image_mod.PREPARED_IMAGE], check=False)
    for image in listed.stdout.split():
        if image not in current:
            podman(["rmi", image], check=False)


def ensure_baselines(names: set[str]) -> dict[str, str]:
    """Return baseline name -> image for ``names``; build every missing baseline first (all of them at once)."""
    unknown = sorted(names - BASELINES.keys())
    if unknown:
        raise LabHostsError(f"unknown baseline {', '.join(unknown)}: use one of {', '.join(sorted(BASELINES))}")
    image_mod.ensure_image()
    if not reposerver.is_serving():
        raise LabHostsError("the simulated repository is not served on 127.0.0.1:8765, and a baseline image "
                            "installs from it: start it (gpusim repo serve, or run the scenario through pytest)")
    build_dir().mkdir(parents=True, exist_ok=True)
    with (build_dir() / "prepared.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digests = {name: baseline_digest(name) for name in BASELINES}
        missing = {name: d for name, d in digests.items()
                   if not image_mod.image_exists(image_mod.prepared_image(name, d))}
        if set(missing) & names:
            start = time.monotonic()
            _build(missing, build_dir() / "prepared-build.log")
            sys.stderr.write(f"built prepared baselines {', '.join(sorted(missing))} "
                             f"in {time.monotonic() - start:.0f} s\n")
            _remove_stale({image_mod.prepared_image(name, d) for name, d in digests.items()})
    return {name: image_mod.prepared_image(name, digests[name]) for name in names}


def hosts_up(platforms: list[dict[str, Any]], owner: str, first_loopback: int) -> list[dict[str, Any]]:
    """Start the platforms' hosts (each from its image) and return one row per host."""
    for platform in platforms:
        baseline = platform.get("baseline")
        if baseline in BASELINES and _has_nvswitch(platform["preset"]) != _has_nvswitch(BASELINES[baseline][0]):
            raise LabHostsError(f"platform {platform['name']} ({platform['preset']}) cannot use baseline {baseline}: "
                                "it was built on a host with a different NVSwitch setup (fabric manager); "
                                "pick the baseline of the same kind")
    images = ensure_baselines({p["baseline"] for p in platforms if p.get("baseline")})
    rows: list[dict[str, Any]] = []
    started: list[str] = []
    try:
        for i, platform in enumerate(platforms):
            spec = hosts_mod.HostSpec(name=platform["name"], preset=platform["preset"],
                                      loopback=hosts_mod.loopback_address(first_loopback + i), owner=owner)
            image = images[platform["baseline"]] if platform.get("baseline") else image_mod.IMAGE
            host = hosts_mod.start_hosts([spec], image=image)[0]
            started.append(host.name)
            rows.append({"name": host.name, "preset": spec.preset, "loopback": spec.loopback, "gpus": host.gpus,
                         "image": image, "boot_s": round(host.boot_s, 2)})
    except BaseException:
        hosts_mod.stop_hosts(started, owners=(owner,))
        raise
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owner", default=MOLECULE_OWNER)
    parser.add_argument("--first-loopback", type=int, default=101)
    parser.add_argument("--platforms", required=True, help="the platform list as JSON")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(json.dumps(hosts_up(json.loads(args.platforms), args.owner, args.first_loopback)) + "\n")
    except (LabHostsError, hosts_mod.HostError) as exc:
        sys.stderr.write(f"lab_hosts: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
