"""The collection artifact: ansible-galaxy builds it, it installs offline, and its playbooks run by FQCN."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NOT_IN_ARTIFACT = ("src/", "tests/", "build/", "collections/", "molecule/", ".git/", "pyproject.toml", "ansible.cfg",
                   "requirements/", "tools/", "scripts/")


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300, cwd=cwd, env=env)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    work = tmp_path_factory.mktemp("galaxy")
    collections = work / "collections"
    # outside the checkout, with no ansible.cfg of ours: only the installed copy can be found
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO)], work, env)
    [tarball] = work.glob("gpufleet-nvidia-*.tar.gz")
    _run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(collections), str(tarball)],
         work, env)
    return tarball, collections / "ansible_collections" / "gpufleet" / "nvidia", env


def test_artifact_contents(installed):
    tarball, _, _ = installed
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "README.md"} <= set(names)
    leaked = sorted(n for n in names if n.startswith(NOT_IN_ARTIFACT) or "__pycache__" in n)
    assert leaked == []
    for directory in ("roles", "plugins", "playbooks"):
        if any((REPO / directory).rglob("*.y*ml")) or any((REPO / directory).rglob("*.py")):
            assert any(n.startswith(f"{directory}/") and not n.endswith("/") for n in names), directory


def test_installed_collection_is_found(installed):
    _, root, env = installed
    listing = _run([str(BIN / "ansible-galaxy"), "collection", "list", "gpufleet.nvidia"], root.parent, env)
    assert "gpufleet.nvidia 0.1.0" in " ".join(listing.stdout.split())


def test_playbooks_run_by_fqcn(installed, tmp_path):
    """`ansible-playbook gpufleet.nvidia.<name>` resolves every shipped playbook, its roles and modules."""
    _, root, env = installed
    playbooks = sorted(p.stem for p in (root / "playbooks").glob("*.yml"))
    if not playbooks:
        pytest.skip("the collection ships no playbooks yet")
    for name in playbooks:
        proc = _run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", f"gpufleet.nvidia.{name}"],
                    tmp_path, env)
        assert f"playbook: {root / 'playbooks' / name}.yml" in proc.stdout
