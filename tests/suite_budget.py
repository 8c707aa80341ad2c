"""The suite's time budget, reported on itself: wall and CPU seconds per test file, per layer and per Molecule
scenario, printed at the end of every run and written to ``build/suite-times.json``.

Issue 33: the whole suite (``bash scripts/test.sh``, what ``.ci/run`` calls) must finish in 45 minutes on the
2-core machine. These are figures for people to read, never a timed assertion: a change that eats the budget
shows in its own run's report (docs/testing.md, "The suite's budget").

How the time is counted:

- A test file's wall time is the time its tests' run protocols took (set-up, call, tear-down; a module fixture's
  set-up counts for the file's first test). Its CPU time is this process's CPU (every thread) plus that of the
  child processes reaped meanwhile (ansible, podman's client, the simulator's tools), less what the Molecule
  scenarios' processes used: those run in background threads beside the tests and are counted per scenario.
- The files that ran in the background lane (tests/suite_lanes.py) are listed with their own child process's wall
  and CPU time, like the scenarios; what the main thread spent waiting for them is the ``lane`` layer.
- The ``molecule`` layer's wall time is what the main thread spends waiting at the scenario tests, after all other
  tests: the part of the scenarios that did not overlap anything. Each scenario's own wall and CPU time (its
  ``molecule test`` process and what that reaped) is listed beside it.
- CPU time stops at the machine's processes this session starts and waits for: what runs inside the lab's hosts is
  started by podman's ``conmon`` and is not counted, so the hosts' own work shows only in wall time. The machine's
  own count (``/proc/stat``: every process, the hosts' included) gives how many cores were busy on average, i.e.
  how much of the second core the run left idle.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: the budget of the whole run (issue 33), seconds
BUDGET_S = 45 * 60
#: each layer's share of BUDGET_S, seconds of the main thread's wall time (they add up to the budget), split from
#: the first full run that measured itself (2026-11-28, docs/testing.md, "The suite's budget"): the layers that fit
#: got about 1.5x what they took there, integration the rest (it took 2457 s: over its share, the layer to cut)
SHARES_S = {"unit": 150, "sim": 150, "gates": 150, "integration": 2160, "molecule": 90}
LAYER_ORDER = ("unit", "sim", "gates", "integration", "lane", "molecule", "other")
SLOWEST = 20
REPORT = REPO / "build" / "suite-times.json"
#: set (by tests/suite_lanes.py, in its child processes) to the file this session writes its figures to instead,
#: without printing them
REPORT_ENV = "GPUFLEET_SUITE_TIMES"
#: on a test the background lane ran: the main thread only waited for it
BACKGROUND_KEY = pytest.StashKey[bool]()
PROC_STAT = Path("/proc/stat")


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _all_cpu_s() -> float:
    return _cpu_s(resource.RUSAGE_SELF) + _cpu_s(resource.RUSAGE_CHILDREN)


def machine_busy_s() -> float | None:
    """Seconds of CPU the whole machine has been busy since boot (every core, every process), or None off Linux."""
    try:
        fields = PROC_STAT.read_text(encoding="ascii").split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def layer_of(path: Path) -> str:
    """The layer a test file belongs to: its folder under tests/, or ``gates`` for the quality gates."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return "other"
    if parts == ("test_quality_gates.py",):
        return "gates"
    return parts[0] if len(parts) > 1 and parts[0] in SHARES_S else "other"


@dataclass
class Entry:
    layer: str
    tests: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0


@dataclass
class Budget:
    """What one session measured; the Molecule conftest adds its scenarios through ``record_scenario``."""

    started: float = field(default_factory=time.monotonic)
    cpu_started: float = field(default_factory=_all_cpu_s)
    files: dict[str, Entry] = field(default_factory=dict)
    scenarios: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    background: dict[str, tuple[float, float, int, int]] = field(default_factory=dict)
    #: CPU of the background threads' processes (scenarios, lane files), not to be counted to a main-thread test
    scenario_cpu_s: float = 0.0
    busy_started: float | None = field(default_factory=machine_busy_s)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record_scenario(self, scenario: str, wall_s: float, cpu_s: float, returncode: int) -> None:
        with self.lock:
            self.scenarios[scenario] = (wall_s, cpu_s, returncode)
            self.scenario_cpu_s += cpu_s

    def record_background(self, name: str, wall_s: float, cpu_s: float, returncode: int, tests: int) -> None:
        with self.lock:
            self.background[name] = (wall_s, cpu_s, returncode, tests)
            self.scenario_cpu_s += cpu_s

    def add(self, path: Path, wall_s: float, cpu_s: float, layer: str | None = None) -> None:
        name = str(path.resolve().relative_to(REPO)) if path.resolve().is_relative_to(REPO) else str(path)
        if layer:
            name += f" ({layer})"
        entry = self.files.setdefault(name, Entry(layer or layer_of(path)))
        entry.tests += 1
        entry.wall_s += wall_s
        entry.cpu_s += max(0.0, cpu_s)

    def layers(self) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        for entry in self.files.values():
            total = out.setdefault(entry.layer, Entry(entry.layer))
            total.tests += entry.tests
            total.wall_s += entry.wall_s
            total.cpu_s += entry.cpu_s
        return out

    def document(self) -> dict[str, Any]:
        wall = time.monotonic() - self.started
        slowest = sorted([(e.wall_s, e.cpu_s, name, e.layer) for name, e in self.files.items() if e.layer != "lane"]
                         + [(w, c, f"scenario {s}", "scenario") for s, (w, c, _rc) in self.scenarios.items()]
                         + [(w, c, f"{name} (background lane)", "background")
                            for name, (w, c, _rc, _n) in self.background.items()],
                         reverse=True)[:SLOWEST]
        busy = machine_busy_s()
        machine = None if busy is None or self.busy_started is None else round(busy - self.busy_started, 1)
        return {
            "budget_s": BUDGET_S, "wall_s": round(wall, 1), "cpu_s": round(_all_cpu_s() - self.cpu_started, 1),
            "machine_busy_s": machine, "cores": os.cpu_count(),
            "layers": {name: {"tests": e.tests, "wall_s": round(e.wall_s, 1), "cpu_s": round(e.cpu_s, 1),
                              "share_s": SHARES_S.get(name)} for name, e in self.layers().items()},
            "scenarios": {s: {"wall_s": round(w, 1), "cpu_s": round(c, 1), "returncode": rc}
                          for s, (w, c, rc) in self.scenarios.items()},
            "background": {name: {"tests": n, "wall_s": round(w, 1), "cpu_s": round(c, 1), "returncode": rc}
                           for name, (w, c, rc, n) in self.background.items()},
            "slowest": [{"what": what, "layer": layer, "wall_s": round(w, 1), "cpu_s": round(c, 1)}
                        for w, c, what, layer in slowest],
        }


