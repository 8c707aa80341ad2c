"""Fixtures for the simulated libnvidia-ml.so.1: the library built once per session, states from presets, and
scenarios run by the UNMODIFIED pynvml in a fresh interpreter (LD_LIBRARY_PATH + NVML_SIM_STATE)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SIM_TEST_BUILD = REPO / "build" / "sim-test"
SIM_DRIVER_VERSION = "550.163.01"

# Helpers every scenario script can use. R collects the results the test asserts on.
_PRELUDE = '''
import ctypes, json, os, sys, time
import pynvml as N
R = {}
def err(fn, *a, **k):
    """[code, message] of the NVMLError fn raises; [0, ""] when it succeeds."""
    try:
        fn(*a, **k)
    except N.NVMLError as e:
        return [e.value, str(e)]
    return [0, ""]
def code(fn, *a, **k):
    return err(fn, *a, **k)[0]
def raw(name):
    """The C function itself, to pass arguments pynvml's wrapper would not."""
    return N._nvmlGetFunctionPointer(name)
def state():
    with open(os.environ["NVML_SIM_STATE"], encoding="utf-8") as f:
        return json.load(f)
def save(doc):
    """Replace the state the way every writer does (write a temporary file, rename it over)."""
    path = os.environ["NVML_SIM_STATE"]
    with open(path + ".tmp.scenario", "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp.scenario", path)
'''
_RESULT_MARK = "@@RESULT@@"


@dataclass
class NvmlSim:
    """One simulated host: a state file and the library; ``run`` executes a pynvml scenario against them."""

    libdir: Path
    state_path: Path

    def read(self) -> dict[str, Any]:
        """Return the current state document."""
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def write(self, doc: dict[str, Any]) -> None:
        """Replace the state document atomically (as the hardware tools do)."""
        tmp = self.state_path.with_name(self.state_path.name + ".tmp.test")
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        tmp.chmod(0o644)
        os.replace(tmp, self.state_path)

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        """Read, let the caller change, write back."""
        doc = self.read()
        yield doc
        self.write(doc)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a scenario runs with."""
        env = {k: v for k, v in os.environ.items() if k not in ("NVML_SIM_STATE", "LD_LIBRARY_PATH")}
        env.update({"NVML_SIM_STATE": str(self.state_path), "LD_LIBRARY_PATH": str(self.libdir), "LC_ALL": "C"})
        env.update(extra or {})
        return env

    def command(self, script: str, user: str | None = None, setup: str = "") -> list[str]:
        """The argv that runs ``setup`` then ``script`` (after the prelude) in a fresh interpreter, as ``user``."""
        code = (_PRELUDE + textwrap.dedent(setup) + "\n" + textwrap.dedent(script)
                + f"\nprint({_RESULT_MARK!r} + json.dumps(R))\n")
        argv = [sys.executable, "-c", code]
        if user:
            entry = pwd.getpwnam(user)
            argv = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", *argv]
        return argv

    def run(self, script: str, *, setup: str = "", user: str | None = None,
            extra_env: dict[str, str] | None = None, timeout: float = 60) -> dict[str, Any]:
        """Run a scenario; return its ``R`` dict. A crash or traceback fails the test with the output."""
        proc = subprocess.run(self.command(script, user, setup), env=self.env(extra_env), capture_output=True,
                              text=True, timeout=timeout, check=False)
        for line in proc.stdout.splitlines():
            if line.startswith(_RESULT_MARK) and proc.returncode == 0:
                result: dict[str, Any] = json.loads(line[len(_RESULT_MARK):])
                return result
        pytest.fail(f"scenario failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="session")
def nvml_libdir() -> Path:
    """Build the simulated library once per session into build/sim-test/ and return its folder."""
    from gpufleet_sim.build import build_library

    return build_library(SIM_TEST_BUILD, SIM_DRIVER_VERSION, python=sys.executable).parent


@pytest.fixture
def nvml_sim(nvml_libdir: Path, tmp_path: Path) -> Iterator[Callable[..., NvmlSim]]:
    """Factory: ``nvml_sim(preset, seed=..., public=False)`` writes a preset's state and returns an NvmlSim.

    ``public=True`` puts the state in a world-readable folder (0755, file 0644, root-owned) so that a scenario
    run as ``nobody`` can read it.
    """
    from gpufleet_sim.presets import build_state

    public_dirs: list[str] = []

    def make(preset: str = "2xA100-40GB", seed: str = "host-a", public: bool = False,
             doc: dict[str, Any] | None = None) -> NvmlSim:
        if public:
            base = Path(tempfile.mkdtemp(prefix="nvmlsim-"))
            public_dirs.append(str(base))
            base.chmod(0o755)
        else:
            base = tmp_path / f"host-{len(list(tmp_path.iterdir()))}"
            base.mkdir()
        sim = NvmlSim(nvml_libdir, base / "state.json")
        sim.write(doc if doc is not None else build_state(preset, seed))
        return sim

    yield make
    for folder in public_dirs:
        shutil.rmtree(folder, ignore_errors=True)


def enable_mig(doc: dict[str, Any], *gpus: int) -> dict[str, Any]:
    """Turn MIG on (current = pending = 1) for the given GPUs of a state document, as after a GPU reset."""
    for index in gpus or range(len(doc["gpus"])):
        doc["gpus"][index]["mig"]["current"] = 1
        doc["gpus"][index]["mig"]["pending"] = 1
    return doc


@pytest.fixture
def mig_on() -> Callable[..., dict[str, Any]]:
    """The ``enable_mig`` helper (conftest modules are not importable under --import-mode=importlib)."""
    return enable_mig
