"""Integration-test ordering: the no-leftovers checks run at the very end of the session."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move ``test_no_leftovers.py`` to the end so that it checks what every other test left behind."""
    last = [item for item in items if item.path.name == "test_no_leftovers.py"]
    if last:
        items[:] = [item for item in items if item.path.name != "test_no_leftovers.py"] + last
