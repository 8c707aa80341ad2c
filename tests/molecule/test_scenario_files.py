"""Every file a Molecule scenario names exists, and none is loaded in a way that skips a missing file silently.

Ansible skips a missing ``vars_files`` entry without a word (ansible-core 2.19: the play runs on), so four
scenarios once loaded ``../nvidia_driver/sim_repo.yml``, a file that never existed, and passed. The scenarios use
``include_vars`` (which fails on a missing file) and this test resolves every path they name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MOLECULE = ROOT / "molecule"
YAML_FILES = sorted(p for p in MOLECULE.rglob("*.yml") if "tests" not in p.relative_to(MOLECULE).parts)
#: task and play keywords whose value is a path to a file that must exist
PATH_KEYS = ("import_playbook", "ansible.builtin.import_playbook", "include_tasks", "ansible.builtin.include_tasks",
             "import_tasks", "ansible.builtin.import_tasks")
VARS_KEYS = ("include_vars", "ansible.builtin.include_vars")


def _walk(node: Any) -> Iterator[dict]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _resolve(raw: str, base: Path) -> Path:
    text = raw.replace("${MOLECULE_PROJECT_DIRECTORY}", str(ROOT)).replace("{{ playbook_dir }}", str(base))
    assert "{{" not in text, f"cannot resolve {raw!r}: name the file without other variables"
    assert "$" not in text, f"cannot resolve {raw!r}: name the file without other variables"
    return (base / text).resolve()


def referenced_files(path: Path) -> list[str]:
    """The files ``path`` names: imports, includes, include_vars, playbooks and extra-vars files of molecule.yml."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in _walk(doc):
        for key in PATH_KEYS:
            value = node.get(key)
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, dict) and isinstance(value.get("file"), str):
                found.append(value["file"])
        files = node.get("vars_files")
        if isinstance(files, list):
            found.extend(f for f in files if isinstance(f, str))
        for key in VARS_KEYS:
            value = node.get(key)
            if value is not None:
                found.append(value["file"] if isinstance(value, dict) else value)
    if path.name in {"molecule.yml", "base.yml"}:
        provisioner = (doc or {}).get("provisioner") or {}
        found.extend((provisioner.get("playbooks") or {}).values())
        extra = (provisioner.get("options") or {}).get("extra-vars")
        if isinstance(extra, str) and extra.startswith("@"):
            found.append(extra[1:])
    return found


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(MOLECULE)))
def test_every_named_file_exists(path: Path) -> None:
    # molecule.yml's playbooks are relative to the scenario directory, like the playbooks' own references
    missing = [raw for raw in referenced_files(path) if not _resolve(raw, path.parent).is_file()]
    assert missing == []


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(MOLECULE)))
def test_no_vars_files(path: Path) -> None:
    # vars_files skips a missing file silently; include_vars fails the run
    assert re.search(r"^\s*vars_files:", path.read_text(encoding="utf-8"), re.MULTILINE) is None


def test_the_scenarios_name_files() -> None:
    # the checks above look at something: the repository variables, the shared playbooks, the side effects
    names = {Path(raw).name for path in YAML_FILES for raw in referenced_files(path)}
    assert {"sim_repo.yml", "create.yml", "prepare.yml", "destroy.yml", "side_effect.yml",
            "sim_hardware.yml"} <= names


def test_a_missing_file_is_found(tmp_path: Path) -> None:
    playbook = tmp_path / "converge.yml"
    playbook.write_text(
        "- name: Converge\n  hosts: all\n  tasks:\n    - name: Load\n      ansible.builtin.include_vars:\n"
        "        file: \"{{ playbook_dir }}/../nvidia_driver/sim_repo.yml\"\n", encoding="utf-8")
    assert referenced_files(playbook) == ["{{ playbook_dir }}/../nvidia_driver/sim_repo.yml"]
    assert not _resolve(referenced_files(playbook)[0], tmp_path).is_file()


def test_include_vars_fails_the_run_on_a_missing_file(tmp_path: Path) -> None:
    # what the scenarios rely on: ansible-playbook stops on the missing file (vars_files would run on)
    playbook = tmp_path / "converge.yml"
    playbook.write_text(
        "- name: Converge\n  hosts: localhost\n  gather_facts: false\n  pre_tasks:\n    - name: Load\n"
        "      ansible.builtin.include_vars:\n        file: \"{{ playbook_dir }}/missing.yml\"\n"
        "  tasks:\n    - name: Not reached\n      ansible.builtin.debug:\n        msg: reached\n", encoding="utf-8")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-c", "local", str(playbook)],
                          cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert proc.returncode == 2
    assert f"Could not find or access '{tmp_path}/missing.yml'" in proc.stdout
    assert "reached" not in proc.stdout.replace("Not reached", "")


#: a role's internal variables (`__<role>_...`): playbooks use its public facts and variables, never these
ROLE_INTERNALS = re.compile(r"\b__(?:gpu_health|gpufleet|nvidia_\w+?|nvml_python)_\w+")


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(MOLECULE)))
def test_no_role_internals_read(path: Path) -> None:
    assert ROLE_INTERNALS.findall(path.read_text(encoding="utf-8")) == []


def test_role_internals_are_recognised() -> None:
    text = "that: 0 not in __nvidia_mig_result.changed_gpus and __side_record and __gpu_health_report"
    assert ROLE_INTERNALS.findall(text) == ["__nvidia_mig_result", "__gpu_health_report"]
