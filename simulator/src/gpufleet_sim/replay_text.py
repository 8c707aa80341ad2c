"""Replay a real host from NVIDIA's text report, ``nvidia-smi -q`` (the XML report is ``replay.py``'s).

The text is read into the shape ``nvidia-smi -q -x`` has (an ``<nvidia_smi_log>`` tree with the XML report's tag
names), and ``replay.state_from_root`` turns that into the host's state: every field is interpreted once, whichever
report it came from. ``LABELS`` maps a line of a GPU's section (its label and the labels of the sections above it)
to the XML path that holds the same value. The pairs are read off one GPU's two reports taken minutes apart, the
real H200 of tests/data/ground-truth/h200-sxm-passthrough-r580 (``nvidia-smi/q.txt`` and ``nvidia-smi/qx.xml``,
driver 580.159.04); the Ampere labels (absolute temperature thresholds, ``Power Draw``) from the public 555.42.02
and 550 transcripts in tests/data/ground-truth/public. A line whose labels are not in the table is not read: what it
would say comes from the model file, as for a field the XML report lacks.

What the text report does not print at all stays with the model (or ``--getters``): retired page addresses (the
text gives counts only) and the MIG devices' instance ids. A transcript with MIG devices listed is refused, not
guessed at: pass ``nvidia-smi -q -x`` for a host with MIG instances.

Standard library only; the simulator never imports the product.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from gpufleet_sim.replay import ReplayError, state_from_root

HEADER = "==============NVSMI LOG=============="
#: ``GPU 00000000:68:00.0``: the line that opens a GPU's section (at the left margin)
GPU_LINE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
#: ``    Label        : value``: nvidia-smi pads every label to one column, so a colon with a space before it ends it
FIELD_LINE = re.compile(r"^(?P<label>\S.*?)\s+:(?: (?P<value>.*))?$")
#: the host-wide lines before the first GPU -> the XML report's tag
HOST_LABELS = {"Driver Version": "driver_version", "CUDA Version": "cuda_version"}
_EVENTS = "clocks_event_reasons/clocks_event_reason_"
_TEMP = "temperature/gpu_temp"
#: a GPU section's labels -> the XML path under <gpu> of the same value
LABELS: dict[tuple[str, ...], str] = {
    ("Product Name",): "product_name",
    ("Persistence Mode",): "persistence_mode",
    ("MIG Mode", "Current"): "mig_mode/current_mig",
    ("MIG Mode", "Pending"): "mig_mode/pending_mig",
    ("Serial Number",): "serial",
    ("GPU UUID",): "uuid",
    ("Minor Number",): "minor_number",
    ("VBIOS Version",): "vbios_version",
    ("Board Part Number",): "board_part_number",
    ("Inforom Version", "Image Version"): "inforom_version/img_version",
    ("GPU Virtualization Mode", "Virtualization Mode"): "gpu_virtualization_mode/virtualization_mode",
    ("PCI", "Device Id"): "pci/pci_device_id",
    ("PCI", "Bus Id"): "pci/pci_bus_id",
    ("PCI", "Sub System Id"): "pci/pci_sub_system_id",
    ("PCI", "GPU Link Info", "PCIe Generation", "Max"): "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    ("PCI", "GPU Link Info", "PCIe Generation", "Current"): "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    ("PCI", "GPU Link Info", "PCIe Generation", "Device Max"): "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen",
    ("PCI", "GPU Link Info", "Link Width", "Max"): "pci/pci_gpu_link_info/link_widths/max_link_width",
    ("PCI", "GPU Link Info", "Link Width", "Current"): "pci/pci_gpu_link_info/link_widths/current_link_width",
    ("PCI", "Replays Since Reset"): "pci/replay_counter",
    ("Performance State",): "performance_state",
    ("Clocks Event Reasons", "Idle"): _EVENTS + "gpu_idle",
    ("Clocks Event Reasons", "Applications Clocks Setting"): _EVENTS + "applications_clocks_setting",
    ("Clocks Event Reasons", "SW Power Cap"): _EVENTS + "sw_power_cap",
    ("Clocks Event Reasons", "HW Slowdown"): _EVENTS + "hw_slowdown",
    ("Clocks Event Reasons", "HW Slowdown", "HW Thermal Slowdown"): _EVENTS + "hw_thermal_slowdown",
    ("Clocks Event Reasons", "HW Slowdown", "HW Power Brake Slowdown"): _EVENTS + "hw_power_brake_slowdown",
    ("Clocks Event Reasons", "Sync Boost"): _EVENTS + "sync_boost",
    ("Clocks Event Reasons", "SW Thermal Slowdown"): _EVENTS + "sw_thermal_slowdown",
    ("Clocks Event Reasons", "Display Clock Setting"): _EVENTS + "display_clocks_setting",
    ("FB Memory Usage", "Total"): "fb_memory_usage/total",
    ("FB Memory Usage", "Reserved"): "fb_memory_usage/reserved",
    ("FB Memory Usage", "Used"): "fb_memory_usage/used",
    ("BAR1 Memory Usage", "Total"): "bar1_memory_usage/total",
    ("BAR1 Memory Usage", "Used"): "bar1_memory_usage/used",
    ("Compute Mode",): "compute_mode",
    ("ECC Mode", "Current"): "ecc_mode/current_ecc",
    ("ECC Mode", "Pending"): "ecc_mode/pending_ecc",
    **{("ECC Errors", scope.title(), label): f"ecc_errors/{scope}/{tag}"
       for scope in ("volatile", "aggregate")
       for label, tag in (("SRAM Correctable", "sram_correctable"), ("SRAM Uncorrectable", "sram_uncorrectable"),
                          ("SRAM Uncorrectable Parity", "sram_uncorrectable_parity"),
                          ("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded"),
                          ("DRAM Correctable", "dram_correctable"), ("DRAM Uncorrectable", "dram_uncorrectable"))},
    ("Retired Pages", "Single Bit ECC"): "retired_pages/multiple_single_bit_retirement/retired_count",
    ("Retired Pages", "Double Bit ECC"): "retired_pages/double_bit_retirement/retired_count",
    ("Retired Pages", "Pending Page Blacklist"): "retired_pages/pending_retirement",
    ("Remapped Rows",): "remapped_rows",
    ("Remapped Rows", "Correctable Error"): "remapped_rows/remapped_row_corr",
    ("Remapped Rows", "Uncorrectable Error"): "remapped_rows/remapped_row_unc",
    ("Remapped Rows", "Pending"): "remapped_rows/remapped_row_pending",
    ("Remapped Rows", "Remapping Failure Occurred"): "remapped_rows/remapped_row_failure",
    **{("Remapped Rows", "Bank Remap Availability Histogram", key.title()):
       f"remapped_rows/row_remapper_histogram/row_remapper_histogram_{key}"
       for key in ("max", "high", "partial", "low", "none")},
    ("Temperature", "GPU Current Temp"): _TEMP,
    ("Temperature", "GPU T.Limit Temp"): _TEMP + "_tlimit",
    ("Temperature", "GPU Shutdown T.Limit Temp"): _TEMP + "_max_tlimit_threshold",
    ("Temperature", "GPU Slowdown T.Limit Temp"): _TEMP + "_slow_tlimit_threshold",
    ("Temperature", "GPU Max Operating T.Limit Temp"): _TEMP + "_max_gpu_tlimit_threshold",
    ("Temperature", "Memory Max Operating T.Limit Temp"): _TEMP + "_max_mem_tlimit_threshold",
    ("Temperature", "GPU Shutdown Temp"): _TEMP + "_max_threshold",
    ("Temperature", "GPU Slowdown Temp"): _TEMP + "_slow_threshold",
    ("Temperature", "GPU Max Operating Temp"): _TEMP + "_max_gpu_threshold",
    ("Temperature", "Memory Max Operating Temp"): _TEMP + "_max_mem_threshold",
    **{("GPU Power Readings", label): f"gpu_power_readings/{tag}"
       for label, tag in (("Power Draw", "power_draw"), ("Instantaneous Power Draw", "instant_power_draw"),
                          ("Average Power Draw", "average_power_draw"),
                          ("Current Power Limit", "current_power_limit"),
                          ("Requested Power Limit", "requested_power_limit"),
                          ("Default Power Limit", "default_power_limit"), ("Min Power Limit", "min_power_limit"),
                          ("Max Power Limit", "max_power_limit"))},
    **{(section, label): f"{tag}/{clock}_clock"
       for section, tag in (("Clocks", "clocks"), ("Max Clocks", "max_clocks"))
       for label, clock in (("Graphics", "graphics"), ("SM", "sm"), ("Memory", "mem"), ("Video", "video"))},
    ("Fabric", "State"): "fabric/state",
    ("Fabric", "Status"): "fabric/status",
    ("Fabric", "CliqueId"): "fabric/cliqueId",
    ("Fabric", "ClusterUUID"): "fabric/clusterUuid",
}


@dataclass
class Line:
    """One line of the report: its label, its value (None for a section heading) and the lines indented under it."""

    label: str
    value: str | None
    number: int
    children: list[Line] = field(default_factory=list)


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(line number, indentation, stripped text) of the report's lines; provenance lines before it (``# source:``)
    and blank lines are left out."""
    out = []
    started = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or (not started and line.startswith("#")):
            continue
        started = True
        expanded = line.expandtabs(4)
        out.append((number, len(expanded) - len(expanded.lstrip(" ")), expanded.strip()))
    return out


