"""One test per Molecule scenario: ``molecule -c molecule/_shared/base.yml test -s NAME``.

The scenarios run in the background from the end of collection on, side by side with the rest of the suite
(``conftest.py`` says how); each test here waits for its own scenario and fails with the tail of its output.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest
import yaml

from gpufleet_lab.loader import lab_hosts as load_lab_hosts

from .conftest import LOOPBACK_BLOCK, ROOT, SCENARIOS, Outcome, first_loopback


@pytest.mark.hosts
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, scenario_runs: dict[str, Future[Outcome]]) -> None:
    outcome = scenario_runs[scenario].result()
    if outcome.returncode != 0:
        tail = "\n".join(outcome.output.splitlines()[-80:])
        pytest.fail(f"molecule test -s {scenario} failed (rc {outcome.returncode}, {outcome.seconds:.0f} s):\n{tail}")


def test_each_scenario_fits_its_loopback_block_below_the_baseline_builders() -> None:
    """Every scenario's hosts fit its block of loopback numbers, and the last block ends below the image builders'."""
    lab_hosts = load_lab_hosts()
    for scenario in SCENARIOS:
        platforms = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())["platforms"]
        assert len(platforms) <= LOOPBACK_BLOCK, f"{scenario} has {len(platforms)} hosts, more than a block"
    last = first_loopback(SCENARIOS[-1]) + LOOPBACK_BLOCK - 1
    assert last < lab_hosts.BUILD_LOOPBACK, (
        f"{len(SCENARIOS)} scenarios need loopback numbers up to {last}; "
        f"{lab_hosts.BUILD_LOOPBACK}+ build the baselines")
