"""After the lab has run, nothing of ours is left: no labelled containers, no repository server, no listeners.

pytest runs this file's tests last among the host tests when the whole ``tests/`` tree runs (it is collected
after ``tests/integration/test_lab_*.py`` and, through ``pytest_collection_modifyitems`` in the local conftest,
moved to the very end of the session).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpufleet_lab import reposerver
from gpufleet_lab.fleet import load_record
from gpufleet_lab.podman import LAB_OWNER, MOLECULE_OWNER, OWNER_LABEL, build_dir, podman

pytestmark = pytest.mark.hosts


def _listeners() -> list[tuple[str, int]]:
    """Return (address, port) of every TCP socket in LISTEN state, from /proc/net/tcp."""
    out = []
    for line in Path("/proc/net/tcp").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state != "0A":  # TCP_LISTEN
            continue
        addr_hex, port_hex = local.split(":")
        octets = [str(int(addr_hex[i:i + 2], 16)) for i in range(6, -1, -2)]
        out.append((".".join(octets), int(port_hex, 16)))
    return out


@pytest.mark.parametrize("owner", [LAB_OWNER, MOLECULE_OWNER, "gpufleet-test"])
def test_no_labelled_containers(owner: str) -> None:
    proc = podman(["ps", "--all", "--filter", f"label={OWNER_LABEL}={owner}", "--format", "json"])
    names = [c["Names"][0] for c in json.loads(proc.stdout or "[]")]
    assert names == [], f"containers labelled {OWNER_LABEL}={owner} are still there: {names}"


def test_no_repository_server_left() -> None:
    assert not reposerver.is_serving(), f"something still listens on 127.0.0.1:{reposerver.DEFAULT_PORT}"
    records = sorted((build_dir() / "fleets").glob("*.json"))
    alive = []
    for record in records:
        fleet = load_record(record.stem)
        if fleet is not None and fleet.repo_pid is not None and reposerver.pid_alive(fleet.repo_pid):
            alive.append((fleet.name, fleet.repo_pid))
    assert alive == [], f"repository servers started by fleets are still running: {alive}"


def test_nothing_listens_on_lab_addresses() -> None:
    ours = [(a, p) for a, p in _listeners()
            if p == reposerver.DEFAULT_PORT or (a.startswith("127.0.") and a.endswith(".1") and a != "127.0.0.1")]
    assert ours == [], f"listeners left on the lab's addresses: {ours}"


def test_no_http_server_process_of_ours() -> None:
    proc = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True)
    left = [line.strip() for line in proc.stdout.splitlines()
            if "http.server" in line and str(reposerver.DEFAULT_PORT) in line]
    assert left == [], f"repository server processes still running: {left}"
