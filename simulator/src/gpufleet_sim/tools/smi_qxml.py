"""``nvidia-smi -q -x``: the NVSMI LOG as NVIDIA's 535 ``nvidia-smi`` writes it in XML (``nvsmi_device_v12.dtd``).

The values are the ``-q`` report's (``smi_qlog.gpu_blocks``): its lines are read back as a tree (four spaces per
level) and written with 535's element names. What the XML holds beyond the text (the retired page lists, the power
state in both power readings, the supported clocks) comes from the same NVML calls.
"""

from __future__ import annotations

import time
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from . import _common
from .smi_common import NA, Gpu, Smi
from .smi_qlog import KEY_WIDTH, accounted_processes, gpu_blocks, supported_memory_clocks
from .smi_report import process_rows

# element names by label; a (parent label, label) key wins over the label alone
TAGS: dict[Any, str] = {
    "Product Name": "product_name", "Product Brand": "product_brand", "Product Architecture": "product_architecture",
    "Display Mode": "display_mode", "Display Active": "display_active", "Persistence Mode": "persistence_mode",
    "Addressing Mode": "addressing_mode", "MIG Mode": "mig_mode", ("MIG Mode", "Current"): "current_mig",
    ("MIG Mode", "Pending"): "pending_mig", "Accounting Mode": "accounting_mode",
    "Accounting Mode Buffer Size": "accounting_mode_buffer_size", "Driver Model": "driver_model",
    ("Driver Model", "Current"): "current_dm", ("Driver Model", "Pending"): "pending_dm", "Serial Number": "serial",
    "GPU UUID": "uuid", "Minor Number": "minor_number", "VBIOS Version": "vbios_version",
    "MultiGPU Board": "multigpu_board", "Board ID": "board_id", "Board Part Number": "board_part_number",
    "GPU Part Number": "gpu_part_number", "FRU Part Number": "gpu_fru_part_number", "Module ID": "gpu_module_id",
    "Inforom Version": "inforom_version", "Image Version": "img_version", "OEM Object": "oem_object",
    "ECC Object": "ecc_object", "Power Management Object": "pwr_object",
    "Inforom BBX Object Flush": "inforom_bbx_flush",
    "Latest Timestamp": "latest_timestamp", "Latest Duration": "latest_duration",
    "GPU Operation Mode": "gpu_operation_mode", ("GPU Operation Mode", "Current"): "current_gom",
    ("GPU Operation Mode", "Pending"): "pending_gom", "GSP Firmware Version": "gsp_firmware_version",
    "GPU Virtualization Mode": "gpu_virtualization_mode", "Virtualization Mode": "virtualization_mode",
    "Host VGPU Mode": "host_vgpu_mode", "GPU Reset Status": "gpu_reset_status", "Reset Required": "reset_required",
    "Drain and Reset Recommended": "drain_and_reset_recommended", "IBMNPU": "ibmnpu",
    "Relaxed Ordering Mode": "relaxed_ordering_mode", "PCI": "pci", ("PCI", "Bus"): "pci_bus",
    ("PCI", "Device"): "pci_device", ("PCI", "Domain"): "pci_domain", "Device Id": "pci_device_id",
    "Bus Id": "pci_bus_id", "Sub System Id": "pci_sub_system_id", "GPU Link Info": "pci_gpu_link_info",
    "PCIe Generation": "pcie_gen", ("PCIe Generation", "Max"): "max_link_gen",
    ("PCIe Generation", "Current"): "current_link_gen", "Device Current": "device_current_link_gen",
    "Device Max": "max_device_link_gen", "Host Max": "max_host_link_gen", "Link Width": "link_widths",
    ("Link Width", "Max"): "max_link_width", ("Link Width", "Current"): "current_link_width",
    "Bridge Chip": "pci_bridge_chip", ("Bridge Chip", "Type"): "bridge_chip_type",
    ("Bridge Chip", "Firmware"): "bridge_chip_fw", "Replays Since Reset": "replay_counter",
    "Replay Number Rollovers": "replay_rollover_counter", "Tx Throughput": "tx_util", "Rx Throughput": "rx_util",
    "Atomic Caps Inbound": "atomic_caps_inbound", "Atomic Caps Outbound": "atomic_caps_outbound",
    "Fan Speed": "fan_speed", "Performance State": "performance_state", "Clocks Event Reasons": "clocks_event_reasons",
    "Idle": "clocks_event_reason_gpu_idle",
    "Applications Clocks Setting": "clocks_event_reason_applications_clocks_setting",
    "SW Power Cap": "clocks_event_reason_sw_power_cap", "HW Slowdown": "clocks_event_reason_hw_slowdown",
    "HW Thermal Slowdown": "clocks_event_reason_hw_thermal_slowdown",
    "HW Power Brake Slowdown": "clocks_event_reason_hw_power_brake_slowdown",
    "Sync Boost": "clocks_event_reason_sync_boost", "SW Thermal Slowdown": "clocks_event_reason_sw_thermal_slowdown",
    "Display Clock Setting": "clocks_event_reason_display_clocks_setting",
    "Sparse Operation Mode": "sparse_operation_mode", "FB Memory Usage": "fb_memory_usage",
    "BAR1 Memory Usage": "bar1_memory_usage", "BAR1 Memory": "bar1_memory_usage",
    "Conf Compute Protected Memory Usage": "cc_protected_memory_usage", "Total": "total", "Reserved": "reserved",
    "Used": "used", "Free": "free", "Compute Mode": "compute_mode", "Utilization": "utilization",
    ("Utilization", "Gpu"): "gpu_util", ("Utilization", "Memory"): "memory_util", "Encoder": "encoder_util",
    "Decoder": "decoder_util", "JPEG": "jpeg_util", "OFA": "ofa_util", "Encoder Stats": "encoder_stats",
    "FBC Stats": "fbc_stats", "Active Sessions": "session_count", "Average FPS": "average_fps",
    "Average Latency": "average_latency", "ECC Mode": "ecc_mode", ("ECC Mode", "Current"): "current_ecc",
    ("ECC Mode", "Pending"): "pending_ecc", "ECC Errors": "ecc_errors", "Volatile": "volatile",
    "Aggregate": "aggregate", "SRAM Correctable": "sram_correctable",
    "SRAM Uncorrectable Parity": "sram_uncorrectable_parity", "SRAM Uncorrectable SEC-DED": "sram_uncorrectable_secded",
    "SRAM Uncorrectable": "sram_uncorrectable", "DRAM Correctable": "dram_correctable",
    "DRAM Uncorrectable": "dram_uncorrectable", "SRAM Threshold Exceeded": "sram_threshold_exceeded",
    "Aggregate Uncorrectable SRAM Sources": "aggregate_uncorrectable_sram_sources", "SRAM L2": "sram_l2",
    "SRAM SM": "sram_sm", "SRAM Microcontroller": "sram_microcontroller", "SRAM PCIE": "sram_pcie",
    "SRAM Other": "sram_other", "Remapped Rows": "remapped_rows", "Correctable Error": "remapped_row_corr",
    "Uncorrectable Error": "remapped_row_unc", ("Remapped Rows", "Pending"): "remapped_row_pending",
    "Remapping Failure Occurred": "remapped_row_failure", "Bank Remap Availability Histogram": "row_remapper_histogram",
    ("Bank Remap Availability Histogram", "Max"): "row_remapper_histogram_max",
    "High": "row_remapper_histogram_high", "Partial": "row_remapper_histogram_partial",
    "Low": "row_remapper_histogram_low", "None": "row_remapper_histogram_none", "Temperature": "temperature",
    "GPU Current Temp": "gpu_temp", "GPU T.Limit Temp": "gpu_temp_tlimit",
    "GPU Shutdown T.Limit Temp": "gpu_temp_max_tlimit_threshold",
    "GPU Slowdown T.Limit Temp": "gpu_temp_slow_tlimit_threshold",
    "GPU Max Operating T.Limit Temp": "gpu_temp_max_gpu_tlimit_threshold",
    "GPU Target Temperature": "gpu_target_temperature", "Memory Current Temp": "memory_temp",
    "Memory Max Operating T.Limit Temp": "gpu_temp_max_mem_tlimit_threshold",
    "Supported GPU_TARGET_TEMP": "supported_gpu_target_temp",
    ("Supported GPU_TARGET_TEMP", "Min"): "gpu_target_temp_min",
    ("Supported GPU_TARGET_TEMP", "Max"): "gpu_target_temp_max", "GPU Power Readings": "gpu_power_readings",
    "Module Power Readings": "module_power_readings", "Power Draw": "power_draw",
    "Current Power Limit": "current_power_limit", "Requested Power Limit": "requested_power_limit",
    "Default Power Limit": "default_power_limit", "Min Power Limit": "min_power_limit",
    "Max Power Limit": "max_power_limit", "Clocks": "clocks", "Applications Clocks": "applications_clocks",
    "Default Applications Clocks": "default_applications_clocks", "Deferred Clocks": "deferred_clocks",
    "Max Clocks": "max_clocks", "Max Customer Boost Clocks": "max_customer_boost_clocks", "Graphics": "graphics_clock",
    "SM": "sm_clock", "Memory": "mem_clock", "Video": "video_clock", ("Voltage", "Graphics"): "graphics_volt",
    "Clock Policy": "clock_policy", "Auto Boost": "auto_boost", "Auto Boost Default": "auto_boost_default",
    "Voltage": "voltage", "Fabric": "fabric", "State": "state", "Status": "status",
    "Supported Clocks": "supported_clocks", "Accounted Processes": "accounted_processes", "Power State": "power_state",
    # a MIG device
    "Index": "index", "GPU Instance ID": "gpu_instance_id", "Compute Instance ID": "compute_instance_id",
    "Device Attributes": "device_attributes", "Shared": "shared", "Multiprocessor count": "multiprocessor_count",
    "Copy Engine count": "copy_engine_count", "Encoder count": "encoder_count", "Decoder count": "decoder_count",
    "OFA count": "ofa_count", "JPG count": "jpg_count", ("MIG Device", "ECC Errors"): "ecc_error_count",
    ("MIG ECC Errors", "Volatile"): "volatile_count",
}
HEX_WITHOUT_PREFIX = {"pci_bus", "pci_device", "pci_domain", "pci_device_id", "pci_sub_system_id"}

