"""Typed results: events, failed tasks, per-host results, exit codes (pure logic, tables of cases)."""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

import pytest

from gpufleet._collect import EventCollector
from gpufleet.results import MODULE_DATA_KEYS, Event, ExitCode, FailedTask, HostResult, RunResult, clean_result


def ev(kind: str, host: str | None = "h1", task: str = "t", action: str = "ansible.builtin.command", **data: Any):
    event_data: dict[str, Any] = {"task": task, "task_action": action.rsplit(".", 1)[-1], "resolved_action": action}
    if host is not None:
        event_data["host"] = host
    event_data.update(data)
    return {"event": kind, "uuid": "u", "counter": 1, "event_data": event_data}


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (ev("runner_on_ok", res={"changed": False}), "ok"),
        (ev("runner_on_ok", res={"changed": True}), "changed"),
        (ev("runner_on_ok"), "ok"),
        (ev("runner_on_failed", res={"msg": "x"}), "failed"),
        (ev("runner_on_failed", res={"msg": "x"}, ignore_errors=True), "ignored"),
        (ev("runner_on_skipped"), "skipped"),
        (ev("runner_on_unreachable", res={"msg": "down"}), "unreachable"),
        (ev("runner_item_on_ok", res={"changed": True}), None),
        (ev("runner_item_on_failed"), None),
        (ev("runner_on_start"), None),
        (ev("playbook_on_task_start", host=None), None),
        ({"event": "verbose", "stdout": "text"}, None),
    ],
)
def test_event_status(raw, status):
    assert Event.from_runner(raw).status == status


def test_event_fields_prefer_resolved_action():
    raw = ev("runner_on_ok", host="gpu1", task="Read facts", action="gpufleet.nvidia.gpu_facts", res={"a": 1})
    raw["event_data"]["task_action"] = "gpu_facts"
    event = Event.from_runner(raw)
    assert (event.kind, event.host, event.task, event.action) == (
        "runner_on_ok",
        "gpu1",
        "Read facts",
        "gpufleet.nvidia.gpu_facts",
    )
    assert event.result == {"a": 1}
    assert event.raw is raw


def test_event_falls_back_to_task_action():
    raw = {"event": "runner_on_ok", "event_data": {"host": "h", "task_action": "ansible.builtin.ping"}}
    assert Event.from_runner(raw).action == "ansible.builtin.ping"


@pytest.mark.parametrize(
    ("res", "msg", "stderr", "rc"),
    [
        ({"msg": "boom"}, "boom", None, None),
        ({"msg": "non-zero return code", "stderr": "E: no such package", "rc": 100},
         "non-zero return code", "E: no such package", 100),
        ({"stderr": "line1\nreal reason\n", "rc": 1}, "real reason", "line1\nreal reason\n", 1),
        ({"msg": "One or more items failed", "results": [
            {"failed": True, "msg": "item a bad"}, {"failed": False, "msg": "fine"}, {"failed": True, "msg": "b bad"}]},
         "One or more items failed; item a bad; b bad", None, None),
        ({"results": [{"failed": True, "msg": "only item"}]}, "only item", None, None),
        ({"msg": "x", "rc": True}, "x", None, None),
        ({}, "", None, None),
    ],
    ids=["msg", "command", "stderr-last-line", "loop", "loop-no-msg", "bool-rc-ignored", "empty"],
)
def test_failed_task_message(res, msg, stderr, rc):
    task = FailedTask.from_event(Event.from_runner(ev("runner_on_failed", res=res)))
    assert (task.msg, task.stderr, task.rc, task.unreachable) == (msg, stderr, rc, False)


def test_unreachable_is_a_failed_task_marked_unreachable():
    task = FailedTask.from_event(Event.from_runner(ev("runner_on_unreachable", task="ping", res={"msg": "refused"})))
    assert task == FailedTask(task="ping", action="ansible.builtin.command", msg="refused", unreachable=True)


def test_clean_result_drops_internal_keys_and_invocation():
    res = {"changed": False, "gpus": [1], "invocation": {"module_args": {"x": 1}}, "_ansible_no_log": False,
           "_ansible_verbose_always": True, "_ansible_anything": 1}
    assert clean_result(res) == {"changed": False, "gpus": [1]}


@pytest.mark.parametrize(
    ("host", "status"),
    [
        (HostResult("h", ok=3), "ok"),
        (HostResult("h", ok=3, changed=1), "changed"),
        (HostResult("h", ok=3, changed=1, failed=1), "failed"),
        (HostResult("h", failed=1, unreachable=1), "unreachable"),
        (HostResult("h", ok=1, rescued=1), "ok"),
        (HostResult("h", ok=1, ignored=2), "ok"),
    ],
)
def test_host_status(host, status):
    assert host.status == status


