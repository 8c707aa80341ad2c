"""The quality gates of the test command: ruff, ansible-lint (production profile, empty skip list) and mypy.

They run as tests so that the one pytest summary of ``scripts/test.sh`` (and CI) covers them, and a violation
fails the suite with the tool's own report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(argv: list[str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", PY_COLORS="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=timeout)


def test_ruff() -> None:
    proc = _run([str(BIN / "ruff"), "check", "--no-cache", "."])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile_with_no_skips() -> None:
    config = yaml.safe_load((ROOT / ".ansible-lint").read_text(encoding="utf-8"))
    assert config["profile"] == "production"
    assert not config.get("skip_list")
    assert not config.get("warn_list")
    proc = _run([str(BIN / "ansible-lint"), "--nocolor"])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]


@pytest.mark.slow
def test_mypy() -> None:
    proc = _run([str(BIN / "mypy")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