Node = tuple[str, Any, list[Any]]  # (label, value or None, children)


def _tree(lines: list[str]) -> list[Node]:
    """The report's lines as a tree: four spaces per level, ``label : value`` leaves."""
    root: list[Node] = []
    stack: list[tuple[int, list[Node]]] = [(0, root)]
    for text in lines:
        level = (len(text) - len(text.lstrip(" "))) // 4
        leaf = text[KEY_WIDTH:KEY_WIDTH + 2] == ": "
        label, value = (text[:KEY_WIDTH].strip(), text[KEY_WIDTH + 2:]) if leaf else (text.strip(), None)
        while stack[-1][0] >= level:
            stack.pop()
        node: Node = (label, value, [])
        stack[-1][1].append(node)
        stack.append((level, node[2]))
    return root


def _tag(parent: str, label: str) -> str:
    return TAGS.get((parent, label)) or TAGS[label]


def _emit(nodes: list[Node], parent: str, depth: int, out: list[str]) -> None:
    tabs = "\t" * depth
    for label, value, children in nodes:
        tag = _tag(parent, label)
        if label == "HW Slowdown":  # its two sub-reasons are its siblings in the XML
            out.append(f"{tabs}<{tag}>{escape(value)}</{tag}>")
            _emit(children, label, depth, out)
            continue
        if value is not None:
            shown = value[2:] if tag in HEX_WITHOUT_PREFIX and value.startswith("0x") else value
            out.append(f"{tabs}<{tag}>{escape(shown)}</{tag}>")
            continue
        out.append(f"{tabs}<{tag}>")
        _emit(children, "MIG ECC Errors" if parent == "MIG Device" and label == "ECC Errors" else label,
              depth + 1, out)
        out.append(f"{tabs}</{tag}>")


