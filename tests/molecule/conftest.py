"""Fixtures for the Molecule scenarios: the repository server, started once for the scenarios' module."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpufleet_lab import reposerver
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import containers_conf


@pytest.fixture(scope="module")
def lab_repo_server() -> Iterator[int | None]:
    """Serve the simulated repository on 127.0.0.1:8765 while the scenarios run; stop it by PID afterwards.

    Module scope, not session: the server must be gone before ``tests/integration/test_no_leftovers.py`` (the last
    tests of the session) checks that nothing of ours still runs.

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
