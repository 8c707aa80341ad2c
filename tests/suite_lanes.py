"""The suite's second lane: test files that bring up their own lab hosts run in background pytest processes while
the main thread runs the rest, so the machine's second core is not idle once the Molecule scenarios are done.

Issue 33: the scenarios run in background threads beside the tests (tests/molecule/conftest.py), one at a time
while the main thread works. They end long before the main thread does, and the main thread's last half hour was
the host tests of ``tests/integration`` one after another on one core. Now:

- ``SLOTS`` is the one pool of background CPU slots: one while the main thread runs tests, more (``widen``) once it
  only waits. The Molecule scenarios take from it first; when every scenario has been handed to a worker
  (``scenarios_handed_out``), the lane's worker takes the files of ``BACKGROUND_FILES``, longest first, and runs each
  selected file's tests in a pytest process of its own (``python -m pytest NODEID...``).
- The main thread reaches those files after its own tests (they are moved to just before the scenario tests,
  shortest first) and runs every file the lane has not claimed itself, so the two lanes meet in the middle and
  neither waits while the other has work. For a file the lane ran, each test is reported from the child's own
  reports (pytest's report serialisation, as pytest-xdist does), so it passes, fails or skips in this session's
  summary exactly as if it had run here; a test the child did not report fails with the tail of its output.
- A file is in ``BACKGROUND_FILES`` only when it shares nothing with any other file but the repository server and
  the prepared images (both made for concurrent use: ``ensure_baselines`` locks, and the session starts the
  repository server before the lane does and stops it last, so that no test stops it under another: a test leaves
  a server it did not start alone): its own lab hosts on loopback addresses no other test uses
  (tests/unit/test_suite_lanes.py), its own names, its own temporary folders.

``GPUFLEET_LANES=0`` runs every test in the main thread, as before. Times: each background file's wall and CPU time
is reported by tests/suite_budget.py beside the scenarios'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import suite_budget
from gpufleet_lab import reposerver

REPO = Path(__file__).resolve().parents[1]
#: Files that start their own lab hosts and share nothing else with the rest of the suite (the loopback numbers
#: are in each file), longest first by the quiet fresh-clone run of 2026-11-28 (docs/testing.md).
BACKGROUND_FILES = (
    "tests/integration/test_slurm_lab.py",             # 127.0.222.1, 127.0.223.1 (its image: 127.0.229.1, locked)
    "tests/integration/test_packaging_ee.py",          # 127.0.225.1, its own podman socket
    "tests/integration/test_mig_faults_hosts.py",      # 127.0.218.1
    "tests/integration/test_host_reboot.py",           # 127.0.219.1
    "tests/integration/test_driver_upgrade_imex.py",   # 127.0.228.1
    "tests/integration/test_driver_upgrade.py",        # 127.0.213.1-2
    "tests/integration/test_baseline_negative.py",     # 127.0.211.1-2
    "tests/integration/test_driver_lifecycle.py",      # 127.0.217.1-2
    "tests/integration/test_monitoring_prometheus.py", # 127.0.221.1-2, its own Prometheus on a free port
    "tests/integration/test_rdma_lab.py",              # 127.0.226.1
    "tests/integration/test_driver_mirror_root.py",    # 127.0.216.1
    "tests/integration/test_baseline_secrets.py",      # 127.0.215.1
    "tests/integration/test_baseline_nvml_hashes.py",  # 127.0.214.1
)
#: In a child: where it writes its test reports (one JSON document per line), and that it runs no lane of its own.
REPORT_ENV = "GPUFLEET_LANE_REPORT"
#: The lane's files go before the Molecule scenario tests (moved to the end by tests/molecule/conftest.py: they only
#: wait) and the no-leftovers check (last of all).
SCENARIO_TESTS, LAST_FILE = "tests/molecule/test_scenarios.py::test_scenario[", "tests/integration/test_no_leftovers.py"
TIMEOUT_S = 1800
TAIL = 6000

SLOTS = threading.Semaphore(1)
_slots_lock = threading.Lock()
_wide = False
_handed_out = threading.Event()
_handed_out.set()


def widen(width: int) -> None:
    """Let ``width`` background jobs run at once (the main thread only waits from now on). Once is enough."""
    global _wide
    with _slots_lock:
        if not _wide:
            _wide = True
            for _ in range(max(0, width - 1)):
                SLOTS.release()


def expect_scenarios() -> None:
    """The Molecule scenarios are queued: the lane waits until each has been handed to a worker."""
    _handed_out.clear()


def scenarios_handed_out() -> None:
    _handed_out.set()


def enabled(config: pytest.Config) -> bool:
    return (os.environ.get("GPUFLEET_LANES", "1") != "0" and not os.environ.get(REPORT_ENV)
            and not config.option.collectonly)


def width() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass
class FileRun:
    """What the child process of one file reported: its tests' reports by node id, its output's tail."""

    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    returncode: int = 0
    tail: str = ""


class Lane:
    def __init__(self, config: pytest.Config, files: dict[str, list[pytest.Item]]) -> None:
        self.config = config
        self.files = files
        self.pending = list(files)  # longest first: the lane takes from the front, the main thread meets it
        self.lock = threading.Lock()
        self.background: dict[str, Future[FileRun]] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopped = False
        self.server_pid: int | None = None
        self.last_item: pytest.Item | None = None
        self.thread = threading.Thread(target=self._work, name="suite-lane", daemon=True)

    def claim_for_main(self, name: str) -> bool:
        """True: the main thread runs this file itself (the lane has not started it); False: wait for the lane."""
        with self.lock:
            if name in self.pending:
                self.pending.remove(name)
                return True
            return name not in self.background

    def _next(self) -> str | None:
        with self.lock:
            if self.stopped or not self.pending:
                return None
            name = self.pending.pop(0)
            self.background[name] = Future()
            return name

    def _work(self) -> None:
        _handed_out.wait()
        while True:
            with self.lock:
                if self.stopped or not self.pending:
                    return
            with SLOTS:
                name = self._next()
                if name is None:
                    return
                future = self.background[name]
                try:
                    future.set_result(self._run(name))
                except Exception as exc:  # a test must see it, not a dead thread
                    future.set_exception(exc)

    def _run(self, name: str) -> FileRun:
        nodeids = [item.nodeid for item in self.files[name]]
        work = Path(tempfile.mkdtemp(prefix="gpufleet-lane-"))
        report, times = work / "reports.jsonl", work / "suite-times.json"
        env = dict(os.environ, **{REPORT_ENV: str(report), suite_budget.REPORT_ENV: str(times)})
        def started(proc: subprocess.Popen[bytes]) -> None:
            with self.lock:
                self.procs[name] = proc

        done = suite_budget.run_measured([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o",
                                          "console_output_style=classic", *nodeids], cwd=REPO, env=env,
                                         timeout_s=TIMEOUT_S, started=started)
        run = FileRun(returncode=done.returncode, tail=done.output[-TAIL:])
        if report.exists():
            for line in report.read_text(encoding="utf-8").splitlines():
                data = json.loads(line)
                if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason): JSON made it a list
                    data["longrepr"] = tuple(data["longrepr"])
                run.reports.setdefault(data["nodeid"], []).append(data)
        suite_budget.record_background(name, done.wall_s, done.cpu_s, done.returncode, len(nodeids))
        for path in (report, times):
            path.unlink(missing_ok=True)
        work.rmdir()
        return run

    def close(self) -> None:
        """After the lane's last test (or the session's end): stop the worker and the server the lane started."""
        self.stop()
        reposerver.stop(self.server_pid)
        self.server_pid = None

    def stop(self) -> None:
        """Start nothing more; end a child that still runs (an interrupted session); wait for the worker."""
        with self.lock:
            self.stopped = True
            procs = [p for p in self.procs.values() if p.returncode is None]
        _handed_out.set()
        for proc in procs:
            proc.terminate()
        if self.thread.is_alive():  # it may wait for a slot a scenario holds: it will find nothing left to do
            self.thread.join(timeout=30)


_LANE: Lane | None = None
_KEY = pytest.StashKey[str]()


def _name(item: pytest.Item) -> str:
    try:
        return str(item.path.resolve().relative_to(REPO))
    except ValueError:
        return ""


def _goes_after(item: pytest.Item) -> bool:
    return item.nodeid.startswith(SCENARIO_TESTS) or _name(item) == LAST_FILE


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the lane's files to just before the Molecule scenario tests (or the no-leftovers check), shortest
    first, and start the lane's worker on them longest first."""
    global _LANE
    if not enabled(config):
        return
    chosen: dict[str, list[pytest.Item]] = {name: [] for name in BACKGROUND_FILES}
    rest: list[pytest.Item] = []
    for item in items:
        name = _name(item)
        if name in chosen:
            item.stash[_KEY] = name
            chosen[name].append(item)
        else:
            rest.append(item)
    chosen = {name: found for name, found in chosen.items() if found}
    if not chosen:
        return
    at = next((i for i, item in enumerate(rest) if _goes_after(item)), len(rest))
    moved = [item for name in reversed(list(chosen)) for item in chosen[name]]
    items[:] = rest[:at] + moved + rest[at:]
    _LANE = Lane(config, chosen)
    _LANE.last_item = moved[-1]


