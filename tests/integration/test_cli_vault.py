"""A vaulted group_vars file with --vault-password-file works through the CLI and the API, and while the run goes no
process's command line (/proc/*/cmdline) holds the vaulted value or the extra var's value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpufleet import api
from gpufleet.results import ExitCode

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "fixtures" / "runner" / "playbooks" / "vault_check.yml"
VAULTED = "vaulted-s3cret-4d1"
EXTRA = "extra-s3cret-7b2"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.ini").write_text(
        f"[gpu_nodes]\nnode-1 ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    secret = root / "group_vars" / "gpu_nodes.yml"
    secret.write_text(f"fixture_value: {VAULTED}\n")
    (tmp_path / "pw").write_text("the vault password\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", str(tmp_path / "pw"), str(secret)],
                   check=True, capture_output=True)
    assert VAULTED not in secret.read_text()
    (tmp_path / "extra.yml").write_text(f"mirror_password: {EXTRA}\n")
    return root


@contextmanager
def cmdline_watch() -> Iterator[dict[str, list[str]]]:
    """Read every process's command line until the block ends: which held a secret, and which were ansible-playbook."""
    seen: dict[str, list[str]] = {"leaks": [], "playbooks": []}
    stop = threading.Event()

    def scan() -> None:
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if VAULTED in argv or EXTRA in argv:
                    seen["leaks"].append(argv)
                if "ansible-playbook" in argv and str(PLAYBOOK) in argv:
                    seen["playbooks"].append(argv)
            time.sleep(0.05)

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def test_cli(inventory: Path, tmp_path: Path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    with cmdline_watch() as seen:
        proc = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli", "run", str(PLAYBOOK), "-i", str(inventory),
             "--vault-password-file", str(tmp_path / "pw"), "-e", f"@{tmp_path / 'extra.yml'}", "--json"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
        )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(proc.stdout)["hosts"]["node-1"]["status"] == "ok"
    assert seen["playbooks"], "the watch never saw ansible-playbook: it proved nothing"
    assert all("--vault-password-file" in argv for argv in seen["playbooks"])
    assert seen["leaks"] == []


def test_api(inventory: Path, tmp_path: Path):
    options = api.AnsibleOptions(vault_password_files=(str(tmp_path / "pw"),))
    with cmdline_watch() as seen:
        result = api.run(PLAYBOOK, inventory, extravars={"mirror_password": EXTRA}, ansible=options)
    assert (result.exit_code, result.error, result.hosts["node-1"].status) == (ExitCode.OK, None, "ok")
    assert seen["playbooks"], "the watch never saw ansible-playbook: it proved nothing"
    assert seen["leaks"] == []


def test_api_vault_password_answers_the_prompt(inventory: Path):
    options = api.AnsibleOptions(vault_password="the vault password")
    with cmdline_watch() as seen:
        result = api.run(PLAYBOOK, inventory, extravars={"mirror_password": EXTRA}, ansible=options)
    assert (result.exit_code, result.error, result.hosts["node-1"].status) == (ExitCode.OK, None, "ok")
    assert seen["playbooks"], "the watch never saw ansible-playbook: it proved nothing"
    assert all("--ask-vault-pass" in argv for argv in seen["playbooks"])
    assert seen["leaks"] == []
    assert "the vault password" not in " ".join(seen["playbooks"])
