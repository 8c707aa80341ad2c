"""The collection artifact: ansible-galaxy builds it, it installs offline with its declared dependencies, and every
module its roles and playbooks use resolves from that collections path alone.

Galaxy is not reachable: the dependencies (galaxy.yml ``dependencies``) are pointed at in the ``ansible`` package's
bundled collections, the same copies that the gpufleet wheel brings. Python's own ``ansible_collections`` are not
scanned (``ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=False``), so nothing outside the empty collections path is found.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NOT_IN_ARTIFACT = ("src/", "tests/", "build/", "collections/", "molecule/", ".git/", "pyproject.toml", "ansible.cfg",
                   "requirements/", "tools/", "scripts/", "simulator/", "inventories/sim/", "benchmarks/")


def _run(argv: list[str], cwd: Path, env: dict[str, str], *, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300, cwd=cwd, env=env)
    if ok:
        assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _bundled(fqcn: str) -> Path:
    """The copy of a collection that the `ansible` package installed (what the gpufleet wheel's users have)."""
    namespace, name = fqcn.split(".")
    path = Path(str(importlib.metadata.distribution("ansible").locate_file(f"ansible_collections/{namespace}/{name}")))
    assert (path / "MANIFEST.json").is_file(), f"the ansible package carries no {fqcn}"
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    work = tmp_path_factory.mktemp("galaxy")
    collections = work / "collections"
    collections.mkdir()
    # outside the checkout, with no ansible.cfg of ours and no Python-installed collections: only what is
    # installed into `collections` can be found
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False",
               HOME=str(work / "home"))
    _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO)], work, env)
    [tarball] = work.glob("gpufleet-nvidia-*.tar.gz")
    return tarball, env, collections


def _dependencies(tarball: Path) -> dict[str, str]:
    with tarfile.open(tarball) as archive:
        manifest = archive.extractfile("MANIFEST.json")
        assert manifest is not None
        return dict(json.load(manifest)["collection_info"]["dependencies"])


@pytest.fixture(scope="module")
def installed(built: tuple[Path, dict[str, str], Path]) -> tuple[Path, Path, dict[str, str]]:
    tarball, env, collections = built
    for fqcn in _dependencies(tarball):
        namespace, name = fqcn.split(".")
        (collections / "ansible_collections" / namespace).mkdir(parents=True, exist_ok=True)
        (collections / "ansible_collections" / namespace / name).symlink_to(_bundled(fqcn), target_is_directory=True)
    _run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(collections), str(tarball)],
         collections, env)
    return tarball, collections / "ansible_collections" / "gpufleet" / "nvidia", env


def _static_playbook(root: Path, path: Path) -> Path:
    """A play that imports every tasks file of every role and of playbooks/tasks statically, so that
    --syntax-check resolves every module they name (include_tasks and `when:` are not followed by a syntax check)."""
    tasks: list[dict[str, Any]] = [
        {"name": f"{f.parts[-3]} {f.stem}",
         "ansible.builtin.import_role": {"name": f"gpufleet.nvidia.{f.parts[-3]}", "tasks_from": f.stem}}
        for f in sorted(root.glob("roles/*/tasks/*.yml"))
    ]
    tasks += [{"name": f"playbooks/tasks {f.stem}", "ansible.builtin.import_tasks": str(f)}
              for f in sorted(root.glob("playbooks/tasks/*.yml"))]
    path.write_text(yaml.safe_dump([{"name": "Every task file", "hosts": "all", "gather_facts": False,
                                     "tasks": tasks}], sort_keys=False))
    return path


def test_artifact_contents(installed):
    tarball, _, _ = installed
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "README.md", "LICENSE", "requirements.yml"} <= set(names)
    leaked = sorted(n for n in names if n.startswith(NOT_IN_ARTIFACT) or "__pycache__" in n)
    assert leaked == []
    for directory in ("roles", "plugins", "playbooks"):
        assert any(n.startswith(f"{directory}/") and n.endswith((".yml", ".py")) for n in names), directory


def test_declared_dependencies_are_the_ones_used(built):
    """galaxy.yml and requirements.yml declare the same collections: every non-builtin one the content names."""
    tarball, _, _ = built
    declared = _dependencies(tarball)
    requirements = yaml.safe_load((REPO / "requirements.yml").read_text())["collections"]
    assert {r["name"]: r["version"] for r in requirements} == declared
    used = set()
    for path in [*REPO.glob("roles/*/*/*.yml"), *REPO.glob("playbooks/**/*.yml")]:
        for word in path.read_text().split():
            parts = word.rstrip(":").split(".")
            if len(parts) == 3 and parts[0] in ("community", "ansible", "kubernetes", "containers") and all(
                    p.isidentifier() for p in parts) and parts[:2] != ["ansible", "builtin"]:
                used.add(".".join(parts[:2]))
    assert used == set(declared)


def test_install_without_the_dependencies_is_refused(built, tmp_path):
    tarball, env, _ = built
    empty = tmp_path / "empty"
    proc = _run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(empty), str(tarball)],
                tmp_path, {**env, "ANSIBLE_COLLECTIONS_PATH": str(empty)}, ok=False)
    assert proc.returncode == 1
    for fqcn, version in _dependencies(tarball).items():
        assert f"* {fqcn}:{version} (dependency of gpufleet.nvidia:0.1.0)" in proc.stderr
    assert not (empty / "ansible_collections" / "gpufleet").exists()


def test_installed_collection_is_found(installed):
    _, root, env = installed
    listing = _run([str(BIN / "ansible-galaxy"), "collection", "list", "--format", "json"], root.parent, env)
    found = json.loads(listing.stdout)[str(root.parents[1])]
    assert found["gpufleet.nvidia"] == {"version": "0.1.0"}


def test_playbooks_run_by_fqcn(installed, tmp_path):
    """`ansible-playbook gpufleet.nvidia.<name>` resolves every shipped playbook, its roles and modules."""
    _, root, env = installed
    playbooks = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml"))
    assert "site" in playbooks
    for name in playbooks:
        proc = _run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", f"gpufleet.nvidia.{name}"],
                    tmp_path, env)
        assert f"playbook: {root / 'playbooks' / name}.yml" in proc.stdout


def test_every_module_the_roles_use_resolves(installed, tmp_path):
    """With the MIG tasks (and every other tasks file) imported statically, every module name resolves."""
    _, root, env = installed
    playbook = _static_playbook(root, tmp_path / "every_task_file.yml")
    assert "gpufleet.nvidia.nvidia_mig\n" in playbook.read_text().replace("'", "")
    proc = _run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", str(playbook)], tmp_path, env)
    assert f"playbook: {playbook}" in proc.stdout


def test_a_missing_dependency_fails_the_same_check(installed, tmp_path):
    """The check above can fail: without community.general, the MIG role's modprobe task does not resolve."""
    _, root, env = installed
    playbook = _static_playbook(root, tmp_path / "every_task_file.yml")
    bare = tmp_path / "bare" / "ansible_collections" / "gpufleet"
    bare.mkdir(parents=True)
    (bare / "nvidia").symlink_to(root, target_is_directory=True)
    proc = _run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", str(playbook)], tmp_path,
                {**env, "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "bare")}, ok=False)
    assert proc.returncode == 4
    assert "couldn't resolve module/action 'community.general.modprobe'" in proc.stderr
