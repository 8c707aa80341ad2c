"""gpufleet.nvidia.package_hold's decision: which packages' dpkg selection differs from the wanted one.

The dpkg-query lines are in dpkg-query(1)'s ``${Package} ${Status}`` format (want, error flag, status). That the
module holds real packages on a lab host, once, is proven by the site scenario's converge and idempotence
(molecule/site) and by test_driver_upgrade.py (release, change, hold again).
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.modules import package_hold as ph
from hypothesis import given
from hypothesis import strategies as st

QUERY = ("nvidia-driver hold ok installed\n"
         "nvidia-kernel-open-dkms install ok installed\n"
         "nvidia-fabricmanager install ok config-files\n"
         "libnvidia-ml1 deinstall ok installed\n")


def test_hold_changes_only_the_installed_packages_not_yet_held() -> None:
    current = ph.selections(QUERY)
    change, absent = ph.plan(["nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-fabricmanager", "libnvidia-ml1",
                              "cuda-drivers", "nvidia-driver"], current, "held")
    assert change == ["nvidia-kernel-open-dkms", "libnvidia-ml1"]
    assert absent == ["nvidia-fabricmanager", "cuda-drivers"]   # config-files only, and unknown to dpkg


def test_release_changes_only_the_held_ones() -> None:
    change, _ = ph.plan(["nvidia-driver", "nvidia-kernel-open-dkms"], ph.selections(QUERY), "released")
    assert change == ["nvidia-driver"]


def test_a_converged_host_needs_nothing() -> None:
    current = ph.selections("a hold ok installed\nb hold ok installed\n")
    assert ph.plan(["a", "b"], current, "held") == ([], [])


@given(st.lists(st.text(max_size=12), max_size=6), st.text(max_size=200), st.sampled_from(["held", "released"]))
def test_any_input_gives_a_plan(names, out, state) -> None:
    change, absent = ph.plan(names, ph.selections(out), state)
    assert set(change).isdisjoint(absent)
    assert set(change) | set(absent) <= set(names)
