"""Start and stop throw-away systemd hosts, each with a simulated GPU preset.

A host is a podman container from :data:`gpufleet_lab.image.IMAGE` running ``/sbin/init`` on the host network
(never ``--privileged``). Before it boots it receives its simulated hardware: the preset's state document at
``/var/lib/nvidia-sim/state.json`` (0644 root, directory 0755) and a read-only fake PCI tree mounted over
``/sys/bus/pci/devices``. Each host owns one loopback address ``127.0.N.1`` for services it runs.

A host started with ``HostSpec(rdma=True)`` whose state has HCAs (``"rdma"``: gpufleet_sim.infiniband) also gets
the simulated kernel's RDMA files,
written on this machine under ``build/lab/hosts/<name>/kernel`` and seen three ways in the host: read-only at
``/sys/class/infiniband`` (where ibstat, ibstatus and the product read them), read-write at
``/var/lib/nvidia-sim/kernel`` (where the simulator in the host, as the hardware, rewrites them when a fault
changes the state), and the simulated modules' folders at ``/sys/module/<name>`` (``initstate`` ``live`` while
loaded: ``nvidia_peermem``, ``mlx5_ib`` ...). This machine's ``/sys/class`` and ``/sys/module`` have no such
folders to mount on and sysfs takes no new folder, so in such a host each of the two is a folder of empty mount
points, one per entry of this machine's (each bound back read-only from it) plus the simulated ones. A fault that
moves a device (``nic-wrong-socket``) changes the state in the host; :func:`refresh_pci_tree` redraws the tree.

A host reboots as a machine does: ``reboot`` inside it ends the container, podman starts it again
(``--restart=always``; ``podman stop`` and ``rm`` keep it down), and every start is a boot: the lab's OCI hook
(:mod:`gpufleet_lab.boothook`) gives it a new ``/proc/sys/kernel/random/boot_id`` and power-cycles its simulated
GPUs (:mod:`gpufleet_sim.power`). :func:`boot_id` reads the current one from this machine.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet_lab.boothook import ANNOTATION as BOOT_ANNOTATION
from gpufleet_lab.boothook import BOOT_ID_FILE
from gpufleet_lab.image import IMAGE
from gpufleet_lab.pcitree import write_pci_tree
from gpufleet_lab.podman import LAB_OWNER, MOLECULE_OWNER, OWNER_LABEL, PodmanError, build_dir, podman

LOG = logging.getLogger(__name__)

STATE_DIR = "/var/lib/nvidia-sim"
PCI_MOUNT = "/sys/bus/pci/devices"
SYS_CLASS = "/sys/class"
SYS_MODULE = "/sys/module"
KERNEL_MOUNT = "/var/lib/nvidia-sim/kernel"
#: Debian's site directory in the host: host_python/'s bytecode cache for zip imports goes there (read-only).
HOST_SITE_DIR = "/usr/lib/python3/dist-packages"
HOST_PYTHON_FILES = ("gpufleet_lab_zipcache.py", "gpufleet_lab_zipcache.pth")
LABEL_PRESET = "gpufleet.preset"
LABEL_LOOPBACK = "gpufleet.loopback"
LABEL_FLEET = "gpufleet.fleet"
MAX_LOOPBACK = 254
BOOT_STATES = ("running", "degraded")
#: How Ansible reaches a lab host from this machine: nsenter into the container (the gpufleet.lab collection's
#: connection, collections/ in a checkout), with the host's own Python. Many times faster per task than
#: ``podman exec`` (containers.podman.podman), which the sim inventory keeps for the execution environment.
ANSIBLE_HOST_VARS = {"ansible_connection": "gpufleet.lab.nsenter", "ansible_python_interpreter": "/usr/bin/python3"}


class HostError(RuntimeError):
    """A host could not be started or did not boot; the message says which and why."""


def loopback_address(number: int) -> str:
    """Return the loopback address of host number ``number`` (1-254): ``127.0.N.1``."""
    if not 1 <= number <= MAX_LOOPBACK:
        raise ValueError(f"host number {number} is out of range: use 1 to {MAX_LOOPBACK}")
    return f"127.0.{number}.1"


@dataclass(frozen=True)
class HostSpec:
    """What a host is: its name, simulated GPU preset and loopback address."""

    name: str
    preset: str
    loopback: str
    owner: str = LAB_OWNER
    fleet: str = ""
    #: The state document; built from ``preset`` with the simulator's presets when ``None``.
    state: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    #: Folders mounted as a fresh tmpfs (``/proc/driver``: where the simulated driver writes its MIG device files).
    tmpfs: tuple[str, ...] = ()
    #: Show the state's HCAs in the host (``/sys/class/infiniband``, ``/sys/module``: about a hundred bind mounts).
    #: Off unless asked: the suite's NVSwitch hosts ran measurably slower with them (issue 33; docs/testing.md), and
    #: a host without them is a node with no RDMA fabric, which gpu_health does not check for one.
    rdma: bool = False

    def labels(self) -> dict[str, str]:
        """Return the podman labels the container carries."""
        labels = {OWNER_LABEL: self.owner, LABEL_PRESET: self.preset, LABEL_LOOPBACK: self.loopback}
        if self.fleet:
            labels[LABEL_FLEET] = self.fleet
        return labels


@dataclass
class Host:
    """A started host."""

    spec: HostSpec
    gpus: int
    pci_devices: list[str]
    boot_s: float = 0.0

    @property
    def name(self) -> str:
        """The container (and host) name."""
        return self.spec.name


def preset_state(preset: str, host_seed: str) -> dict[str, Any]:
    """Build the state document of ``preset`` with the simulator (seeded by the host name)."""
    from gpufleet_sim.presets import build_state  # imported late: hosts with explicit states need no simulator

    return build_state(preset, host_seed)


def host_files_dir(name: str) -> Path:
    """Return the folder under ``build/lab/hosts`` that holds a host's state and PCI tree."""
    return build_dir() / "hosts" / name


