"""Bad input never ends in an empty table or exit 0: for each one, the terminal output, the --json document and the
API's RunResult carry Ansible's own error text (or gpufleet's sentence) and the same non-zero exit code.

Real runs: the gpufleet command as a subprocess and gpufleet.api in this process, real ansible-playbook against
local-connection hosts (cheap: no test hosts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet import api
from gpufleet.results import ExitCode

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "tests" / "fixtures" / "runner" / "playbooks"
LOCAL = f"ansible_connection=local ansible_python_interpreter={sys.executable}"


def gpufleet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("GPUFLEET_INVENTORY", None)
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False,
    )


@dataclass
class Case:
    """One bad input: the command's arguments (besides -i) and what the operator must see."""

    command: tuple[str, ...]
    inventory: str
    limit: str | None
    code: ExitCode
    text: str


def write_inventories(root: Path) -> None:
    gpu = root / "gpu"
    (gpu / "group_vars").mkdir(parents=True)
    (gpu / "hosts.ini").write_text(f"[gpu_nodes]\nnode-1 {LOCAL}\n")
    yaml_error = root / "yaml-error"
    (yaml_error / "group_vars").mkdir(parents=True)
    (yaml_error / "hosts.ini").write_text(f"[gpu_nodes]\nnode-1 {LOCAL}\n")
    (yaml_error / "group_vars" / "gpu_nodes.yml").write_text("fixture_value: [unclosed\n")
    vaulted = root / "vaulted"
    (vaulted / "group_vars").mkdir(parents=True)
    (vaulted / "hosts.ini").write_text(f"[gpu_nodes]\nnode-1 {LOCAL}\n")
    secret = vaulted / "group_vars" / "gpu_nodes.yml"
    secret.write_text("fixture_value: s3cret\n")
    (root / "pw").write_text("pw\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", str(root / "pw"), str(secret)],
                   check=True, capture_output=True)
    (root / "broken.yml").write_text("all:\n  hosts: [\n")
    (root / "empty").mkdir()
    (root / "no-gpu-nodes.ini").write_text(f"[login]\nlogin-1 {LOCAL}\n")
    (root / "syntax.yml").write_text("- hosts: gpu_nodes\n  tasks:\n    - name: x\n      no.such.module: {}\n")


GPU_NODES = str(PLAYBOOKS / "gpu_nodes.yml")
CASES = {
    # Ansible's messages: ansible-core's YAML loader, vault and plugin loader wording.
    "yaml-error-in-group-vars": Case(("run", GPU_NODES), "yaml-error", None, ExitCode.ANSIBLE_ERROR,
                                     "YAML parsing failed"),
    "vaulted-without-password": Case(("run", GPU_NODES), "vaulted", None, ExitCode.ANSIBLE_ERROR,
                                     "Attempting to decrypt but no vault secrets found"),
    "playbook-syntax-error": Case(("run", "{root}/syntax.yml"), "gpu", None, ExitCode.ANSIBLE_ERROR,
                                  "couldn't resolve module/action 'no.such.module'"),
    # gpufleet's own sentences (preflight: Ansible's InventoryManager found the problem, nothing ran).
    "inventory-does-not-parse": Case(("verify",), "broken.yml", None, ExitCode.BAD_INPUT,
                                     "the inventory {root}/broken.yml could not be parsed by any inventory plugin; "
                                     "fix the file (Ansible's messages follow) or pass the right path with -i:"),
    "empty-directory": Case(("verify",), "empty", None, ExitCode.BAD_INPUT,
                            "the inventory {root}/empty could not be parsed by any inventory plugin"),
    "limit-matches-nothing": Case(("verify",), "gpu", "nope", ExitCode.BAD_INPUT,
                                  "the limit 'nope' matches none of the 1 host(s) the playbook targets (gpu_nodes); "
                                  "check the host or group name (gpufleet run ... --list-hosts shows them)"),
    "empty-limit": Case(("verify",), "gpu", "", ExitCode.BAD_INPUT,
                        "the limit is empty, and Ansible would run on every host: give a host, group or pattern "
                        "(-l gpu-a100-01, -l 'gpu_nodes:!gpu-h100-*'), or leave -l out to target every host"),
    "malformed-limit": Case(("verify",), "gpu", "~[(", ExitCode.BAD_INPUT,
                            "the limit '~[(' is not a valid pattern: the regular expression '[(' is malformed"),
    "no-gpu-nodes": Case(("verify",), "no-gpu-nodes.ini", None, ExitCode.BAD_INPUT,
                         "no host of the inventory {root}/no-gpu-nodes.ini matches the playbook's hosts (gpu_nodes); "
                         "put your GPU servers in the group gpu_nodes"),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bad-inputs")
    write_inventories(path)
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_shown_everywhere_and_never_exits_0(name: str, root: Path, monkeypatch: pytest.MonkeyPatch):
    case = CASES[name]
    text = case.text.format(root=root)
    command = [c.format(root=root) for c in case.command]
    argv = [*command, "-i", str(root / case.inventory), *(["-l", case.limit] if case.limit is not None else [])]

    terminal = gpufleet(*argv, cwd=root)
    assert terminal.returncode == case.code, terminal.stderr
    assert text in terminal.stderr
    assert "result: " in terminal.stdout
    assert "no host ran" in terminal.stdout

    as_json = gpufleet(*argv, "--json", cwd=root)
    document = json.loads(as_json.stdout)
    assert (as_json.returncode, document["exit_code"], document["schema_version"]) == (case.code, case.code, 2)
    assert text in document["error"]
    assert document["hosts"] == {}
    assert document["limit"] == case.limit

    monkeypatch.chdir(root)
    use_case = api.verify if command == ["verify"] else lambda inv, **kw: api.run(command[1], inv, **kw)
    result = use_case(str(root / case.inventory), limit=case.limit)
    assert result.exit_code == case.code
    assert result.error is not None
    assert text in result.error
    assert result.hosts == {}
