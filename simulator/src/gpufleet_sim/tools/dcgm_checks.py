"""What the simulated DCGM concludes from the host's state: ``dcgmi diag`` test results and health incidents.

Pure functions of a state document, so the rules are testable as tables. Watched systems follow DCGM's health
letters: ``p`` PCIe, ``m`` memory, ``i`` InfoROM, ``t`` thermal and power, ``n`` NVLink, ``d`` driver, ``a`` all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CRITICAL_XIDS = {48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}
HEALTH_SYSTEMS = {"p": "PCIe", "m": "Memory", "i": "InfoROM", "t": "Thermal", "n": "NVLink", "d": "Driver"}
LEVEL_TESTS = {
    1: [("Deployment", "software")],
    2: [("Deployment", "software"), ("Integration", "pcie"), ("Hardware", "memory")],
    3: [("Deployment", "software"), ("Integration", "pcie"), ("Hardware", "memory"),
        ("Hardware", "diagnostic"), ("Stress", "targeted_stress"), ("Stress", "targeted_power"),
        ("Stress", "memory_bandwidth")],
}
# dcgmError_t, dcgmErrorCategory_t and dcgmErrorSeverity_t of NVIDIA's DCGM (dcgmlib/dcgm_errors.h in
# github.com/NVIDIA/DCGM): the ids a ``dcgmi diag -j`` warning carries as error_id, error_category, error_severity.
FR = {"xid": 101, "dbe": 4, "pending_retire": 6, "nvlink_down": 14, "pcie_gen": 45, "pcie_width": 46,
      "thermal": 40, "row_remap_failure": 80, "pending_row_remap": 85, "internal": 44, "api_fail_gpu": 65}
EC = {"xid": 5, "software": 8, "memory": 10, "nvlink": 11, "pcie": 13, "thermal": 9}
SEVERITY = {"monitor": 1, "isolate": 2, "triage": 4, "reset": 6}
TEST_LABELS = {"software": "Software", "pcie": "PCIe", "memory": "Memory", "diagnostic": "Diagnostic",
               "targeted_stress": "Targeted Stress", "targeted_power": "Targeted Power",
               "memory_bandwidth": "Memory Bandwidth"}


@dataclass
class TestResult:
    """One diagnostic test on one GPU."""

    category: str
    name: str
    gpu: int
    status: str  # Pass | Fail | Skip
    errors: list[str] = field(default_factory=list)
    # Per error: {error_id, error_category, error_severity} (DCGM's ids, see FR/EC/SEVERITY), in ``errors``' order.
    codes: list[dict[str, int]] = field(default_factory=list)


Finding = tuple[str, str, str, str]  # message, FR key, EC key, SEVERITY key


def _code(finding: Finding) -> dict[str, int]:
    _msg, fr, ec, sev = finding
    return {"error_id": FR[fr], "error_category": EC[ec], "error_severity": SEVERITY[sev]}


@dataclass
class Incident:
    """One health problem: a watched system, a GPU, a severity (Warning/Failure) and DCGM's message."""

    system: str
    gpu: int
    health: str
    message: str


def _xids(gpu: dict[str, Any]) -> list[int]:
    return [int(e["data"]) for e in gpu.get("events", []) if e.get("type") == 0x8]


def _software_errors(gpu: dict[str, Any]) -> list[Finding]:
    index = gpu["index"]
    errors: list[Finding] = []
    if gpu.get("lost"):
        errors.append((f"GPU {index} is lost: it has fallen off the bus. Reboot the system to recover it.",
                       "xid", "xid", "isolate"))
    for xid in sorted(set(_xids(gpu)) & CRITICAL_XIDS):
        errors.append((f"Detected XID {xid} on GPU {index}; the GPU needs attention (reset or reboot).",
                       "xid", "xid", "reset"))
    if gpu.get("inject"):
        calls = ", ".join(sorted(gpu["inject"]))
        errors.append((f"NVML calls fail on GPU {index}: {calls}.", "api_fail_gpu", "software", "triage"))
    rows = gpu.get("remapped_rows", {})
    if rows.get("pending"):
        errors.append((f"GPU {index} has pending row remappings; reset the GPU to apply them.",
                       "pending_row_remap", "memory", "reset"))
    return errors