def query_xml(smi: Smi, gpus: list[Gpu]) -> str:
    """The whole ``-q -x`` document for ``gpus``."""
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">', "<nvidia_smi_log>",
           f"\t<timestamp>{time.strftime('%a %b %d %H:%M:%S %Y')}</timestamp>",
           f"\t<driver_version>{escape(smi.driver_version())}</driver_version>",
           f"\t<cuda_version>{smi.cuda_version()}</cuda_version>",
           f"\t<attached_gpus>{smi.count()}</attached_gpus>"]
    for gpu in gpus:
        out.append(f"\t<gpu id={quoteattr(gpu.bus_id)}>")
        out += _gpu(smi, gpu)
        out += ["\t</gpu>", ""]
    return "\n".join([*out, "</nvidia_smi_log>"]) + "\n"


def _gpu(smi: Smi, gpu: Gpu) -> list[str]:
    lines: list[str] = []
    for tag, extra, block in gpu_blocks(smi, gpu):
        if extra and ("Samples" in block[0] or tag == "SUPPORTED_CLOCKS"):
            continue
        lines += block
    nodes = _tree(lines)
    out: list[str] = []
    migs = [n for n in nodes if n[0] == "MIG Device"]
    for label, value, children in nodes:
        if label == "MIG Device":
            continue
        if label == "Retired Pages":
            out += _retired_pages(smi, gpu)
        elif label == "Processes":
            out += _processes(smi, gpu)
        elif label in ("GPU Power Readings", "Module Power Readings"):
            pstate = next(v for lbl, v, _ in nodes if lbl == "Performance State")
            _emit([(label, None, [("Power State", pstate, []), *children])], "", 2, out)
        elif label == "Accounted Processes":
            continue
        else:
            _emit([(label, value, children)], "", 2, out)
        if label == "MIG Mode":
            out.append("\t\t<mig_devices>")
            if not migs:
                out.append("\t\t\tNone")
            for mig in migs:  # 535 writes <mig_device> at the level of <mig_devices>
                out += ["\t\t<mig_device>"]
                _emit(mig[2], "MIG Device", 3, out)
                out += ["\t\t</mig_device>"]
            out.append("\t\t</mig_devices>")
        if label == "Fabric":
            out += _supported_clocks(smi, gpu)
    if accounted_processes(smi, gpu.handle) == "None":
        return [*out, "\t\t<accounted_processes>", "\t\t</accounted_processes>"]
    return [*out, "\t\t<accounted_processes>N/A</accounted_processes>"]


