"""Run a playbook from the checkout against the lab's hosts and read Ansible's JSON callback document.

One way for the host tests to call ``ansible-playbook``: the checkout's ansible.cfg and collections, no colour,
the ``ansible.posix.json`` callback, and (given a work folder) a private ``XDG_CACHE_HOME``. A run that prints
no JSON fails the test with the tail of its output, never passes as "no failures".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet_lab.podman import project_root

ROOT = project_root()


ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def ansible_env(work: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_NOCOLOR": "1"})
    if work is not None:
        env["XDG_CACHE_HOME"] = str(work / "cache")
    return env


def playbook_argv(inventory: Path, playbook: Path, extra: Sequence[str] = (), *, check: bool = False,
                  limit: str | None = None) -> list[str]:
    argv = [ANSIBLE_PLAYBOOK, "-i", str(inventory), *(["--limit", limit] if limit else []), str(playbook)]
    for item in extra:
        argv += ["-e", item]
    return [*argv, "--check"] if check else argv


def parse(rc: int, out: str, err: str) -> dict[str, Any]:
    """The JSON callback's document, or a test failure that shows what Ansible printed instead."""
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON (rc {rc}):\n{out[-3000:]}{err[-3000:]}")


def results(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every host result of every task, in order."""
    return [result for play in doc["plays"] for task in play["tasks"] for result in task["hosts"].values()]


def failed_messages(doc: dict[str, Any]) -> list[str]:
    return [result.get("msg", "") for result in results(doc) if result.get("failed")]


def run_playbook(inventory: Path, playbook: Path, extra: Sequence[str] = (), *, work: Path | None = None,
                 check: bool = False, limit: str | None = None, timeout: int = 600) -> tuple[int, dict[str, Any]]:
    """Run ``playbook``; return its exit status and the JSON callback's document."""
    proc = subprocess.run(playbook_argv(inventory, playbook, extra, check=check, limit=limit), cwd=ROOT,
                          env=ansible_env(work), capture_output=True, text=True, check=False, timeout=timeout)
    return proc.returncode, parse(proc.returncode, proc.stdout, proc.stderr)


def gpufleet_json(args: Sequence[str], *, env: dict[str, str] | None = None,
                  timeout: int = 600) -> tuple[int, dict[str, Any], str]:
    """Run the operator's command from the checkout, ``python -m gpufleet.cli ARGS`` (e.g. ``verify -i INV --json``);
    return its exit code, the JSON it printed and its standard error. A run that prints no JSON fails the test."""
    full = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], cwd=ROOT, env={**full, **(env or {})},
                          capture_output=True, text=True, check=False, timeout=timeout)
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except json.JSONDecodeError:
        pytest.fail(f"gpufleet {' '.join(args[:1])} printed no JSON (rc {proc.returncode}): {proc.stdout[-3000:]} "
                    f"{proc.stderr[-3000:]}")
