"""The live view: elapsed time and the current play (the batch in rolling runs), one row per host, and counts
instead of rows above COLLAPSE_AT hosts."""

from __future__ import annotations

import io

from rich.console import Console

from gpufleet._output import COLLAPSE_AT, LiveProgress
from gpufleet.results import Event


def event(kind: str, host: str | None = None, **data: object) -> Event:
    raw = {"event": kind, "event_data": {"host": host, **data} if host else dict(data)}
    return Event.from_runner(raw)


def rendered(progress: LiveProgress) -> str:
    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(progress._table())
    return console.export_text()


def test_rows_per_host_with_elapsed_time_and_play():
    progress = LiveProgress(Console(file=io.StringIO(), force_terminal=False))
    progress(event("playbook_on_play_start", play="MIG batch"))
    progress(event("runner_on_start", "gpu-1", task="Apply"))
    text = rendered(progress)
    progress.close()
    assert "elapsed 0:00  play 1: MIG batch" in text
    assert "gpu-1" in text
    assert "Apply" in text


def test_many_hosts_collapse_to_counts():
    progress = LiveProgress(Console(file=io.StringIO(), force_terminal=False))
    for i in range(COLLAPSE_AT + 1):
        progress(event("runner_on_start", f"gpu-{i:03d}", task="Apply"))
    progress(event("runner_on_failed", "gpu-000", task="Apply", res={"msg": "boom"}))
    text = rendered(progress)
    progress.close()
    assert "gpu-001" not in text
    lines = [[w for w in line.split() if w not in "┃│"] for line in text.splitlines() if line.strip()]
    header = lines.index(["hosts", "running", "failed", "unreachable"])
    assert lines[header + 2] == [str(COLLAPSE_AT + 1), str(COLLAPSE_AT), "1", "0"]
