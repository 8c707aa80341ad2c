"""Suite-wide set-up that must happen before any test module is imported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

import suite_budget  # noqa: E402  (needs tests/ on sys.path, set just above)
import suite_lanes  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Install Ansible's collection loader for the checkout's collections/ before collection starts.

    Test modules import ``ansible_collections.gpufleet.nvidia.plugins...`` at import time; if that name were first
    bound as a plain namespace package, Ansible's collection finder installed later (by a templating test) could
    no longer resolve ``gpufleet.nvidia.*`` filters and tests would pass or fail by the order they run in.
    """
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader([str(REPO / "collections")])
    if not config.pluginmanager.is_registered(suite_budget):
        config.pluginmanager.register(suite_budget, "gpufleet-suite-budget")
    if not config.pluginmanager.is_registered(suite_lanes):
        config.pluginmanager.register(suite_lanes, "gpufleet-suite-lanes")
