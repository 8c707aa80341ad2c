"""Fast real runs of the MIG modules and playbooks: real Ansible (local connection), real pynvml, the simulator's
``libnvidia-ml.so.1`` (``LD_LIBRARY_PATH``), a temporary state (``NVML_SIM_STATE``) and the simulated
``nvidia-smi`` (for GPU resets) on ``PATH``. Shared by the MIG integration tests and ``benchmarks/mig_apply.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
COLLECTIONS = ROOT / "collections"
BUILD = ROOT / "build" / "mig"
DRIVER_VERSION = "550.163.01"
VENV_PYTHON = sys.executable
ANSIBLE = str(Path(sys.executable).with_name("ansible"))
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))

for _path in (str(SRC), str(COLLECTIONS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from gpufleet_sim import presets, store  # noqa: E402

A100_MIXED = [{"devices": "all", "mig_enabled": True,
               "gpu_instances": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}]


def sim_lib_dir() -> Path:
    """Build (incrementally) the simulator's library under build/mig/lib and return its directory."""
    from gpufleet_sim.build import build_library

    return Path(build_library(BUILD / "lib", DRIVER_VERSION)).parent


def sim_bin_dir() -> Path:
    """A directory with an ``nvidia-smi`` that runs the simulated tool under this interpreter."""
    path = BUILD / "bin"
    path.mkdir(parents=True, exist_ok=True)
    smi = path / "nvidia-smi"
    text = f'#!/bin/sh\nPYTHONPATH="{SRC}" exec "{VENV_PYTHON}" -m gpufleet_sim.tools.nvidia_smi "$@"\n'
    if not smi.exists() or smi.read_text(encoding="utf-8") != text:
        smi.write_text(text, encoding="utf-8")
        smi.chmod(0o755)
    return path


def new_state(path: Path, preset: str, seed: str = "mig-test") -> Path:
    """A fresh state of ``preset`` at ``path`` (any older file replaced)."""
    path.unlink(missing_ok=True)
    doc = presets.build_state(preset, seed)
    return store.create(path, doc)


def sim_env(lib_dir: Path, state: Path, tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for a real Ansible run against the simulator."""
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=str(lib_dir), NVML_SIM_STATE=str(state), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        PATH=f"{sim_bin_dir()}:{env['PATH']}", ANSIBLE_NOCOLOR="1",
    )
    env.update(extra)
    return env


def run_module(module: str, args: dict[str, Any], lib_dir: Path, state: Path, tmp: Path, check: bool = False,
               diff: bool = False) -> tuple[int, dict[str, Any]]:
    """Run ``gpufleet.nvidia.<module>`` once on localhost; return (ansible's rc, the module result)."""
    env = sim_env(lib_dir, state, tmp, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    argv = [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-m", f"gpufleet.nvidia.{module}",
            "-a", json.dumps(args), "-e", f"ansible_python_interpreter={VENV_PYTHON}"]
    argv += (["--check"] if check else []) + (["--diff"] if diff else [])
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON from ansible (rc {proc.returncode}): {proc.stdout[-3000:]} "
                             f"{proc.stderr[-3000:]}") from exc
    return proc.returncode, doc["plays"][0]["tasks"][0]["hosts"]["localhost"]


def mig_layout(state: Path) -> list[list[tuple[str, int, list[int]]]]:
    """What the simulated hardware holds per GPU: ``[(GI profile name, start, [CI slices])]`` sorted by start."""
    doc = store.load(state)
    result = []
    for gpu in doc["gpus"]:
        names = {p["id"]: p["name"] for p in gpu["mig"].get("gi_profiles", [])}
        gis = sorted(gpu["mig"].get("gpu_instances", []), key=lambda g: g["start"])
        result.append([(names[g["profile_id"]], g["start"], sorted(ci["size"] for ci in g["compute_instances"]))
                       for g in gis])
    return result


def mig_modes(state: Path) -> list[tuple[int, int]]:
    """``(current, pending)`` MIG mode per GPU, from the state file."""
    return [(int(g["mig"]["current"]), int(g["mig"]["pending"])) for g in store.load(state)["gpus"]]


def fleet(tmp: Path, hosts: dict[str, str], lib_dir: Path, extra_vars: dict[str, Any] | None = None) -> Path:
    """A local-connection inventory of simulated hosts ``{name: preset}`` under ``tmp``; returns its path.

    Each host gets its own state and an interpreter wrapper that points NVML_SIM_STATE at it (the local
    connection shares one environment, the wrapper makes it per host). Fake ``scontrol``/``sinfo``/``kubectl``
    log their argv to ``tmp/calls.log``; ``scontrol show node`` prints ``tmp/slurm-node-<name>`` when present.
    The role's install paths are moved under ``tmp``.
    """
    fake_bin = tmp / "fake-bin"
    fake_bin.mkdir(parents=True, exist_ok=True)
    for tool, output in (("scontrol", ""), ("sinfo", "drained"), ("kubectl", "")):
        script = fake_bin / tool
        # `scontrol show node --oneliner N` prints tmp/slurm-node-N when a test wrote one (the node's state line)
        shows = (f'[ "$1" = show ] && [ -f "{tmp}/slurm-node-$4" ] && cat "{tmp}/slurm-node-$4"\n'
                 if tool == "scontrol" else "")
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp}/calls.log"\n' + shows
                          + (f'echo "{output}"\n' if output else "")
                          + ('[ "$1" = get ] && exit 1\n' if tool == "kubectl" else "") + "exit 0\n",
                          encoding="utf-8")
        script.chmod(0o755)
    hostvars = {}
    for name, preset in hosts.items():
        home = tmp / name
        home.mkdir(parents=True, exist_ok=True)
        state = new_state(home / "state.json", preset, seed=name)
        wrapper = home / "python"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'export NVML_SIM_STATE="{state}" LD_LIBRARY_PATH="{lib_dir}" PATH="{sim_bin_dir()}:{fake_bin}:$PATH"\n'
            f'exec "{VENV_PYTHON}" "$@"\n', encoding="utf-8")
        wrapper.chmod(0o755)
        hostvars[name] = {
            "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": str(wrapper),
            "gpufleet_python": str(wrapper), "nvidia_mig_state_file": str(home / "mig-state.json"),
            "nvidia_mig_boot_apply": False, "nvidia_mig_lib_dir": str(home / "lib"),
            "nvidia_mig_script": str(home / "libexec" / "gpufleet-mig-apply"),
            "nvidia_mig_lock_file": str(home / "run" / "mig.lock"),
            # no systemd here: the transaction runs as a child of the task (the podman hosts run it as a unit)
            "nvidia_mig_apply_in_unit": False,
        }
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hostvars}}, "vars": dict(extra_vars or {})}}
    path = tmp / "inventory.yml"
    path.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
    return path


