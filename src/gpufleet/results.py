"""Typed results of a gpufleet run: events as they arrive, and per-host results at the end.

Everything here is built from ansible-runner's structured data (job events and ``Runner.stats``), never from
Ansible's text output.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

EventStatus: TypeAlias = Literal["ok", "changed", "failed", "ignored", "skipped", "unreachable"]
HostStatus: TypeAlias = Literal["ok", "changed", "failed", "unreachable"]

#: Results of the toolkit's own modules that a run keeps per host, by resolved action -> key in ``module_data``.
MODULE_DATA_KEYS: Mapping[str, str] = {
    "gpufleet.nvidia.gpu_facts": "facts",
    "gpufleet.nvidia.nvidia_mig": "mig",
    "gpufleet.nvidia.gpu_health": "health",
}

#: Keys of a module result that never reach ``module_data`` besides Ansible's internal ``_ansible*`` ones.
_DROPPED_RESULT_KEYS = frozenset({"invocation"})

# ansible-runner event name -> status, for the final result of a task on one host.
_TASK_RESULT_EVENTS: Mapping[str, EventStatus] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
}


class ExitCode(enum.IntEnum):
    """Exit codes of the ``gpufleet`` command (and :attr:`RunResult.exit_code`)."""

    OK = 0
    FAILED = 2
    UNREACHABLE = 3
    BAD_INPUT = 4
    RUNNER_ERROR = 5
    ANSIBLE_ERROR = 6


#: Version of the document :meth:`RunResult.to_dict` returns (``gpufleet --json``); bumped on incompatible changes.
SCHEMA_VERSION = 2


def clean_result(res: Mapping[str, Any]) -> dict[str, Any]:
    """Return a module result without Ansible's internal keys and the echoed ``invocation``."""
    return {k: v for k, v in res.items() if k not in _DROPPED_RESULT_KEYS and not k.startswith("_ansible")}


@dataclass(frozen=True)
class Event:
    """One ansible-runner job event, typed for the fields gpufleet uses.

    Attributes:
        kind: The ansible-runner event name (``runner_on_ok``, ``playbook_on_task_start``, ``playbook_on_stats``...).
        host: The inventory host the event is about, or ``None`` for play- and playbook-level events.
        task: The task name, when the event belongs to a task.
        action: The resolved action (FQCN, e.g. ``ansible.builtin.command``), when the event belongs to a task.
        status: For the final result of a task on a host: ``ok``, ``changed``, ``failed``, ``ignored`` (failed
            under ``ignore_errors``), ``skipped`` or ``unreachable``; ``None`` for every other event (including
            per-item results of loops).
        raw: The event exactly as ansible-runner delivered it.
    """

    kind: str
    host: str | None
    task: str | None
    action: str | None
    status: EventStatus | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_runner(cls, raw: Mapping[str, Any]) -> Event:
        """Build an :class:`Event` from an ansible-runner event dict."""
        kind = str(raw.get("event", ""))
        data: Mapping[str, Any] = raw.get("event_data") or {}
        action = data.get("resolved_action") or data.get("task_action")
        return cls(
            kind=kind,
            host=data.get("host"),
            task=data.get("task"),
            action=str(action) if action else None,
            status=_status_of(kind, data),
            raw=raw,
        )

    @property
    def data(self) -> Mapping[str, Any]:
        """The event's ``event_data`` mapping (empty when absent)."""
        data: Mapping[str, Any] = self.raw.get("event_data") or {}
        return data

    @property
    def result(self) -> Mapping[str, Any]:
        """The module result (``event_data.res``) of a task result event, else an empty mapping."""
        res = self.data.get("res")
        return res if isinstance(res, Mapping) else {}


def _status_of(kind: str, data: Mapping[str, Any]) -> EventStatus | None:
    status = _TASK_RESULT_EVENTS.get(kind)
    if status == "ok" and _is_changed(data.get("res")):
        return "changed"
    if status == "failed" and data.get("ignore_errors"):
        return "ignored"
    return status


def _is_changed(res: object) -> bool:
    return isinstance(res, Mapping) and bool(res.get("changed"))