def prepare_files(spec: HostSpec, state_factory: Callable[[str, str], Mapping[str, Any]] = preset_state
                  ) -> tuple[Path, Path, Mapping[str, Any]]:
    """Write the host's ``nvidia-sim/state.json`` and ``pci/`` tree; return (state dir, pci dir, state)."""
    state = spec.state if spec.state is not None else state_factory(spec.preset, spec.name)
    base = host_files_dir(spec.name)
    state_dir = base / "nvidia-sim"
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o755)
    state_file = state_dir / "state.json"
    state_file.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    state_file.chmod(0o644)
    pci_dir = base / "pci"
    write_pci_tree(state, pci_dir)
    write_local_facts(spec, base / "ansible")
    if spec.rdma:
        write_kernel_files(state, base)
    return state_dir, pci_dir, state


def write_kernel_files(state: Mapping[str, Any], base: Path, sys_root: Path = Path("/sys")) -> bool:
    """Write the simulated RDMA kernel files (``kernel/``) and the ``sys/`` mount points of a host with HCAs.

    Returns whether the host has HCAs (nothing is written without).
    """
    if not (state.get("rdma") or {}).get("hcas"):
        return False
    from gpufleet_sim.infiniband import render  # the simulator decides what the kernel shows

    kernel = base / "kernel"
    kernel.mkdir(parents=True, exist_ok=True)
    kernel.chmod(0o755)
    render(dict(state), kernel, pci_root=PCI_MOUNT)
    for sub, ours in (("class", ["infiniband"]), ("module", [p.name for p in (kernel / "module").iterdir()])):
        stubs = base / "sys" / sub
        stubs.mkdir(parents=True, exist_ok=True)
        for name in {*(p.name for p in (sys_root / sub).iterdir()), *ours}:
            (stubs / name).mkdir(exist_ok=True)
    return True


def kernel_mounts(base: Path, sys_root: Path = Path("/sys")) -> list[str]:
    """The ``podman create`` mount arguments of a host with HCAs (see the module's description); [] without."""
    kernel = base / "kernel"
    if not (kernel / "infiniband").is_dir():
        return []
    args: list[str] = []
    for sub, ours in (("class", {"infiniband": kernel / "infiniband"}),
                      ("module", {p.name: p for p in (kernel / "module").iterdir()})):
        args += ["--mount", f"type=bind,src={base / 'sys' / sub},dst=/sys/{sub},ro=true"]
        for item in sorted((sys_root / sub).iterdir()):
            if item.name not in ours:
                args += ["--mount", f"type=bind,src={item},dst=/sys/{sub}/{item.name},ro=true"]
        for name, src in sorted(ours.items()):
            args += ["--mount", f"type=bind,src={src},dst=/sys/{sub}/{name},ro=true"]
    return [*args, "--mount", f"type=bind,src={kernel},dst={KERNEL_MOUNT}"]


