"""One source for each fact (issue 11): the collection-wide paths and the modules' ``attributes:`` block.

* ``/opt/gpufleet`` (the venv of the NVML modules, the host-side library) is written in the internal ``gpufleet``
  role only; every other role and playbook reads ``gpufleet_python`` / ``gpufleet_lib_dir``, so moving the paths is
  one inventory variable, not a hunt through seventeen defaults.
* A role that reads those variables lists the ``gpufleet`` role as a dependency (without it they are undefined).
* Every module takes its ``attributes:`` block from the ``gpufleet.nvidia.attributes`` doc fragment.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
LITERAL = b"/opt/gpufleet"
#: the one role allowed to write the paths
HOME = "gpufleet"

#: Files of other roles that still write the literal, each for a reason noted here, until their owners change them.
#: The list can only shrink: a file that no longer has the literal fails the test until it is taken off the list,
#: and any file not listed fails it at once.
STILL_RESTATED = {
    # Descriptions that quote gpufleet_python's default (and the README generated from them), and an error
    # message that gives it as an example.
    "roles/nvidia_driver/meta/argument_specs.yml",
    "roles/nvidia_driver/README.md",
}


def restating(repo: Path) -> set[str]:
    """Repository-relative paths of the files under ``roles/`` (outside ``roles/gpufleet/``) and ``playbooks/``
    that contain ``/opt/gpufleet``."""
    found = set()
    for top in ("roles", "playbooks"):
        for path in sorted((repo / top).rglob("*")):
            rel = path.relative_to(repo)
            if not path.is_file() or rel.parts[:2] == ("roles", HOME):
                continue
            if LITERAL in path.read_bytes():
                found.add(rel.as_posix())
    return found


def test_only_the_gpufleet_role_writes_the_gpufleet_paths() -> None:
    assert restating(REPO) == STILL_RESTATED


def test_the_gpufleet_role_is_where_the_paths_are_defined() -> None:
    defaults = yaml.safe_load((ROLES / HOME / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults["gpufleet_python"] == "/opt/gpufleet/venv/bin/python3"
    assert defaults["gpufleet_lib_dir"] == "/opt/gpufleet/lib"


@pytest.mark.parametrize("planted", [
    "roles/gpu_health/defaults/main.yml",
    "roles/nvidia_mig/tasks/install.yml",
    "roles/nvidia_mps/templates/nvidia-mps.service.j2",
    "playbooks/facts.yml",
])
def test_a_restated_path_is_found(tmp_path: Path, planted: str) -> None:
    for top in ("roles", "playbooks"):
        shutil.copytree(REPO / top, tmp_path / top)
    with (tmp_path / planted).open("a", encoding="utf-8") as handle:
        handle.write("# python: /opt/gpufleet/venv/bin/python3\n")
    assert restating(tmp_path) == STILL_RESTATED | {planted}


def test_the_gpufleet_role_itself_is_not_reported(tmp_path: Path) -> None:
    (tmp_path / "roles" / HOME / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / HOME / "defaults" / "main.yml").write_text("gpufleet_lib_dir: /opt/gpufleet/lib\n")
    (tmp_path / "roles" / "gpufleet_extra").mkdir()
    (tmp_path / "roles" / "gpufleet_extra" / "x.yml").write_text("x: /opt/gpufleet/lib\n")
    (tmp_path / "playbooks").mkdir()
    assert restating(tmp_path) == {"roles/gpufleet_extra/x.yml"}


# ---- the roles that read the paths depend on the role that defines them --------------------------------------

#: a Jinja expression that reads one of the gpufleet role's defaults
_READS_DEFAULT = re.compile(r"\{\{[^}]*\bgpufleet_(python|lib_dir|apt_prerequisites)\b")
_ROLE_FILES = ("defaults", "vars", "tasks", "handlers", "templates")


def _roles_reading_gpufleet_defaults() -> list[str]:
    readers = []
    for role in sorted(p for p in ROLES.iterdir() if p.is_dir() and p.name != HOME):
        texts = (f.read_text(encoding="utf-8") for d in _ROLE_FILES for f in (role / d).rglob("*") if f.is_file())
        if any(_READS_DEFAULT.search(text) for text in texts):
            readers.append(role.name)
    return readers


def test_the_roles_that_read_the_paths_are_the_expected_ones() -> None:
    # Fixed list: a role that stops reading gpufleet_python (or starts) is a change to look at.
    assert _roles_reading_gpufleet_defaults() == [
        "gpu_health", "nvidia_dcgm", "nvidia_driver", "nvidia_gpu_sharing", "nvidia_mig", "nvidia_mps",
        "nvml_python", "slurm_gres",
    ]


@pytest.mark.parametrize("role", _roles_reading_gpufleet_defaults())
def test_a_role_that_reads_the_paths_depends_on_the_gpufleet_role(role: str) -> None:
    meta = yaml.safe_load((ROLES / role / "meta" / "main.yml").read_text(encoding="utf-8"))
    names = [dep["role"] if isinstance(dep, dict) else dep for dep in meta.get("dependencies") or []]
    assert "gpufleet.nvidia.gpufleet" in names, f"{role}: meta/main.yml must list gpufleet.nvidia.gpufleet"


@pytest.mark.parametrize(("role", "variable", "expected"), [
    ("gpu_health", "gpu_health_python", "{{ gpufleet_python }}"),
    ("nvidia_dcgm", "nvidia_dcgm_python", "{{ gpufleet_python }}"),
    ("nvidia_gpu_sharing", "nvidia_gpu_sharing_python", "{{ gpufleet_python }}"),
    ("nvidia_mig", "nvidia_mig_python", "{{ gpufleet_python }}"),
    ("nvidia_mig", "nvidia_mig_lib_dir", "{{ gpufleet_lib_dir }}"),
    ("nvidia_mps", "nvidia_mps_python", "{{ gpufleet_python }}"),
    ("nvml_python", "nvml_python_interpreter", "{{ gpufleet_python }}"),
])
def test_role_path_defaults_follow_the_gpufleet_role(role: str, variable: str, expected: str) -> None:
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults[variable] == expected


# ---- container detection: one rule ------------------------------------------------------------------------------

#: a container engine's marker file, or a test of the virtualization facts (gathering them is fine)
_CONTAINER_RULE = re.compile(r"\.containerenv|\.dockerenv|virtualization_(?:type|role)\b(?!\s+is\s+(?:not\s+)?defined)")


def container_rule_copies(roles: Path) -> list[str]:
    """Task and variable files of roles other than ``gpufleet`` that decide "container" by themselves."""
    return sorted(
        f.relative_to(roles).as_posix()
        for role in roles.iterdir() if role.is_dir() and role.name != HOME
        for d in ("defaults", "vars", "tasks", "handlers")
        for f in (role / d).rglob("*.yml") if _CONTAINER_RULE.search(f.read_text(encoding="utf-8")))


def test_no_role_but_gpufleet_decides_container() -> None:
    assert container_rule_copies(ROLES) == []


@pytest.mark.parametrize("rule", [
    "    path: /run/.containerenv\n",
    "    path: /.dockerenv\n",
    "    in_ct: \"{{ ansible_facts.virtualization_type | default('') in ['podman', 'lxc'] }}\"\n",
    "    in_ct: \"{{ ansible_facts.virtualization_role == 'guest' }}\"\n",
])
def test_a_second_container_rule_is_found(tmp_path: Path, rule: str) -> None:
    shutil.copytree(ROLES, tmp_path / "roles")
    with (tmp_path / "roles" / "nvidia_mig" / "tasks" / "preflight.yml").open("a", encoding="utf-8") as handle:
        handle.write("- name: Detect a container\n  ansible.builtin.set_fact:\n" + rule)
    assert container_rule_copies(tmp_path / "roles") == ["nvidia_mig/tasks/preflight.yml"]


# ---- the modules' attributes block: the doc fragment ------------------------------------------------------------

MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if not p.name.startswith("_"))


def _documentation(module: str) -> dict:
    tree = ast.parse((REPO / "plugins" / "modules" / f"{module}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DOCUMENTATION" for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value))
    raise LookupError(f"{module}: no DOCUMENTATION")


def test_there_are_modules_to_check() -> None:
    assert {"gpu_health", "gpu_facts", "nvidia_mig"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_module_takes_its_attributes_from_the_fragment(module: str) -> None:
    doc = _documentation(module)
    assert "attributes" not in doc, f"{module}: DOCUMENTATION has its own attributes: block"
    fragments = doc.get("extends_documentation_fragment") or []
    assert any(f == "gpufleet.nvidia.attributes" or f.startswith("gpufleet.nvidia.attributes.") for f in fragments)


def test_gpu_health_is_documented_read_only() -> None:
    # The module reads NVML and the journal, writes nothing (the role writes the report files).
    assert _documentation("gpu_health")["extends_documentation_fragment"] == ["gpufleet.nvidia.attributes.read_only"]
