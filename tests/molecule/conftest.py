"""The Molecule scenarios, run side by side with the rest of the suite.

Every selected scenario test (``tests/molecule/test_scenarios.py::test_scenario``) is moved to the end of the
session (before ``test_no_leftovers.py``), and the scenarios themselves start as soon as collection ends, in
background threads, while the other tests run in the main thread:

- one scenario at a time while the other tests run (the second core is theirs), then, once the main thread
  reaches the scenario tests, ``GPUFLEET_MOLECULE_PARALLEL`` at a time (default: the number of CPUs); the slots
  are the suite's one pool of background work (``suite_lanes.SLOTS``), which the test files of the background lane
  (tests/suite_lanes.py) take once every scenario has been handed to a worker;
- the longest first; each with its own block of loopback numbers (``GPUFLEET_MOLECULE_FIRST_LOOPBACK``), so
  services with fixed ports never meet, and Molecule's hosts never share a name or an address with the
  integration tests' (127.0.200+ and the fleets' 127.0.1+);
- the repository server on 127.0.0.1:8765 starts first (``reposerver.start`` lets the integration tests share
  it: they leave a server they did not start alone) and stops when the last scenario has ended, before
  ``test_no_leftovers.py`` looks.

Each scenario test waits for its own scenario and fails with the tail of its output. ``GPUFLEET_MOLECULE_EARLY=0``
starts them only when the first scenario test runs; ``GPUFLEET_MOLECULE_PARALLEL=1`` runs them one at a time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

import suite_budget  # tests/, put on sys.path by tests/conftest.py
import suite_lanes
from gpufleet_lab import reposerver
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import build_dir, containers_conf, project_root

ROOT = project_root()
BASE_CONFIG = ROOT / "molecule" / "_shared" / "base.yml"
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
#: Started first because they take longest (measured; docs/testing.md): the others fill the gaps.
LONGEST_FIRST = ("site", "nvidia_mig", "nvidia_driver_nvlink5", "nvidia_imex", "nvidia_driver")
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


def first_loopback(scenario: str) -> int:
    """The first loopback number of ``scenario``'s hosts: its own block, so side-by-side scenarios never share one."""
    return FIRST_LOOPBACK + LOOPBACK_BLOCK * SCENARIOS.index(scenario)


def parallelism() -> int:
    raw = os.environ.get("GPUFLEET_MOLECULE_PARALLEL", "")
    if not raw:
        return max(1, os.cpu_count() or 1)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"GPUFLEET_MOLECULE_PARALLEL must be a whole number of at least 1, not {raw!r}")
    return int(raw)


def _molecule() -> str:
    found = shutil.which("molecule") or str(Path(sys.executable).with_name("molecule"))
    if not Path(found).exists():
        raise FileNotFoundError("molecule is not installed in this environment; run scripts/bootstrap.sh")
    return found


def _run(molecule: str, scenario: str) -> Outcome:
    env = dict(os.environ)
    env.setdefault("ANSIBLE_PIPELINING", "True")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env["GPUFLEET_MOLECULE_FIRST_LOOPBACK"] = str(first_loopback(scenario))
    run = suite_budget.run_measured([molecule, "-c", str(BASE_CONFIG), "test", "-s", scenario], cwd=ROOT, env=env,
                                    timeout_s=TIMEOUT_S)
    output, seconds, cpu = run.output, run.wall_s, run.cpu_s
    if run.timed_out:
        output += f"\n(timed out after {TIMEOUT_S} s)"
    returncode = -1 if run.timed_out else run.returncode
    suite_budget.record_scenario(scenario, seconds, cpu, returncode)
    return Outcome(scenario, returncode, output, seconds)