@pytest.mark.parametrize(
    ("status", "rc", "hosts", "code"),
    [
        ("successful", 0, [HostResult("a", ok=1)], ExitCode.OK),
        ("successful", 0, [], ExitCode.OK),
        ("failed", 2, [HostResult("a", ok=1), HostResult("b", failed=1)], ExitCode.FAILED),
        ("failed", 4, [HostResult("a", unreachable=1)], ExitCode.UNREACHABLE),
        ("failed", 4, [HostResult("a", failed=1), HostResult("b", unreachable=1)], ExitCode.UNREACHABLE),
        ("failed", 4, [], ExitCode.RUNNER_ERROR),
        ("failed", 1, [HostResult("a", ok=1)], ExitCode.RUNNER_ERROR),
        ("canceled", 254, [HostResult("a", failed=1)], ExitCode.RUNNER_ERROR),
        ("timeout", 254, [HostResult("a", unreachable=1)], ExitCode.RUNNER_ERROR),
        ("successful", 0, [HostResult("a", ok=1, rescued=1, ignored=1)], ExitCode.OK),
    ],
    ids=["ok", "no-hosts", "failed", "unreachable", "unreachable-wins", "syntax-error", "error-rc",
         "canceled", "timeout", "rescued-and-ignored-are-ok"],
)
def test_exit_code(status, rc, hosts, code):
    result = RunResult("/p.yml", status, rc, {h.name: h for h in hosts})
    assert result.exit_code is code
    assert result.ok is (code is ExitCode.OK)


def test_host_lists():
    result = RunResult("/p.yml", "failed", 4, {
        "a": HostResult("a", ok=1), "b": HostResult("b", failed=1), "c": HostResult("c", unreachable=1),
    })
    assert (result.failed_hosts, result.unreachable_hosts) == (["b"], ["c"])


def _stream() -> list[dict[str, Any]]:
    return [
        {"event": "playbook_on_start", "event_data": {}},
        ev("runner_on_start", host="a"),
        ev("runner_on_ok", host="a", action="gpufleet.nvidia.gpu_facts", res={"gpus": [0], "invocation": {}}),
        ev("runner_on_ok", host="a", action="gpufleet.nvidia.nvidia_mig", res={"changed": True, "actions": ["x"]}),
        ev("runner_on_ok", host="a", action="gpufleet.nvidia.gpu_facts", res={"gpus": [0, 1]}),
        ev("runner_on_failed", host="a", task="ignored", res={"msg": "meh"}, ignore_errors=True),
        ev("runner_on_failed", host="b", task="Install", res={"msg": "apt broke", "rc": 100, "stderr": "E: x"}),
        ev("runner_item_on_failed", host="b", task="Install", res={"msg": "item"}),
        ev("runner_on_failed", host="b", task="gpu health", action="gpufleet.nvidia.gpu_health", res={"msg": "xid"}),
        ev("runner_on_unreachable", host="c", task="Gather", res={"msg": "refused"}),
        ev("runner_on_ok", host="d", action="other.col.mod", res={"x": 1}),
        {"event": "playbook_on_stats", "event_data": {}},
    ]


def test_collector_builds_hosts_from_events_and_stats():
    collector = EventCollector(MODULE_DATA_KEYS)
    for raw in _stream():
        assert collector(raw) is True
    stats = {"ok": {"a": 3, "d": 1}, "changed": {"a": 1}, "failures": {"b": 1}, "dark": {"c": 1},
             "ignored": {"a": 1}, "processed": {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}}
    result = collector.build_result(playbook="/p.yml", status="failed", rc=4, stats=stats, check=True)
    assert list(result.hosts) == ["a", "b", "c", "d", "e"]
    a, b, c, d, e = result.hosts.values()
    assert (a.ok, a.changed, a.ignored, a.failed_tasks) == (3, 1, 1, [])
    assert a.facts == {"gpus": [0, 1]}
    assert a.mig == {"changed": True, "actions": ["x"]}
    assert a.health is None
    assert [t.task for t in b.failed_tasks] == ["Install", "gpu health"]
    assert b.failed_tasks[0] == FailedTask("Install", "ansible.builtin.command", "apt broke", "E: x", 100)
    assert b.health is None  # failed module runs are failures, not module data
    assert c.failed_tasks == [FailedTask("Gather", "ansible.builtin.command", "refused", unreachable=True)]
    assert (c.unreachable, c.status) == (1, "unreachable")
    assert d.module_data == {}
    assert (e.ok, e.status) == (0, "ok")
    assert collector.saw_stats is True
    assert result.check is True


def test_collector_extra_module_keys():
    collector = EventCollector({**MODULE_DATA_KEYS, "other.col.mod": "other"})
    for raw in _stream():
        collector(raw)
    result = collector.build_result(playbook="/p.yml", status="failed", rc=4, stats=None, check=False)
    assert result.hosts["d"].module_data == {"other": {"x": 1}}


def test_on_event_gets_every_event_in_order():
    kinds: list[str] = []
    collector = EventCollector(MODULE_DATA_KEYS, on_event=lambda e: kinds.append(e.kind))
    for raw in _stream():
        collector(raw)
    assert kinds == [raw["event"] for raw in _stream()]


