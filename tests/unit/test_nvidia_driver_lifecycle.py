"""nvidia_driver's lifecycle check (issue 17): the branch against NVIDIA's end-of-life dates and the GPUs present.

The expected values are written from NVIDIA's pages, not from the code: the lifecycle section of the data-centre
driver documentation (R535 end of life June 2026, R580 long-term support to June 2028 and the last branch for
Maxwell-Volta), Blackwell from R570, the open kernel modules for Turing and later (required on Blackwell and Grace
Hopper). The table under test is the role's own (``roles/nvidia_driver/vars/main.yml``), and the architecture of each
simulated model comes from the simulator's model files, a second source beside the filter's device-id ranges.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.driver_lifecycle import (
    driver_branch_check,
    driver_package_names,
    gpu_architecture,
)
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
TABLE = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text(encoding="utf-8"))[
    "__nvidia_driver_lifecycle"]
MODELS = REPO / "simulator" / "src" / "gpufleet_sim" / "models"
#: NVML's architecture numbers (nvml.h NVML_DEVICE_ARCH_*) as the simulator's model files hold them.
NVML_ARCH = {5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada", 9: "Hopper", 10: "Blackwell"}

B200 = "0x2901"
GB200 = "0x2941"
H100 = "0x2330"
GH200 = "0x2342"
A100 = "0x20B2"
A30 = "0x20B7"
L40S = "0x26B9"
T4 = "0x1EB8"
V100 = "0x1DB1"
P100 = "0x15F8"


def gpus(device: str, count: int = 1) -> list[dict[str, str]]:
    return [{"bus_id": f"0000:{0x18 + i:02x}:00.0", "device_id": device} for i in range(count)]


def check(branch: str, found: list[dict[str, str]], today: str = "2026-11-24", module: str = "auto") -> dict[str, Any]:
    return driver_branch_check(TABLE, branch, found, today, module)


@pytest.mark.parametrize("model_file", [p.name for p in sorted(MODELS.glob("*.json"))])
def test_every_simulated_model_gets_its_own_architecture(model_file: str) -> None:
    model = json.loads((MODELS / model_file).read_text(encoding="utf-8"))
    expected = NVML_ARCH[model["architecture"]]
    if model["model"].startswith("GH200"):
        expected = "Grace Hopper"
    assert gpu_architecture(model["pci"]["device"]) == expected


@pytest.mark.parametrize(("device", "architecture"), [
    ("0x2901", "Blackwell"), ("0x290110DE", "Blackwell"), ("0x2BB5", "Blackwell"), ("0x2330", "Hopper"),
    ("0x1DB1", "Volta"), ("0x1DB4", "Volta"), ("0x15F8", "Pascal"), ("0x17FD", "Maxwell"), ("0x13BD", "Maxwell"),
    ("0x1EB8", "Turing"), ("0x2182", "Turing"), ("0x20B2", "Ampere"), ("0x2235", "Ampere"), ("0x26B9", "Ada"),
    ("0x2342", "Grace Hopper"), ("0x0FFF", "unknown"), ("not-hex", "unknown"), ("", "unknown"),
])
def test_architecture_from_the_pci_device_id(device: str, architecture: str) -> None:
    assert gpu_architecture(device) == architecture


def test_the_table_holds_nvidias_dates() -> None:
    assert TABLE["branches"]["535"]["end_of_life"] == "2026-06"
    assert TABLE["branches"]["580"] == {"designation": "long-term support", "end_of_life": "2028-06",
                                        "open_default": True}
    assert TABLE["architectures"]["Volta"]["last"] == 580
    assert TABLE["architectures"]["Blackwell"]["first"] == 570


@pytest.mark.parametrize(("branch", "today", "warned"), [
    ("535", "2026-06-30", False),   # the last month of support
    ("535", "2026-07-01", True),
    ("535", "2026-11-24", True),
    ("580", "2026-11-24", False),
    ("580", "2028-06-15", False),
    ("580", "2028-07-01", True),
    ("595", "2027-04-01", True),
])
def test_end_of_life_is_the_end_of_the_month_nvidia_names(branch: str, today: str, warned: bool) -> None:
    result = check(branch, gpus(H100, 8), today)
    assert result["past_end_of_life"] is warned
    assert bool(result["warnings"]) is warned
    assert result["errors"] == []


def test_the_past_end_of_life_warning_says_what_to_do() -> None:
    assert check("535", gpus(H100), "2026-11-24")["warnings"] == [
        "nvidia_driver: driver branch 535 (long-term support branch) reached its end of life in 2026-06 and gets no "
        "more fixes; move nvidia_driver_branch to a supported branch (long-term support: 580, 620)."]


def test_a_branch_outside_the_table_is_reported_not_refused() -> None:
    result = check("610", gpus(B200, 8))
    assert result["errors"] == []
    assert result["warnings"] == [
        "nvidia_driver: driver branch 610 is not in the role's lifecycle table (a new feature branch or one the role "
        "does not know): its end of life is not checked. Production and long-term branches are listed in "
        "docs/roles.md (long-term support: 580, 620)."]


def test_blackwell_on_a_branch_before_570_is_refused() -> None:
    assert check("550", gpus(B200, 8))["errors"] == [
        "nvidia_driver: driver branch 550 does not support the Blackwell GPUs at 0000:18:00.0, 0000:19:00.0, "
        "0000:1a:00.0, 0000:1b:00.0 and 4 more; Blackwell needs branch 570 or later. Set nvidia_driver_branch "
        "accordingly (long-term support: 580, 620). Nothing was changed."]


def test_volta_after_580_is_refused() -> None:
    assert check("595", gpus(V100))["errors"] == [
        "nvidia_driver: driver branch 595 does not support the Volta GPU at 0000:18:00.0; branch 580 is the last for "
        "Volta. Set nvidia_driver_branch: \"580\". Nothing was changed."]


@pytest.mark.parametrize(("branch", "found", "requested", "resolved"), [
    ("580", gpus(B200, 8), "auto", "open"),
    ("570", gpus(GB200, 4), "auto", "open"),
    ("535", gpus(GH200), "auto", "open"),          # Grace Hopper: open only, even where the branch defaults otherwise
    ("580", gpus(H100, 8), "auto", "open"),        # from 560 on the branch's default is open
    ("535", gpus(H100, 8), "auto", "proprietary"),  # before 560 it is proprietary
    ("550", gpus(A100, 8), "auto", "proprietary"),
    ("570", gpus(A100, 8), "auto", "open"),
    ("570", gpus(T4), "auto", "open"),
    ("580", gpus(V100), "auto", "proprietary"),    # Volta cannot run the open modules
    ("580", gpus(P100), "auto", "proprietary"),
    ("580", [], "auto", "open"),                   # no GPU (forced install): the branch's default
    ("550", [], "auto", "proprietary"),
    ("580", gpus(H100, 8), "proprietary", "proprietary"),
    ("535", gpus(H100, 8), "open", "open"),
])
def test_auto_resolves_to_what_the_gpus_and_the_branch_need(branch: str, found: list[dict[str, str]],
                                                           requested: str, resolved: str) -> None:
    result = check(branch, found, module=requested)
    assert result["errors"] == []
    assert result["kernel_module"] == resolved


def test_proprietary_modules_on_blackwell_are_refused() -> None:
    assert check("580", gpus(B200, 2), module="proprietary")["errors"] == [
        "nvidia_driver: the Blackwell GPUs at 0000:18:00.0, 0000:19:00.0 cannot run the proprietary kernel modules; "
        "set nvidia_driver_kernel_module: open (or auto). Nothing was changed."]


def test_open_modules_on_volta_are_refused() -> None:
    assert check("580", gpus(V100), module="open")["errors"] == [
        "nvidia_driver: the Volta GPU at 0000:18:00.0 cannot run the open kernel modules; set "
        "nvidia_driver_kernel_module: proprietary (or auto). Nothing was changed."]


def test_a_host_no_flavour_can_serve_is_refused() -> None:
    mixed = [*gpus(V100), {"bus_id": "0000:3b:00.0", "device_id": B200}]
    result = check("580", mixed)
    assert result["kernel_module"] == ""
    assert result["errors"] == [
        "nvidia_driver: no kernel module flavour runs all GPUs of this host (Blackwell GPU at 0000:3b:00.0: open only; "
        "Volta GPU at 0000:18:00.0: proprietary only); put them in different hosts. Nothing was changed."]


@pytest.mark.parametrize(("args", "needle"), [
    (("not a table", "580", [], "2026-11-24"), "lifecycle table"),
    ((TABLE, "58", [], "2026-11-24"), "3 or 4 digits"),
    ((TABLE, "580\n", [], "2026-11-24"), "3 or 4 digits"),  # re.match's $ lets a trailing newline through
    ((TABLE, "580", "0000:18:00.0", "2026-11-24"), "list of GPUs"),
    ((TABLE, "580", ["0x2901"], "2026-11-24"), "mapping with bus_id"),
    ((TABLE, "580", [], "24.11.2026"), "YYYY-MM-DD"),
    ((TABLE, "580", [], "2026-11-24", "closed"), "open, proprietary, auto"),
])
def test_bad_input_is_one_clear_error(args: tuple[Any, ...], needle: str) -> None:
    with pytest.raises(AnsibleFilterError, match=needle):
        driver_branch_check(*args)


@settings(max_examples=300, deadline=None)
@given(device=st.one_of(st.text(max_size=12), st.integers(min_value=0, max_value=0xFFFFFFFF).map(hex)))
def test_any_device_id_gets_an_architecture_name(device: str) -> None:
    assert gpu_architecture(device) in {*TABLE["architectures"], "unknown"}


@settings(max_examples=300, deadline=None)
@given(branch=st.integers(min_value=100, max_value=9999).map(str),
       devices=st.lists(st.integers(min_value=0, max_value=0xFFFF).map(lambda v: f"0x{v:04X}"), max_size=4),
       module=st.sampled_from(["open", "proprietary", "auto"]),
       month=st.dates(min_value=date(2000, 1, 1)).map(lambda d: d.strftime("%Y-%m-%d")))
def test_the_check_never_crashes_and_never_installs_what_it_refuses(branch: str, devices: list[str], module: str,
                                                                   month: str) -> None:
    found = [{"bus_id": f"0000:{i:02x}:00.0", "device_id": d} for i, d in enumerate(devices)]
    result = driver_branch_check(TABLE, branch, found, month, module)
    assert result["kernel_module"] in {"open", "proprietary", ""}
    assert result["kernel_module"] != "" or result["errors"]
    for line in result["errors"] + result["warnings"]:
        assert line.startswith("nvidia_driver: ")
        assert "\n" not in line


#: The role's default branch, read from its defaults file (not copied here).
DEFAULT_BRANCH = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "defaults" / "main.yml").read_text(
    encoding="utf-8"))["nvidia_driver_branch"]


@pytest.mark.parametrize("found", [gpus(A100, 8), gpus(H100, 8), gpus(A30, 4)], ids=["A100", "H100", "A30"])
def test_the_default_branch_is_in_support_on_ampere_and_hopper(found: list[dict[str, str]]) -> None:
    """A run with no branch pinned (issue 17's date, 2026-11-26) warns about nothing; pinning 570 still warns."""
    default = check(str(DEFAULT_BRANCH), found, "2026-11-26")
    assert (default["warnings"], default["errors"]) == ([], [])
    assert check("570", found, "2026-11-26")["warnings"] == [
        "nvidia_driver: driver branch 570 (production branch) reached its end of life in 2026-02 and gets no more "
        "fixes; move nvidia_driver_branch to a supported branch (long-term support: 580, 620)."]


@pytest.mark.parametrize(("branch", "names"), [
    ("550", {"fabricmanager": "nvidia-fabricmanager-550", "nscq": "libnvidia-nscq-550", "imex": "nvidia-imex-550",
             "nvlsm": "nvlsm"}),
    ("570", {"fabricmanager": "nvidia-fabricmanager-570", "nscq": "libnvidia-nscq-570", "imex": "nvidia-imex-570",
             "nvlsm": "nvlsm"}),
    ("580", {"fabricmanager": "nvidia-fabricmanager", "nscq": "libnvidia-nscq", "imex": "nvidia-imex",
             "nvlsm": "nvlsm"}),
    (595, {"fabricmanager": "nvidia-fabricmanager", "nscq": "libnvidia-nscq", "imex": "nvidia-imex",
           "nvlsm": "nvlsm"}),
])
def test_package_names_lose_the_branch_suffix_from_580(branch: str, names: dict[str, str]) -> None:
    assert driver_package_names(branch) == names


@pytest.mark.parametrize("branch", ["", "57", "580; rm", "latest"])
def test_package_names_of_something_that_is_no_branch_are_refused(branch: str) -> None:
    with pytest.raises(AnsibleFilterError, match="is not a driver branch"):
        driver_package_names(branch)
