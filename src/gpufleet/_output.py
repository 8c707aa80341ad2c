"""What the ``gpufleet`` command shows: live per-host progress while a run goes, and renderers for its result.

Renderers are looked up per command. Every command gets the generic host summary
(:func:`render_host_summary`); a command can add its own views (GPU health tables for ``verify``, plans for
``mig plan``) by registering a function::

    # src/gpufleet/renderers/verify.py  (every module of the gpufleet.renderers package is imported on demand)
    from gpufleet._output import register_renderer

    @register_renderer("verify")
    def render_health(result, console):
        ...
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpufleet._collect import plain_text
from gpufleet.results import Event, RunResult

Renderer = Callable[[RunResult, Console], None]

_RENDERERS: dict[str, list[Renderer]] = {}
_RENDERER_PACKAGE = "gpufleet.renderers"
_STYLES = {
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "ignored": "cyan",
    "skipped": "blue",
    "unreachable": "bold magenta",
}


def register_renderer(command: str) -> Callable[[Renderer], Renderer]:
    """Register a renderer for a CLI command (``"verify"``, ``"mig plan"``...); it runs after the host summary."""

    def decorator(renderer: Renderer) -> Renderer:
        _RENDERERS.setdefault(command, []).append(renderer)
        return renderer

    return decorator


def load_renderers() -> None:
    """Import every module of the optional ``gpufleet.renderers`` package so that they register themselves."""
    try:
        package = importlib.import_module(_RENDERER_PACKAGE)
    except ModuleNotFoundError as exc:
        if exc.name != _RENDERER_PACKAGE:
            raise
        return
    for module in pkgutil.iter_modules(package.__path__, f"{_RENDERER_PACKAGE}."):
        importlib.import_module(module.name)


def renderers_for(command: str) -> list[Renderer]:
    """The renderers for a command: the host summary first, then the command's own."""
    return [render_host_summary, *_RENDERERS.get(command, [])]


def render_host_summary(result: RunResult, console: Console) -> None:
    """Print one row per host with the play recap counters, then every failed task, then the overall outcome."""
    table = Table(title=f"{result.playbook}{' (check mode)' if result.check else ''}", title_justify="left")
    table.add_column("host")
    table.add_column("status")
    for header in ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored"):
        table.add_column(header, justify="right")
    for host in result.hosts.values():
        table.add_row(
            host.name,
            Text(host.status, style=_STYLES.get(host.status, "")),
            *(
                str(n)
                for n in (
                    host.ok,
                    host.changed,
                    host.failed,
                    host.unreachable,
                    host.skipped,
                    host.rescued,
                    host.ignored,
                )
            ),
        )
    console.print(table)
    for host in result.hosts.values():
        for task in host.failed_tasks:
            what = "unreachable" if task.unreachable else "failed"
            line = Text(f"{host.name}: {what}: {task.task} ({task.action}): ", style=_STYLES[what])
            line.append(task.msg, style="")
            console.print(line)
    outcome = "ok" if result.ok else f"{result.status} (exit {int(result.exit_code)})"
    console.print(f"result: {outcome}")


class Progress(Protocol):
    """Receives the run's events as they come (the ``on_event`` callback) and is closed when the run ends."""

    def __call__(self, event: Event) -> None:
        """Show one event."""

    def close(self) -> None:
        """Stop showing progress."""


class PlainProgress:
    """One line per task result on a host, for logs and pipes."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, event: Event) -> None:
        """Print the final result of a task on a host; other events are skipped."""
        if event.status is None or event.host is None:
            return
        line = f"{event.host}: {event.status}: {event.task or ''}"
        if event.status in ("failed", "unreachable"):
            msg = event.result.get("msg")
            if msg:
                line += f": {msg}"
        self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Nothing to stop."""


@dataclass
class _HostRow:
    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False


class AnsibleTextProgress:
    """Ansible's own output as it comes (``-v`` and ``--list-hosts``): every event's text, colour codes removed."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, event: Event) -> None:
        """Print the event's text."""
        text = plain_text(str(event.raw.get("stdout") or ""))
        if text.strip():
            self._stream.write(text.rstrip("\n") + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Nothing to stop."""


#: Above this many hosts the live view shows counts per state instead of one row per host.
COLLAPSE_AT = 40


class LiveProgress:
    """A live table (rich): elapsed time and play (the batch, in rolling runs), then one row per host with its
    current task and counters, or counts per state above :data:`COLLAPSE_AT` hosts."""

    def __init__(self, console: Console) -> None:
        self._rows: dict[str, _HostRow] = {}
        self._started = time.monotonic()
        self._play = ""
        self._plays = 0
        self._live = Live(self._table(), console=console, auto_refresh=False, transient=True)
        self._live.start()

    def __call__(self, event: Event) -> None:
        """Update the host's row with one event."""
        if event.kind == "playbook_on_play_start":
            self._plays += 1
            self._play = str(event.data.get("play") or event.data.get("name") or "")
            self._live.update(self._table(), refresh=True)
            return
        if event.host is None:
            return
        row = self._rows.setdefault(event.host, _HostRow())
        if event.kind == "runner_on_start":
            row.task = event.task or ""
        elif event.status in ("ok", "ignored"):
            row.ok += 1
        elif event.status == "changed":
            row.ok += 1
            row.changed += 1
        elif event.status == "failed":
            row.failed += 1
        elif event.status == "skipped":
            row.skipped += 1
        elif event.status == "unreachable":
            row.unreachable = True
        self._live.update(self._table(), refresh=True)

    def close(self) -> None:
        """Remove the live table from the terminal."""
        self._live.stop()

    def _title(self) -> str:
        elapsed = int(time.monotonic() - self._started)
        play = f"  play {self._plays}: {self._play}" if self._plays else ""
        return f"elapsed {elapsed // 60}:{elapsed % 60:02d}{play}"

    def _table(self) -> Table:
        if len(self._rows) > COLLAPSE_AT:
            counts = Table(show_edge=False, title=self._title(), title_justify="left")
            for header in ("hosts", "running", "failed", "unreachable"):
                counts.add_column(header, justify="right")
            failed = sum(1 for r in self._rows.values() if r.failed)
            unreachable = sum(1 for r in self._rows.values() if r.unreachable)
            counts.add_row(
                str(len(self._rows)), str(len(self._rows) - failed - unreachable), str(failed), str(unreachable)
            )
            return counts
        table = Table(show_edge=False, title=self._title(), title_justify="left")
        for header in ("host", "task", "ok", "changed", "failed", "skipped"):
            table.add_column(header, justify="right" if header not in ("host", "task") else "left")
        for name, row in sorted(self._rows.items()):
            task = Text("unreachable", style=_STYLES["unreachable"]) if row.unreachable else Text(row.task)
            table.add_row(name, task, str(row.ok), str(row.changed), str(row.failed), str(row.skipped))
        return table


def make_progress(stream: TextIO, *, quiet: bool = False, ansible_text: bool = False) -> Progress | None:
    """A live table when ``stream`` is a terminal, plain lines otherwise, nothing when ``quiet``; Ansible's own
    output when ``ansible_text`` (``-v``, ``--list-hosts``)."""
    if quiet:
        return None
    if ansible_text:
        return AnsibleTextProgress(stream)
    if stream.isatty():
        return LiveProgress(Console(file=stream))
    return PlainProgress(stream)
