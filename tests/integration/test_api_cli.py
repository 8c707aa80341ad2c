"""The gpufleet command end to end (a subprocess, real ansible-runner runs): --json documents and exit codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "runner"


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory, closed_port: int) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {
        "good": dict(local),
        "bad": dict(local),
        "gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": closed_port,
                 "ansible_user": "nobody"},
    }
    path = tmp_path_factory.mktemp("inventory") / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def gpufleet(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env["ANSIBLE_COLLECTIONS_PATH"] = str(FIXTURES / "collections")
    env.pop("GPUFLEET_INVENTORY", None)
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd or REPO, timeout=300, check=False,
    )


@pytest.mark.parametrize(
    ("playbook", "limit", "code", "statuses"),
    [
        ("ok.yml", "good", 0, {"good": "ok"}),
        ("mixed.yml", "good,bad", 2, {"good": "changed", "bad": "failed"}),
        ("mixed.yml", "all", 3, {"good": "changed", "bad": "failed", "gone": "unreachable"}),
    ],
    ids=["ok", "failed", "unreachable"],
)
def test_json_and_exit_code(inventory, playbook, limit, code, statuses):
    proc = gpufleet("run", str(FIXTURES / "playbooks" / playbook), "-i", str(inventory), "-l", limit, "--json")
    assert proc.returncode == code, proc.stderr
    document = json.loads(proc.stdout)  # stdout holds the document and nothing else
    assert document["exit_code"] == code
    assert {name: host["status"] for name, host in document["hosts"].items()} == statuses
    assert proc.stderr.splitlines()  # the progress lines went to stderr
    if "bad" in statuses:
        assert document["hosts"]["bad"]["failed_tasks"][0]["msg"] == "bad host refuses: bad"


def test_plain_output(inventory):
    proc = gpufleet("run", str(FIXTURES / "playbooks" / "mixed.yml"), "-i", str(inventory), "-l", "good,bad")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stdout.splitlines()
    assert "bad: failed: Fail on the bad host: bad host refuses: bad" in lines  # progress, plain (not a tty)
    assert "bad: failed: Fail on the bad host (ansible.builtin.fail): bad host refuses: bad" in lines  # summary
    assert lines[-1] == "result: failed (exit 2)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "ok.yml", "-i", "/nonexistent/inventory"],
         "inventory '/nonexistent/inventory' not found: no such file or directory, and not one of the shipped "
         "inventories"),
        (["run", "no-such-playbook", "-i", "."], "unknown playbook 'no-such-playbook': not a playbook file and not "
                                                 "one of the collection's playbooks"),
        (["run", "ok.yml"], "no inventory: pass -i/--inventory or set GPUFLEET_INVENTORY"),
        (["run", "ok.yml", "-i", ".", "-e", "@missing.yml"],
         "bad extra vars '@missing.yml': Unable to retrieve file contents."),
    ],
    ids=["missing-inventory", "unknown-playbook", "no-inventory", "bad-extra-vars"],
)
def test_bad_input_exits_4(args, message):
    proc = gpufleet(*args, "--json", cwd=FIXTURES / "playbooks")
    assert proc.returncode == 4, proc.stderr
    document = json.loads(proc.stdout)
    assert document["exit_code"] == 4
    assert document["error"].startswith(message)
    assert proc.stderr.startswith(f"gpufleet: error: {message}")


def test_usage_error_exits_4():
    proc = gpufleet("verify", "--forks", "many")
    assert proc.returncode == 4
    assert "argument -f/--forks: invalid int value: 'many'" in proc.stderr
    assert proc.stdout == ""
