"""Turn ansible-runner's event stream and stats into :class:`~gpufleet.results.RunResult` (pure logic)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from gpufleet.results import STATS_FIELDS, Event, FailedTask, HostResult, RunResult, clean_result

EventCallback = Callable[[Event], None]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Lines that start a message of Ansible's own (ansible-core 2.19 ``[ERROR]: ...``; older ``ERROR! ...``).
_ERROR_START = ("[ERROR]", "ERROR!")
_OTHER_START = ("[WARNING]", "[DEPRECATION WARNING]", "[NOTICE]", "PLAY ", "TASK ", "PLAYBOOK:")
#: the rc ansible-runner gives a canceled or timed-out run (ansible_runner/runner.py)
RUNNER_CANCELED_RC = 254


def plain_text(text: str) -> str:
    """Ansible's text without terminal colour codes."""
    return _ANSI.sub("", text)


class EventCollector:
    """The ``event_handler`` given to ansible-runner.

    For every event it records what the result needs (task failures, the toolkit's module results, the hosts
    seen) and then hands a typed :class:`Event` to the caller's ``on_event``. An exception raised by ``on_event``
    is kept in :attr:`callback_error` and stops the run through :meth:`should_cancel`; the API re-raises it.

    It is also the ``cancel_callback`` (:meth:`should_cancel`), which stops the run when the caller's ``cancel``
    event is set, ``on_event`` raised, or the ``timeout`` passed.
    """

    def __init__(
        self,
        module_keys: Mapping[str, str],
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
        timeout: float | None = None,
    ) -> None:
        self._module_keys = dict(module_keys)
        self._on_event = on_event
        self._cancel = cancel
        self._deadline = time.monotonic() + timeout if timeout else None
        self._terminated = False
        self.playbook_pid: int | None = None
        self.failed_tasks: dict[str, list[FailedTask]] = {}
        self.module_data: dict[str, dict[str, Any]] = {}
        self.hosts_seen: list[str] = []
        self.saw_stats = False
        self.timed_out = False
        self.callback_error: BaseException | None = None
        self.error_lines: list[str] = []
        self.host_times: dict[str, tuple[str, str]] = {}
        self._in_error = False

    def __call__(self, raw: Mapping[str, Any]) -> bool:
        """Consume one ansible-runner event; returns True so that ansible-runner keeps it for ``Runner.stats``."""
        event = Event.from_runner(raw)
        if self.playbook_pid is None and event.kind == "playbook_on_start" and isinstance(raw.get("pid"), int):
            self.playbook_pid = raw["pid"]
        self.record(event)
        if self._on_event is not None and self.callback_error is None:
            try:
                self._on_event(event)
            except Exception as exc:  # the caller's code: stop the run and re-raise after it ended
                self.callback_error = exc
        return True

    def _record_text(self, event: Event) -> None:
        """Keep Ansible's own error messages: the ``error`` events (ansible-core 2.19 reports errors outside host
        tasks, such as YAML and vault errors in group_vars, as their own event) and the ``[ERROR]`` lines of the
        ``verbose`` events (errors before the playbook starts: syntax, inventory)."""
        if event.kind == "error":
            self._in_error = False
            self.error_lines.extend(plain_text(str(event.raw.get("stdout") or "")).rstrip().splitlines())
            return
        if event.kind != "verbose":
            self._in_error = False
            return
        for line in plain_text(str(event.raw.get("stdout") or "")).splitlines():
            stripped = line.strip()
            if stripped.startswith(_ERROR_START):
                self._in_error = True
            elif stripped.startswith(_OTHER_START):
                self._in_error = False
            if self._in_error:
                self.error_lines.append(line.rstrip())

    @property
    def error(self) -> str | None:
        """Ansible's error messages printed outside host task results, or None."""
        text = "\n".join(self.error_lines).strip()
        return text or None

    def _record_time(self, event: Event) -> None:
        created = event.raw.get("created")
        if event.host is None or not isinstance(created, str):
            return
        first, _last = self.host_times.get(event.host, (created, created))
        self.host_times[event.host] = (first, created)

    def record(self, event: Event) -> None:
        """Update the collected state with one event."""
        self._record_text(event)
        self._record_time(event)
        if event.kind == "playbook_on_stats":
            self.saw_stats = True
            return
        host = event.host
        if host is None or event.status is None:
            return
        if host not in self.hosts_seen:
            self.hosts_seen.append(host)
        if event.status in ("failed", "unreachable"):
            self.failed_tasks.setdefault(host, []).append(FailedTask.from_event(event))
        elif event.status in ("ok", "changed") and event.action in self._module_keys:
            key = self._module_keys[event.action]
            self.module_data.setdefault(host, {})[key] = clean_result(event.result)

    def stop_requested(self) -> bool:
        """Whether the run should stop: cancel event set, ``on_event`` raised, or the timeout passed."""
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.timed_out = True
        return self.timed_out or self.callback_error is not None or (self._cancel is not None and self._cancel.is_set())

    def should_cancel(self) -> bool:
        """The ``cancel_callback`` given to ansible-runner (polled every few seconds and when the output ends).

        ansible-runner cancels with SIGKILL to ansible-playbook's process group, but ansible-core (2.19+) runs
        each worker in its own session, so the workers and the commands they started would live on. So the first
        time a stop is requested this sends SIGTERM to ansible-playbook, which passes it on to its workers, and
        says "not yet"; at the next poll (the process has ended, or a few seconds passed) it says "cancel".
        """
        if not self.stop_requested():
            return False
        if self._terminated or self.playbook_pid is None:
            return True
        self._terminated = True
        try:
            os.kill(self.playbook_pid, signal.SIGTERM)
        except ProcessLookupError:
            return True
        return False

    def build_result(
        self,
        *,
        playbook: str,
        status: str,
        rc: int,
        stats: Mapping[str, Mapping[str, int]] | None,
        check: bool,
    ) -> RunResult:
        """Combine ``Runner.stats`` with the collected events into a :class:`RunResult`."""
        hosts: dict[str, HostResult] = {}
        names = set(self.hosts_seen)
        for per_host in (stats or {}).values():
            names.update(per_host)
        for name in sorted(names):
            host = HostResult(name=name)
            for stats_key, attr in STATS_FIELDS.items():
                setattr(host, attr, int((stats or {}).get(stats_key, {}).get(name, 0)))
            host.failed_tasks = list(self.failed_tasks.get(name, []))
            host.module_data = dict(self.module_data.get(name, {}))
            if name in self.host_times:
                host.started_at, host.ended_at = self.host_times[name]
                host.duration_s = _seconds_between(*self.host_times[name])
            hosts[name] = host
        if self.timed_out:
            status = "timeout"
        elif self._terminated and status == "failed":
            # Our SIGTERM ended ansible-playbook before ansible-runner polled should_cancel again (a loaded machine:
            # the process is gone within the poll interval), so the runner never heard "cancel" and calls the
            # signal's exit a failure. The stop was asked for: canceled, with ansible-runner's rc for it.
            status, rc = "canceled", RUNNER_CANCELED_RC
        return RunResult(playbook=playbook, status=status, rc=rc, hosts=hosts, check=check, error=self.error)


def _seconds_between(first: str, last: str) -> float | None:
    try:
        return round((datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds(), 3)
    except ValueError:
        return None