class ScenarioRuns:
    """The selected scenarios, run by ``parallelism()`` worker threads that share a widening number of slots."""

    def __init__(self, scenarios: list[str]) -> None:
        self.order = sorted(dict.fromkeys(scenarios), key=lambda s: (
            LONGEST_FIRST.index(s) if s in LONGEST_FIRST else len(LONGEST_FIRST), s))
        self.futures: dict[str, Future[Outcome]] = {s: Future() for s in self.order}
        self.error: str | None = None
        self.server_pid: int | None = None
        self._queue = list(self.order)
        self._lock = threading.Lock()
        self._slots = suite_lanes.SLOTS
        self._cancelled = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        suite_lanes.expect_scenarios()
        try:
            reposerver.check_repo(reposerver.repo_dir())
            os.environ["CONTAINERS_CONF"] = str(containers_conf())
            ensure_image()
            molecule = _molecule()
            workers = parallelism()
            self.server_pid = reposerver.start()
        except (reposerver.RepoServerError, OSError, ValueError, subprocess.SubprocessError) as exc:
            self.error = f"the Molecule scenarios could not start: {exc}"
            suite_lanes.scenarios_handed_out()
            return
        for i in range(workers):
            thread = threading.Thread(target=self._work, args=(molecule,), name=f"molecule-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def widen(self) -> None:
        """Let every worker run (the main thread has reached the scenario tests and only waits now)."""
        suite_lanes.widen(len(self._threads))

    def _work(self, molecule: str) -> None:
        while True:
            with self._lock:
                if self._cancelled or not self._queue:
                    return
                scenario = self._queue.pop(0)
                if not self._queue:
                    suite_lanes.scenarios_handed_out()
            with self._slots:
                future = self.futures[scenario]
                try:
                    future.set_result(_run(molecule, scenario))
                except Exception as exc:  # a test must see it, not a dead thread
                    future.set_exception(exc)

    def finish(self) -> None:
        """Cancel what has not started, wait for what runs, record the times and stop the repository server."""
        with self._lock:
            self._cancelled = True
            for scenario in self._queue:
                self.futures[scenario].cancel()
            self._queue.clear()
        suite_lanes.scenarios_handed_out()
        self.widen()
        for thread in self._threads:
            thread.join()
        done = [(s, f.result()) for s, f in self.futures.items() if f.done() and not f.cancelled()
                and f.exception() is None]
        (build_dir() / "molecule-times.txt").write_text(
            "".join(f"{o.seconds:7.1f} s  {s}\n" for s, o in done), encoding="utf-8")
        reposerver.stop(self.server_pid)
        self.server_pid = None


_RUNS: ScenarioRuns | None = None


def _is_scenario(item: pytest.Item) -> bool:
    return getattr(item, "originalname", "") == "test_scenario" and hasattr(item, "callspec") \
        and item.path.parent == ROOT / "tests" / "molecule"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the scenario tests last (before test_no_leftovers.py): they only wait, the scenarios run meanwhile."""
    scenarios = [item for item in items if _is_scenario(item)]
    if not scenarios:
        return
    rest = [item for item in items if not _is_scenario(item)]
    tail = [item for item in rest if item.path.name == "test_no_leftovers.py"]
    items[:] = [item for item in rest if item.path.name != "test_no_leftovers.py"] + scenarios + tail


def _runs(session: pytest.Session) -> ScenarioRuns:
    global _RUNS
    if _RUNS is None:
        _RUNS = ScenarioRuns([item.callspec.params["scenario"] for item in session.items if _is_scenario(item)])
        _RUNS.start()
    return _RUNS


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or os.environ.get("GPUFLEET_MOLECULE_EARLY", "1") == "0":
        return
    if any(_is_scenario(item) for item in session.items):
        _runs(session)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ends early (-x, an interrupt) still stops the scenarios' threads and the server."""
    if _RUNS is not None:
        _RUNS.finish()


@pytest.fixture(scope="module")
def scenario_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Outcome]]]:
    """The selected scenarios' outcomes by name; all of them have ended when the scenario tests are over."""
    runs = _runs(request.session)
    if runs.error:
        pytest.fail(runs.error)
    runs.widen()
    yield runs.futures
    runs.finish()
