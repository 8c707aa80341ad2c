"""The simulated host's state file, read and written under the shared locking protocol.

Every Python tool of the simulated NVIDIA stack (and the C library) follows the same rules, described in
``docs/simulator.md``: readers load the JSON document as it is on disk; writers take an exclusive ``flock()`` on
``<state>.lock``, reload, change, write ``<state>.tmp.<pid>``, ``fsync`` it and ``rename()`` it over the state.

This module must stay importable by the system ``python3`` of a target host (standard library only, no imports from
the rest of ``gpufleet``): the packages ship it under ``/usr/lib/nvidia-sim/python``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_STATE_PATH = Path("/var/lib/nvidia-sim/state.json")
STATE_ENV = "NVML_SIM_STATE"
SCHEMA_VERSION = 1
FILE_MODE = 0o644

State = dict[str, Any]


class StateError(Exception):
    """The state file is missing or unreadable: the host's "driver" is not loaded."""


def state_path() -> Path:
    """Return the state file path: ``$NVML_SIM_STATE`` when set, else the default under /var/lib."""
    env = os.environ.get(STATE_ENV)
    return Path(env) if env else DEFAULT_STATE_PATH


def _resolve(path: Path | str | None) -> Path:
    return Path(path) if path is not None else state_path()


def load(path: Path | str | None = None) -> State:
    """Read and parse the state document (no lock: the writer's rename makes every read see a whole file).

    Raises:
        StateError: the file is missing, unreadable, not JSON, or not a schema-1 document.
    """
    target = _resolve(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise StateError(f"cannot read the simulator state {target}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(f"the simulator state {target} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_VERSION:
        raise StateError(f"the simulator state {target} is not a schema {SCHEMA_VERSION} document")
    return doc


def dump(doc: State) -> str:
    """Serialise a state document the way every Python writer does (stable key order, trailing newline)."""
    return json.dumps(doc, indent=2) + "\n"


def write_atomic(path: Path | str, doc: State) -> None:
    """Write ``doc`` to ``path`` through ``<path>.tmp.<pid>`` + fsync + rename, mode 0644.

    The caller must hold the lock (see :func:`transaction`) unless nothing else can write the file yet.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp.{os.getpid()}")
    data = dump(doc).encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def locked(path: Path | str | None = None) -> Iterator[Path]:
    """Hold the exclusive ``flock()`` on ``<state>.lock`` for the duration of the block."""
    target = _resolve(path)
    lock_path = target.with_name(target.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield target
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def transaction(path: Path | str | None = None) -> Iterator[State]:
    """Lock, reload, yield the document for changes, then write it back atomically.

    Nothing is written when the block raises, or when the document did not change (so readers are not made to
    reload for nothing).
    """
    with locked(path) as target:
        doc = load(target)
        before = dump(doc)
        yield doc
        if dump(doc) != before:
            write_atomic(target, doc)


def create(path: Path | str | None, doc: State) -> Path:
    """Write a fresh state document under the lock (used by ``gpusim host init``); return its path."""
    target = _resolve(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target):
        write_atomic(target, doc)
    return target
