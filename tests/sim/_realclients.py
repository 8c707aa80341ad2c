"""NVIDIA's own clients, run unchanged against the simulated ``libnvidia-ml.so.1``.

``fetch()`` downloads ``nvidia-smi`` and ``nvidia-cuda-mps`` of driver 535.261.03 from Debian bookworm's non-free
archive with apt's own client (a private sources list, lists and cache under ``build/realclients/``: nothing of
the system's apt state changes), unpacks them with ``dpkg-deb -x`` into ``build/realclients/root`` and keeps them
for the next run. Nothing is installed. The packages carry no ``libnvidia-ml``; ``fetch`` checks that, so NVIDIA's
library can never stand in for the simulated one. A failed fetch raises ``RealClientError``: the tests that need
the binaries fail (they do not skip), because a skipped judge would be a false green.

``run()`` starts a binary with ``LD_LIBRARY_PATH`` naming only the simulated library's folder, ``NVML_SIM_STATE``
naming the state file, the C locale and the packages' ``usr/sbin`` first on ``PATH`` (``env()`` builds that
environment for a caller that starts a daemon itself).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "build" / "realclients"
VERSION = "535.261.03-1"
DRIVER_VERSION = VERSION.split("-", 1)[0]
PACKAGES = ("nvidia-smi", "nvidia-cuda-mps")
ARCHIVE = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian "
           "bookworm non-free")
BINARIES = {
    "nvidia-smi": "usr/lib/nvidia/current/nvidia-smi",
    "nvidia-cuda-mps-control": "usr/bin/nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server": "usr/sbin/nvidia-cuda-mps-server",
}


class RealClientError(RuntimeError):
    """NVIDIA's packages could not be fetched or unpacked; the message says which step failed and why."""


@dataclass(frozen=True)
class RealClients:
    """The unpacked packages: ``path(name)`` is the binary, ``run`` starts it against a simulated host."""

    root: Path

    def path(self, name: str) -> Path:
        """Return the unpacked binary called ``name`` (a key of ``BINARIES``)."""
        return self.root / BINARIES[name]

    def env(self, libdir: Path, state: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a binary runs in: only the simulated library's folder on ``LD_LIBRARY_PATH``, the state
        file in ``NVML_SIM_STATE``, the C locale, UTC, the packages' ``usr/sbin`` first on ``PATH`` (where
        ``nvidia-cuda-mps-control`` finds ``nvidia-cuda-mps-server``), then ``extra``."""
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "NVML_SIM_STATE")}
        env.update({"LD_LIBRARY_PATH": str(libdir), "NVML_SIM_STATE": str(state), "LC_ALL": "C", "TZ": "UTC",
                    "PATH": f"{self.root / 'usr' / 'sbin'}{os.pathsep}{env.get('PATH', os.defpath)}"})
        env.update(extra or {})
        return env

    def run(self, name: str, args: list[str], libdir: Path, state: Path, timeout: float = 60,
            input: str | None = None, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run binary ``name`` with ``args`` (and ``input`` on stdin) on the simulated library in ``libdir`` and the
        state file ``state``."""
        return subprocess.run([str(self.path(name)), *args], env=self.env(libdir, state, extra_env),
                              capture_output=True, text=True, input=input, timeout=timeout, check=False)


def _apt_options(base: Path, retries: int) -> list[str]:
    return ["-o", f"Acquire::Retries={retries}",
            "-o", f"Dir::Etc::sourcelist={base / 'sources.list'}", "-o", "Dir::Etc::sourceparts=-",
            "-o", f"Dir::State::Lists={base / 'lists'}", "-o", f"Dir::Cache={base / 'cache'}",
            "-o", "APT::Sandbox::User=root"]


def _step(what: str, argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C"}, timeout=300)
    if proc.returncode != 0:
        raise RealClientError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
                              f"{proc.stdout}{proc.stderr}")


def fetch(base: Path = BASE, archive: str = ARCHIVE, retries: int = 3) -> RealClients:
    """Return the unpacked clients, downloading and unpacking them first when they are not cached.

    ``archive`` is the sources.list line of the archive to download from and ``retries`` how often apt retries a
    failed download (tests point at an unreachable archive and retry nothing).
    """
    base.mkdir(parents=True, exist_ok=True)
    root = base / "root"
    marker = base / f"unpacked-{VERSION}"
    with open(base / ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.is_file():
            for folder in (base / "lists" / "partial", base / "cache" / "archives" / "partial", base / "debs"):
                folder.mkdir(parents=True, exist_ok=True)
            (base / "sources.list").write_text(archive + "\n", encoding="utf-8")
            apt = _apt_options(base, retries)
            _step("apt-get update of Debian bookworm non-free", ["apt-get", *apt, "--error-on=any", "update"], base)
            _step(f"apt-get download of {', '.join(PACKAGES)} {VERSION}",
                  ["apt-get", *apt, "download", *(f"{p}={VERSION}" for p in PACKAGES)], base / "debs")
            for package in PACKAGES:
                deb = base / "debs" / f"{package}_{VERSION}_amd64.deb"
                if not deb.is_file():
                    raise RealClientError(f"apt-get download did not leave {deb}")
                _step(f"dpkg-deb -x of {deb.name}", ["dpkg-deb", "-x", str(deb), str(root)], base)
            marker.write_text(VERSION + "\n", encoding="utf-8")
    strays = sorted(str(p.relative_to(root)) for p in root.rglob("libnvidia-ml*"))
    if strays:
        raise RealClientError(f"NVIDIA's libnvidia-ml is unpacked under {root} ({', '.join(strays)}); "
                              "remove it so that only the simulated library can be loaded")
    clients = RealClients(root)
    for name in BINARIES:
        if not os.access(clients.path(name), os.X_OK):
            raise RealClientError(f"{clients.path(name)} is missing after unpacking; delete {base} and run again")
    return clients
