"""mig-parted v1, as mig-parted itself reads it (issue 15):

* NVIDIA's gpu-operator default MIG config (tests/data/gpu-operator, every label) imports into gpufleet layouts and
  exports back to the same config: no label, entry, filter, device list or count is lost or changed;
* an empty ``device-filter`` (``""`` or ``[]``) is no filter, as in mig-parted's ``MatchesDeviceFilter``
  (api/spec/v1/helpers.go): the entry matches every GPU;
* ``devices: []`` matches no GPU in mig-parted (``MatchesDevices``); gpufleet refuses such an entry rather than
  apply nothing silently.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "collections", Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_parted as mpp  # noqa: E402
from test_mig_catalogue import CONFIG, GPU_OPERATOR  # noqa: E402

HOST = [{"index": 0, "model": "A100-SXM4-80GB", "pci_device_id": "0x20B210DE"},
        {"index": 1, "model": "H100-SXM5-80GB", "pci_device_id": "0x233010DE"}]


def test_gpu_operator_config_round_trips_without_loss() -> None:
    text = yaml.safe_load(GPU_OPERATOR.read_text(encoding="utf-8"))["data"]["config.yaml"]
    layouts = mpp.from_mig_parted(text)
    assert isinstance(layouts, dict)
    assert len(layouts) == len(CONFIG["mig-configs"]) == 68
    exported = mpp.to_mig_parted(layouts)
    assert exported == CONFIG
    assert yaml.safe_load(yaml.safe_dump(exported)) == CONFIG
    assert mpp.from_mig_parted(exported) == layouts


def test_one_id_filter_keeps_its_form() -> None:
    doc = {"version": "v1", "mig-configs": {"a": [
        {"device-filter": ["0x20B210DE"], "devices": "all", "mig-enabled": False},
        {"device-filter": "0x233010DE", "devices": "all", "mig-enabled": False}]}}
    layouts = mpp.from_mig_parted(doc)
    assert [e["device_filter"] for e in layouts["a"]] == [["0x20B210DE"], "0x233010DE"]
    assert mpp.to_mig_parted(layouts) == doc


@pytest.mark.parametrize("empty", ["", []])
def test_empty_device_filter_is_no_filter(empty: Any) -> None:
    doc = {"version": "v1", "mig-configs": {"a": [{"device-filter": empty, "devices": "all", "mig-enabled": True,
                                                    "mig-devices": {"7g.80gb": 1}}]}}
    assert mpp.parse_spec(doc) == {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}
    entries = mpp.from_mig_parted(doc, "a")
    assert entries == [{"devices": "all", "mig_enabled": True, "gpu_instances": {"7g.80gb": 1}}]
    assert [(c.index, [gi.profile for gi in c.gpu_instances]) for c in ml.validate(entries, HOST)] == [
        (0, ["7g.80gb"]), (1, ["7g.80gb"])]


@pytest.mark.parametrize("filt", [[""], ["0x20B210DE", " "]])
def test_an_empty_id_in_a_device_filter_list_is_refused_not_read_as_no_filter(filt: list[str]) -> None:
    """mig-parted's MatchesDeviceFilter (api/spec/v1/helpers.go) drops '' only when it is the whole filter; in a
    list it parses it, ignores the parse error and compares the zero DeviceID, which no GPU has: the entry would
    quietly apply to nothing."""
    doc = {"version": "v1", "mig-configs": {"a": [{"device-filter": filt, "devices": "all", "mig-enabled": False}]}}
    with pytest.raises(mpp.MigPartedError, match=r"holds an empty id: mig-parted would match no GPU with it"):
        mpp.from_mig_parted(doc, "a")


def test_devices_empty_list_matches_nothing_and_is_refused() -> None:
    doc = {"version": "v1", "mig-configs": {"a": [{"devices": [], "mig-enabled": False},
                                                  {"devices": "all", "mig-enabled": False}]}}
    entries = mpp.from_mig_parted(doc, "a")
    with pytest.raises(ml.LayoutError) as info:
        ml.validate(entries, HOST)
    assert str(info.value) == "layout entry[0]: devices must be 'all' or a non-empty list of GPU indexes, got []"


def test_a_filter_that_matches_no_gpu_leaves_the_gpus_unmatched() -> None:
    entries = mpp.from_mig_parted({"version": "v1", "mig-configs": {"a": [
        {"device-filter": "0x2BB510DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb": 4}}]}}, "a")
    with pytest.raises(ml.LayoutError) as info:
        ml.validate(entries, HOST)
    assert info.value.problems == [
        "GPU 0 (A100-SXM4-80GB): no layout entry matches it; add an entry for it or use devices: all",
        "GPU 1 (H100-SXM5-80GB): no layout entry matches it; add an entry for it or use devices: all"]


def test_a_text_past_the_size_limit_is_refused_before_it_is_parsed() -> None:
    """A 10 MB file took 240 s and 1.4 GB in PyYAML (issue 32); NVIDIA's own default config is 12 KB."""
    text = "version: v1\n" + "#" * mpp.MAX_TEXT_BYTES
    with pytest.raises(mpp.MigPartedError) as err:
        mpp.from_mig_parted(text)
    assert str(err.value) == (f"unable to parse mig-parted config: it is {len(text)} bytes, more than the "
                              f"{mpp.MAX_TEXT_BYTES} this reads (NVIDIA's own default config is about 12 KB); "
                              "check that the file is the mig-parted config")
    assert GPU_OPERATOR.stat().st_size * 50 < mpp.MAX_TEXT_BYTES, "NVIDIA's real config is far inside the limit"
    assert mpp.from_mig_parted(yaml.safe_dump(CONFIG)), "and it still parses as text"
