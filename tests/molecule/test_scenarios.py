"""One test per Molecule scenario: ``molecule -c molecule/_shared/base.yml test -s NAME``.

The scenarios are independent (their hosts have their own names and, through ``GPUFLEET_MOLECULE_FIRST_LOOPBACK``,
their own loopback addresses, so services with fixed ports never meet), and most of a scenario's time is spent
waiting on systemd, apt and podman rather than computing. So the selected scenarios are started together when
the first of them runs, ``GPUFLEET_MOLECULE_PARALLEL`` at a time (default: the number of CPUs, at least 1), the
longest first; each test then waits for its own scenario and fails with the tail of its output. Set
``GPUFLEET_MOLECULE_PARALLEL=1`` to run them one after the other.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpufleet_lab.podman import build_dir, project_root

ROOT = project_root()
BASE_CONFIG = ROOT / "molecule" / "_shared" / "base.yml"
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
#: Started first because they take longest (measured; docs/testing.md): the others fill the gaps.
LONGEST_FIRST = ("site", "nvidia_container_toolkit", "nvidia_driver", "nvidia_mig")
#: Molecule's hosts take loopback numbers from 101 up (create.yml); a scenario gets a block of this many, and the
#: blocks end below the numbers the baseline images are built on (molecule/_shared/lab_hosts.py: 230).
LOOPBACK_BLOCK = 10
FIRST_LOOPBACK = 101
TIMEOUT_S = 2400


@dataclass(frozen=True)
class Outcome:
    scenario: str
    returncode: int
    output: str
    seconds: float


def _molecule() -> str:
    found = shutil.which("molecule") or str(Path(sys.executable).with_name("molecule"))
    if not Path(found).exists():
        pytest.fail("molecule is not installed in this environment; run scripts/bootstrap.sh")
    return found


def first_loopback(scenario: str) -> int:
    """The first loopback number of ``scenario``'s hosts: its own block, so side-by-side scenarios never share one."""
    return FIRST_LOOPBACK + LOOPBACK_BLOCK * SCENARIOS.index(scenario)


def parallelism() -> int:
    raw = os.environ.get("GPUFLEET_MOLECULE_PARALLEL", "")
    if not raw:
        return max(1, os.cpu_count() or 1)
    if not raw.isdigit() or int(raw) < 1:
        pytest.fail(f"GPUFLEET_MOLECULE_PARALLEL must be a whole number of at least 1, not {raw!r}")
    return int(raw)


def _run(molecule: str, scenario: str) -> Outcome:
    env = dict(os.environ)
    env.setdefault("ANSIBLE_PIPELINING", "True")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env["GPUFLEET_MOLECULE_FIRST_LOOPBACK"] = str(first_loopback(scenario))
    start = time.monotonic()
    try:
        proc = subprocess.run([molecule, "-c", str(BASE_CONFIG), "test", "-s", scenario], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Outcome(scenario, -1, out + f"\n(timed out after {TIMEOUT_S} s)", time.monotonic() - start)
    return Outcome(scenario, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


@pytest.fixture(scope="module")
def scenario_runs(request: pytest.FixtureRequest, lab_repo_server: int | None) -> Iterator[dict[str, Future[Outcome]]]:
    """Start every selected scenario (longest first, ``parallelism()`` at a time); map each name to its outcome."""
    selected = [item.callspec.params["scenario"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_scenario" and hasattr(item, "callspec")]
    order = sorted(dict.fromkeys(selected),
                   key=lambda s: (LONGEST_FIRST.index(s) if s in LONGEST_FIRST else len(LONGEST_FIRST), s))
    molecule = _molecule()
    pool = ThreadPoolExecutor(max_workers=parallelism(), thread_name_prefix="molecule")
    runs = {scenario: pool.submit(_run, molecule, scenario) for scenario in order}
    yield runs
    pool.shutdown(wait=True)
    times = build_dir() / "molecule-times.txt"
    times.write_text("".join(f"{f.result().seconds:7.1f} s  {name}\n" for name, f in runs.items()), encoding="utf-8")


@pytest.mark.hosts
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, scenario_runs: dict[str, Future[Outcome]]) -> None:
    outcome = scenario_runs[scenario].result()
    if outcome.returncode != 0:
        tail = "\n".join(outcome.output.splitlines()[-80:])
        pytest.fail(f"molecule test -s {scenario} failed (rc {outcome.returncode}, {outcome.seconds:.0f} s):\n{tail}")


def test_each_scenario_fits_its_loopback_block_below_the_baseline_builders() -> None:
    """Every scenario's hosts fit its block of loopback numbers, and the last block ends below the image builders'."""
    spec = importlib.util.spec_from_file_location("lab_hosts", ROOT / "molecule" / "_shared" / "lab_hosts.py")
    assert spec is not None
    assert spec.loader is not None
    lab_hosts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab_hosts)
    for scenario in SCENARIOS:
        platforms = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())["platforms"]
        assert len(platforms) <= LOOPBACK_BLOCK, f"{scenario} has {len(platforms)} hosts, more than a block"
    last = first_loopback(SCENARIOS[-1]) + LOOPBACK_BLOCK - 1
    assert last < lab_hosts.BUILD_LOOPBACK, (
        f"{len(SCENARIOS)} scenarios need loopback numbers up to {last}; "
        f"{lab_hosts.BUILD_LOOPBACK}+ build the baselines")