def parse_text(text: str) -> list[Line]:
    """The report as a tree of lines (``Line``), by indentation: the top-level lines and the GPU sections."""
    if "<nvidia_smi_log" in text:
        raise ReplayError("this is the XML report (`nvidia-smi -q -x`): pass it with --nvidia-smi-xml")
    roots: list[Line] = []
    stack: list[tuple[int, Line]] = []
    for number, indent, body in _lines(text):
        gpu = GPU_LINE.match(body)
        match = None if gpu else FIELD_LINE.match(body)
        if gpu and indent == 0:
            line = Line("GPU", gpu.group(1), number)
        elif match:
            value = match.group("value")
            line = Line(match.group("label").strip(), value.strip() if value is not None else None, number)
        else:
            line = Line(body, None, number)  # a section heading ("PCI", "Temperature")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(line)
        stack.append((indent, line))
    return roots


def _put(root: ET.Element, path: str, value: str | None) -> None:
    """Set the text at ``path`` under ``root`` (elements created on the way); a heading only creates the element."""
    node = root
    for tag in path.split("/"):
        child = node.find(tag)
        node = child if child is not None else ET.SubElement(node, tag)
    if value is not None:
        node.text = value


def _gpu_element(section: Line) -> ET.Element:
    gpu = ET.Element("gpu", id=section.value or "")

    def walk(lines: list[Line], above: tuple[str, ...]) -> None:
        for line in lines:
            labels = (*above, line.label)
            if not above and line.label.lower().startswith("mig device") and line.children:
                raise ReplayError(f"line {line.number}: MIG devices are listed, and the text report does not say "
                                  "enough to rebuild them; pass the same host's `nvidia-smi -q -x` with "
                                  "--nvidia-smi-xml")
            path = LABELS.get(labels)
            if path is not None:
                _put(gpu, path, line.value)
            walk(line.children, labels)

    walk(section.children, ())
    return gpu


def text_to_xml(text: str) -> ET.Element:
    """The ``<nvidia_smi_log>`` tree the XML report of the same host would have, as far as ``LABELS`` reads it."""
    lines = parse_text(text)
    root = ET.Element("nvidia_smi_log")
    for line in lines:
        if line.label in HOST_LABELS and line.value is not None:
            _put(root, HOST_LABELS[line.label], line.value)
    gpus = [line for line in lines if line.label == "GPU"]
    if not gpus:
        header = any(line.label == HEADER for line in lines)
        where = "after the NVSMI LOG header" if header else "and no NVSMI LOG header"
        raise ReplayError(f"the report lists no GPU (no `GPU <bus id>` section {where}): pass the unchanged "
                          "output of `nvidia-smi -q` of a whole host")
    for line in gpus:
        root.append(_gpu_element(line))
    return root


def state_from_text(text: str, getters: list[dict[str, Any]] | None = None, source: str = "") -> dict[str, Any]:
    """Return the schema-1 state document of the host a ``nvidia-smi -q`` report (``text``) describes."""
    return state_from_root(text_to_xml(text), getters, source)
