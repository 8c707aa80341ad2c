"""Slurm on lab hosts: Debian bookworm's ``slurmctld``, ``slurmd`` and ``munge`` with the NVML GPU plugin.

* :func:`fetch_nvml_plugin` downloads ``slurm-wlm-nvml-plugin`` from bookworm's ``contrib`` component with apt's
  own client and a private sources list, lists and cache under ``build/slurm/`` (nothing of the system's apt state
  changes), unpacks it with ``dpkg-deb -x`` and returns its ``gpu_nvml.so``. The package carries no
  ``libnvidia-ml``; that is checked, so NVIDIA's library can never stand in for the simulated one. Only the plugin
  file is taken: contrib's build pins ``slurm-wlm-basic-plugins`` to an older point release of the same Slurm
  22.05.8 than main now ships, and the plugin ABI is the release's (22.05.8), not the Debian revision's.
* :func:`ensure_slurm_image` makes a prepared image: a baseline image (simulated driver and NVML bindings
  installed) plus ``slurmctld slurmd slurm-client munge`` from the Debian mirror and the plugin, the services
  disabled. Tagged with a hash of the base image and the recipe; built once.
* :class:`Cluster` configures and starts a cluster on started hosts: a munge key generated per run, one
  ``slurm.conf`` (the first host runs ``slurmctld``; every host runs ``slurmd`` on its own port, since the hosts
  share the host network), ``gres.conf`` with ``AutoDetect=nvml``.
"""

from __future__ import annotations

import base64
import fcntl
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet_lab import image as image_mod
from gpufleet_lab.hosts import HostError, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.podman import MOLECULE_OWNER, build_dir, podman

PLUGIN_PACKAGE = "slurm-wlm-nvml-plugin"
PLUGIN_FILE = "usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so"
ARCHIVE = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian "
           "bookworm contrib")
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
SLURMCTLD_PORT = 6817
FIRST_SLURMD_PORT = 6818
#: a tmpfs over /proc/driver lets the simulated driver keep its MIG device files there
DRIVER_TMPFS = ("/proc/driver",)
BUILD_LOOPBACK = "127.0.229.1"
NVML_DEV_LINK = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so"


class SlurmLabError(RuntimeError):
    """Slurm could not be fetched, installed or started on the lab hosts; the message says which step and why."""


def _step(what: str, argv: Sequence[str], cwd: Path) -> None:
    proc = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C"}, timeout=300)
    if proc.returncode != 0:
        raise SlurmLabError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{proc.stdout}{proc.stderr}")