@pytest.hookimpl(trylast=True)  # after the Molecule conftest has queued its scenarios (expect_scenarios)
def pytest_collection_finish(session: pytest.Session) -> None:
    if _LANE is not None and not _LANE.thread.is_alive():
        try:
            _LANE.server_pid = reposerver.start()
        except (reposerver.RepoServerError, OSError) as exc:
            # the lane's tests will find no server and fail saying so; the main thread's start it themselves
            print(f"the background lane could not start the repository server: {exc}", file=sys.stderr)
        _LANE.thread.start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A test of a file the lane ran: wait for the file, then report what its child reported."""
    name = item.stash.get(_KEY, "")
    if _LANE is None or not name or _LANE.claim_for_main(name):
        return None
    widen(width())  # the main thread waits: the core it leaves is the background's
    future = _LANE.background[name]
    try:
        run = future.result()
    except Exception as exc:  # the worker's error becomes this test's failure
        run = FileRun(returncode=-1, tail=f"the lane could not run {name}: {exc!r}")
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = run.reports.get(item.nodeid)
    if reports:
        for data in reports:
            report = ihook.pytest_report_from_serializable(config=item.config, data=data)
            ihook.pytest_runtest_logreport(report=report)
    else:
        report = pytest.TestReport(item.nodeid, item.location, {}, "failed",
                                   f"ran in the background lane (tests/suite_lanes.py), which has no report of this "
                                   f"test (exit {run.returncode}); the end of its output:\n{run.tail}", "call")
        ihook.pytest_runtest_logreport(report=report)
    # what the main thread set up for the tests before this one and the next one does not need goes now, as in
    # pytest's own teardown phase (_pytest/runner.py, pytest_runtest_teardown: the one call of it that applies; the
    # whole hook would also run other plugins' teardowns for a test this process never set up)
    try:
        item.session._setupstate.teardown_exact(nextitem)
    except Exception as exc:  # a finalizer of an earlier test failed: an error of this test's teardown, as in pytest
        report = pytest.TestReport(item.nodeid, item.location, {}, "failed",
                                   f"tearing down what earlier tests set up failed: {exc!r}", "teardown")
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    item.stash[suite_budget.BACKGROUND_KEY] = True
    return True


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """After the lane's last test the lane closes, so the no-leftovers check finds its server gone."""
    if _LANE is not None and _LANE.last_item is not None and nodeid == _LANE.last_item.nodeid:
        _LANE.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _LANE is not None:
        _LANE.close()


# ----- in a child process: write each report for the parent --------------------------------------------------------

def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    config = _CONFIG[0] if _CONFIG else None
    if config is None:
        return
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(data) + "\n")


_CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG[:] = [config]
