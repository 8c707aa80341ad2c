# Copyright: gpufleet maintainers. Apache-2.0 (see LICENSE).
"""Reach a gpufleet-lab host (a podman container on this machine) by entering its namespaces with nsenter."""

from __future__ import annotations

DOCUMENTATION = r"""
name: nsenter
short_description: Run tasks in a gpufleet-lab podman host through nsenter, with pipelining
description:
  - The lab's hosts are podman containers on the controller's own machine. C(containers.podman.podman) runs every
    command through C(podman exec), which costs a few hundred milliseconds each and cannot pipeline, so one task
    costs about a second even when it does nothing.
  - This plugin asks podman once per host for the container's init PID, cgroups and environment (and keeps the
    answer in a file of the controller user's own, so the next task's connection does not ask again; a
    C(podman inspect) costs about 50 ms of CPU, a fifth of what a whole small task costs), then runs each
    command with C(nsenter) in the container's mount, UTS, IPC, network, PID and cgroup namespaces, in the
    container's cgroups, with the container's environment only (as C(podman exec) does), and supports
    pipelining. Files travel through the same path (C(cat)), so paths resolve inside the host.
  - A lab host reboots (podman starts the container again with a new init PID). Before each command the plugin
    checks that the PID it entered is still the container's init (the same start time in C(/proc/PID/stat)), and
    asks podman again when it is not, so C(ansible.builtin.reboot) reaches the host after its reboot. A host that is
    not running is a connection failure, which the reboot action retries.
  - Test harness only: it needs root on the controller and the container on the same machine.
author: gpufleet maintainers
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    type: str
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_podman_host
  podman_executable:
    description: The podman binary that started the container.
    default: podman
    type: str
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  pipelining:
    description: Send modules through standard input instead of copying them first.
    default: true
    type: boolean
    vars:
      - name: ansible_pipelining
      - name: ansible_nsenter_pipelining
"""

import json
import os
import re
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.connection.local import Connection as LocalConnection
from ansible.utils.display import Display

display = Display()

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: A container name podman accepts (and so a safe file name): the cache file's name is the container's.
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,250}")


def cache_dir() -> Path | None:
    """The controller user's own directory for what podman said of each host, or None where it is not safely ours.

    Created with mode 0700; a directory that exists and belongs to another user, or that others can write, is not
    used (every connection then asks podman, as without a cache).
    """
    path = Path(tempfile.gettempdir()) / f"gpufleet-lab-nsenter-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def cache_file(name: str) -> Path | None:
    """The file that keeps what podman said of container ``name``, or None when there is no safe place for it."""
    if not _NAME.fullmatch(name):
        return None
    directory = cache_dir()
    return None if directory is None else directory / f"{name}.json"


def cgroup_procs_files(proc_cgroup: str) -> list[str]:
    """The cgroup.procs files of the cgroups in a ``/proc/PID/cgroup`` text (v1 hierarchies and v2's unified one)."""
    files = []
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        path = path.removesuffix("/init.scope")  # the container's own cgroup, where `podman exec` puts commands
        if controllers.startswith("name="):
            mount = controllers.removeprefix("name=")
        elif controllers == "":
            mount = "unified" if (CGROUP_ROOT / "unified").is_dir() else ""
        else:
            mount = controllers
        procs = CGROUP_ROOT / mount / path.lstrip("/") / "cgroup.procs"
        if procs.exists():
            files.append(str(procs))
    return files


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (field 22 of ``/proc/PID/stat``), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count the fields after its closing one
    return stat.rsplit(")", 1)[1].split()[19]


