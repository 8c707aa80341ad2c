"""mig-parted config import/export (plugins/module_utils/mig_parted.py) and the filter plugin wrapping it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.filter import mig as mig_filter  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_parted as mpt  # noqa: E402

# NVIDIA/mig-parted README.md, "Example config" for a DGX A100 (verbatim content).
README = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7

  all-2g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.10gb": 3

  all-3g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2

  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1

  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [5]
      mig-enabled: true
      mig-devices:
        "2g.10gb": 3
    - devices: [6]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
    - devices: [7]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
"""

DGX_A100 = [{"index": i, "pci_device_id": "0x20B010DE"} for i in range(8)]


def test_readme_round_trip() -> None:
    layouts = mpt.from_mig_parted(README)
    assert mpt.to_mig_parted(layouts) == yaml.safe_load(README)


@pytest.mark.parametrize(("label", "per_gpu"), [
    ("all-disabled", [0] * 8), ("all-enabled", [0] * 8), ("all-1g.5gb", [7] * 8), ("all-2g.10gb", [3] * 8),
    ("all-3g.20gb", [2] * 8), ("all-balanced", [4] * 8), ("custom-config", [0, 0, 0, 0, 7, 3, 2, 4]),
])
def test_readme_labels_validate_on_dgx_a100(label: str, per_gpu: list[int]) -> None:
    configs = ml.validate(mpt.from_mig_parted(README, label), DGX_A100)
    assert [len(c.gpu_instances) for c in configs] == per_gpu


def test_readme_custom_config_export_merges_like_mig_parted_export() -> None:
    configs = ml.validate(mpt.from_mig_parted(README, "custom-config"), DGX_A100)
    exported = mpt.export_gpus([c.to_dict() for c in configs], label="custom-config")
    assert exported == {"version": "v1", "mig-configs": {"custom-config": yaml.safe_load(README)["mig-configs"][
        "custom-config"]}}
    balanced = ml.validate(mpt.from_mig_parted(README, "all-balanced"), DGX_A100)
    assert mpt.export_gpus([c.to_dict() for c in balanced]) == {
        "version": "v1", "mig-configs": {"current": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}]}}


def test_heterogeneous_device_filters() -> None:
    # mig-parted deployments/systemd/config-default.yaml, all-1g.10gb (device ids shortened to three per group).
    config = {"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"device-filter": ["0x233010DE", "0x20B210DE", "0x233510DE"], "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.10gb": 7}},
        {"device-filter": ["0x20B010DE", "0x20B110DE"], "devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.10gb": 4}}]}}
    entries = mpt.from_mig_parted(config, "all-1g.10gb")
    host = [{"index": 0, "pci_device_id": "0x20B010DE"}, {"index": 1, "pci_device_id": "0x20B210DE"},
            {"index": 2, "pci_device_id": "0x233010DE"}]
    configs = ml.validate(entries, host)
    assert [(c.model, len(c.gpu_instances), c.gpu_instances[0].size) for c in configs] == [
        ("A100-SXM4-40GB", 4, 2), ("A100-SXM4-80GB", 7, 1), ("H100-SXM5-80GB", 7, 1)]
    assert mpt.to_mig_parted({"all-1g.10gb": entries}) == config


