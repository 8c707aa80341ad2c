"""The local apt/PEP 503 repository server the simulated hosts install from (127.0.0.1:8765).

The simulator's own server (``gpufleet_sim.repo.serve``) is used when it is available; otherwise a plain
``python3 -m http.server`` bound to 127.0.0.1 serves ``build/repo``. Whoever starts the server records its PID and
stops it by that PID; a server that was already running is reused and left alone.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpufleet_lab.podman import build_dir, project_root

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class RepoServerError(RuntimeError):
    """The repository is missing or its server did not come up."""


def repo_dir() -> Path:
    """Return the repository to serve: ``$GPUFLEET_REPO_DIR``, else ``build/repo`` (made by ``gpusim build``)."""
    env = os.environ.get("GPUFLEET_REPO_DIR")
    return Path(env).resolve() if env else project_root() / "build" / "repo"


def is_serving(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, timeout: float = 0.5) -> bool:
    """Return whether something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def pid_alive(pid: int) -> bool:
    """Return whether process ``pid`` exists (and is not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text(encoding="utf-8").split(") ", 1)[1][0] != "Z"
    return True


def check_repo(path: Path) -> None:
    """Raise :class:`RepoServerError` unless ``path`` holds a signed flat repository."""
    missing = [name for name in ("InRelease", "Packages", "gpusim-archive-keyring.gpg") if not (path / name).exists()]
    if missing:
        raise RepoServerError(f"{path} is not a built repository (missing {', '.join(missing)}); "
                              "run `gpusim build` (or scripts/bootstrap.sh) first")


def _fallback_serve(path: Path, host: str, port: int) -> int:
    log = (build_dir() / "repo-server.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", host, "--directory", str(path)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    return proc.pid


def _sim_repo() -> Any:
    """Return ``gpufleet_sim.repo`` (its server writes the PID file ``gpusim repo stop`` uses), or ``None``."""
    try:
        return importlib.import_module("gpufleet_sim.repo")
    except ImportError:
        return None


def _sim_build_dir() -> Path:
    return project_root() / "build"


def start(path: Path | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          timeout: float = 15.0) -> int | None:
    """Serve the repository; return the PID we started, or ``None`` when a server was already listening."""
    path = path or repo_dir()
    check_repo(path)
    if is_serving(host, port):
        return None
    sim_repo = _sim_repo()
    if sim_repo is None:
        pid = _fallback_serve(path, host, port)
    else:
        pid = int(sim_repo.serve(path, host, port, build_dir=_sim_build_dir(), timeout=timeout))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_serving(host, port):
            return pid
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    stop(pid)
    raise RepoServerError(f"the repository server (pid {pid}) did not listen on {host}:{port} within {timeout:.0f} s")


def stop(pid: int | None, timeout: float = 5.0) -> None:
    """Stop the server we started (by its PID); ``None`` (a server we did not start) is left alone."""
    if pid is None or not pid_alive(pid):
        return
    sim_repo = _sim_repo()
    pid_file = _sim_build_dir() / str(getattr(sim_repo, "PID_FILE", ""))
    if sim_repo is not None and pid_file.is_file() and pid_file.read_text(encoding="ascii").strip() == str(pid):
        sim_repo.stop(_sim_build_dir(), timeout)  # the simulator's own stop also removes its PID file
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
