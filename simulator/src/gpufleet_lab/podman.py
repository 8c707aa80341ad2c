"""Project paths and the podman command line every lab module goes through.

Podman runs with the project's own ``containers.conf`` (``CONTAINERS_CONF``), never with changes to ``/etc``:
runc (crun cannot handle this cgroup layout), explicit ulimits (the machine withholds CAP_SYS_RESOURCE), the
host network as the only network, and the lab's OCI hooks folder (``build/lab/hooks``: the boot hook,
:mod:`gpufleet_lab.boothook`, which gives every start of a lab host its own boot id).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: Label every container started by the lab carries (molecule's own hosts carry ``owner=molecule``).
OWNER_LABEL = "owner"
LAB_OWNER = "gpufleet-lab"
MOLECULE_OWNER = "molecule"

CONTAINERS_CONF = """\
# Written by gpufleet_lab: used through CONTAINERS_CONF, nothing is written to /etc.
[containers]
netns = "host"
default_ulimits = ["nofile=1024:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
hooks_dir = ["{hooks_dir}"]
"""


class PodmanError(RuntimeError):
    """A podman command failed; the message carries the command and podman's own words."""


def project_root() -> Path:
    """Return the repository root: ``$GPUFLEET_ROOT``, else the checkout this package lives in, else the cwd."""
    env = os.environ.get("GPUFLEET_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "src" / "gpufleet").is_dir() and (parent / "docs").is_dir():
            return parent
    return Path.cwd().resolve()


def build_dir() -> Path:
    """Return ``build/lab`` under the project root (created on demand)."""
    path = project_root() / "build" / "lab"
    path.mkdir(parents=True, exist_ok=True)
    return path


def hooks_dir() -> Path:
    """Return ``build/lab/hooks`` with the lab's boot hook written into it (this Python runs the hook)."""
    from gpufleet_lab.boothook import hook_config  # late: boothook runs in an empty environment, keep it small

    path = build_dir() / "hooks"
    hook_config(sys.executable, path)
    return path


def containers_conf() -> Path:
    """Write (when it differs) and return the project's ``containers.conf`` (and the hooks it names)."""
    path = build_dir() / "containers.conf"
    text = CONTAINERS_CONF.format(hooks_dir=hooks_dir())
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path


def podman_env() -> dict[str, str]:
    """Return the environment podman (and Ansible's podman connection, testinfra) must run with."""
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(containers_conf())
    return env


def podman(args: Sequence[str], *, check: bool = True, input_data: bytes | None = None,
           timeout: float | None = 300) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` with the project's configuration and return the finished process (text output).

    Raises:
        PodmanError: when ``check`` is true and podman exits non-zero.
    """
    cmd = ["podman", *args]
    proc = subprocess.run(
        cmd, env=podman_env(), capture_output=True, check=False, timeout=timeout,
        input=input_data.decode() if input_data is not None else None, text=True,
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise PodmanError(f"podman {' '.join(args)} failed (rc {proc.returncode}): {detail}")
    return proc
