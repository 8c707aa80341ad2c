"""The state-file protocol: load errors, atomic replace, lock-protected read-modify-write across processes."""

from __future__ import annotations

import multiprocessing
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import make_state, write_state

from gpufleet_sim import store


def test_state_path_default_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVML_SIM_STATE", raising=False)
    assert store.state_path() == Path("/var/lib/nvidia-sim/state.json")
    monkeypatch.setenv("NVML_SIM_STATE", "/tmp/x/state.json")
    assert store.state_path() == Path("/tmp/x/state.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the simulator state"),
        ("{not json", "is not valid JSON"),
        ('{"schema": 2, "gpus": []}', "is not a schema 1 document"),
        ("[]", "is not a schema 1 document"),
    ],
)
def test_load_errors(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "state.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(store.StateError, match=message):
        store.load(path)


def test_transaction_writes_atomically_with_mode_0644(tmp_path: Path) -> None:
    path = write_state(tmp_path / "state.json", make_state(1))
    inode_before = path.stat().st_ino
    with store.transaction(path) as doc:
        doc["gpus"][0]["persistence_mode"] = 1
    assert store.load(path)["gpus"][0]["persistence_mode"] == 1
    assert path.stat().st_ino != inode_before, "the state must be replaced by rename, not rewritten in place"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not list(tmp_path.glob("state.json.tmp.*"))
    assert (tmp_path / "state.json.lock").exists()


def test_transaction_unchanged_or_failed_does_not_write(tmp_path: Path) -> None:
    path = write_state(tmp_path / "state.json", make_state(1))
    inode = path.stat().st_ino
    with store.transaction(path):
        pass
    assert path.stat().st_ino == inode

    def failing_change() -> None:
        with store.transaction(path) as doc:
            doc["gpus"][0]["compute_mode"] = 3
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError, match="abort"):
        failing_change()
    assert path.stat().st_ino == inode
    assert store.load(path)["gpus"][0]["compute_mode"] == 0


def _bump(path: str, times: int) -> None:
    for _ in range(times):
        with store.transaction(path) as doc:
            doc["event_seq"] = doc["event_seq"] + 1


def test_concurrent_writers_lose_no_update(tmp_path: Path) -> None:
    path = write_state(tmp_path / "state.json", make_state(1))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_bump, args=(str(path), 25)) for _ in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert store.load(path)["event_seq"] == 150


def test_create_makes_directory(tmp_path: Path) -> None:
    target = store.create(tmp_path / "deep" / "state.json", make_state(1))
    assert store.load(target)["schema"] == 1
    assert os.access(target, os.R_OK)