def fleet_env(tmp: Path) -> dict[str, str]:
    """Environment of an ansible-playbook run over :func:`fleet` (fake scheduler tools on PATH)."""
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
               ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
               PATH=f"{tmp / 'fake-bin'}:{sim_bin_dir()}:{Path(VENV_PYTHON).parent}:{env['PATH']}",
               ANSIBLE_NOCOLOR="1")
    return env


def run_playbook(playbook: str, inventory: Path, tmp: Path, extra_vars: dict[str, Any] | None = None,
                 check: bool = False) -> subprocess.CompletedProcess[str]:
    """ansible-playbook on the collection's playbook over a :func:`fleet` inventory."""
    argv = [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(ROOT / "playbooks" / playbook),
            "-e", json.dumps(extra_vars or {})] + (["--check"] if check else [])
    return subprocess.run(argv, cwd=ROOT, env=fleet_env(tmp), capture_output=True, text=True, check=False,
                          timeout=600)


# ------------------------------------------------------------------------ a MIG board only the simulator knows
# A deliberately invented board (issue 15): absent from gpufleet's catalogue by name, PCI id and geometry (6 compute
# slices on 6 memory slices, which no NVIDIA board has), so the validator can only plan it from the profile table
# its simulated driver reports. Profile names follow go-nvlib's memory rounding of a 48 GB board.
LAB_BOARD_NAME = "NVIDIA Lab MIG Board 48GB"
LAB_BOARD_PCI_DEVICE = 0x2FF0
LAB_BOARD_PROFILES = [  # (NVML enum, id, name, compute slices, instances, MiB, starts, size)
    (0, 19, "1g.6gb", 1, 6, 6016, [0, 1, 2, 3, 4, 5], 1),
    (1, 14, "2g.12gb", 2, 3, 12160, [0, 2, 4], 2),
    (2, 9, "3g.18gb", 3, 2, 18304, [0, 3], 3),
    (6, 0, "6g.48gb", 6, 1, 48896, [0], 6),
]


def _lab_ci_profiles(gi_slices: int) -> list[dict[str, Any]]:
    """Compute-instance profiles inside a GI of ``gi_slices``: go-nvlib's rule, placements at multiples of the next
    power of two (what gpufleet's validator assumes for a board it has no CI table for)."""
    enums = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
    result = []
    for slices in sorted(enums):
        if slices > gi_slices or (slices < gi_slices and 2 * slices > gi_slices + 1):
            continue
        step = 1 << (slices - 1).bit_length()
        starts = list(range(0, gi_slices - slices + 1, step))
        result.append({"index": enums[slices], "id": enums[slices], "name": f"{slices}c.{gi_slices}g",
                       "slices": slices, "instances": len(starts), "sms": 16 * slices,
                       "placements": [[s, slices] for s in starts]})
    return result


def make_lab_board(state: Path) -> None:
    """Turn every GPU of the simulated host at ``state`` into the lab board (MIG off, no instances)."""
    doc = store.load(state)
    for gpu in doc["gpus"]:
        gpu["model"], gpu["name"] = "LAB-MIG-48GB", LAB_BOARD_NAME
        gpu["pci"]["pci_device_id"] = LAB_BOARD_PCI_DEVICE << 16 | 0x10DE
        gpu["memory"]["total_mib"] = 49152
        gpu["mig"].update(current=0, pending=0, gpu_instances=[], reset_required_for_mode=False, gi_profiles=[
            {"index": enum, "id": pid, "name": name, "slices": slices, "instances": count, "sms": 16 * slices,
             "copy_engines": slices, "decoders": 0, "encoders": 0, "jpegs": 0, "ofas": 0, "memory_mib": mib,
             "p2p": 0, "placements": [[s, size] for s in starts]}
            for enum, pid, name, slices, count, mib, starts, size in LAB_BOARD_PROFILES],
            ci_profiles={str(s): _lab_ci_profiles(s) for s in sorted({p[3] for p in LAB_BOARD_PROFILES})})
    state.unlink()
    store.create(state, doc)


def rename_driver_profiles(state: Path, names: dict[str, str]) -> None:
    """Give every GPU at ``state`` a driver that prints some GI profiles under other names (GB200's early
    ``1g.24gb`` for production's ``1g.23gb``): the simulated driver reports what the state document says."""
    doc = store.load(state)
    for gpu in doc["gpus"]:
        for profile in gpu["mig"]["gi_profiles"]:
            profile["name"] = names.get(profile["name"], profile["name"])
    state.unlink()
    store.create(state, doc)
