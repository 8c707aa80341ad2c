"""The fidelity report: the simulator against a real GPU's NVML getter dump, call by call.

The real side is data: tests/data/ground-truth/h200-sxm-passthrough-r580/ (an H200 SXM passed through to a VM,
driver 580.159.04, its README says where it comes from). The simulated side is the same dump tool run through the
unmodified pynvml on a host of the preset that describes that machine, ``1xH200-passthrough``. Every disagreement
that remains is in the allow-list with a reason; the list may only shrink.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet_sim import fidelity

REPO = Path(__file__).resolve().parents[2]
GROUND_TRUTH = REPO / "tests" / "data" / "ground-truth"
H200_DUMP = GROUND_TRUTH / "h200-sxm-passthrough-r580" / "nvml" / "getters-nvidia-ml-py-13.615.71.jsonl"
H200_ALLOW = GROUND_TRUTH / "h200-fidelity-allow.txt"
PRESET = "1xH200-passthrough"


@pytest.fixture(scope="module")
def h200_report() -> fidelity.Report:
    from gpufleet_sim.build import build_library

    real = fidelity.load_dump(H200_DUMP)
    driver = fidelity.dump_driver(real)
    lib = build_library(REPO / "build" / f"sim-test-fidelity-{driver}", driver, python=sys.executable)
    sim = fidelity.run_simulated_dump(PRESET, driver, lib=lib)
    return fidelity.compare(real, sim, real_path=str(H200_DUMP), preset=PRESET)


def test_the_dump_is_the_documented_machine() -> None:
    real = fidelity.load_dump(H200_DUMP)
    assert fidelity.dump_driver(real) == "580.159.04"
    assert len(real) == 940  # every call nvidia-ml-py 13.615.71 binds, as the issue counts them


def test_every_disagreement_with_the_real_h200_is_allowed_and_every_allowed_one_remains(
        h200_report: fidelity.Report) -> None:
    allowed = fidelity.read_allow_list(H200_ALLOW)
    new, stale, bare = fidelity.check_allow_list(h200_report, allowed)
    details = "\n".join(f"{key}: {h200_report.disagreements[key]}" for key in new)
    assert new == [], f"disagreements not in {H200_ALLOW.name}:\n{details}"
    assert stale == [], f"{H200_ALLOW.name} lists differences that are gone (remove them): {stale}"
    assert bare == [], f"{H200_ALLOW.name} entries without a reason: {bare}"


def test_return_codes_agree_on_97_percent_of_the_calls(h200_report: fidelity.Report) -> None:
    assert h200_report.calls == 940
    assert h200_report.rc_percent() >= 97.0, "\n".join(h200_report.summary())


def test_the_summary_counts_what_is_inferred(h200_report: fidelity.Report) -> None:
    counts = fidelity.inferred_count()
    assert counts["library"] > 0  # nvmlsim_board.c marks its guesses (board id rule, module id, ...)
    assert counts["models"] > 0  # the BAR1 apertures, MIG details no listing shows
    assert f"{counts['library']} marks in the library's sources" in h200_report.summary()[-1]


# ------------------------------------------------------------------------------------ the comparison itself

def _rec(fn: str, rc: str = "OK", value: Any = None, args: list[Any] | None = None, gpu: int | None = 0) -> dict:
    return {"fn": fn, "gpu": gpu, "args": args or [], "rc": rc, "value": value}


DRIVER = _rec("nvmlSystemGetDriverVersion", value="580.159.04", gpu=None)


@pytest.mark.parametrize(("real", "sim", "agree", "disagreements"), [
    # same code, same static value
    (_rec("nvmlDeviceGetBusType", value=2), _rec("nvmlDeviceGetBusType", value=2), (2, 1), {}),
    # a static value differs
    (_rec("nvmlDeviceGetBusType", value=2), _rec("nvmlDeviceGetBusType", value=3), (2, 0),
     {"value nvmlDeviceGetBusType gpu0 []": "value: real 2, simulator 3"}),
    # a reading that moves is not compared
    (_rec("nvmlDeviceGetPowerUsage", value=78699), _rec("nvmlDeviceGetPowerUsage", value=76000), (2, 0), {}),
    # a machine-specific part of a struct is left out, the rest compared
    (_rec("nvmlDeviceGetPciInfo", value={"busId": "00000000:00:06.0", "pciDeviceId": 1}),
     _rec("nvmlDeviceGetPciInfo", value={"busId": "00000000:4B:00.0", "pciDeviceId": 2}), (2, 0),
     {"value nvmlDeviceGetPciInfo gpu0 []": "pciDeviceId: real 1, simulator 2"}),
    # return codes differ: no value comparison
    (_rec("nvmlDeviceGetClock", "NVML_ERROR_NOT_SUPPORTED", args=[4, 0]),
     _rec("nvmlDeviceGetClock", "NVML_ERROR_INVALID_ARGUMENT", args=[4, 0]), (1, 0),
     {"rc nvmlDeviceGetClock gpu0 [4, 0]": "real NVML_ERROR_NOT_SUPPORTED, simulator NVML_ERROR_INVALID_ARGUMENT"}),
    # a call the simulator's dump lacks
    (_rec("nvmlDeviceGetBoardId", value=6), None, (1, 0),
     {"rc nvmlDeviceGetBoardId gpu0 []": "real OK, simulator MISSING"}),
])
def test_compare_call_by_call(real: dict, sim: dict | None, agree: tuple[int, int],
                              disagreements: dict[str, str]) -> None:
    report = fidelity.compare([DRIVER, real], [DRIVER, *([sim] if sim else [])])
    assert (report.rc_agree, report.values_agree - 1) == agree  # the driver version agrees in every case
    assert report.disagreements == disagreements


def test_field_values_compare_field_by_field() -> None:
    def fields(*entries: tuple[int, int, int, int]) -> list[dict[str, Any]]:
        return [{"fieldId": f, "nvmlReturn": rc, "valueType": t, "timestamp": 5, "value": {"uiVal": v, "ullVal": v}}
                for f, rc, t, v in entries]

    real = _rec("nvmlDeviceGetFieldValues", args=["1..279"], value=fields((1, 0, 3, 1), (83, 0, 3, 999), (94, 3, 1, 0)))
    sim = _rec("nvmlDeviceGetFieldValues", args=["1..279"], value=fields((1, 0, 3, 0), (83, 0, 3, 5), (94, 0, 1, 0)))
    report = fidelity.compare([DRIVER, real], [DRIVER, sim])
    assert report.disagreements == {  # 83 (energy) moves: only its return code is compared
        'value nvmlDeviceGetFieldValues gpu0 ["1..279"] field 1':
            "NVML_FI_DEV_ECC_CURRENT: real (type, value) (3, 1), simulator (3, 0)",
        'value nvmlDeviceGetFieldValues gpu0 ["1..279"] field 94':
            "NVML_FI_DEV_PCIE_REPLAY_COUNTER: real return 3, simulator 0"}


def test_allow_list_catches_new_and_stale_entries(tmp_path: Path) -> None:
    report = fidelity.compare([DRIVER, _rec("nvmlDeviceGetBusType", value=2), _rec("nvmlDeviceGetBoardId", value=6)],
                              [DRIVER, _rec("nvmlDeviceGetBusType", value=3), _rec("nvmlDeviceGetBoardId", value=7)])
    allow = tmp_path / "allow.txt"
    allow.write_text("# comment\nvalue nvmlDeviceGetBusType gpu0 []  # a reason\n"
                     "rc nvmlDeviceGetName gpu0 []  # gone now\nvalue nvmlDeviceGetSerial gpu0 []\n", encoding="utf-8")
    new, stale, bare = fidelity.check_allow_list(report, fidelity.read_allow_list(allow))
    assert new == []  # the board id is machine-specific: not compared
    assert stale == ["rc nvmlDeviceGetName gpu0 []", "value nvmlDeviceGetSerial gpu0 []"]
    assert bare == ["value nvmlDeviceGetSerial gpu0 []"]