def fetch_nvml_plugin(base: Path | None = None, archive: str = ARCHIVE) -> Path:
    """Return ``gpu_nvml.so`` of Debian's ``slurm-wlm-nvml-plugin``, downloading and unpacking it when not cached."""
    base = base or build_dir() / "slurm"
    base.mkdir(parents=True, exist_ok=True)
    root = base / "root"
    plugin = root / PLUGIN_FILE
    with open(base / ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not plugin.is_file():
            for folder in (base / "lists" / "partial", base / "cache" / "archives" / "partial", base / "debs"):
                folder.mkdir(parents=True, exist_ok=True)
            (base / "sources.list").write_text(archive + "\n", encoding="utf-8")
            apt = ["-o", f"Dir::Etc::sourcelist={base / 'sources.list'}", "-o", "Dir::Etc::sourceparts=-",
                   "-o", f"Dir::State::Lists={base / 'lists'}", "-o", f"Dir::Cache={base / 'cache'}",
                   "-o", "APT::Sandbox::User=root", "-o", "Acquire::Retries=3"]
            _step("apt-get update of Debian bookworm contrib", ["apt-get", *apt, "--error-on=any", "update"], base)
            _step(f"apt-get download of {PLUGIN_PACKAGE}", ["apt-get", *apt, "download", PLUGIN_PACKAGE],
                  base / "debs")
            debs = sorted((base / "debs").glob(f"{PLUGIN_PACKAGE}_*.deb"))
            if not debs:
                raise SlurmLabError(f"apt-get download left no {PLUGIN_PACKAGE} package in {base / 'debs'}")
            _step(f"dpkg-deb -x of {debs[-1].name}", ["dpkg-deb", "-x", str(debs[-1]), str(root)], base)
    strays = sorted(str(p.relative_to(root)) for p in root.rglob("libnvidia-ml*"))
    if strays:
        raise SlurmLabError(f"{PLUGIN_PACKAGE} unpacked a libnvidia-ml under {root} ({', '.join(strays)}); "
                            "remove it so that only the simulated library can be loaded")
    if not plugin.is_file():
        raise SlurmLabError(f"{plugin} is missing after unpacking {PLUGIN_PACKAGE}; delete {base} and run again")
    return plugin


def ensure_slurm_image(base_image: str) -> str:
    """Return the prepared image ``base_image`` + Slurm + the NVML plugin; build it when missing."""
    plugin = fetch_nvml_plugin()
    digest = image_mod.tree_digest([plugin], base=plugin.parents[5], extra={
        "base": base_image, "packages": " ".join(PACKAGES), "revision": "2"})
    tag = image_mod.prepared_image("slurm", digest)
    if image_mod.image_exists(tag):
        return tag
    name = "prepared-slurm"
    start_hosts([HostSpec(name, "1xT4", BUILD_LOOPBACK, owner=MOLECULE_OWNER)], image=base_image)
    try:
        exec_in(name, ["sh", "-c", "DEBIAN_FRONTEND=noninteractive apt-get -qq -o Acquire::Retries=3 install -y "
                       f"--no-install-recommends {' '.join(PACKAGES)} >/tmp/apt.log 2>&1 || "
                       "{ tail -30 /tmp/apt.log; exit 1; }"])
        podman(["cp", str(plugin), f"{name}:/{PLUGIN_FILE}"])
        # Slurm's gpu plugin dlopen()s the development name libnvidia-ml.so (a dev package's symlink)
        exec_in(name, ["sh", "-c", f"test -e {NVML_DEV_LINK} || ln -s libnvidia-ml.so.1 {NVML_DEV_LINK}"])
        exec_in(name, ["sh", "-c", "systemctl disable --now slurmctld slurmd munge >/dev/null 2>&1; "
                       "rm -f /etc/munge/munge.key; systemctl reset-failed"])
        image_mod.commit_host(name, tag, digest)
    except (HostError, subprocess.SubprocessError) as exc:
        raise SlurmLabError(f"building the Slurm lab image from {base_image} failed: {exc}") from exc
    finally:
        stop_hosts([name], owners=(MOLECULE_OWNER,))
    return tag


@dataclass
class Cluster:
    """A Slurm cluster over started lab hosts: ``nodes`` maps host name -> loopback address; the first runs
    ``slurmctld``. ``gres`` maps a node to its ``Gres=`` value in ``slurm.conf`` (none when absent)."""

    nodes: Mapping[str, str]
    gres: dict[str, str] = field(default_factory=dict)
    name: str = "gpufleet"
    #: slurmd's HealthCheckProgram (run on every node each ``health_check_interval`` s); None: no health check
    health_check: str | None = None
    health_check_interval: int = 5

    @property
    def controller(self) -> str:
        """The host that runs slurmctld."""
        return next(iter(self.nodes))

    def port(self, node: str) -> int:
        """The port ``node``'s slurmd listens on."""
        return FIRST_SLURMD_PORT + list(self.nodes).index(node)

    def slurm_conf(self) -> str:
        """Render ``slurm.conf``."""
        ctl = self.controller
        lines = [
            "# Managed by gpufleet_lab.slurm (a throw-away test cluster)",
            f"ClusterName={self.name}", f"SlurmctldHost={ctl}({self.nodes[ctl]})",
            f"SlurmctldPort={SLURMCTLD_PORT}", "AuthType=auth/munge", "CryptoType=crypto/munge",
            "SlurmUser=root", "SlurmdUser=root", "StateSaveLocation=/var/lib/slurm/slurmctld",
            "SlurmdSpoolDir=/var/lib/slurm/slurmd", "SlurmctldPidFile=/run/slurmctld.pid",
            "SlurmdPidFile=/run/slurmd.pid", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "GresTypes=gpu", "ReturnToService=2",
            "SlurmdParameters=config_overrides", "MpiDefault=none", "SchedulerType=sched/backfill",
            "SlurmctldLogFile=/var/log/slurm/slurmctld.log", "SlurmdLogFile=/var/log/slurm/slurmd.log",
            "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5",
        ]
        if self.health_check:
            lines += [f"HealthCheckProgram={self.health_check}", f"HealthCheckInterval={self.health_check_interval}",
                      "HealthCheckNodeState=ANY"]
        for node, address in self.nodes.items():
            gres = f" Gres={self.gres[node]}" if self.gres.get(node) else ""
            lines.append(f"NodeName={node} NodeAddr={address} Port={self.port(node)} CPUs=2 RealMemory=100"
                         f"{gres} State=UNKNOWN")
        lines.append(f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _put(self, host: str, path: str, content: bytes, mode: str, owner: str = "root:root") -> None:
        # base64 on the way: podman's stdin is text here, and a munge key is binary
        podman(["exec", "-i", host, "sh", "-c", f"mkdir -p $(dirname {path}) && base64 -d > {path} && "
                f"chmod {mode} {path} && chown {owner} {path}"], input_data=base64.b64encode(content))

    def write_config(self) -> None:
        """Write ``slurm.conf`` and ``gres.conf`` (AutoDetect=nvml) on every node."""
        conf = self.slurm_conf().encode()
        for host in self.nodes:
            self._put(host, "/etc/slurm/slurm.conf", conf, "0644")
            self._put(host, "/etc/slurm/gres.conf", b"# Managed by gpufleet_lab.slurm\nAutoDetect=nvml\n", "0644")

    def read_gres(self) -> dict[str, str]:
        """Read the nodes' ``Gres=`` back from the controller's ``slurm.conf`` (after something else edited it) into
        :attr:`gres`, so that :meth:`write_config` keeps them; return them."""
        text = exec_in(self.controller, ["cat", "/etc/slurm/slurm.conf"])
        for line in text.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S+)", line))
            if line.startswith("NodeName=") and fields.get("NodeName") in self.nodes:
                self.gres[fields["NodeName"]] = fields.get("Gres", "")
        return dict(self.gres)

    def start(self) -> None:
        """Generate this run's munge key, write the configuration and start munge, slurmctld and slurmd."""
        key = os.urandom(1024)
        for host in self.nodes:
            self._put(host, "/etc/munge/munge.key", key, "0400", "munge:munge")
            exec_in(host, ["sh", "-c", "mkdir -p /var/log/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd"])
        self.write_config()
        for host in self.nodes:
            exec_in(host, ["systemctl", "start", "munge"])
        exec_in(self.controller, ["systemctl", "start", "slurmctld"])
        for host in self.nodes:
            exec_in(host, ["systemctl", "start", "slurmd"])

    def restart(self, hosts: Sequence[str] | None = None) -> None:
        """Write the configuration again and restart slurmctld and the slurmd of ``hosts`` (all when None)."""
        self.write_config()
        exec_in(self.controller, ["systemctl", "restart", "slurmctld"])
        for host in hosts or list(self.nodes):
            exec_in(host, ["systemctl", "restart", "slurmd"])

    def wait_idle(self, timeout: float = 60.0) -> dict[str, str]:
        """Wait until every node is idle (or mixed/allocated); return node -> state. Raises after ``timeout``."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            out = exec_in(self.controller, ["sinfo", "-h", "-N", "-o", "%N %T"], check=False)
            states = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
            if set(states) == set(self.nodes) and all(s.rstrip("*") in ("idle", "mixed", "allocated")
                                                      for s in states.values()):
                return states
            time.sleep(1)
        raise SlurmLabError(f"the Slurm nodes did not become idle within {timeout:.0f} s: {states}")


GRES_LINE = re.compile(r"Gres Name=(?P<name>\S+) Type=(?P<type>\S+) Count=(?P<count>\d+)")


def detected_gres(host: str) -> list[dict[str, str]]:
    """Run ``slurmd -G`` on ``host`` and return its GRES lines (name, type, count, index, file)."""
    proc = podman(["exec", host, "slurmd", "-G"], check=False)
    rows = []
    for line in (proc.stdout + proc.stderr).splitlines():
        match = GRES_LINE.search(line)
        if match:
            fields = dict(re.findall(r"(\w+)=(\S+)", line[match.start():]))
            rows.append({"name": match["name"], "type": match["type"], "count": match["count"],
                         "index": fields.get("Index", ""), "file": fields.get("File", "")})
    if proc.returncode != 0 and not rows:
        raise SlurmLabError(f"slurmd -G on {host} failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return rows


def gres_value(rows: Sequence[Mapping[str, str]]) -> str:
    """The ``Gres=`` value for ``slurm.conf`` from detected rows: ``gpu:<type>:<count>`` per type, sorted."""
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row["name"], row["type"])
        counts[key] = counts.get(key, 0) + int(row["count"])
    return ",".join(f"{name}:{kind}:{n}" for (name, kind), n in sorted(counts.items()))


__all__ = ["DRIVER_TMPFS", "Cluster", "SlurmLabError", "detected_gres", "ensure_slurm_image", "fetch_nvml_plugin",
           "gres_value"]
