"""The product wheel: the package and the collection, where ansible-core finds it, and none of the simulator.

Built with ``python -m build --wheel --no-isolation``, installed into a fresh venv (no system site packages, no
checkout on any path) with the pinned constraints, then used from a directory outside the checkout with no
``ANSIBLE_*`` variable and an empty home: only what the wheel installed can be found.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COLLECTION_PREFIX = "ansible_collections/gpufleet/nvidia/"
# what the collection is, in the checkout (the repository root is the collection root)
COLLECTION_PARTS = ("meta", "playbooks", "roles", "plugins", "inventories/sample")
SKIPPED_PARTS = {"__pycache__", ".molecule", ".pytest_cache"}


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900, **kwargs)
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
def names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(path)])
    constraints = REPO / "requirements" / "constraints.txt"
    _run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          "-c", str(constraints), str(wheel)])
    return path


@pytest.fixture
def clean_env(venv: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of an operator who only installed the wheel: its venv on PATH, an empty home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    return env


def _site_packages(venv: Path, env: dict[str, str]) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([str(venv / "bin" / "python"), "-c", code], env=env).stdout.strip())


def _metadata(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"gpufleet-0.1.0.dist-info/{name}").decode()


def test_wheel_carries_the_collection_where_ansible_looks(names):
    for required in ("galaxy.yml", "meta/runtime.yml", "requirements.yml", "LICENSE", "README.md"):
        assert COLLECTION_PREFIX + required in names
    assert "gpufleet/ansible.cfg" in names
    checkout = set().union(*(_files(REPO / d) for d in COLLECTION_PARTS))
    shipped = {n.removeprefix(COLLECTION_PREFIX) for n in names if n.startswith(COLLECTION_PREFIX)}
    missing = sorted(checkout - shipped)
    assert missing == [], f"collection files missing from the wheel: {missing}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_wheel_carries_the_package(names, wheel):
    for module in ("__init__", "api", "results", "cli", "_paths", "errors"):
        assert f"gpufleet/{module}.py" in names
    assert "gpufleet/py.typed" in names
    package = {f"gpufleet/{p.removeprefix('src/gpufleet/')}" for p in _files(REPO / "src" / "gpufleet")}
    missing = sorted(package - names)
    assert missing == [], f"package files missing from the wheel: {missing}"
    entry_points = _metadata(wheel, "entry_points.txt")
    assert re.findall(r"^(\S+) = ", entry_points, re.MULTILINE) == ["gpufleet"]
    assert "gpufleet = gpufleet.cli:main" in entry_points


def test_wheel_carries_none_of_the_simulator(names, wheel):
    """The simulator, the test hosts and the sim inventory are gpufleet-sim's (simulator/), never the product's."""
    simulator = sorted(
        n for n in names
        if n.split("/")[0] in ("gpufleet_sim", "gpufleet_lab", "simulator")
        or n.startswith(f"{COLLECTION_PREFIX}inventories/sim/")
        or n.endswith((".c", ".h", "Makefile"))
    )
    assert simulator == []
    sim_files = [p.name for p in (REPO / "simulator" / "src").rglob("*.c")]
    assert sim_files, "the checkout has the simulator's C sources, so the check above could have found them"
    assert not [n for n in names if n.rsplit("/", 1)[-1] in sim_files]
    requires = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)(.*)$", _metadata(wheel, "METADATA"), re.MULTILINE)
    required = {name.lower(): rest for name, rest in requires if "extra ==" not in rest}
    assert "gpufleet-sim" not in required
    # NVML bindings run on the hosts (the nvml_python role's venv) and in the simulator build, never on the controller
    assert "nvidia-ml-py" not in {name.lower() for name, _ in requires}
    # the collections the roles use (galaxy.yml `dependencies`) come with the `ansible` package
    assert "ansible" in required


def test_installed_package_runs_a_playbook_from_outside_the_checkout(venv, clean_env, tmp_path):
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
    playbook = REPO / "tests" / "fixtures" / "runner" / "playbooks" / "whereami.yml"
    proc = _run([str(python), str(script), str(playbook), str(inventory)], cwd=tmp_path, env=clean_env)
    report = json.loads(proc.stdout)
    site_packages = _site_packages(venv, clean_env)
    assert report["origin"] == "wheel"
    assert Path(report["root"]) == site_packages / "ansible_collections" / "gpufleet" / "nvidia"
    assert Path(report["cfg"]) == site_packages / "gpufleet" / "ansible.cfg"
    result = report["result"]
    assert result["exit_code"] == 0, result
    seen = result["hosts"]["here"]["module_data"]["debug"]["msg"]
    assert seen["config_file"] == report["cfg"]
    assert seen["collections_paths"][0] == str(site_packages)

    version = _run([str(venv / "bin" / "gpufleet"), "--version"], cwd=tmp_path, env=clean_env)
    assert version.stdout.strip() == "gpufleet 0.1.0"


def test_ansible_finds_the_installed_collection_by_itself(venv, clean_env, tmp_path):
    """Plain ansible-playbook / ansible-doc / ansible-galaxy of the venv find gpufleet.nvidia: no gpufleet, no cfg."""
    site_packages = _site_packages(venv, clean_env)
    root = site_packages / "ansible_collections" / "gpufleet" / "nvidia"
    playbooks = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml"))
    assert "site" in playbooks
    for name in playbooks:
        proc = _run([str(venv / "bin" / "ansible-playbook"), "-i", "localhost,", "--syntax-check",
                     f"gpufleet.nvidia.{name}"], cwd=tmp_path, env=clean_env)
        assert f"playbook: {root / 'playbooks' / name}.yml" in proc.stdout

    doc = _run([str(venv / "bin" / "ansible-doc"), "gpufleet.nvidia.nvidia_mig"], cwd=tmp_path, env=clean_env)
    assert f"{root / 'plugins' / 'modules' / 'nvidia_mig.py'}" in doc.stdout
    assert "EXAMPLES:" in doc.stdout

    listing = _run([str(venv / "bin" / "ansible-galaxy"), "collection", "list", "--format", "json"],
                   cwd=tmp_path, env=clean_env)
    found = json.loads(listing.stdout)
    assert found[str(site_packages / "ansible_collections")]["gpufleet.nvidia"] == {"version": "0.1.0"}
    # every declared dependency is installed with the wheel, by the `ansible` package
    declared = yaml.safe_load((REPO / "galaxy.yml").read_text())["dependencies"]
    assert declared
    assert sorted(set(declared) - set(found[str(site_packages / "ansible_collections")])) == []


def test_offline_mig_validation_runs_from_the_wheel_alone(venv, clean_env, tmp_path):
    """`gpufleet mig validate` needs no checkout and no host: the validator comes with the installed collection."""
    layouts = tmp_path / "layouts.yml"
    layouts.write_text(
        "nvidia_mig_layouts:\n"
        "  good:\n    - {devices: all, mig_enabled: true, gpu_instances: {3g.40gb: 2}}\n"
        "  bad:\n    - {devices: all, mig_enabled: true, gpu_instances: {1g.10gb: 8}}\n",
        encoding="utf-8",
    )
    gpufleet = str(venv / "bin" / "gpufleet")
    good = _run([gpufleet, "mig", "validate", str(layouts), "--layout", "good", "--model", "A100-SXM4-80GB",
                 "--gpus", "1", "--json"], cwd=tmp_path, env=clean_env)
    report = json.loads(good.stdout)
    assert report["valid"] is True
    # NVIDIA's MIG user guide, A100 80GB: two 3g.40gb instances take the placements starting at slices 0 and 4.
    assert [(gi["profile"], gi["start"]) for gi in report["layouts"]["good"][0]["gpu_instances"]] == [
        ("3g.40gb", 0), ("3g.40gb", 4)]
    bad = subprocess.run([gpufleet, "mig", "validate", str(layouts), "--layout", "bad", "--model", "A100-SXM4-80GB",
                          "--gpus", "1", "--json"], cwd=tmp_path, env=clean_env, capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 4, bad.stdout + bad.stderr
    # The A100 80GB offers at most seven 1g.10gb instances (NVIDIA's MIG user guide, supported profiles).
    assert "offers at most 7 x 1g.10gb" in json.loads(bad.stdout)["error"]
