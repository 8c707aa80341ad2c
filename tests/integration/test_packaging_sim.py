"""The simulator distribution gpufleet-sim (simulator/): it builds and installs on its own, without the product.

Built with ``python -m build --wheel --no-isolation simulator``, installed into a fresh venv that has no gpufleet,
then its commands run from a directory outside the checkout.
"""

from __future__ import annotations

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
SIM_SRC = REPO / "simulator" / "src"


def _run(argv: list[str], *, ok: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900, **kwargs)
    if ok:
        assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("simdist")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO / "simulator")])
    [built] = out.glob("gpufleet_sim-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("simvenv")
    _run([sys.executable, "-m", "venv", str(path)])
    _run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          "-c", str(REPO / "requirements" / "constraints.txt"), str(wheel)])
    return path


@pytest.fixture
def env(venv: Path, tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}
    clean["PATH"] = f"{venv / 'bin'}:{clean.get('PATH', '')}"
    return clean


def test_wheel_carries_the_simulator_sources_and_models(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read("gpufleet_sim-0.1.0.dist-info/entry_points.txt").decode()
        metadata = archive.read("gpufleet_sim-0.1.0.dist-info/METADATA").decode()
    # `gpusim build` compiles the C library and reads the models on the machine it runs on: all of them ship
    expected = {
        p.relative_to(SIM_SRC).as_posix()
        for p in SIM_SRC.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so", ".o")
    }
    assert {n for n in expected if n.endswith(".c")}, "the checkout has the simulator's C sources"
    assert sorted(expected - names) == []
    assert not [n for n in names if n.startswith(("gpufleet/", "ansible_collections/"))]
    assert sorted(re.findall(r"^(\S+) = ", entry_points, re.MULTILINE)) == ["gpufleet-lab", "gpusim"]
    requires = dict(re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)(.*)$", metadata, re.MULTILINE))
    # the simulated libnvidia-ml.so.1 is checked against the pynvml that the hosts' venv installs: the same release
    hosts_release = yaml.safe_load((REPO / "roles" / "nvml_python" / "defaults" / "main.yml").read_text())[
        "nvml_python_package_version"]
    assert requires["nvidia-ml-py"].strip() == f"=={hosts_release}"
    assert "gpufleet" not in requires  # not even as an extra: the demo that drives both is tools/demo.py


def test_installed_simulator_runs_without_the_product(venv, env, tmp_path):
    gpusim = _run([str(venv / "bin" / "gpusim"), "--help"], cwd=tmp_path, env=env)
    assert gpusim.stdout.startswith("usage: gpusim")
    lab = _run([str(venv / "bin" / "gpufleet-lab"), "--help"], cwd=tmp_path, env=env)
    assert lab.stdout.startswith("usage: gpufleet-lab")
    presets = _run([str(venv / "bin" / "gpusim"), "presets"], cwd=tmp_path, env=env)
    assert "H100" in presets.stdout
    product = _run([str(venv / "bin" / "python"), "-c", "import gpufleet"], ok=False, cwd=tmp_path, env=env)
    assert product.returncode == 1
    assert "ModuleNotFoundError: No module named 'gpufleet'" in product.stderr