@pytest.mark.parametrize(("doc", "message"), [
    ({"version": "v2", "mig-configs": {}}, "unknown version: v2"),
    ({"mig-configs": {"a": []}}, "unable to parse with missing 'version' field"),
    ({"version": "v1", "mig-configs": {}}, "at least one entry in 'mig-configs' is required"),
    ({"version": "v1", "mig-configs": {"empty": []}}, "at least one entry in 'empty' is required"),
    ({"version": "v1", "extra": 1, "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}},
     "unexpected field: extra"),
    ({"version": "v1", "mig-configs": {"a": [{"mig-enabled": False}]}},
     "mig-configs.a[0]: missing required field: devices"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all"}]}},
     "mig-configs.a[0]: missing required field: mig-enabled"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": False}]}},
     "mig-configs.a[0]: invalid string input for 'devices': some"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "gpus": 1}]}},
     "mig-configs.a[0]: unexpected field: gpus"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}},
     "mig-configs.a[0]: missing required field 'mig-devices' when 'mig-enabled' is true"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False,
                                              "mig-devices": {"1g.5gb": 1}}]}},
     "mig-configs.a[0]: MIG devices included when 'mig-enabled' is false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"1g.5gb": 0}}]}},
     "mig-configs.a[0]: error validating values in 'mig-devices' field: all counts for all MigProfiles are 0"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"1g.5gb": -1}}]}},
     "mig-configs.a[0]: error validating values in 'mig-devices' field: invalid count for '1g.5gb': -1"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True,
                                              "mig-devices": {"1g5gb": 1}}]}},
     "mig-configs.a[0]: error validating values in 'mig-devices' field: invalid format for '1g5gb': malformed "
     "MIG profile '1g5gb'; expected [<C>c.]<G>g.<GB>gb[+attr], e.g. 3g.40gb or 1c.3g.40gb"),
    ({"version": "v1", "mig-configs": {"a": [{"device-filter": "0x20B0:0x1:0x2", "devices": "all",
                                              "mig-enabled": False}]}},
     "mig-configs.a[0]: invalid DeviceID format '0x20B0:0x1:0x2': expected '<devicevendor>' or "
     "'<devicevendor>:<subdevicevendor>'"),
])
def test_parse_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(mpt.MigPartedError) as err:
        mpt.parse_spec(doc)
    assert str(err.value) == message


def test_selected_label_missing() -> None:
    with pytest.raises(mpt.MigPartedError, match=r"^selected mig-config 'nope' not found; available: all-disabled"):
        mpt.from_mig_parted(README, "nope")


@pytest.mark.parametrize(("mig_devices", "groups"), [
    # mig-parted apply: sorted largest G then larger C; a CI joins the GI created just before it if it fits.
    ({"1c.3g.20gb": 3}, [("3g.20gb", ("1c.3g.20gb",) * 3)]),
    ({"1c.3g.20gb": 4}, [("3g.20gb", ("1c.3g.20gb",) * 3), ("3g.20gb", ("1c.3g.20gb",))]),
    ({"3g.20gb": 1, "1c.3g.20gb": 1}, [("3g.20gb", ("3g.20gb",)), ("3g.20gb", ("1c.3g.20gb",))]),
    ({"1c.3g.20gb": 1, "2c.3g.20gb": 1}, [("3g.20gb", ("2c.3g.20gb", "1c.3g.20gb"))]),
    ({"1g.5gb": 2, "7g.40gb": 1}, [("7g.40gb", ("7g.40gb",)), ("1g.5gb", ("1g.5gb",)), ("1g.5gb", ("1g.5gb",))]),
])
def test_group_mig_devices(mig_devices: dict[str, int], groups: list[tuple[str, tuple[str, ...]]]) -> None:
    assert mpt.group_mig_devices(mig_devices) == groups


def test_import_compute_instances() -> None:
    doc = {"version": "v1", "mig-configs": {"ci": [{"devices": "all", "mig-enabled": True,
                                                    "mig-devices": {"1c.3g.40gb": 4, "4g.40gb": 1}}]}}
    entries = mpt.from_mig_parted(doc, "ci")
    assert entries == [{"devices": "all", "mig_enabled": True, "gpu_instances": {"4g.40gb": 1, "3g.40gb": 2},
                        "compute_instances": {"3g.40gb": [["1c.3g.40gb"] * 3, ["1c.3g.40gb"]]}}]
    assert mpt.to_mig_parted({"ci": entries}) == doc


