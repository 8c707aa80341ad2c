"""Fleet presets -> schema-1 state documents."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from gpufleet_sim.models import load_model, pci_ids
from gpufleet_sim.presets import UnknownPresetError, build_state, list_presets, mig_device_uuid

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

EXPECTED = [  # preset, GPU count, model, NVSwitch count
    ("8xH100-NVSwitch", 8, "H100-SXM5-80GB", 4),
    ("8xA100", 8, "A100-SXM4-80GB", 0),
    ("4xA30", 4, "A30-24GB", 0),
    ("2xL40S", 2, "L40S", 0),
    ("1xH200", 1, "H200-141GB", 0),
    ("2xA100-40GB", 2, "A100-SXM4-40GB", 0),
    ("1xT4", 1, "T4", 0),
    ("8xB200-NVSwitch", 8, "B200-180GB", 2),
    ("4xGB200", 4, "GB200-186GB", 0),
    ("1xGH200", 1, "GH200-96GB", 0),
    ("2xH100-NVL", 2, "H100-NVL-94GB", 0),
    ("1xA100-80GB-PCIe", 1, "A100-PCIE-80GB", 0),
    ("4xRTX-PRO-6000", 4, "RTX-PRO-6000-96GB", 0),
    ("1xA100-40GB-PCIe", 1, "A100-PCIE-40GB", 0),
    ("2xH100-PCIe", 2, "H100-PCIE-80GB", 0),
    ("1xGH200-144GB", 1, "GH200-144GB", 0),
    ("2xH200-NVL", 2, "H200-NVL-141GB", 0),
    ("1xH200-passthrough", 1, "H200-141GB", 0),
]


def test_list_presets() -> None:
    assert list_presets() == [e[0] for e in EXPECTED]


@pytest.mark.parametrize(("preset", "count", "model_name", "nvswitches"), EXPECTED)
def test_preset_document(preset: str, count: int, model_name: str, nvswitches: int) -> None:
    doc = build_state(preset, "host-a")
    model = load_model(model_name)
    assert (doc["schema"], doc["require_root"], doc["event_seq"], doc["clients"], doc["inject"]) == (1, True, 0, [],
                                                                                                   {})
    assert len(doc["gpus"]) == count
    if nvswitches:
        assert doc["nvswitch"] == {"count": nvswitches, "fabric_manager_required": True}
    else:
        assert "nvswitch" not in doc
    buses = [g["pci"]["bus"] for g in doc["gpus"]]
    assert buses == sorted(set(buses))
    for i, gpu in enumerate(doc["gpus"]):
        assert (gpu["index"], gpu["minor_number"], gpu["model"], gpu["name"]) == (i, i, model_name, model["name"])
        assert UUID_RE.match(gpu["uuid"])
        assert re.fullmatch(r"\d{13}", gpu["serial"])
        assert gpu["pci"]["bus_id"] == f"00000000:{gpu['pci']['bus']:02X}:00.0"
        assert (gpu["pci"]["pci_device_id"], gpu["pci"]["pci_subsystem_id"]) == pci_ids(model)
        assert (gpu["persistence_mode"], gpu["compute_mode"], gpu["lost"]) == (0, 0, False)
        assert (gpu["mig"]["current"], gpu["mig"]["pending"], gpu["mig"]["gpu_instances"]) == (0, 0, [])
        assert gpu["mig"]["gi_profiles"] == model["mig"]["gi_profiles"]
        assert gpu["mig"]["ci_profiles"] == model["mig"]["ci_profiles"]
        if preset != "1xH200-passthrough":  # no NVLink exposed in the VM: test_passthrough_preset
            assert len(gpu["nvlink"]["links"]) == model["nvlink"]["links"]
        assert (gpu["processes"], gpu["events"], gpu["inject"]) == ([], [], {})
    assert json.loads(json.dumps(doc)) == doc


def test_same_seed_same_document_other_seed_other_identity() -> None:
    a1, a2, b = (build_state("8xA100", s) for s in ("node-a", "node-a", "node-b"))
    assert a1 == a2
    for key in ("uuid", "serial"):
        assert {g[key] for g in a1["gpus"]}.isdisjoint({g[key] for g in b["gpus"]})
    assert [g["pci"]["bus"] for g in a1["gpus"]] != [g["pci"]["bus"] for g in b["gpus"]]
    assert len({g["uuid"] for g in a1["gpus"]}) == 8
    assert len({g["serial"] for g in a1["gpus"]}) == 8


def test_unknown_preset_message() -> None:
    with pytest.raises(UnknownPresetError) as info:
        build_state("16xB200", "x")
    assert str(info.value) == ("unknown preset '16xB200'; known presets: 8xH100-NVSwitch, 8xA100, 4xA30, 2xL40S, "
                               "1xH200, 2xA100-40GB, 1xT4, 8xB200-NVSwitch, 4xGB200, 1xGH200, 2xH100-NVL, "
                               "1xA100-80GB-PCIe, 4xRTX-PRO-6000, 1xA100-40GB-PCIe, 2xH100-PCIe, 1xGH200-144GB, "
                               "2xH200-NVL, 1xH200-passthrough")


def test_mig_device_uuid_is_uuid5_of_the_gpu_uuid() -> None:
    gpu = "GPU-5b3a6c1e-0000-4000-8000-000000000001"
    expected = "MIG-" + str(uuid.uuid5(uuid.UUID(gpu[4:]), "7/0"))
    assert mig_device_uuid(gpu, 7, 0) == expected
    assert mig_device_uuid(gpu, 7, 1) != expected


# BAR1 aperture per board, MiB: what nvidia-smi -q reports under "BAR1 Memory Usage / Total" in public transcripts
# (inferred; no NVIDIA document states it). NVIDIA's 535 binary lists MIG devices only where BAR1 is reported.
BAR1_TOTAL_MIB = {"8xH100-NVSwitch": 131072, "8xA100": 131072, "4xA30": 32768, "2xL40S": 65536, "1xH200": 262144,
                  "2xA100-40GB": 65536, "1xT4": 256}


@pytest.mark.parametrize("preset", list(BAR1_TOTAL_MIB))
def test_presets_write_bar1(preset: str) -> None:
    gpus = build_state(preset, "host-a")["gpus"]
    assert [g["bar1"] for g in gpus] == [{"total_mib": BAR1_TOTAL_MIB[preset], "used_mib": 1}] * len(gpus)


# Host-level fabric and per-GPU virtualization keys (docs/simulator.md, "Fabric identity and virtualization")
HOST_KIND = {  # preset -> ("fabric" key of the document or None, every GPU's virtualization_mode)
    "4xGB200": ({"multinode": True}, 0),             # an NVL72 compute tray: clique and cluster UUID (GB200__xml__1)
    "8xH100-NVSwitch": (None, 0),                     # one node: clique 0, zero UUID (H100_SXM_HGX__xml__1)
    "8xB200-NVSwitch": (None, 0),
    "1xH200": (None, 0),
    "1xH200-passthrough": (None, 1),                  # the ground-truth H200: Pass-Through
}


@pytest.mark.parametrize("preset", list(HOST_KIND))
def test_presets_say_what_host_they_are(preset: str) -> None:
    fabric, mode = HOST_KIND[preset]
    doc = build_state(preset, "host-a")
    assert doc.get("fabric") == fabric
    assert [g["virtualization_mode"] for g in doc["gpus"]] == [mode] * len(doc["gpus"])


def test_passthrough_preset_is_the_ground_truth_machine() -> None:
    # /work/shared/ground-truth/h200-sxm-passthrough-r580: one H200 SXM in a VM, no NVLink, no NVSwitch
    doc = build_state("1xH200-passthrough", "vm")
    (gpu,) = doc["gpus"]
    assert (gpu["model"], gpu["virtualization_mode"], gpu["nvlink"]["links"]) == ("H200-141GB", 1, [])
    assert "nvswitch" not in doc
    assert "fabric" not in doc
    bare = build_state("1xH200", "vm")["gpus"][0]
    assert {k: v for k, v in gpu.items() if k not in ("nvlink", "virtualization_mode")} == {
        k: v for k, v in bare.items() if k not in ("nvlink", "virtualization_mode")}