@dataclass(frozen=True)
class FailedTask:
    """A task that failed on a host (not under ``ignore_errors``), or the connection that made it unreachable.

    Attributes:
        task: The task name.
        action: The resolved action (FQCN).
        msg: The failure message Ansible reported (for loops: the messages of the failed items, joined).
        stderr: The command's stderr, when the module ran a command and reported it.
        rc: The command's return code, when reported.
        unreachable: True when the host could not be reached (``runner_on_unreachable``).
    """

    task: str
    action: str
    msg: str
    stderr: str | None = None
    rc: int | None = None
    unreachable: bool = False

    @classmethod
    def from_event(cls, event: Event) -> FailedTask:
        """Build a :class:`FailedTask` from a ``runner_on_failed`` or ``runner_on_unreachable`` event."""
        res = event.result
        stderr = res.get("stderr")
        rc = res.get("rc")
        return cls(
            task=event.task or "",
            action=event.action or "",
            msg=_failure_message(res),
            stderr=str(stderr) if stderr else None,
            rc=rc if isinstance(rc, int) and not isinstance(rc, bool) else None,
            unreachable=event.kind == "runner_on_unreachable",
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return {
            "task": self.task,
            "action": self.action,
            "msg": self.msg,
            "stderr": self.stderr,
            "rc": self.rc,
            "unreachable": self.unreachable,
        }


def _failure_message(res: Mapping[str, Any]) -> str:
    msg = str(res.get("msg") or "")
    items = res.get("results")
    if isinstance(items, list):
        failed = [str(i.get("msg")) for i in items if isinstance(i, Mapping) and i.get("failed") and i.get("msg")]
        if failed:
            return "; ".join([msg, *failed]) if msg else "; ".join(failed)
    if not msg and res.get("stderr"):
        return str(res["stderr"]).strip().splitlines()[-1]
    return msg


@dataclass
class HostResult:
    """What happened on one host.

    The counters come from ``Runner.stats`` (Ansible's play recap). ``failed_tasks`` lists every task failure that
    was not under ``ignore_errors``, in order; a failure that a block's ``rescue:`` handled is listed too (Ansible's
    events do not mark it), and counted in ``rescued`` instead of ``failed``.
    ``module_data`` holds the last result of each of the toolkit's own modules (see :data:`MODULE_DATA_KEYS`).
    """

    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    failed_tasks: list[FailedTask] = field(default_factory=list)
    module_data: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None

    @property
    def status(self) -> HostStatus:
        """``unreachable``, ``failed``, ``changed`` or ``ok``: the worst thing that happened on the host."""
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"

    @property
    def facts(self) -> Any:
        """The last ``gpufleet.nvidia.gpu_facts`` result on this host, or ``None``."""
        return self.module_data.get("facts")

    @property
    def mig(self) -> Any:
        """The last ``gpufleet.nvidia.nvidia_mig`` result on this host, or ``None``."""
        return self.module_data.get("mig")

    @property
    def health(self) -> Any:
        """The last ``gpufleet.nvidia.gpu_health`` result on this host, or ``None``."""
        return self.module_data.get("health")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return {
            "status": self.status,
            "ok": self.ok,
            "changed": self.changed,
            "failed": self.failed,
            "unreachable": self.unreachable,
            "skipped": self.skipped,
            "rescued": self.rescued,
            "ignored": self.ignored,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": self.duration_s,
            "failed_tasks": [t.to_dict() for t in self.failed_tasks],
            "module_data": self.module_data,
        }


# Runner.stats key -> HostResult attribute.
STATS_FIELDS: Mapping[str, str] = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}


@dataclass
class RunResult:
    """The outcome of one playbook run.

    Attributes:
        playbook: Absolute path of the playbook that ran.
        status: ansible-runner's final status: ``successful``, ``failed``, ``canceled`` or ``timeout``; or
            ``not_started`` when gpufleet refused to start ansible-playbook (the inventory did not parse, no host
            matched, a bad ``--limit``: the reason is in ``error``).
        rc: ansible-playbook's return code (254 when canceled or timed out; -1 when not started).
        hosts: Per-host results, by inventory name, sorted.
        check: Whether the run was in check mode.
        error: What stopped the run outside host tasks, as Ansible printed it (inventory, YAML, vault or syntax
            errors) or as gpufleet says it (``not_started``); ``None`` when there was nothing of the kind.
        inventory: The inventory sources, resolved to absolute paths.
        limit: The ``--limit`` pattern, or ``None``.
        started_at / ended_at: ISO 8601 UTC times of the run.
    """

    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostResult] = field(default_factory=dict)
    check: bool = False
    error: str | None = None
    inventory: list[str] = field(default_factory=list)
    limit: str | None = None
    started_at: str | None = None
    ended_at: str | None = None

    @property
    def failed_hosts(self) -> list[str]:
        """Names of the hosts with at least one failed task (not counting unreachable ones)."""
        return [h.name for h in self.hosts.values() if h.failed and not h.unreachable]

    @property
    def unreachable_hosts(self) -> list[str]:
        """Names of the hosts that could not be reached."""
        return [h.name for h in self.hosts.values() if h.unreachable]

    @property
    def ok(self) -> bool:
        """True when the run finished successfully and no host failed or was unreachable."""
        return self.exit_code is ExitCode.OK

    @property
    def exit_code(self) -> ExitCode:
        """The CLI exit code for this result.

        ``BAD_INPUT`` (4) when the run was not started (see ``error``), ``RUNNER_ERROR`` (5) when it was canceled
        or timed out, else ``UNREACHABLE`` (3) when any host was unreachable, else ``FAILED`` (2) when any host
        failed, else ``OK`` (0) when ansible-runner reports success and no error, else ``ANSIBLE_ERROR`` (6) when
        Ansible printed an error outside host tasks (syntax, YAML, vault...), else ``RUNNER_ERROR``.
        """
        if self.status == "not_started":
            return ExitCode.BAD_INPUT
        if self.status in ("canceled", "timeout"):
            return ExitCode.RUNNER_ERROR
        if self.unreachable_hosts:
            return ExitCode.UNREACHABLE
        if self.failed_hosts:
            return ExitCode.FAILED
        if self.status == "successful" and self.rc == 0 and self.error is None:
            return ExitCode.OK
        if self.error is not None:
            return ExitCode.ANSIBLE_ERROR
        return ExitCode.RUNNER_ERROR

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (the document ``gpufleet --json`` prints)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "playbook": self.playbook,
            "inventory": list(self.inventory),
            "limit": self.limit,
            "status": self.status,
            "rc": self.rc,
            "check": self.check,
            "ok": self.ok,
            "exit_code": int(self.exit_code),
            "error": self.error,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "hosts": {name: host.to_dict() for name, host in self.hosts.items()},
        }