def lines(doc: dict[str, Any]) -> list[str]:
    """The report as printed: the total against the budget, each layer against its share, the slowest files."""
    wall, budget = doc["wall_s"], doc["budget_s"]
    out = [f"whole run: {wall:.0f} s wall of a {budget} s budget ({100 * wall / budget:.0f}%), "
           f"{doc['cpu_s']:.0f} s CPU (this process and the processes it waited for)"]
    if doc.get("machine_busy_s") is not None and wall > 0:
        out.append(f"the machine: {doc['machine_busy_s']:.0f} s CPU busy (the lab's hosts included), "
                   f"{doc['machine_busy_s'] / wall:.2f} of its {doc['cores']} cores on average")
    out += [
           f"{'layer':<12} {'tests':>6} {'wall s':>8} {'share s':>8} {'of share':>9} {'CPU s':>8}"]
    layers = doc["layers"]
    for name in sorted(layers, key=LAYER_ORDER.index):
        row = layers[name]
        share = row["share_s"]
        of_share = f"{100 * row['wall_s'] / share:.0f}%" if share else "-"
        out.append(f"{name:<12} {row['tests']:>6} {row['wall_s']:>8.1f} {share or '-':>8} {of_share:>9} "
                   f"{row['cpu_s']:>8.1f}")
    accounted = sum(row['wall_s'] for row in layers.values())
    out.append(f"{'(outside tests: collection, session set-up)':<46} {wall - accounted:>8.1f}")
    if doc["scenarios"]:
        scen = doc["scenarios"]
        out.append(f"Molecule scenarios, in background threads beside the tests (overlapping): {len(scen)}, "
                   f"{sum(s['wall_s'] for s in scen.values()):.0f} s wall in all, "
                   f"{sum(s['cpu_s'] for s in scen.values()):.0f} s CPU")
    if doc.get("background"):
        lane = doc["background"]
        out.append(f"test files run in the background lane (tests/suite_lanes.py; overlapping): {len(lane)}, "
                   f"{sum(b['tests'] for b in lane.values())} tests, {sum(b['wall_s'] for b in lane.values()):.0f} s "
                   f"wall in all, {sum(b['cpu_s'] for b in lane.values()):.0f} s CPU")
    out.append(f"the {len(doc['slowest'])} slowest test files and scenarios:")
    out.extend(f"  {row['wall_s']:>7.1f} s wall {row['cpu_s']:>7.1f} s CPU  {row['what']}" for row in doc["slowest"])
    return out


BUDGET = Budget()


@dataclass
class Measured:
    """A background process's end: exit status (-9 when its time ran out), output, wall and CPU seconds."""

    returncode: int
    output: str
    wall_s: float
    cpu_s: float
    timed_out: bool


def run_measured(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
                 started: Any = None) -> Measured:
    """Run ``argv`` and wait for it with ``wait4``, not subprocess.run, to learn the CPU time of its own processes;
    its output goes to a file, so that no pipe can fill while nobody reads it. ``started(proc)`` sees the process
    (to stop it from elsewhere)."""
    import subprocess
    import tempfile

    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        if started is not None:
            started(proc)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read().decode(errors="replace")
    wall = time.monotonic() - start
    return Measured(proc.returncode, output, wall, usage.ru_utime + usage.ru_stime,
                    wall >= timeout_s and proc.returncode < 0)


def record_scenario(scenario: str, wall_s: float, cpu_s: float, returncode: int) -> None:
    """Called by tests/molecule/conftest.py when a scenario's ``molecule test`` has been waited for."""
    BUDGET.record_scenario(scenario, wall_s, cpu_s, returncode)


def record_background(name: str, wall_s: float, cpu_s: float, returncode: int, tests: int) -> None:
    """Called by tests/suite_lanes.py when a test file's child process in the background lane has ended."""
    BUDGET.record_background(name, wall_s, cpu_s, returncode, tests)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    wall0, cpu0, scen0 = time.monotonic(), _all_cpu_s(), BUDGET.scenario_cpu_s
    yield
    BUDGET.add(item.path, time.monotonic() - wall0, _all_cpu_s() - cpu0 - (BUDGET.scenario_cpu_s - scen0),
               "lane" if item.stash.get(BACKGROUND_KEY, False) else None)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if config.option.collectonly or not BUDGET.files:
        return
    doc = BUDGET.document()
    child_report = os.environ.get(REPORT_ENV)
    report = Path(child_report) if child_report else REPORT
    if not child_report:
        terminalreporter.write_sep("=", "suite budget (issue 33; figures, not assertions)")
        for line in lines(doc):
            terminalreporter.write_line(line)
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        terminalreporter.write_line(f"(the figures could not be written to {report}: {exc})")
