"""Issue 13 regression set for the MIG inputs and the apply order: each test failed on the code before the fix.

Expected values are fixed data: NVIDIA's A100 profile table (docs/mig.md), mig-parted's DeviceID parsing
(``strconv.ParseInt(str, 0, 32)`` in pkg/types/device.go), the messages users see.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.filter import mig as mig_filters  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_apply as ma  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_layout import LayoutError, validate  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_parted import (  # noqa: E402
    MigPartedError,
    from_mig_parted,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import GpuPlan  # noqa: E402

A100 = [{"index": i, "model": "A100-SXM4-80GB", "pci_device_id": "0x20B210DE"} for i in range(2)]


def problems(entries: Any, gpus: Any = A100) -> str:
    with pytest.raises(LayoutError) as err:
        validate(entries, gpus)
    return str(err.value)


def parted(entry: dict[str, Any]) -> Any:
    return from_mig_parted({"version": "v1", "mig-configs": {"a": [entry]}}, "a")


# --------------------------------------------------------------------------------------------------- layout input
def test_empty_device_filter_is_a_sentence() -> None:
    assert problems([{"devices": "all", "device_filter": "", "mig_enabled": False}]) == (
        "layout entry[0]: device_filter '' is not '0xDDDDVVVV' or '0xDDDDVVVV:0xSSSSVVVV'; give a PCI id such as "
        "'0x20B210DE'")


def test_null_gpu_instances_is_refused_not_taken_as_no_instances() -> None:
    assert problems([{"devices": "all", "mig_enabled": True, "gpu_instances": None}]) == (
        "layout entry[0]: gpu_instances is empty (null); list the GPU instances, e.g. gpu_instances: "
        "{'3g.40gb': 2}, or leave the key out (mig-parted refuses the same)")


def test_duplicate_gpu_index_is_refused() -> None:
    assert problems([{"devices": "all", "mig_enabled": False}], [A100[0], dict(A100[0])]) == (
        "GPU 0: listed more than once in the GPU descriptions; give each index once")


def test_non_integer_gpu_index_is_named() -> None:
    text = problems([{"devices": "all", "mig_enabled": False}], [dict(A100[0], index="0")])
    assert "cannot read its description (index '0' is not a GPU index (an integer >= 0))" in text


@pytest.mark.parametrize(("value", "capable"), [("false", False), ("no", False), ("True", True)])
def test_mig_capable_strings_from_ini_inventories(value: str, capable: bool) -> None:
    gpus = [{"index": 0, "model": "A100-SXM4-80GB", "mig_capable": value}]
    config = validate([{"devices": "all", "mig_enabled": False}], gpus)[0]
    assert config.mig_capable is capable


def test_mig_capable_garbage_is_a_sentence() -> None:
    text = problems([{"devices": "all", "mig_enabled": False}],
                    [{"index": 0, "model": "A100-SXM4-80GB", "mig_capable": "maybe"}])
    assert "cannot read its description (mig_capable 'maybe' is not a boolean; use true or false)" in text


def test_deeply_nested_layout_is_a_sentence() -> None:
    deep: Any = {}
    for _ in range(sys.getrecursionlimit() + 100):
        deep = [deep]
    assert problems([{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 1},
                      "compute_instances": {"3g.40gb": deep}}]) == (
        "the layout or the GPU list is nested too deeply; a layout is a list of entries whose values are mappings "
        "of profile to count")


def test_profile_with_trailing_newline_is_refused() -> None:
    assert "malformed MIG profile '3g.40gb\n'" in problems([{"devices": "all", "gpu_instances": {"3g.40gb\n": 1}}])


@pytest.mark.parametrize("name", ["\u0663g.40gb", "3g.\u0664\u0660gb", "\uff13g.40gb"])
def test_unicode_digits_are_not_profile_sizes(name: str) -> None:
    assert f"malformed MIG profile '{name}'" in problems([{"devices": "all", "gpu_instances": {name: 1}}])


# --------------------------------------------------------------------------------------------------- mig-parted
@pytest.mark.parametrize(("text", "expected"), [
    ("548409566", "0x20B010DE"),  # decimal in mig-parted (strconv.ParseInt base 0)
    ("0x20B010DE", "0x20B010DE"),
    ("0X20b010de", "0x20B010DE"),
    ("04054010336", "0x20B010DE"),  # a bare leading 0 is octal in Go
])
def test_device_filter_parsed_as_mig_parted_parses_it(text: str, expected: str) -> None:
    entries = parted({"devices": "all", "device-filter": text, "mig-enabled": False})
    assert entries[0]["device_filter"] == expected


@pytest.mark.parametrize("text", ["20B010DE", "0x80000000", " 0x20B010DE", "\u0665"])  # "": no filter (v1 test)
def test_device_filter_that_mig_parted_refuses(text: str) -> None:
    with pytest.raises(MigPartedError) as err:
        parted({"devices": "all", "device-filter": text, "mig-enabled": False})
    assert str(err.value).startswith("mig-configs.a[0]: ")


def test_huge_mig_devices_count_is_checked_before_expanding() -> None:
    started = time.monotonic()
    with pytest.raises(MigPartedError) as err:
        parted({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 100000000}})
    assert time.monotonic() - started < 1
    assert str(err.value) == ("mig-configs.a[0]: error validating values in 'mig-devices' field: count 100000000 "
                              "for '1g.5gb' is more MIG devices than any GPU has (at most 7, one per compute slice)")


def test_deeply_nested_yaml_is_a_sentence() -> None:
    with pytest.raises(MigPartedError) as err:
        from_mig_parted("[" * 100000)
    assert str(err.value).startswith("unable to parse mig-parted config: ")


# --------------------------------------------------------------------------------------------------- filters
def test_mig_plan_filter_names_a_bad_input() -> None:
    with pytest.raises(AnsibleFilterError) as err:
        mig_filters.mig_plan([1], [])
    assert str(err.value) == ("mig_plan: the current GPUs must be a list of mappings (gpu_facts' gpus with mig and "
                              "gpu_instances), got [1]")


def test_mig_validate_filter_names_a_bad_input() -> None:
    with pytest.raises(AnsibleFilterError) as err:
        mig_filters.mig_validate([{"devices": "all", "mig_enabled": False}], "abc")
    assert str(err.value) == ("mig_validate: the GPUs must be a list of mappings (gpu_facts' gpus: index, model "
                              "or name, pci_device_id), got 'abc'")


# --------------------------------------------------------------------------------------------------- gpus option
@pytest.mark.parametrize(("gpus", "message"), [
    ([99], "gpus: GPU 99 is not on this host (it has GPUs 0-7); list only its GPUs"),
    ([], "gpus is an empty list: it selects no GPU, so nothing would be applied; leave gpus unset for every GPU, "
         "or list the ones to manage (this host has GPUs 0-7)"),
    ([1, 1], "gpus: GPU 1 is listed twice; list each GPU once"),
    (["1"], "gpus: '1' is not a GPU index; list integers (this host has GPUs 0-7)"),
])
def test_gpus_must_be_distinct_indexes_of_this_host(gpus: list[Any], message: str) -> None:
    with pytest.raises(ma.InvalidLayout) as err:
        ma.check_indexes(gpus, 8)
    assert str(err.value) == message


# --------------------------------------------------------------------------------------------------- apply order
class RecordingNvml:
    """Records the NVML calls of the applier (pure logic under test: which call, with which arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def create_gpu_instance(self, index: int, profile_id: int, start: int | None = None) -> dict[str, Any]:
        self.calls.append(("create_gi", index, profile_id, start))
        return {"id": 10 + len(self.calls)}

    def create_compute_instance(self, index: int, gi_id: int, slices: int | None = None,
                                start: int | None = None) -> dict[str, Any]:
        self.calls.append(("create_ci", index, gi_id, slices, start))
        return {"id": len(self.calls)}

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None:
        self.calls.append(("destroy_gi", index, gi_id))

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None:
        self.calls.append(("destroy_ci", index, gi_id, ci_id))


def test_ci_placement_from_the_validator_reaches_nvml() -> None:
    nvml = RecordingNvml()
    actions = [{"action": "create_gi", "gpu": 0, "profile": "3g.40gb", "profile_id": 2, "start": 4, "size": 4},
               {"action": "create_ci", "gpu": 0, "profile": "2c.3g.40gb", "start": 0, "gi_id": None,
                "gi_profile": "3g.40gb", "gi_start": 4},
               {"action": "create_ci", "gpu": 0, "profile": "1c.3g.40gb", "start": 2, "gi_id": None,
                "gi_profile": "3g.40gb", "gi_start": 4}]
    applier = ma._Applier(nvml, lambda argv: (0, "", ""), "nvidia-smi", True)  # type: ignore[arg-type]
    applier.apply([GpuPlan(index=0, uuid=None, model=None, actions=actions)],
                  [{"index": 0, "mig": {"current": 1, "pending": 1}}])
    assert nvml.calls == [("create_gi", 0, 2, 4), ("create_ci", 0, 11, 2, 0), ("create_ci", 0, 11, 1, 2)]


def test_gpus_change_one_at_a_time_additions_first() -> None:
    nvml = RecordingNvml()
    destroy = [{"action": "destroy_ci", "gpu": 0, "gi_id": 1, "ci_id": 0},
               {"action": "destroy_gi", "gpu": 0, "gi_id": 1},
               {"action": "create_gi", "gpu": 0, "profile": "7g.80gb", "profile_id": 0, "start": 0, "size": 8}]
    add = [{"action": "create_gi", "gpu": 1, "profile": "1g.10gb", "profile_id": 19, "start": 6, "size": 1}]
    applier = ma._Applier(nvml, lambda argv: (0, "", ""), "nvidia-smi", True)  # type: ignore[arg-type]
    gpus = [{"index": i, "mig": {"current": 1, "pending": 1}} for i in (0, 1)]
    applier.apply([GpuPlan(index=0, uuid=None, model=None, actions=destroy),
                   GpuPlan(index=1, uuid=None, model=None, actions=add)], gpus)
    assert [c[:2] for c in nvml.calls] == [("create_gi", 1), ("destroy_ci", 0), ("destroy_gi", 0), ("create_gi", 0)]


# --------------------------------------------------------------------------------------------------- lock
def _hold(path: str, ready: Any) -> None:
    with ma.host_lock(path, 0, "child holder"):
        ready.set()
        time.sleep(60)


def test_lock_holder_named_and_released_when_the_holder_is_killed(tmp_path: Path) -> None:
    path = str(tmp_path / "run" / "mig.lock")
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=_hold, args=(path, ready))
    child.start()
    assert ready.wait(10)
    with pytest.raises(ma.LockBusy) as err, ma.host_lock(path, 0.5, "test"):
        pass
    assert str(err.value).startswith(f"another gpufleet MIG run holds the host lock {path} (pid {child.pid} "
                                     "(child holder) since ")
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    with ma.host_lock(path, 5, "test"):  # the kernel dropped the dead holder's lock
        assert Path(path).read_text(encoding="utf-8").startswith(f"pid {os.getpid()} (test) since ")
