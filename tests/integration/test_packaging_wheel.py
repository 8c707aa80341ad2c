"""The wheel: it carries the package, the simulator's data and the collection, and works from outside a checkout.

Built with ``python -m build --wheel --no-isolation``, installed into a fresh venv (no system site packages) with the
pinned constraints, then used from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COLLECTION_PREFIX = "gpufleet/_collection/ansible_collections/gpufleet/nvidia/"
COLLECTION_DIRS = ("meta", "playbooks", "roles", "plugins", "inventories")
SKIPPED_PARTS = {"__pycache__", ".molecule", ".pytest_cache"}


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _files(directory: Path) -> set[str]:
    return {
        p.relative_to(REPO).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and not SKIPPED_PARTS & set(p.parts) and p.suffix not in (".pyc", ".so", ".o")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)])
    [built] = out.glob("gpufleet-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(path)])
    constraints = REPO / "requirements" / "constraints.txt"
    _run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(constraints), str(wheel)])
    return path


def test_wheel_carries_the_collection(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("galaxy.yml", "meta/runtime.yml"):
        assert COLLECTION_PREFIX + required in names
    assert "gpufleet/_collection/ansible.cfg" in names
    checkout = set().union(*(_files(REPO / d) for d in COLLECTION_DIRS))
    shipped = {n.removeprefix(COLLECTION_PREFIX) for n in names if n.startswith(COLLECTION_PREFIX)}
    missing = sorted(checkout - shipped)
    assert missing == [], f"collection files missing from the wheel: {missing}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_wheel_carries_the_package_and_its_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("__init__", "api", "results", "cli", "_paths", "errors"):
        assert f"gpufleet/{module}.py" in names
    assert "gpufleet/py.typed" in names
    package_data = {f"gpufleet/{p.removeprefix('src/gpufleet/')}" for p in _files(REPO / "src" / "gpufleet")}
    missing = sorted(package_data - names)
    assert missing == [], f"package files missing from the wheel: {missing}"
    sim = {n for n in names if n.startswith("gpufleet_sim/")}
    if (REPO / "src" / "gpufleet" / "sim" / "native").is_dir():
        assert any(n.endswith(".c") for n in sim)
        assert any(n.endswith("Makefile") for n in sim)
    entry_points = zipfile.ZipFile(wheel).read("gpufleet-0.1.0.dist-info/entry_points.txt").decode()
    assert "gpufleet = gpufleet.cli:main" in entry_points
    assert "gpusim = gpufleet_sim.cli:main" in entry_points


def test_installed_package_runs_a_playbook_from_outside_the_checkout(venv, tmp_path):
    python = venv / "bin" / "python"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"here": {
        "ansible_connection": "local", "ansible_python_interpreter": str(python)}}}}))
    script = tmp_path / "probe.py"
    script.write_text(
        "import json, sys\n"
        "from gpufleet import _paths, api\n"
        "layout = _paths.layout()\n"
        "result = api.run(sys.argv[1], sys.argv[2], module_keys={'ansible.builtin.debug': 'debug'})\n"
        "print(json.dumps({'origin': layout.origin, 'root': str(layout.root),"
        " 'collections': str(layout.collections_dir), 'cfg': str(layout.ansible_cfg), 'result': result.to_dict()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    playbook = REPO / "tests" / "fixtures" / "runner" / "playbooks" / "whereami.yml"
    proc = _run([str(python), str(script), str(playbook), str(inventory)], cwd=tmp_path, env=env)
    report = json.loads(proc.stdout)
    site_packages = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              env=env).stdout.strip())
    assert report["origin"] == "wheel"
    shipped = site_packages / "gpufleet" / "_collection"
    assert Path(report["root"]) == shipped / "ansible_collections" / "gpufleet" / "nvidia"
    result = report["result"]
    assert result["exit_code"] == 0, result
    seen = result["hosts"]["here"]["module_data"]["debug"]["msg"]
    assert seen["config_file"] == report["cfg"]
    assert seen["collections_paths"][0] == report["collections"]

    version = _run([str(venv / "bin" / "gpufleet"), "--version"], cwd=tmp_path, env=env)
    assert version.stdout.strip() == "gpufleet 0.1.0"


def test_shipped_playbooks_resolve_by_fqcn(venv, tmp_path):
    """Every playbook of the installed collection passes --syntax-check by its FQCN (roles and modules resolve)."""
    python = venv / "bin" / "python"
    layout = json.loads(_run([str(python), "-c",
        "import json; from gpufleet import _paths; l = _paths.layout();"
        "print(json.dumps({'collections': str(l.collections_dir), 'cfg': str(l.ansible_cfg), 'root': str(l.root)}))"],
        cwd=tmp_path).stdout)
    playbooks = sorted(p.stem for p in (Path(layout["root"]) / "playbooks").glob("*.yml"))
    if not playbooks:
        pytest.skip("the collection ships no playbooks yet")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=layout["collections"], ANSIBLE_CONFIG=layout["cfg"],
               PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    for name in playbooks:
        _run([str(venv / "bin" / "ansible-playbook"), "-i", "localhost,", "--syntax-check", f"gpufleet.nvidia.{name}"],
             cwd=tmp_path, env=env)