def write_local_facts(spec: HostSpec, ansible_dir: Path) -> Path:
    """Write ``facts.d/gpufleet_lab.fact`` (an Ansible local fact: the host's preset and loopback address).

    Copied to ``/etc/ansible`` in the host, it tells plays what only the harness knows, e.g. the address a service
    with a fixed port binds to (``ansible_local.gpufleet_lab.loopback``) on hosts that share one network.
    """
    facts = ansible_dir / "facts.d"
    facts.mkdir(parents=True, exist_ok=True)
    fact = facts / "gpufleet_lab.fact"
    fact.write_text(json.dumps({"name": spec.name, "preset": spec.preset, "loopback": spec.loopback}) + "\n",
                    encoding="utf-8")
    fact.chmod(0o644)
    return fact


def python_mounts() -> list[str]:
    """The ``--mount`` arguments that give a host's Python the lab's bytecode cache for Ansible's zipped modules.

    host_python/gpufleet_lab_zipcache.py says what it does and why (a run of the suite runs a few thousand
    modules; each compiled its module_utils again). Read-only binds: nothing in the image changes, a host that a
    prepared image was committed from gets them again at its next start.
    """
    source = Path(__file__).resolve().parent / "host_python"
    args: list[str] = []
    for name in HOST_PYTHON_FILES:
        args += ["--mount", f"type=bind,src={source / name},dst={HOST_SITE_DIR}/{name},ro=true"]
    return args


def create_args(spec: HostSpec, pci_dir: Path | None, image: str = IMAGE) -> list[str]:
    """Return the ``podman create`` arguments for a host (host network, systemd, labels, PCI mount)."""
    args = ["create", "--name", spec.name, "--hostname", spec.name, "--systemd=always", "--network=host",
            "--stop-timeout", "5", "--restart=always",
            "--annotation", f"{BOOT_ANNOTATION}={host_files_dir(spec.name)}"]
    for key, value in spec.labels().items():
        args += ["--label", f"{key}={value}"]
    if pci_dir is not None:
        # an RDMA host's bridges take setpci's writes (ACS), as root's writes to a real config space land
        args += ["--mount", f"type=bind,src={pci_dir},dst={PCI_MOUNT},ro={'false' if spec.rdma else 'true'}"]
        if spec.rdma:
            args += kernel_mounts(pci_dir.parent)
    for folder in spec.tmpfs:
        args += ["--mount", f"type=tmpfs,dst={folder}"]
    return [*args, *python_mounts(), image, "/sbin/init"]


def wait_running(name: str, timeout: float = 90.0) -> float:
    """Wait until systemd inside ``name`` has booted (running or degraded); return the seconds waited.

    Right after the start ``systemctl`` may fail with "Failed to connect to bus": that is retried.
    """
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        proc = podman(["exec", name, "systemctl", "is-system-running", "--wait"], check=False,
                      timeout=max(1.0, timeout - (time.monotonic() - start)))
        last = (proc.stdout.strip() or proc.stderr.strip())
        if proc.stdout.strip() in BOOT_STATES:
            return time.monotonic() - start
        time.sleep(0.3)
    raise HostError(f"host {name} did not finish booting within {timeout:.0f} s (last answer: {last!r})")


