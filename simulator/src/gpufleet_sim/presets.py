"""Fleet presets: a named host configuration -> a full schema-1 state document (docs/simulator.md).

Identity that differs between real hosts (GPU UUIDs, serial numbers, PCI bus numbers) is derived from a
``host_seed`` (the host name, typically), so the same seed always builds the same document and two hosts of
the same preset differ. Every preset starts as a freshly booted server: persistence off, MIG disabled, no
processes, no events, no faults.
"""

from __future__ import annotations

import copy
import hashlib
import random
import uuid
from dataclasses import dataclass
from typing import Any

from gpufleet_sim.infiniband import build_rdma
from gpufleet_sim.models import load_model, pci_ids

SCHEMA_VERSION = 1
NVML_BRAND_NVIDIA = 14


@dataclass(frozen=True)
class Preset:
    """A host kind: ``count`` GPUs of one ``model``, optionally behind NVSwitches."""

    model: str
    count: int
    description: str
    nvswitch_count: int = 0
    # NVLink bridges join the GPUs in pairs (0-1, 2-3, ...): each GPU's "nvlink.peers" names its partner. Without
    # it, every GPU with NVLinks reaches every other one (NVSwitches, or a full mesh such as HGX A100's).
    nvlink_bridged_pairs: bool = False
    # A compute tray of a multi-node NVLink domain (GB200/GB300 NVL72): its NVSwitches and their fabric management
    # sit in other trays; the state's "fabric": {"multinode": true} gives its GPUs a fabric with a clique and a
    # cluster UUID (nvmlsim_fabric.c). Single-node NVSwitch systems complete with clique 0 and a zero cluster UUID.
    fabric_multinode: bool = False
    # nvml.h nvmlGpuVirtualizationMode_t of every GPU ("virtualization_mode"): 0 bare metal, 1 passed through to a VM
    virtualization_mode: int = 0
    # False: the host sees none of the board's NVLinks ("nvlink.links" []), as a one-GPU VM (the real H200 passed
    # through answers NVML_ERROR_NOT_SUPPORTED to every NvLink getter)
    nvlinks_visible: bool = True
    # one single-port ConnectX-7 NDR HCA per GPU on the GPU's PCIe switch, and nvidia_peermem loaded (infiniband.py)
    hcas: bool = False


PRESETS: dict[str, Preset] = {
    "8xH100-NVSwitch": Preset("H100-SXM5-80GB", 8, "HGX H100 8-GPU: 8x H100 SXM5 80GB on 4 NVSwitches (one node: "
                              "the fabric completes with clique 0 and a zero cluster UUID); 8x ConnectX-7 NDR, "
                              "one per GPU", 4, hcas=True),
    "8xA100": Preset("A100-SXM4-80GB", 8, "HGX A100 8-GPU: 8x A100 SXM4 80GB"),
    "4xA30": Preset("A30-24GB", 4, "PCIe server with 4x A30 24GB", nvlink_bridged_pairs=True),
    "2xL40S": Preset("L40S", 2, "PCIe server with 2x L40S (no MIG)"),
    "1xH200": Preset("H200-141GB", 1, "one H200 141GB"),
    "2xA100-40GB": Preset("A100-SXM4-40GB", 2, "2x A100 SXM4 40GB"),
    "1xT4": Preset("T4", 1, "inference node with one T4 (no MIG, Turing)"),
    # issue 15: the MIG boards operators buy now (model files cite their sources and mark what is inferred)
    "8xB200-NVSwitch": Preset("B200-180GB", 8, "HGX B200 8-GPU: 8x B200 180GB on 2 NVLink 5 switch chips (one "
                              "node: the fabric completes with clique 0 and a zero cluster UUID); 8x ConnectX-7 NDR, "
                              "one per GPU",
                              2, hcas=True),
    "4xGB200": Preset("GB200-186GB", 4, "one GB200 NVL72 compute tray: 4x GB200 (NVLink switches sit in other trays; "
                      "a multi-node fabric with a clique and a cluster UUID)", fabric_multinode=True),
    "1xGH200": Preset("GH200-96GB", 1, "one GH200 Grace Hopper superchip (H100 96GB)"),
    "2xH100-NVL": Preset("H100-NVL-94GB", 2, "PCIe server with an H100 NVL pair (94GB each)",
                         nvlink_bridged_pairs=True),
    "1xA100-80GB-PCIe": Preset("A100-PCIE-80GB", 1, "PCIe server with one A100 80GB PCIe"),
    "4xRTX-PRO-6000": Preset("RTX-PRO-6000-96GB", 4, "PCIe server with 4x RTX PRO 6000 Blackwell Server Edition"),
    "1xA100-40GB-PCIe": Preset("A100-PCIE-40GB", 1, "PCIe server with one A100 PCIe 40GB"),
    "2xH100-PCIe": Preset("H100-PCIE-80GB", 2, "PCIe server with 2x H100 PCIe 80GB", nvlink_bridged_pairs=True),
    "1xGH200-144GB": Preset("GH200-144GB", 1, "one GH200 Grace Hopper superchip with 144GB HBM3e"),
    "2xH200-NVL": Preset("H200-NVL-141GB", 2, "PCIe server with an H200 NVL pair", nvlink_bridged_pairs=True),
    # the ground-truth machine (/work/shared/ground-truth/h200-sxm-passthrough-r580): one H200 SXM passed through to
    # a VM, virtualization mode 1, no NVLink exposed, no NVSwitch, fabric answered with state Not Supported
    "1xH200-passthrough": Preset("H200-141GB", 1, "one H200 141GB passed through to a VM (Pass-Through, no NVLink "
                                 "exposed, fabric Not Supported)", virtualization_mode=1, nvlinks_visible=False),
}


