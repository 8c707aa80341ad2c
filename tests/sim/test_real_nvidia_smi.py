"""NVIDIA's own nvidia-smi (535.261.03, Debian bookworm non-free) judges the simulated libnvidia-ml.so.1.

The binary runs unchanged against a preset's state (tests/sim/_realclients.py fetches it; a failed fetch fails
these tests). Expected values come from the state document the test wrote, never from the library's answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _realclients import DRIVER_VERSION, REPO, RealClientError, RealClients, fetch

from gpufleet_sim.presets import build_state, list_presets

PRESETS = list_presets()


@pytest.fixture(scope="session")
def real() -> RealClients:
    """NVIDIA's unpacked clients; a fetch failure is a test failure, never a skip."""
    try:
        return fetch()
    except RealClientError as exc:
        pytest.fail(f"NVIDIA's nvidia-smi could not be fetched: {exc}")


@pytest.fixture(scope="session")
def lib535() -> Path:
    """The simulated library built as driver 535.261.03 (the branch of NVIDIA's binary)."""
    from gpufleet_sim.build import build_library

    return build_library(REPO / "build" / "sim-test-535", DRIVER_VERSION).parent


@dataclass
class Host:
    """A state file and the way to run NVIDIA's nvidia-smi on it."""

    real: RealClients
    libdir: Path
    state_path: Path

    def read(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def write(self, doc: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    def smi(self, *args: str, rc: int = 0) -> str:
        """Run NVIDIA's nvidia-smi; fail the test unless it exits ``rc``; return stdout."""
        proc: subprocess.CompletedProcess[str] = self.real.run("nvidia-smi", list(args), self.libdir,
                                                                self.state_path)
        assert proc.returncode == rc, f"nvidia-smi {' '.join(args)} exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        return proc.stdout


@pytest.fixture
def host(real: RealClients, lib535: Path, tmp_path: Path) -> Callable[..., Host]:
    """Factory: ``host(preset)`` or ``host(doc=...)`` writes a state and returns a Host."""

    def make(preset: str = "2xA100-40GB", doc: dict[str, Any] | None = None) -> Host:
        folder = tmp_path / f"host-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        made = Host(real, lib535, folder / "state.json")
        made.write(doc if doc is not None else build_state(preset, f"seed-{preset}"))
        return made

    return make


def test_the_binary_is_nvidias_and_every_name_it_resolves_is_exported(real: RealClients, lib535: Path) -> None:
    binary = real.path("nvidia-smi").read_bytes()
    wanted = set(re.findall(rb"(?<=\x00)(nvml[A-Z]\w+)(?=\x00)", binary))
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib535 / "libnvidia-ml.so.1")], check=True,
                              capture_output=True, text=True).stdout
    names = {line.split()[-1].encode() for line in exported.splitlines() if line.strip()}
    assert len(wanted) == 234  # issue 14: the 535 binary resolves 234 nvml* names
    assert sorted(wanted - names) == []
    assert not list(real.root.rglob("libnvidia-ml*"))


@pytest.mark.parametrize("preset", PRESETS)
def test_list_gpus(host: Callable[..., Host], preset: str) -> None:
    h = host(preset)
    doc = h.read()
    expected = [f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})" for g in doc["gpus"]]
    assert h.smi("-L").splitlines() == expected