def start_hosts(specs: Sequence[HostSpec], *, image: str = IMAGE, pci: bool = True, timeout: float = 120.0,
                state_factory: Callable[[str, str], Mapping[str, Any]] = preset_state) -> list[Host]:
    """Create, seed and start every host, then wait until all have booted. Replaces same-named lab hosts.

    On any failure the hosts started here are removed again before the error is raised.
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise HostError(f"host names must be unique: {names}")
    started: list[Host] = []
    try:
        for spec in specs:
            _remove_if_ours(spec.name, spec.owner)
            state_dir, pci_dir, state = prepare_files(spec, state_factory)
            podman(create_args(spec, pci_dir if pci else None, image))
            # `SRC/.`: the folder's content, also into an image that already has the folder (a prepared image)
            podman(["cp", f"{state_dir}/.", f"{spec.name}:{STATE_DIR}"])
            podman(["cp", f"{host_files_dir(spec.name) / 'ansible'}/.", f"{spec.name}:/etc/ansible"])
            podman(["start", spec.name])
            started.append(Host(spec=spec, gpus=len(state.get("gpus", [])),
                                pci_devices=sorted(p.name for p in pci_dir.iterdir()
                                                   if not p.name.startswith(".")) if pci else []))
        begin = time.monotonic()
        for host in started:
            wait_running(host.name, timeout=max(5.0, timeout - (time.monotonic() - begin)))
            host.boot_s = time.monotonic() - begin
    except BaseException:
        stop_hosts([h.name for h in started] or names, owners=(specs[0].owner,) if specs else (LAB_OWNER,))
        raise
    return started


def _owner_of(name: str) -> str | None:
    proc = podman(["container", "inspect", "--format", f'{{{{index .Config.Labels "{OWNER_LABEL}"}}}}', name],
                  check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _remove_if_ours(name: str, owner: str) -> None:
    current = _owner_of(name)
    if current is None:
        return
    if current != owner:
        raise HostError(f"a container named {name} exists and is not ours (owner={current!r}); remove it by hand")
    podman(["rm", "--force", "--time", "2", name])


def stop_hosts(names: Iterable[str], owners: Sequence[str] = (LAB_OWNER, MOLECULE_OWNER)) -> list[str]:
    """Remove the named hosts that carry one of ``owners``; return the names removed."""
    removed = []
    for name in names:
        owner = _owner_of(name)
        if owner is None or owner not in owners:
            continue
        podman(["rm", "--force", "--ignore", "--time", "2", name])
        shutil.rmtree(host_files_dir(name), ignore_errors=True)
        removed.append(name)
    return removed


def list_hosts(owner: str = LAB_OWNER, fleet: str | None = None) -> list[dict[str, str]]:
    """Return ``name``, ``state``, ``preset``, ``loopback`` and ``fleet`` of the containers labelled ``owner``."""
    args = ["ps", "--all", "--filter", f"label={OWNER_LABEL}={owner}", "--format", "json"]
    if fleet is not None:
        args[4:4] = ["--filter", f"label={LABEL_FLEET}={fleet}"]
    proc = podman(args)
    rows = []
    for item in json.loads(proc.stdout or "[]"):
        labels = item.get("Labels") or {}
        rows.append({"name": item["Names"][0], "state": item.get("State", ""),
                     "preset": labels.get(LABEL_PRESET, ""), "loopback": labels.get(LABEL_LOOPBACK, ""),
                     "fleet": labels.get(LABEL_FLEET, "")})
    return rows


def cleanup(owners: Sequence[str] = (LAB_OWNER,)) -> list[str]:
    """Remove every container labelled with one of ``owners`` (and their files); return the names removed."""
    removed: list[str] = []
    for owner in owners:
        names = [row["name"] for row in list_hosts(owner)]
        removed += stop_hosts(names, owners=(owner,))
    return removed


def boot_id(name: str) -> str:
    """Return the boot id the lab gave host ``name`` at its last start (what the host reads in ``/proc``)."""
    path = host_files_dir(name) / BOOT_ID_FILE
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise HostError(f"host {name} has no boot id ({path}: {exc.strerror}); was it started by gpufleet_lab?") \
            from exc


def wait_rebooted(name: str, old_boot_id: str, timeout: float = 120.0) -> float:
    """Wait until host ``name`` runs again with a boot id other than ``old_boot_id``; return the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        proc = podman(["exec", name, "cat", "/proc/sys/kernel/random/boot_id"], check=False, timeout=10)
        current = proc.stdout.strip()
        if proc.returncode == 0 and current and current != old_boot_id:
            wait_running(name, timeout=max(5.0, timeout - (time.monotonic() - start)))
            return time.monotonic() - start
        time.sleep(0.5)
    raise HostError(f"host {name} did not come back with a new boot id within {timeout:.0f} s")


def exec_in(name: str, argv: Sequence[str], *, check: bool = True) -> str:
    """Run ``argv`` inside host ``name`` and return its standard output."""
    try:
        return podman(["exec", name, *argv], check=check).stdout
    except PodmanError as exc:
        raise HostError(str(exc)) from exc


def refresh_pci_tree(name: str) -> list[str]:
    """Rewrite host ``name``'s PCI tree from the state in the host (after a fault moved a device; the RDMA faults
    change the state in the host, the tree is mounted read-only from this machine). Returns the bus ids written."""
    state = json.loads(exec_in(name, ["cat", f"{STATE_DIR}/state.json"]))
    return write_pci_tree(state, host_files_dir(name) / "pci")
