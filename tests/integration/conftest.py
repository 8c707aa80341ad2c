"""Integration-test ordering (the no-leftovers checks run at the very end of the session), and this folder's
helper modules (``_lab_play``) importable by its test modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move ``test_no_leftovers.py`` to the end so that it checks what every other test left behind."""
    last = [item for item in items if item.path.name == "test_no_leftovers.py"]
    if last:
        items[:] = [item for item in items if item.path.name != "test_no_leftovers.py"] + last