class UnknownPresetError(KeyError):
    """Raised for a preset name that is not in ``PRESETS``."""

    def __str__(self) -> str:
        """Return the message without KeyError's quoting."""
        return str(self.args[0])


def list_presets() -> list[str]:
    """Return the preset names in their documented order."""
    return list(PRESETS)


def get_preset(name: str) -> Preset:
    """Return the preset called ``name``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPresetError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}") from None


def _rng(host_seed: str, purpose: str) -> random.Random:
    digest = hashlib.sha256(f"gpufleet-sim/{host_seed}/{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def gpu_uuid(host_seed: str, index: int) -> str:
    """Return the GPU UUID of GPU ``index`` on the host seeded ``host_seed``."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet-sim://{host_seed}/gpu/{index}"))


def mig_device_uuid(gpu_uuid_text: str, gi_id: int, ci_id: int) -> str:
    """Return the MIG device UUID the simulated driver gives compute instance ``ci_id`` of GI ``gi_id``.

    ``MIG-`` + uuid5(namespace = the GPU's UUID, name = ``"<gi>/<ci>"``), as in nvmlsim_ci.c.
    """
    namespace = uuid.UUID(gpu_uuid_text.removeprefix("GPU-"))
    return "MIG-" + str(uuid.uuid5(namespace, f"{gi_id}/{ci_id}"))


def bus_numbers(host_seed: str, count: int) -> list[int]:
    """Return ``count`` distinct, ascending PCI bus numbers for the host's GPUs (NVML enumerates by bus)."""
    rng = _rng(host_seed, "bus")
    return sorted(rng.sample(range(0x01, 0xFF), count))


def _serial(host_seed: str, index: int) -> str:
    digest = hashlib.sha256(f"gpufleet-sim/{host_seed}/serial/{index}".encode()).hexdigest()
    return "1" + str(int(digest[:16], 16) % 10**12).zfill(12)


def _ecc_counters() -> dict[str, Any]:
    zero = {"corrected": {"dram": 0, "sram": 0}, "uncorrected": {"dram": 0, "sram": 0}}
    return {"current": 1, "pending": 1, "volatile": copy.deepcopy(zero), "aggregate": copy.deepcopy(zero)}