def _pcie_errors(gpu: dict[str, Any]) -> list[Finding]:
    pcie, index = gpu.get("pcie", {}), gpu["index"]
    errors: list[Finding] = []
    if pcie and int(pcie.get("gen", 0)) < int(pcie.get("max_gen", 0)):
        errors.append((f"GPU {index} PCIe link generation {pcie['gen']} is below its maximum {pcie['max_gen']}.",
                       "pcie_gen", "pcie", "isolate"))
    if pcie and int(pcie.get("width", 0)) < int(pcie.get("max_width", 0)):
        errors.append((f"GPU {index} PCIe link width x{pcie['width']} is below its maximum x{pcie['max_width']}.",
                       "pcie_width", "pcie", "isolate"))
    for link, up in enumerate(gpu.get("nvlink", {}).get("links", [])):
        if not up:
            errors.append((f"GPU {index}'s NvLink link {link} is currently down.", "nvlink_down", "nvlink",
                           "isolate"))
    return errors


def _memory_errors(gpu: dict[str, Any]) -> list[Finding]:
    index = gpu["index"]
    errors: list[Finding] = []
    dbe = sum(int(v) for v in gpu.get("ecc", {}).get("volatile", {}).get("uncorrected", {}).values())
    if dbe:
        errors.append((f"A volatile double-bit ECC error was detected on GPU {index} ({dbe} errors).", "dbe",
                       "memory", "isolate"))
    if gpu.get("remapped_rows", {}).get("failure"):
        errors.append((f"GPU {index} had uncorrectable memory errors and row remapping failed.",
                       "row_remap_failure", "memory", "isolate"))
    return errors


def _thermal_errors(gpu: dict[str, Any]) -> list[Finding]:
    reasons = int(gpu.get("clock_event_reasons", 0))
    if reasons & (0x40 | 0x20 | 0x8):
        return [(f"Thermal violations detected on GPU {gpu['index']}: clocks are slowed down (reasons "
                 f"0x{reasons:016X}).", "thermal", "thermal", "monitor")]
    return []


def diag(doc: dict[str, Any], level: int) -> list[TestResult]:
    """The results of ``dcgmi diag -r level`` on every GPU."""
    results = []
    for gpu in doc.get("gpus", []):
        lost = bool(gpu.get("lost"))
        for category, name in LEVEL_TESTS[level]:
            errors: list[Finding]
            if name == "software":
                errors = _software_errors(gpu)
            elif lost:
                errors = [(f"GPU {gpu['index']} is lost; the test could not run.", "internal", "software", "isolate")]
            elif name == "pcie":
                errors = _pcie_errors(gpu)
            elif name in ("memory", "memory_bandwidth"):
                errors = _memory_errors(gpu)
            elif name in ("targeted_power", "diagnostic"):
                errors = _thermal_errors(gpu)
            else:
                errors = []
            results.append(TestResult(category, name, gpu["index"], "Fail" if errors else "Pass",
                                      [e[0] for e in errors], [_code(e) for e in errors]))
    return results


def parse_systems(letters: str) -> set[str]:
    """Health-watch letters -> the set of watched systems (``a`` = all).

    Raises:
        ValueError: an unknown letter.
    """
    if "a" in letters:
        return set(HEALTH_SYSTEMS)
    unknown = set(letters) - set(HEALTH_SYSTEMS)
    if unknown:
        raise ValueError(f"Invalid health system '{''.join(sorted(unknown))}'")
    return set(letters)


def health(doc: dict[str, Any], systems: set[str]) -> list[Incident]:
    """The health incidents of the watched ``systems`` on every GPU."""
    incidents = []
    for gpu in doc.get("gpus", []):
        index = gpu["index"]
        if "d" in systems:
            if gpu.get("lost"):
                incidents.append(Incident("Driver", index, "Failure",
                                          f"GPU {index} has fallen off the bus (XID 79)."))
            for xid in sorted(set(_xids(gpu)) & CRITICAL_XIDS - {79}):
                incidents.append(Incident("Driver", index, "Failure", f"Detected XID {xid} on GPU {index}."))
        if gpu.get("lost"):
            continue
        if "p" in systems:
            incidents += [Incident("PCIe", index, "Warning", m) for m, *_ in _pcie_errors(gpu) if "NvLink" not in m]
        if "n" in systems:
            incidents += [Incident("NVLink", index, "Failure", m) for m, *_ in _pcie_errors(gpu) if "NvLink" in m]
        if "m" in systems:
            incidents += [Incident("Memory", index, "Failure", m) for m, *_ in _memory_errors(gpu)]
            if gpu.get("remapped_rows", {}).get("pending"):
                incidents.append(Incident("Memory", index, "Warning",
                                          f"GPU {index} has pending row remappings; a GPU reset is required."))
        if "t" in systems:
            incidents += [Incident("Thermal", index, "Warning", m) for m, *_ in _thermal_errors(gpu)]
    return incidents


def overall(incidents: list[Incident]) -> str:
    """DCGM's overall health word for a list of incidents."""
    if any(i.health == "Failure" for i in incidents):
        return "Failure"
    return "Warning" if incidents else "Healthy"