class Connection(LocalConnection):
    """``local`` with every command prefixed by nsenter into the container's namespaces and cgroups."""

    transport = "gpufleet.lab.nsenter"
    has_pipelining = True
    allow_executable = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._prefix: str | None = None
        self._pid = 0
        self._pid_start: str | None = None

    def _connect(self) -> LocalConnection:
        if self._prefix is not None and process_start(self._pid) != self._pid_start:
            display.vvv(f"NSENTER: PID {self._pid} is gone (the host rebooted or stopped); asking podman again",
                        host=self.get_option("remote_addr"))
            self._prefix = None
        if self._prefix is None:
            self._load_cached()
        if self._prefix is None:
            name = self.get_option("remote_addr")
            podman = self.get_option("podman_executable")
            proc = subprocess.run([podman, "inspect", "--type", "container", "--format", "json", name],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise AnsibleConnectionFailure(f"podman inspect {name} failed: {proc.stderr.strip()}")
            info = json.loads(proc.stdout)[0]
            pid = int(info["State"]["Pid"])
            if not info["State"]["Running"] or pid <= 0:
                raise AnsibleConnectionFailure(f"the lab host {name} is not running")
            start = process_start(pid)
            if start is None:
                raise AnsibleConnectionFailure(f"the lab host {name} is not running (its PID {pid} is gone)")
            try:
                proc_cgroup = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
            except OSError as exc:
                raise AnsibleConnectionFailure(f"the lab host {name} is not running ({exc.strerror})") from exc
            joins = "".join(f"echo $$ > {shlex.quote(f)} && " for f in cgroup_procs_files(proc_cgroup))
            # the container's environment as `podman exec` gives it (which leaves out the container_uuid)
            env = " ".join(shlex.quote(v) for v in info["Config"].get("Env") or []
                           if not v.startswith("container_uuid="))
            # -w: the working directory of the container's init (its WorkingDir); nsenter 2.38's --wd=DIR
            # resolves DIR before it enters the mount namespace.
            self._prefix = (f"{joins}exec nsenter --target={pid} --mount --uts --ipc --net --pid --cgroup -w "
                            f"-- env -i {env} /bin/sh -c ")
            self._pid, self._pid_start = pid, start
            display.vvv(f"NSENTER {name}: PID {pid}", host=name)
            self._store_cached()
        return super()._connect()

    def _load_cached(self) -> None:
        """Take the prefix an earlier connection to this host kept, if its PID is still the same process."""
        path = cache_file(self.get_option("remote_addr"))
        if path is None:
            return
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            pid, start, prefix = int(kept["pid"]), str(kept["start"]), str(kept["prefix"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if process_start(pid) == start:
            self._prefix, self._pid, self._pid_start = prefix, pid, start

    def _store_cached(self) -> None:
        path = cache_file(self.get_option("remote_addr"))
        if path is None:
            return
        text = json.dumps({"pid": self._pid, "start": self._pid_start, "prefix": self._prefix})
        try:
            # written beside, then renamed: a connection reading at the same time sees the old file or the new one
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except OSError:
            return

    def reset(self) -> None:
        """Forget the container's PID: the next command asks podman again (after a reboot, the new init)."""
        self._prefix = None
        self._pid_start = None
        path = cache_file(self.get_option("remote_addr"))
        if path is not None:
            path.unlink(missing_ok=True)

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = True) -> tuple[int, bytes, bytes]:
        self._connect()
        assert self._prefix is not None
        return super().exec_command(self._prefix + shlex.quote(to_text(cmd)), in_data=in_data, sudoable=sudoable)

    def put_file(self, in_path: str, out_path: str) -> None:
        display.vvv(f"PUT {in_path} TO {out_path}", host=self.get_option("remote_addr"))
        data = Path(in_path).read_bytes()
        rc, _, err = self.exec_command(f"cat > {shlex.quote(out_path)}", in_data=data, sudoable=False)
        if rc != 0:
            raise AnsibleError(f"failed to transfer {in_path} to {out_path}: {to_text(err).strip()}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self.get_option("remote_addr"))
        rc, out, err = self.exec_command(f"cat {shlex.quote(in_path)}", sudoable=False)
        if rc != 0:
            raise AnsibleError(f"failed to fetch {in_path}: {to_text(err).strip()}")
        Path(out_path).write_bytes(out)
