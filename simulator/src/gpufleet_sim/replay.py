"""Replay a real host: a schema-1 state document built from NVIDIA's ``nvidia-smi -q -x`` of that host (or its
``nvidia-smi -q``, read into the same tree by ``replay_text.py``).

``state_from_xml`` reads the GPUs of the report: which simulator model each one is (its PCI device id, then its
product name), and what the report says of it that does not change while the host idles: identity (name, UUID,
serial, PCI bus id and ids, VBIOS, board part number, InfoROM image, minor number), persistence, compute, ECC and
MIG modes, ECC counters, retired pages and remapped rows, temperature and its thresholds, power limits, clocks, the
PCIe link, the virtualization mode and the GPU fabric (state, clique id, cluster UUID). Everything the report does
not give (MIG profile tables, the NVLink count) comes from the model file, as for a preset. The simulated
``nvidia-smi -q`` then prints those fields as the real one did.

A getter dump of the same host (``nvml_getters_dump.py``, JSON lines) adds what the XML does not say: whether the
host sees the GPUs' NVLinks (a GPU passed through alone to a VM answers NOT_SUPPORTED to every NvLink getter), the
NVLink version, the absolute temperature thresholds, the fabric and virtualization answers of NVML itself.

MIG devices are rebuilt from their GPU and compute instance ids: the GPU instance's placement follows from its id by
the driver's placement rule (docs/simulator.md), its profile is the model's profile with that placement, the
device's memory and the shared engine counts; the compute instance's profile has the device's SM count.

Not replayed (listed in the document's ``"replay"`` record): processes, events, clocks event counters,
utilization, MIG device UUIDs (the library derives them); the driver version is recorded there, but the simulated
library reports the version it was built for (``gpusim build``; ``build.build_library`` for another one).

Pure Python, standard library only (and the simulator's own models and presets): the simulator never imports the
product.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufleet_sim.models import list_models, load_model, pci_ids
from gpufleet_sim.presets import PRESETS, SCHEMA_VERSION, build_gpu

NA = "N/A"
#: nvml.h nvmlGpuVirtualizationMode_t, as nvidia-smi prints it
VIRTUALIZATION = {"None": 0, "Pass-Through": 1, "VGPU": 2, "Host VGPU": 3, "Host VSGA": 4}
#: nvml.h nvmlComputeMode_t, as nvidia-smi prints it
COMPUTE_MODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}
#: nvml.h nvmlClocksEventReason* bits, by the report's tag
CLOCK_EVENT_BITS = {
    "clocks_event_reason_gpu_idle": 0x1, "clocks_event_reason_applications_clocks_setting": 0x2,
    "clocks_event_reason_sw_power_cap": 0x4, "clocks_event_reason_hw_slowdown": 0x8,
    "clocks_event_reason_sync_boost": 0x10, "clocks_event_reason_sw_thermal_slowdown": 0x20,
    "clocks_event_reason_hw_thermal_slowdown": 0x40, "clocks_event_reason_hw_power_brake_slowdown": 0x80,
    "clocks_event_reason_display_clocks_setting": 0x100,
}
#: fabric states a GPU with a fabric reports (nvidia-smi prints N/A for a GPU without one)
FABRIC_STATES = ("Not Started", "In Progress", "Completed")
#: NVSwitch chips of an HGX baseboard by architecture, for a single-node fabric no preset describes: third-generation
#: NVSwitch on HGX H100/H200 (4), NVLink 5 switch chips on HGX B200 (2) -- NVIDIA's HGX platform pages
NVSWITCHES_BY_ARCHITECTURE = {9: 4, 10: 2}
NOT_REPLAYED = ["processes", "events", "utilization", "clocks event counters", "MIG device UUIDs (derived)",
                "the driver version (the simulated library reports the version it was built for)"]
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


class ReplayError(ValueError):
    """The report cannot be replayed; the message says what is wrong and what to do."""


def parse_xml(text: str) -> ET.Element:
    """Return the ``<nvidia_smi_log>`` root of a report; provenance lines before the XML (``# source: ...``) are
    skipped."""
    start = min((i for i in (text.find("<?xml"), text.find("<nvidia_smi_log")) if i >= 0), default=-1)
    if start < 0:
        raise ReplayError("no nvidia_smi_log element: pass the output of `nvidia-smi -q -x`")
    try:
        root = ET.fromstring(text[start:])
    except ET.ParseError as exc:
        raise ReplayError(f"the nvidia-smi XML does not parse ({exc}); pass the unchanged output of "
                          "`nvidia-smi -q -x`") from None
    if root.tag != "nvidia_smi_log":
        raise ReplayError(f"the XML's root is <{root.tag}>, not <nvidia_smi_log>: pass `nvidia-smi -q -x` output")
    return root


def _text(node: ET.Element, path: str) -> str | None:
    """The stripped text at ``path``; None when absent, empty or N/A."""
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", NA) else value


def _number(node: ET.Element, path: str) -> float | None:
    """The leading number of the text at ``path`` (``700.00 W`` -> 700.0, ``-8 C`` -> -8.0, ``16x`` -> 16.0)."""
    value = _text(node, path)
    match = re.match(r"^-?\d+(\.\d+)?", value or "")
    return float(match.group(0)) if match else None


def _int(node: ET.Element, path: str) -> int | None:
    value = _number(node, path)
    return None if value is None else int(value)


def _flag(node: ET.Element, path: str, yes: tuple[str, ...] = ("Enabled", "Yes")) -> int | None:
    value = _text(node, path)
    return None if value is None else int(value in yes)


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        target[key] = value


def match_model(name: str | None, device_id: int | None, subsystem_id: int | None) -> str:
    """The simulator model of a GPU: its PCI device id (``device << 16 | vendor``), then its product name, then its
    subsystem id among models of one device id."""
    models = {m: load_model(m) for m in list_models()}
    by_device = [m for m, data in models.items() if device_id is not None and pci_ids(data)[0] == device_id]
    if len(by_device) > 1:
        by_device = ([m for m in by_device if models[m]["name"] == name] or
                     [m for m in by_device if pci_ids(models[m])[1] == subsystem_id] or by_device)
    if by_device:
        return sorted(by_device)[0]
    by_name = [m for m, data in models.items() if data["name"] == name]
    if by_name:
        return by_name[0]
    device = f"0x{device_id:08X}" if device_id is not None else "unknown"
    raise ReplayError(f"no simulator model for {name!r} (PCI device id {device}); add a model file to "
                      f"simulator/src/gpufleet_sim/models/ (known: {', '.join(models)})")


def _pci(gpu: dict[str, Any], node: ET.Element) -> None:
    pci = gpu["pci"]
    bus_id = _text(node, "pci/pci_bus_id") or node.get("id")
    if bus_id:
        match = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", bus_id)
        if not match:
            raise ReplayError(f"PCI bus id {bus_id!r} is not DOMAIN:BUS:DEVICE.FUNCTION")
        domain, bus, device = (int(match.group(i), 16) for i in (1, 2, 3))
        pci.update({"bus_id": f"{domain:08X}:{bus:02X}:{device:02X}.{match.group(4)}", "domain": domain,
                    "bus": bus, "device": device})
    for key, path in (("pci_device_id", "pci/pci_device_id"), ("pci_subsystem_id", "pci/pci_sub_system_id")):
        value = _text(node, path)
        if value:
            pci[key] = int(value, 16)
    link = gpu["pcie"]
    for key, path in (("max_gen", "pcie_gen/max_link_gen"), ("gen", "pcie_gen/current_link_gen"),
                      ("gpu_max_gen", "pcie_gen/max_device_link_gen"), ("max_width", "link_widths/max_link_width"),
                      ("width", "link_widths/current_link_width")):
        _set(link, key, _int(node, f"pci/pci_gpu_link_info/{path}"))
    _set(link, "replay_counter", _int(node, "pci/replay_counter"))


def _ecc(gpu: dict[str, Any], node: ET.Element) -> None:
    ecc = gpu["ecc"]
    _set(ecc, "current", _flag(node, "ecc_mode/current_ecc"))
    _set(ecc, "pending", _flag(node, "ecc_mode/pending_ecc"))
    for scope in ("volatile", "aggregate"):
        counters = ecc[scope]
        for memory in ("dram", "sram"):
            _set(counters["corrected"], memory, _int(node, f"ecc_errors/{scope}/{memory}_correctable"))
            parts = [_int(node, f"ecc_errors/{scope}/{memory}_uncorrectable{suffix}")
                     for suffix in ("", "_parity", "_secded")]
            if any(p is not None for p in parts):
                counters["uncorrected"][memory] = sum(p or 0 for p in parts)


def _page_addresses(node: ET.Element, path: str, count: int, inferred: list[str], what: str) -> list[int]:
    addresses = [int(e.text.strip(), 16) for e in node.iterfind(f"{path}//*")
                 if e.tag.endswith("address") and e.text and e.text.strip().lower().startswith("0x")]
    if len(addresses) < count:
        inferred.append(f"{count - len(addresses)} {what} page address(es) the report does not list")
        addresses += [0x1000 * (i + 1) for i in range(len(addresses), count)]
    return addresses[:count]


def _memory_health(gpu: dict[str, Any], node: ET.Element, inferred: list[str]) -> None:
    pages = gpu["retired_pages"]
    sbe = _int(node, "retired_pages/multiple_single_bit_retirement/retired_count")
    dbe = _int(node, "retired_pages/double_bit_retirement/retired_count")
    pages["supported"] = sbe is not None or dbe is not None
    if pages["supported"]:
        pages["sbe"] = _page_addresses(node, "retired_pages/multiple_single_bit_retirement", sbe or 0, inferred,
                                       "single-bit retired")
        pages["dbe"] = _page_addresses(node, "retired_pages/double_bit_retirement", dbe or 0, inferred,
                                       "double-bit retired")
        pages["pending"] = _flag(node, "retired_pages/pending_retirement") or 0
    rows = gpu["remapped_rows"]
    element = node.find("remapped_rows")
    rows["supported"] = element is not None and len(element) > 0
    if rows["supported"]:
        _set(rows, "corrected", _int(node, "remapped_rows/remapped_row_corr"))
        _set(rows, "uncorrected", _int(node, "remapped_rows/remapped_row_unc"))
        _set(rows, "pending", _flag(node, "remapped_rows/remapped_row_pending"))
        _set(rows, "failure", _flag(node, "remapped_rows/remapped_row_failure"))
        for key in ("max", "high", "partial", "low", "none"):
            path = f"remapped_rows/row_remapper_histogram/row_remapper_histogram_{key}"
            _set(rows["histogram"], key, _int(node, path))


def _temperature(gpu: dict[str, Any], node: ET.Element) -> None:
    temp = gpu["temperature"]
    current = _int(node, "temperature/gpu_temp")
    _set(temp, "gpu", current)
    tlimit = _int(node, "temperature/gpu_temp_tlimit")
    if tlimit is not None and current is not None:
        # Hopper and newer on R550+: the thresholds are degrees below the max operating temperature (T.Limit), which
        # is the current temperature plus the T.Limit reading (H200 580.159.04: 33 + 54 = 87, shutdown -8 -> 95)
        limit = current + tlimit
        temp["gpu_max"] = limit - (_int(node, "temperature/gpu_temp_max_gpu_tlimit_threshold") or 0)
        for key, tag in (("shutdown", "gpu_temp_max_tlimit_threshold"), ("slowdown", "gpu_temp_slow_tlimit_threshold")):
            offset = _int(node, f"temperature/{tag}")
            if offset is not None:
                temp[key] = limit - offset
        return  # the memory threshold is relative to a limit the report does not give: the model's (or --getters)
    for key, tags in (("shutdown", ("gpu_temp_max_threshold", "gpu_temp_max_tlimit_threshold")),
                      ("slowdown", ("gpu_temp_slow_threshold", "gpu_temp_slow_tlimit_threshold")),
                      ("gpu_max", ("gpu_temp_max_gpu_threshold", "gpu_temp_max_gpu_tlimit_threshold")),
                      ("mem_max", ("gpu_temp_max_mem_threshold", "gpu_temp_max_mem_tlimit_threshold"))):
        for tag in tags:
            value = _int(node, f"temperature/{tag}")
            if value is not None:
                temp[key] = value
                break


def _milliwatts(node: ET.Element, path: str) -> int | None:
    value = _number(node, path)
    return None if value is None else round(value * 1000)


def _power_and_clocks(gpu: dict[str, Any], node: ET.Element) -> None:
    readings = node.find("gpu_power_readings")
    if readings is None:
        readings = node.find("power_readings")
    if readings is not None:
        power = gpu["power"]
        for key, tag in (("enforced_mw", "current_power_limit"), ("limit_mw", "requested_power_limit"),
                         ("default_mw", "default_power_limit"), ("min_mw", "min_power_limit"),
                         ("max_mw", "max_power_limit")):
            _set(power, key, _milliwatts(readings, tag))
        for tag in ("instant_power_draw", "power_draw", "average_power_draw"):
            usage = _milliwatts(readings, tag)
            if usage is not None:
                power["usage_mw"] = usage
                break
    clocks = gpu["clocks"]
    for group, path in (("current", "clocks"), ("max", "max_clocks")):
        for key in ("graphics", "sm", "mem", "video"):
            _set(clocks[group], key, _int(node, f"{path}/{key}_clock"))
    reasons = node.find("clocks_event_reasons")
    if reasons is None:
        reasons = node.find("clocks_throttle_reasons")
    if reasons is not None:
        gpu["clock_event_reasons"] = sum(bit for tag, bit in CLOCK_EVENT_BITS.items()
                                         if _text(reasons, tag) == "Active" or
                                         _text(reasons, tag.replace("event", "throttle")) == "Active")


def gi_placement(gi_id: int, slots: int) -> tuple[int, int]:
    """(start, size) of GPU instance ``gi_id`` on a GPU of ``slots`` memory slots (8, or 4 on A30): the driver's
    placement rule, the memory axis as a binary heap (docs/simulator.md, "Notes")."""
    size, first = slots, 0
    while size >= 1:
        count = slots // size
        if gi_id < first + count:
            return (gi_id - first) * size, size
        first += count
        size //= 2
    raise ReplayError(f"GPU instance id {gi_id} does not fit a GPU of {slots} memory slots")


def _shared(device: ET.Element, tag: str) -> int | None:
    return _int(device, f"device_attributes/shared/{tag}")


def _mig_devices(gpu: dict[str, Any], node: ET.Element, inferred: list[str]) -> None:
    """The GPU's GPU and compute instances from the report's MIG devices (``mig_device`` anywhere under the GPU:
    535.261.03 writes them beside ``mig_devices``, others inside)."""
    mig = gpu["mig"]
    devices = node.findall(".//mig_device")
    if not devices or not mig["supported"]:
        return
    slots = max(start + size for p in mig["gi_profiles"] for start, size in p["placements"])
    instances: dict[int, dict[str, Any]] = {}
    for device in devices:
        gi_id, ci_id = _int(device, "gpu_instance_id"), _int(device, "compute_instance_id")
        if gi_id is None or ci_id is None:
            inferred.append(f"GPU {gpu['uuid']}: a MIG device without instance ids left out")
            continue
        start, size = gi_placement(gi_id, slots)
        engines = {"copy_engines": _shared(device, "copy_engine_count"), "decoders": _shared(device, "decoder_count"),
                   "encoders": _shared(device, "encoder_count"), "jpegs": _shared(device, "jpg_count"),
                   "ofas": _shared(device, "ofa_count")}
        memory = _int(device, "fb_memory_usage/total")
        profiles = [p for p in mig["gi_profiles"] if [start, size] in p["placements"] and
                    all(value is None or p.get(key) == value for key, value in engines.items())]
        if not profiles:
            raise ReplayError(f"GPU {gpu['uuid']}: no GPU instance profile of {gpu['model']} has GPU instance "
                              f"{gi_id}'s placement (slots {start}-{start + size - 1}) and engines; the model's MIG "
                              "tables do not describe this GPU")
        # the same profile's memory differs a little between driver builds (the MIG tables of H200 on 550 and 580)
        gip = min(profiles, key=lambda p: abs(p["memory_mib"] - memory) if memory is not None else 0)
        if memory is not None and gip["memory_mib"] != memory:
            inferred.append(f"GPU {gpu['uuid']} GPU instance {gi_id}: profile {gip['name']} has "
                            f"{gip['memory_mib']} MiB in the model, {memory} MiB in the report")
        gi = instances.setdefault(gi_id, {"id": gi_id, "profile_id": gip["id"], "start": start, "size": size,
                                          "compute_instances": []})
        sms = _shared(device, "multiprocessor_count")
        cips = [c for c in mig["ci_profiles"][str(gip["slices"])] if sms is None or c["sms"] == sms]
        if not cips:
            raise ReplayError(f"GPU {gpu['uuid']}: no compute instance profile of {gip['name']} has {sms} SMs")
        cip = cips[-1]
        used = {(ci["start"], ci["size"]) for ci in gi["compute_instances"]}
        taken = {slot for ci_start, ci_size in used for slot in range(ci_start, ci_start + ci_size)}
        free = [(a, b) for a, b in cip["placements"] if not taken & set(range(a, a + b))]
        if not free:
            raise ReplayError(f"GPU {gpu['uuid']}: GPU instance {gi_id} has no room for compute instance {ci_id}")
        gi["compute_instances"].append({"id": ci_id, "profile_id": cip["id"], "start": free[0][0],
                                        "size": free[0][1]})
    mig["gpu_instances"] = sorted(instances.values(), key=lambda gi: gi["id"])


def _gpu(node: ET.Element, index: int, inferred: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state object of one ``<gpu>`` element, and what the report says of its fabric."""
    name = _text(node, "product_name")
    device = _text(node, "pci/pci_device_id")
    subsystem = _text(node, "pci/pci_sub_system_id")
    model = match_model(name, int(device, 16) if device else None, int(subsystem, 16) if subsystem else None)
    gpu = build_gpu(model, index, f"replay/{_text(node, 'uuid') or index}", 0)
    for key, path in (("name", "product_name"), ("uuid", "uuid"), ("serial", "serial"),
                      ("vbios_version", "vbios_version"), ("board_part_number", "board_part_number"),
                      ("inforom_image_version", "inforom_version/img_version")):
        _set(gpu, key, _text(node, path))
    _set(gpu, "minor_number", _int(node, "minor_number"))
    _set(gpu, "persistence_mode", _flag(node, "persistence_mode"))
    mode = _text(node, "compute_mode")
    _set(gpu, "compute_mode", COMPUTE_MODES.get(mode or ""))
    pstate = _text(node, "performance_state")
    if pstate and re.fullmatch(r"P\d+", pstate):
        gpu["performance_state"] = int(pstate[1:])
    virtualization = _text(node, "gpu_virtualization_mode/virtualization_mode")
    gpu["virtualization_mode"] = VIRTUALIZATION.get(virtualization or "None", 0)
    _pci(gpu, node)
    memory = gpu["memory"]
    _set(memory, "total_mib", _int(node, "fb_memory_usage/total"))
    _set(memory, "reserved_mib", _int(node, "fb_memory_usage/reserved"))
    _set(memory, "used_mib", _int(node, "fb_memory_usage/used"))
    _set(gpu["bar1"], "total_mib", _int(node, "bar1_memory_usage/total"))
    _set(gpu["bar1"], "used_mib", _int(node, "bar1_memory_usage/used"))
    if (node.findtext("bar1_memory_usage/total") or "").strip() == NA:
        gpu["bar1"] = {}  # no aperture to report (GH200__q__1, 550.127.05: BAR1 Total N/A): NVML NOT_SUPPORTED
    if gpu["mig"]["supported"]:
        _set(gpu["mig"], "current", _flag(node, "mig_mode/current_mig"))
        _set(gpu["mig"], "pending", _flag(node, "mig_mode/pending_mig"))
        _mig_devices(gpu, node, inferred)
    _ecc(gpu, node)
    _memory_health(gpu, node, inferred)
    _temperature(gpu, node)
    _power_and_clocks(gpu, node)
    fabric = {"state": _text(node, "fabric/state"), "status": _text(node, "fabric/status"),
              "clique_id": _int(node, "fabric/cliqueId"), "cluster_uuid": _text(node, "fabric/clusterUuid")}
    return gpu, fabric


def _host_fabric(doc: dict[str, Any], fabrics: list[dict[str, Any]]) -> None:
    """The host's fabric from its GPUs': a non-zero clique or cluster UUID is a multi-node NVLink domain (GB200
    NVL72: ``fabric.multinode`` with that identity); a fabric with clique 0 and a zero UUID is a single-node NVSwitch
    system (HGX: ``nvswitch``, its fabric completes once nv-fabricmanager runs, as on the real host)."""
    with_fabric = [f for f in fabrics if f["state"] in FABRIC_STATES]
    if not with_fabric:
        return
    identity = next((f for f in with_fabric if f["clique_id"] or (f["cluster_uuid"] or ZERO_UUID) != ZERO_UUID),
                    None)
    if identity:
        doc["fabric"] = {"multinode": True}
        _set(doc["fabric"], "clique_id", identity["clique_id"])
        _set(doc["fabric"], "cluster_uuid", identity["cluster_uuid"])
        return
    model = doc["gpus"][0]["model"]
    counts = [p.nvswitch_count for p in PRESETS.values() if p.model == model and p.nvswitch_count]
    count = counts[0] if counts else NVSWITCHES_BY_ARCHITECTURE.get(doc["gpus"][0]["architecture"], 4)
    doc["nvswitch"] = {"count": count, "fabric_manager_required": True}


def _calls(getters: Iterable[dict[str, Any]], fn: str, gpu: int) -> list[dict[str, Any]]:
    return [c for c in getters if c.get("fn") == fn and c.get("gpu") == gpu]


def apply_getters(doc: dict[str, Any], getters: list[dict[str, Any]]) -> None:
    """Add to ``doc`` what a getter dump of the same host says and the XML does not (GPUs matched by UUID)."""
    by_uuid = {c.get("value"): c.get("gpu") for c in getters if c.get("fn") == "nvmlDeviceGetUUID"}
    for gpu in doc["gpus"]:
        index = by_uuid.get(gpu["uuid"])
        if index is None:
            continue
        links = _calls(getters, "nvmlDeviceGetNvLinkState", index)
        if links and all(c["rc"] == "NVML_ERROR_NOT_SUPPORTED" for c in links):
            gpu["nvlink"]["links"] = []  # the host sees none of the board's NVLinks (a GPU alone in a VM)
        elif links:
            ordered = sorted(links, key=lambda c: c["args"][0])
            gpu["nvlink"]["links"] = [int(c["value"]) for c in ordered if c["rc"] == "OK"]
            versions = [c["value"] for c in _calls(getters, "nvmlDeviceGetNvLinkVersion", index) if c["rc"] == "OK"]
            if versions:
                gpu["nvlink"]["version"] = int(versions[0])
        for call in _calls(getters, "nvmlDeviceGetTemperatureThreshold", index):
            key = {0: "shutdown", 1: "slowdown", 2: "mem_max", 3: "gpu_max"}.get(call["args"][0])
            if key and call["rc"] == "OK":
                gpu["temperature"][key] = int(call["value"])
        for call in _calls(getters, "nvmlDeviceGetVirtualizationMode", index):
            if call["rc"] == "OK":
                gpu["virtualization_mode"] = int(call["value"])


def read_getters(path: Path) -> list[dict[str, Any]]:
    """The calls of a getter dump (JSON lines)."""
    calls = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                calls.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ReplayError(f"{path}:{number} is not a JSON line ({exc.msg}); pass the output of "
                                  "nvml_getters_dump.py") from None
    return calls


def state_from_xml(text: str, getters: list[dict[str, Any]] | None = None, source: str = "") -> dict[str, Any]:
    """Return the schema-1 state document of the host a ``nvidia-smi -q -x`` report (``text``) describes."""
    return state_from_root(parse_xml(text), getters, source)


def state_from_root(root: ET.Element, getters: list[dict[str, Any]] | None = None,
                    source: str = "") -> dict[str, Any]:
    """Return the state document of the host an ``<nvidia_smi_log>`` tree describes: the XML report's, or the one
    ``replay_text`` reads from the text report (``nvidia-smi -q``)."""
    nodes = root.findall("gpu")
    if not nodes:
        raise ReplayError("the report lists no GPU (<gpu> element): nothing to replay")
    inferred: list[str] = []
    pairs = [_gpu(node, index, inferred) for index, node in enumerate(nodes)]
    models = {gpu["model"] for gpu, _ in pairs}
    pairs.sort(key=lambda pair: (pair[0]["pci"]["domain"], pair[0]["pci"]["bus"], pair[0]["pci"]["device"]))
    for index, (gpu, _) in enumerate(pairs):
        gpu["index"] = index
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "preset": None,
        "require_root": True,
        "inject": {},
        "event_seq": 0,
        "clients": [],
        "gpus": [gpu for gpu, _ in pairs],
        "replay": {"source": source, "driver_version": _text(root, "driver_version"),
                   "cuda_version": _text(root, "cuda_version"), "models": sorted(models),
                   "not_replayed": list(NOT_REPLAYED), "inferred": inferred},
    }
    _host_fabric(doc, [fabric for _, fabric in pairs])
    if getters:
        apply_getters(doc, getters)
    return doc