def _supported_clocks(smi: Smi, gpu: Gpu) -> list[str]:
    clocks = supported_memory_clocks(smi, gpu.handle)
    if clocks == NA:
        return ["\t\t<supported_clocks>N/A</supported_clocks>"]
    out = ["\t\t<supported_clocks>"]
    for mem, graphics in clocks:
        out += ["\t\t\t<supported_mem_clock>", f"\t\t\t\t<value>{mem} MHz</value>"]
        out += (["\t\t\t\t<supported_graphics_clock>N/A</supported_graphics_clock>"] if graphics == NA else
                [f"\t\t\t\t<supported_graphics_clock>{g} MHz</supported_graphics_clock>" for g in graphics])
        out.append("\t\t\t</supported_mem_clock>")
    return [*out, "\t\t</supported_clocks>"]


def _retired_pages(smi: Smi, gpu: Gpu) -> list[str]:
    nv = smi.nvml
    out = ["\t\t<retired_pages>"]
    for tag, cause in (("multiple_single_bit_retirement", 0), ("double_bit_retirement", 1)):
        pages = smi.call(nv.nvmlDeviceGetRetiredPages_v2, gpu.handle, cause)
        out.append(f"\t\t\t<{tag}>")
        if pages == NA:
            out += ["\t\t\t\t<retired_count>N/A</retired_count>", "\t\t\t\t<retired_pagelist>N/A</retired_pagelist>"]
        else:
            out += [f"\t\t\t\t<retired_count>{len(pages)}</retired_count>", "\t\t\t\t<retired_pagelist>"]
            for address, stamp in ((page["address"], page["timestamp"]) for page in pages):
                out += ["\t\t\t\t\t<retired_page>",
                        f"\t\t\t\t\t\t<retired_page_address>0x{int(address):016x}</retired_page_address>"]
                if stamp:
                    when = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(int(stamp)))
                    out.append(f"\t\t\t\t\t\t<retired_page_timestamp>{when}</retired_page_timestamp>")
                out.append("\t\t\t\t\t</retired_page>")
            out.append("\t\t\t\t</retired_pagelist>")
        out.append(f"\t\t\t</{tag}>")
    pending = smi.call(nv.nvmlDeviceGetRetiredPagesPendingStatus, gpu.handle)
    shown = NA if pending == NA else ("Yes" if pending else "No")
    return [*out, f"\t\t\t<pending_blacklist>{shown}</pending_blacklist>",
            f"\t\t\t<pending_retirement>{shown}</pending_retirement>", "\t\t</retired_pages>"]


def _processes(smi: Smi, gpu: Gpu) -> list[str]:
    out = ["\t\t<processes>"]
    for pid, name, used, gi, ci, kind in process_rows(smi, gpu):
        out += ["\t\t\t<process_info>", f"\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>",
                f"\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>", f"\t\t\t\t<pid>{pid}</pid>",
                f"\t\t\t\t<type>{kind}</type>", f"\t\t\t\t<process_name>{escape(_common.text(name))}</process_name>",
                f"\t\t\t\t<used_memory>{NA if used == NA else f'{used} MiB'}</used_memory>", "\t\t\t</process_info>"]
    return [*out, "\t\t</processes>"]


__all__ = ["query_xml"]
