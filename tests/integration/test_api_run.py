"""Real ansible-runner runs (no mocks) of fixture playbooks against local and unreachable hosts."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet import api
from gpufleet.errors import RunnerError
from gpufleet.results import Event, ExitCode, FailedTask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runner"
PLAYBOOKS = FIXTURES / "playbooks"
STUB_FACTS = "gpufleet_fixtures.stub.gpu_facts"


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A loopback port that is bound (so nobody else takes it) but not listening: connections are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def inventory(tmp_path: Path, closed_port: int) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    data = {
        "all": {
            "hosts": {
                "good": dict(local),
                "bad": dict(local),
                "gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": closed_port,
                         "ansible_user": "nobody"},
            }
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def fixture_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the fixture collection gpufleet_fixtures.stub after the API's own collection path."""
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(FIXTURES / "collections"))


@pytest.fixture
def private_dirs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the private data directories the API creates."""
    created: list[str] = []
    real = api.tempfile.mkdtemp

    def mkdtemp(prefix: str) -> str:
        path = real(prefix=prefix)
        created.append(path)
        return path

    monkeypatch.setattr(api.tempfile, "mkdtemp", mkdtemp)
    return created


def test_mixed_run(inventory, fixture_collections, private_dirs):
    events: list[Event] = []
    result = api.run(
        PLAYBOOKS / "mixed.yml", inventory, module_keys={STUB_FACTS: "facts"}, on_event=events.append
    )

    assert (result.status, result.rc, result.exit_code) == ("failed", 4, ExitCode.UNREACHABLE)
    assert result.error is None  # task failures are host results, not an error outside host tasks
    assert list(result.hosts) == ["bad", "gone", "good"]
    good, bad, gone = result.hosts["good"], result.hosts["bad"], result.hosts["gone"]

    assert (good.ok, good.changed, good.failed, good.skipped, good.ignored, good.unreachable) == (4, 1, 0, 1, 1, 0)
    assert good.failed_tasks == []  # the ignored failure is not reported
    assert good.facts == {"changed": False, "gpu_count": 2,
                          "gpus": [{"index": 0, "name": "Fixture GPU 0"}, {"index": 1, "name": "Fixture GPU 1"}]}

    assert (bad.ok, bad.changed, bad.failed, bad.status) == (2, 1, 1, "failed")
    assert bad.failed_tasks == [FailedTask("Fail on the bad host", "ansible.builtin.fail", "bad host refuses: bad")]
    assert bad.facts is None  # the play stopped for the failed host before the facts task

    assert (gone.unreachable, gone.status) == (1, "unreachable")
    [unreachable] = gone.failed_tasks
    assert (unreachable.task, unreachable.unreachable) == ("Say hello", True)
    assert "Connection refused" in unreachable.msg

    statuses = {(e.host, e.task, e.status) for e in events if e.status}
    assert ("bad", "Fail on the bad host", "failed") in statuses
    assert ("good", "A failure that is ignored", "ignored") in statuses
    assert ("good", "Change something", "changed") in statuses
    assert ("gone", "Say hello", "unreachable") in statuses
    assert events[-1].kind == "playbook_on_stats"
    assert result.failed_hosts == ["bad"]
    assert result.unreachable_hosts == ["gone"]

    assert len(private_dirs) == 1
    assert not os.path.exists(private_dirs[0])


def test_all_ok_with_limit_and_check(inventory, private_dirs):
    result = api.run(PLAYBOOKS / "ok.yml", inventory, limit="good", check=True)
    assert (result.status, result.rc, result.ok, result.exit_code) == ("successful", 0, True, ExitCode.OK)
    assert list(result.hosts) == ["good"]
    # check mode: command tasks are skipped unless they support check mode
    assert result.hosts["good"].skipped == 1
    assert not os.path.exists(private_dirs[0])


def test_extravars_keep_their_types(inventory, tmp_path):
    playbook = tmp_path / "types.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Types", "hosts": "good", "gather_facts": False,
        "tasks": [{"name": "Check types", "ansible.builtin.assert": {"that": [
            "count is integer", "count == 3", "flag is boolean", "flag", "names | length == 2", "text == 'a b'",
        ]}}],
    }]))
    result = api.run(playbook, inventory, extravars={"count": 3, "flag": True, "names": ["x", "y"], "text": "a b"})
    assert result.exit_code is ExitCode.OK, result.to_dict()


def _sleeping(marker: str) -> bool:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.split(b"\0")[:2] == [b"sleep", marker.encode()]:
            return True
    return False


def test_cancel_stops_a_long_run(inventory, private_dirs):
    cancel = threading.Event()
    marker = "41.7"  # unusual sleep length, to find the process

    def on_event(event: Event) -> None:
        if event.kind == "runner_on_start" and event.task == "Sleep":
            cancel.set()

    started = time.monotonic()
    result = api.run(
        PLAYBOOKS / "sleep.yml", inventory, limit="good", extravars={"sleep_seconds": marker},
        on_event=on_event, cancel=cancel,
    )
    elapsed = time.monotonic() - started
    assert (result.status, result.rc, result.exit_code) == ("canceled", 254, ExitCode.RUNNER_ERROR)
    assert elapsed < 20, f"cancel took {elapsed:.1f}s"
    assert not _sleeping(marker), "the canceled task's process is still running"
    assert not os.path.exists(private_dirs[0])


def test_failing_on_event_cancels_and_raises(inventory, private_dirs):
    def on_event(event: Event) -> None:
        if event.kind == "runner_on_start":
            raise ValueError("renderer broke")

    with pytest.raises(RunnerError) as info:
        api.run(PLAYBOOKS / "sleep.yml", inventory, limit="good", extravars={"sleep_seconds": 39.3},
                on_event=on_event)
    assert str(info.value) == "on_event callback raised ValueError: renderer broke; the run was canceled"
    assert not _sleeping("39.3")
    assert not os.path.exists(private_dirs[0])


def test_unknown_module_is_an_ansible_error_with_its_message(inventory, tmp_path):
    playbook = tmp_path / "broken.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - name: x\n      no.such.module: {}\n")
    result = api.run(playbook, inventory)
    assert (result.status, result.hosts, result.exit_code) == ("failed", {}, ExitCode.ANSIBLE_ERROR)
    assert result.rc != 0
    assert result.error is not None
    assert result.error.startswith("[ERROR]: couldn't resolve module/action 'no.such.module'")