def test_to_dict_is_json_and_complete():
    collector = EventCollector(MODULE_DATA_KEYS)
    for raw in _stream():
        collector(raw)
    result = collector.build_result(
        playbook="/p.yml", status="failed", rc=4, stats={"ok": {"a": 3}, "dark": {"c": 1}}, check=False
    )
    document = json.loads(json.dumps(result.to_dict()))
    assert {k: document[k] for k in ("playbook", "status", "rc", "check", "ok", "exit_code")} == {
        "playbook": "/p.yml", "status": "failed", "rc": 4, "check": False, "ok": False, "exit_code": 3,
    }
    assert document["hosts"]["a"]["module_data"]["facts"] == {"gpus": [0, 1]}
    assert document["hosts"]["c"]["failed_tasks"] == [
        {"task": "Gather", "action": "ansible.builtin.command", "msg": "refused", "stderr": None, "rc": None,
         "unreachable": True}
    ]
    assert set(document["hosts"]["a"]) == {"status", "ok", "changed", "failed", "unreachable", "skipped",
                                          "rescued", "ignored", "failed_tasks", "module_data", "started_at",
                                          "ended_at", "duration_s"}
    # The schema docs/api.md documents for --json (schema_version 2).
    assert {k: document[k] for k in ("schema_version", "error", "limit", "inventory")} == {
        "schema_version": 2, "error": None, "limit": None, "inventory": [],
    }


class Killed:
    def __init__(self, missing: bool = False) -> None:
        self.calls: list[tuple[int, int]] = []
        self.missing = missing

    def __call__(self, pid: int, sig: int) -> None:
        self.calls.append((pid, sig))
        if self.missing:
            raise ProcessLookupError(pid)


def test_cancel_terminates_ansible_playbook_first(monkeypatch):
    killed = Killed()
    monkeypatch.setattr("gpufleet._collect.os.kill", killed)
    cancel = threading.Event()
    collector = EventCollector(MODULE_DATA_KEYS, cancel=cancel)
    collector({"event": "playbook_on_start", "pid": 4242, "event_data": {}})
    collector({"event": "runner_on_start", "pid": 9999, "event_data": {"host": "a"}})
    assert collector.should_cancel() is False
    cancel.set()
    assert (collector.should_cancel(), killed.calls) == (False, [(4242, signal.SIGTERM)])
    assert (collector.should_cancel(), killed.calls) == (True, [(4242, signal.SIGTERM)])


def test_cancel_without_a_known_process_cancels_at_once(monkeypatch):
    killed = Killed()
    monkeypatch.setattr("gpufleet._collect.os.kill", killed)
    cancel = threading.Event()
    cancel.set()
    assert (EventCollector(MODULE_DATA_KEYS, cancel=cancel).should_cancel(), killed.calls) == (True, [])


def test_cancel_when_the_process_is_gone(monkeypatch):
    monkeypatch.setattr("gpufleet._collect.os.kill", Killed(missing=True))
    cancel = threading.Event()
    collector = EventCollector(MODULE_DATA_KEYS, cancel=cancel)
    collector({"event": "playbook_on_start", "pid": 4242, "event_data": {}})
    cancel.set()
    assert collector.should_cancel() is True


def test_timeout_stops_the_run_and_sets_status(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("gpufleet._collect.time.monotonic", lambda: now[0])
    monkeypatch.setattr("gpufleet._collect.os.kill", Killed())
    collector = EventCollector(MODULE_DATA_KEYS, timeout=30)
    assert collector.should_cancel() is False
    now[0] += 30
    assert collector.should_cancel() is True
    result = collector.build_result(playbook="/p.yml", status="canceled", rc=254, stats=None, check=False)
    assert (result.status, result.exit_code) == ("timeout", ExitCode.RUNNER_ERROR)


def test_a_run_our_sigterm_ended_before_the_next_poll_is_canceled_not_failed(monkeypatch):
    """Seen in a loaded run of the suite: ansible-playbook exited on our SIGTERM before ansible-runner polled again,
    so the runner never heard "cancel" and reported status failed, rc None (-1). The stop was asked for: canceled,
    rc 254, as when the poll comes in time. A run that failed without a stop request stays failed."""
    monkeypatch.setattr("gpufleet._collect.os.kill", Killed())
    cancel = threading.Event()
    collector = EventCollector(MODULE_DATA_KEYS, cancel=cancel)
    collector({"event": "playbook_on_start", "pid": 4242, "event_data": {}})
    cancel.set()
    assert collector.should_cancel() is False  # SIGTERM sent; the process then ends before the next poll
    result = collector.build_result(playbook="/p.yml", status="failed", rc=-1, stats=None, check=False)
    assert (result.status, result.rc, result.exit_code) == ("canceled", 254, ExitCode.RUNNER_ERROR)
    plain = EventCollector(MODULE_DATA_KEYS).build_result(playbook="/p.yml", status="failed", rc=2, stats=None,
                                                          check=False)
    assert (plain.status, plain.rc) == ("failed", 2)
