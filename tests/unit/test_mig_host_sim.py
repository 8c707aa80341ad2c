"""The host's own MIG profile table is the last word (issue 15), through the unmodified pynvml into the simulated
driver and gpufleet's own NVML layer and ``converge`` (what the ``nvidia_mig`` module runs):

* a board absent from the catalogue (``_mig_sim.make_lab_board``: a name, PCI id and 6-slice geometry no NVIDIA
  board has) is planned and applied from the table its driver reports;
* a profile that GPU lacks is refused before any change, naming the GPU, the profile and what it offers;
* a driver that lacks a profile the catalogue lists for its board is believed over the catalogue;
* a layout in GB200's early ``1g.24gb`` applies on a driver that says ``1g.23gb``, and the result says so.

The role-level proof on a simulated fleet is tests/integration/test_mig_host_table_sim.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "collections", REPO / "simulator" / "src", REPO / "tests" / "integration"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _mig_sim import (  # noqa: E402
    LAB_BOARD_NAME,
    make_lab_board,
    mig_layout,
    mig_modes,
    new_state,
    rename_driver_profiles,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import (  # noqa: E402
    InvalidLayout,
    converge,
    read_host,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import MODELS, find_model  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import nvml_session  # noqa: E402

LAB_OFFERS = "1g.6gb x6, 2g.12gb x3, 3g.18gb x2, 6g.48gb x1"  # _mig_sim.LAB_BOARD_PROFILES, smallest first


@pytest.fixture(scope="module")
def lib() -> Path:
    from gpufleet_sim.build import build_library

    return Path(build_library(REPO / "build" / "mig" / "lib", "550.163.01"))


@pytest.fixture
def state(tmp_path: Path, lib: Path) -> Iterator[Path]:
    from gpufleet_sim.build import pynvml_bound

    path = tmp_path / "state.json"
    with pynvml_bound(lib, path):
        yield path


def apply(entries: Any, check: bool = False) -> dict[str, Any]:
    with nvml_session() as nvml:
        return converge(nvml, entries, check_mode=check, run=lambda argv: (1, "", "no reset expected"))


def test_the_lab_board_is_not_in_the_catalogue() -> None:
    assert find_model(name=LAB_BOARD_NAME, pci_device_id=0x2FF010DE) is None
    with pytest.raises(ml.LayoutError) as info:  # offline, without the host's table: refused as unknown
        ml.validate([{"devices": "all", "gpu_instances": {"3g.18gb": 1}}],
                    [{"index": 0, "name": LAB_BOARD_NAME, "pci_device_id": "0x2FF010DE"}])
    assert str(info.value).startswith(f"GPU 0: unknown GPU model '{LAB_BOARD_NAME}' (pci_device_id 0x2FF010DE); ")


def test_unknown_board_is_planned_and_applied_from_its_own_table(state: Path) -> None:
    new_state(state, "2xH100-NVL", "lab")
    make_lab_board(state)
    with nvml_session() as nvml:
        gpus = read_host(nvml)
    assert [g["model"] for g in gpus] == [None, None]
    assert [(p["name"], p["id"], p["placements"]) for p in gpus[0]["mig_profiles"]][2] == (
        "3g.18gb", 9, [[0, 3], [3, 3]])
    layout = [{"devices": [0], "mig_enabled": True, "gpu_instances": {"3g.18gb": 1, "1g.6gb": 3},
               "compute_instances": {"3g.18gb": ["1c.3g.18gb", "2c.3g.18gb"]}},
              {"devices": [1], "mig_enabled": True, "gpu_instances": {"6g.48gb": 1}}]
    checked = apply(layout, check=True)
    assert checked["changed_gpus"] == [0, 1]
    assert mig_modes(state) == [(0, 0), (0, 0)]
    result = apply(layout)
    assert result["changed_gpus"] == [0, 1]
    assert [d["model"] for d in result["desired"]] == [LAB_BOARD_NAME] * 2
    assert mig_layout(state) == [[("3g.18gb", 0, [1, 2]), ("1g.6gb", 3, [1]), ("1g.6gb", 4, [1]),
                                  ("1g.6gb", 5, [1])], [("6g.48gb", 0, [6])]]
    again = apply(layout)
    assert (again["changed"], again["msg"]) == (False, "MIG layout already applied")


@pytest.mark.parametrize(("layout", "message"), [
    ({"7g.80gb": 1}, f"GPU 0 ({LAB_BOARD_NAME}): profile '7g.80gb' is not offered by this GPU (its driver's MIG "
                     f"profile table); it offers: {LAB_OFFERS}"),
    ({"1g.6gb": 7}, f"2 problems in the MIG layout:\n- GPU 0 ({LAB_BOARD_NAME}): 7 x 1g.6gb requested, but "
                    f"{LAB_BOARD_NAME} offers at most 6 x 1g.6gb\n- GPU 0 ({LAB_BOARD_NAME}): 1g.6gb x7 need 7 "
                    f"compute slices; {LAB_BOARD_NAME} has 6"),
    ({"3g.18gb": 1, "2g.12gb": 2}, f"GPU 0 ({LAB_BOARD_NAME}): 3g.18gb x1 + 2g.12gb x2 need 7 compute slices; "
                                   f"{LAB_BOARD_NAME} has 6"),
])
def test_a_profile_the_board_lacks_is_refused_before_any_change(state: Path, layout: dict[str, int],
                                                                 message: str) -> None:
    new_state(state, "2xH100-NVL", "lab")
    make_lab_board(state)
    before = state.read_bytes()
    with pytest.raises(InvalidLayout) as info:
        apply([{"devices": [0], "mig_enabled": True, "gpu_instances": layout},
               {"devices": [1], "mig_enabled": True, "gpu_instances": {"6g.48gb": 1}}])
    assert str(info.value) == message
    assert state.read_bytes() == before


def test_the_drivers_table_wins_over_the_catalogue(state: Path) -> None:
    """A B200 whose driver offers no 4g.90gb (the catalogue lists it from a later driver's -lgip)."""
    new_state(state, "8xB200-NVSwitch", "lab")
    from gpufleet_sim import store

    doc = store.load(state)
    for gpu in doc["gpus"]:
        gpu["mig"]["gi_profiles"] = [p for p in gpu["mig"]["gi_profiles"] if p["name"] != "4g.90gb"]
    state.unlink()
    store.create(state, doc)
    before = state.read_bytes()
    layout = [{"devices": "all", "mig_enabled": True, "gpu_instances": {"4g.90gb": 1}}]
    assert ml.validate(layout, [{"index": 0, "model": "B200-180GB"}])  # the catalogue alone would accept it
    with pytest.raises(InvalidLayout) as info:
        apply(layout)
    first = str(info.value).split("\n- ")[1]
    assert first == ("GPU 0 (B200-180GB): profile '4g.90gb' is not offered by this GPU (its driver's MIG profile "
                     "table); it offers: 1g.23gb x7, 1g.23gb+me x1, 1g.45gb x4, 2g.45gb x3, 3g.90gb x2, 7g.180gb x1")
    assert state.read_bytes() == before


@pytest.mark.parametrize(("early_driver", "written", "driver_names"), [
    (False, {"1g.24gb": 6, "1g.24gb+me": 1}, {"1g.24gb": "1g.23gb", "1g.24gb+me": "1g.23gb+me"}),
    (True, {"1g.23gb": 6, "1g.23gb+me": 1}, {"1g.23gb": "1g.24gb", "1g.23gb+me": "1g.24gb+me"}),
    (True, {"1g.24gb": 6, "1g.24gb+me": 1}, {}),
])
def test_gb200_layout_in_either_drivers_names_and_the_report_names_the_drivers(
        state: Path, early_driver: bool, written: dict[str, int], driver_names: dict[str, str]) -> None:
    new_state(state, "4xGB200", "lab")
    if early_driver:
        rename_driver_profiles(state, {"1g.23gb": "1g.24gb", "1g.23gb+me": "1g.24gb+me"})
    result = apply([{"devices": "all", "mig_enabled": True, "gpu_instances": written}])
    expected = [{"gpu": i, "layout": a, "driver": b} for i in range(4) for a, b in sorted(driver_names.items())]
    assert result["profile_names"] == expected
    if driver_names:
        assert result["msg"].startswith("changed GPU(s) 0, 1, 2, 3; the driver's names for the layout's profiles: "
                                        "GPU 0 ")
        assert f"GPU 3 {next(iter(sorted(driver_names)))} -> {driver_names[sorted(driver_names)[0]]}" in result["msg"]
    names = ("1g.24gb", "1g.24gb+me") if early_driver else ("1g.23gb", "1g.23gb+me")
    assert {tuple(sorted({gi[0] for gi in gpu})) for gpu in mig_layout(state)} == {tuple(sorted(names))}
    assert [len(gpu) for gpu in mig_layout(state)] == [7] * 4
    assert apply([{"devices": "all", "mig_enabled": True, "gpu_instances": written}])["changed"] is False


def test_an_unknown_board_whose_driver_lists_no_profile_is_refused(state: Path) -> None:
    """Fail closed: no catalogue row and no table from the driver is a refusal that says both, before any change."""
    new_state(state, "2xH100-NVL", "lab")
    make_lab_board(state)
    from gpufleet_sim import store

    doc = store.load(state)
    for gpu in doc["gpus"]:
        gpu["mig"]["gi_profiles"] = []
    state.unlink()
    store.create(state, doc)
    before = state.read_bytes()
    with pytest.raises(InvalidLayout) as info:
        apply([{"devices": "all", "mig_enabled": True, "gpu_instances": {"1g.6gb": 1}}])
    assert str(info.value).split("\n- ")[1] == (
        f"GPU 0: unknown GPU model '{LAB_BOARD_NAME}' (pci_device_id 0x2FF010DE); known: "
        f"{', '.join(sorted(m.name for m in MODELS))}; and its driver's MIG profile table could not be read (NVML "
        "listed no GPU-instance profile), so it cannot be planned from that either; check that `nvidia-smi mig "
        "-lgip` lists its profiles and run again")
    assert state.read_bytes() == before
