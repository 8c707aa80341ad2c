"""Fixtures for the node-baseline roles' unit tests: render role variables, task expressions and templates with
Ansible's own templating engine, from the role files themselves (no copies of the expressions in the tests)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"


# The templating engine finds gpufleet.nvidia.* filters through the collection loader that tests/conftest.py
# installs before any test module is imported.


def trust(value: Any) -> Any:
    """Mark every string of a loaded YAML document as a template, as Ansible does for role files."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trust(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trust(item) for item in value]
    return value


def load_yaml(path: Path) -> Any:
    """Load a role file (trusted)."""
    return trust(yaml.safe_load(path.read_text(encoding="utf-8")))


def role_variables(role: str, os_vars: str | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """defaults < OS vars < vars/main.yml < overrides, like the role's own precedence (set_fact/extra vars last)."""
    base = ROLES / role
    variables: dict[str, Any] = {"ansible_managed": "Ansible managed", "inventory_hostname": "node1"}
    # The gpufleet role is every baseline role's dependency: its defaults are theirs.
    variables.update(load_yaml(ROLES / "gpufleet" / "defaults" / "main.yml") or {})
    variables.update(load_yaml(base / "defaults" / "main.yml") or {})
    if os_vars:
        variables.update(load_yaml(base / "vars" / f"{os_vars}.yml") or {})
    variables.update(load_yaml(base / "vars" / "main.yml") or {})
    variables.update(trust(dict(overrides)))
    return variables


def find_task(role: str, tasks_file: str, name: str) -> dict[str, Any]:
    """The task called ``name`` in ``roles/<role>/tasks/<tasks_file>`` (searching blocks too)."""
    def walk(tasks: list[dict[str, Any]]) -> dict[str, Any] | None:
        for task in tasks:
            if task.get("name") == name:
                return task
            found = walk(task.get("block", []))
            if found is not None:
                return found
        return None

    task = walk(load_yaml(ROLES / role / "tasks" / tasks_file))
    if task is None:
        raise LookupError(f"no task {name!r} in roles/{role}/tasks/{tasks_file}")
    return task


@pytest.fixture
def render() -> Callable[..., Any]:
    """``render(role, expression_or_value, os_vars=..., **variables)``: template with the role's variables."""
    def _render(role: str, template: Any, os_vars: str | None = "Debian-12", **overrides: Any) -> Any:
        templar = Templar(loader=DataLoader(), variables=role_variables(role, os_vars, overrides))
        return templar.template(trust(template))
    return _render


@pytest.fixture
def render_file() -> Callable[..., str]:
    """``render_file(role, template_name, **variables)``: a role template rendered as the template module would."""
    def _render(role: str, name: str, os_vars: str | None = "Debian-12", **overrides: Any) -> str:
        templar = Templar(loader=DataLoader(), variables=role_variables(role, os_vars, overrides))
        source = (ROLES / role / "templates" / name).read_text(encoding="utf-8")
        return str(templar.template(trust_as_template(source)))
    return _render
