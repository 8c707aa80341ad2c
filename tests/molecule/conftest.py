"""Fixtures for the Molecule scenarios: the repository server, started once for the session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpufleet.lab import reposerver
from gpufleet.lab.image import ensure_image
from gpufleet.lab.podman import containers_conf


@pytest.fixture(scope="session")
def lab_repo_server() -> Iterator[int | None]:
    """Serve the simulated repository on 127.0.0.1:8765 for the session; stop it by PID afterwards.

    Also makes sure the host image exists and that podman runs with the project's containers.conf.
    """
    try:
        reposerver.check_repo(reposerver.repo_dir())
    except reposerver.RepoServerError as exc:
        pytest.fail(str(exc))
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    pid = reposerver.start()
    try:
        yield pid
    finally:
        reposerver.stop(pid)