@pytest.mark.parametrize(("entry", "message"), [
    ({"devices": "all", "gpu_instances": {"3g.40gb": 1}, "placements": [{"profile": "3g.40gb", "start": 4}]},
     "layout 'x' entry[0]: explicit placements cannot be written as a mig-parted config; pass allow_lossy=True to "
     "drop them"),
    ({"devices": "all", "gpu_instances": {"3g.40gb": 2}, "compute_instances": {"3g.40gb": ["1c.3g.40gb"]}},
     "layout 'x' entry[0]: mig-parted would group these compute instances into GPU instances differently "
     "([('3g.40gb', ('1c.3g.40gb', '1c.3g.40gb'))] instead of [('3g.40gb', ('1c.3g.40gb',)), ('3g.40gb', "
     "('1c.3g.40gb',))]); pass allow_lossy=True to accept"),
    ({"devices": "all", "gpu_instances": {"3g.40gb": 1}, "compute_instances": {"3g.40gb": []}},
     "layout 'x' entry[0]: a 3g.40gb GPU instance without compute instances cannot be written as a mig-parted "
     "config; pass allow_lossy=True to drop it"),
    ({"devices": "all", "model": "Tesla T4", "mig_enabled": False},
     "layout 'x' entry[0]: model 'Tesla T4' has no known PCI device id to write as a device-filter"),
])
def test_export_refuses_what_mig_parted_cannot_express(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(mpt.MigPartedError) as err:
        mpt.to_mig_parted({"x": [entry]})
    assert str(err.value) == message


def test_export_lossy_and_model_filter() -> None:
    layouts = {"x": [{"model": "A100-SXM4-80GB", "gpu_instances": {"3g.40gb": 1},
                      "placements": [{"profile": "3g.40gb", "start": 4}]}]}
    assert mpt.to_mig_parted(layouts, allow_lossy=True) == {"version": "v1", "mig-configs": {"x": [
        {"device-filter": "0x20B210DE", "devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 1}}]}}


def test_export_nvml_state() -> None:
    gpus = [{"index": 0, "model": "A100-SXM4-40GB", "mig": {"current": 1, "pending": 1}, "gpu_instances": [
                {"id": 1, "profile_id": 9, "start": 0, "size": 4, "compute_instances": [{"id": 0, "profile_id": 2}]},
                {"id": 2, "profile_id": 9, "start": 4, "size": 4,
                 "compute_instances": [{"id": 0, "profile_id": 0}, {"id": 1, "profile_id": 1}]}]},
            {"index": 1, "model": "H100-SXM5-80GB", "mig": {"current": 0, "pending": 0}, "gpu_instances": []}]
    assert mpt.export_gpus(gpus) == {"version": "v1", "mig-configs": {"current": [
        {"device-filter": "0x20B010DE", "devices": [0], "mig-enabled": True,
         "mig-devices": {"1c.3g.20gb": 1, "2c.3g.20gb": 1, "3g.20gb": 1}},
        {"device-filter": "0x233010DE", "devices": [1], "mig-enabled": False}]}}


# ---------------------------------------------------------------------------------------------------- filters
def test_filter_plugin_functions() -> None:
    filters = mig_filter.FilterModule().filters()
    assert sorted(filters) == ["mig_from_mig_parted", "mig_plan", "mig_record_current", "mig_to_mig_parted",
                               "mig_validate"]
    layouts = filters["mig_from_mig_parted"](README)
    desired = filters["mig_validate"](layouts, DGX_A100[:2], name="all-balanced")
    assert [len(d["gpu_instances"]) for d in desired] == [4, 4]
    current = [{"index": i, "model": "A100-SXM4-40GB", "mig": {"supported": True, "current": 0, "pending": 0},
                "gpu_instances": []} for i in range(2)]
    plan = filters["mig_plan"](current, desired)
    assert plan["changed"]
    assert plan["reset_required"]
    assert plan["summary"].splitlines()[0] == "GPU 0 (A100-SXM4-40GB): 9 action(s), GPU reset required"
    exported = filters["mig_to_mig_parted"](desired, label="balanced")
    assert filters["mig_from_mig_parted"](exported, label="balanced") == layouts["all-balanced"]


@pytest.mark.parametrize(("name", "args", "kwargs", "message"), [
    ("mig_validate", ({"a": []}, DGX_A100), {}, "mig_validate: the input is a map of layouts; pass name=<layout name>"),
    ("mig_validate", ({"a": []}, DGX_A100), {"name": "b"}, "mig_validate: no MIG layout named 'b'; defined: a"),
    ("mig_validate", ([{"devices": "all", "gpu_instances": {"1g.5gb+me": 2}}], DGX_A100[:1]), {},
     "mig_validate: GPU 0 (A100-SXM4-40GB): 2 x 1g.5gb+me requested, but A100-SXM4-40GB offers at most 1 x "
     "1g.5gb+me"),
    ("mig_from_mig_parted", ("version: v3",), {}, "mig_from_mig_parted: unknown version: v3"),
    ("mig_to_mig_parted", ("text",), {}, "mig_to_mig_parted: expected a map of layouts or a list of GPUs, got str"),
])
def test_filter_errors(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleFilterError) as err:
        mig_filter.FilterModule().filters()[name](*args, **kwargs)
    assert err.value.message == message