def build_gpu(model_name: str, index: int, host_seed: str, bus: int) -> dict[str, Any]:
    """Return the state object of one GPU of ``model_name`` (idle, healthy, MIG disabled)."""
    model = load_model(model_name)
    device_id, subsystem_id = pci_ids(model)
    mig = model["mig"]
    links = model["nvlink"]["links"]
    return {
        "index": index,
        "model": model["model"],
        "name": model["name"],
        "uuid": gpu_uuid(host_seed, index),
        "serial": _serial(host_seed, index),
        "board_part_number": model["board_part_number"],
        "vbios_version": model["vbios_version"],
        "inforom_image_version": model["inforom_image_version"],
        "minor_number": index,
        "brand": model["brand"],
        "architecture": model["architecture"],
        "compute_capability": list(model["compute_capability"]),
        "pci": {
            "bus_id": f"00000000:{bus:02X}:00.0",
            "domain": 0,
            "bus": bus,
            "device": 0,
            "pci_device_id": device_id,
            "pci_subsystem_id": subsystem_id,
        },
        "memory": {"total_mib": model["memory"]["total_mib"], "reserved_mib": model["memory"]["reserved_mib"],
                   "used_mib": 0},
        "bar1": {"total_mib": model["bar1"]["total_mib"], "used_mib": model["bar1"]["idle_used_mib"]},
        "persistence_mode": 0,
        "compute_mode": 0,
        "performance_state": 0,
        "utilization": {"gpu": 0, "memory": 0},
        "ecc": _ecc_counters(),
        "retired_pages": {"supported": model["retired_pages"], "sbe": [], "dbe": [], "pending": 0},
        "remapped_rows": {
            "supported": model["remapped_rows"],
            "corrected": 0,
            "uncorrected": 0,
            "pending": 0,
            "failure": 0,
            "histogram": {"max": model["row_remapper_max"], "high": 0, "partial": 0, "low": 0, "none": 0},
        },
        "temperature": {"gpu": model["temperature"]["idle"], **{
            key: model["temperature"][key] for key in ("shutdown", "slowdown", "mem_max", "gpu_max")}},
        "power": {
            "usage_mw": model["power"]["idle_mw"],
            "limit_mw": model["power"]["default_mw"],
            "enforced_mw": model["power"]["default_mw"],
            "default_mw": model["power"]["default_mw"],
            "min_mw": model["power"]["min_mw"],
            "max_mw": model["power"]["max_mw"],
        },
        "clocks": {"current": dict(model["clocks"]["idle"]), "max": dict(model["clocks"]["max"])},
        "clock_event_reasons": 1,  # nvmlClocksEventReasonGpuIdle
        "pcie": {
            "gen": model["pcie"]["idle_gen"],
            "width": model["pcie"]["max_width"],
            "max_gen": model["pcie"]["max_gen"],
            "max_width": model["pcie"]["max_width"],
            "gpu_max_gen": model["pcie"]["max_gen"],
            "replay_counter": 0,
        },
        "nvlink": {"version": model["nvlink"]["version"], "links": [1] * links},
        "mig": {
            "supported": mig["supported"],
            "current": 0,
            "pending": 0,
            "reset_required_for_mode": mig["reset_required_for_mode"],
            "gi_profiles": copy.deepcopy(mig["gi_profiles"]),
            "ci_profiles": copy.deepcopy(mig["ci_profiles"]),
            "gpu_instances": [],
        },
        "processes": [],
        "events": [],
        "lost": False,
        "inject": {},
    }


def build_state(preset: str, host_seed: str) -> dict[str, Any]:
    """Return the full schema-1 state document of a host of ``preset`` seeded by ``host_seed``."""
    spec = get_preset(preset)
    buses = bus_numbers(host_seed, spec.count)
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "preset": preset,
        "require_root": True,
        "inject": {},
        "event_seq": 0,
        "clients": [],
        "gpus": [build_gpu(spec.model, i, host_seed, buses[i]) for i in range(spec.count)],
    }
    if spec.nvswitch_count:
        doc["nvswitch"] = {"count": spec.nvswitch_count, "fabric_manager_required": True}
    if spec.fabric_multinode:
        doc["fabric"] = {"multinode": True}
    for gpu in doc["gpus"]:
        gpu["virtualization_mode"] = spec.virtualization_mode
        if not spec.nvlinks_visible:
            gpu["nvlink"]["links"] = []
    if spec.hcas:
        doc["rdma"] = build_rdma(doc["gpus"], host_seed)
    if spec.nvlink_bridged_pairs:
        for gpu in doc["gpus"]:
            partner = gpu["index"] ^ 1
            gpu["nvlink"]["peers"] = [partner] if partner < spec.count else []
    return doc
