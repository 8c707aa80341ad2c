"""One test per Molecule scenario: ``molecule -c molecule/_shared/base.yml test -s NAME``, one at a time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet_lab.podman import project_root

ROOT = project_root()
BASE_CONFIG = ROOT / "molecule" / "_shared" / "base.yml"
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def _molecule() -> str:
    found = shutil.which("molecule") or str(Path(sys.executable).with_name("molecule"))
    if not Path(found).exists():
        pytest.fail("molecule is not installed in this environment; run scripts/bootstrap.sh")
    return found


@pytest.mark.hosts
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, lab_repo_server: int | None) -> None:
    env = dict(os.environ)
    env.setdefault("ANSIBLE_PIPELINING", "True")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    proc = subprocess.run(
        [_molecule(), "-c", str(BASE_CONFIG), "test", "-s", scenario],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-80:])
        pytest.fail(f"molecule test -s {scenario} failed (rc {proc.returncode}):\n{tail}")
