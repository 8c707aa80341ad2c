"""NVIDIA's own nvidia-smi (535.261.03, Debian bookworm non-free) judges the simulated libnvidia-ml.so.1.

The binary runs unchanged against a preset's state (tests/sim/_realclients.py fetches it; a failed fetch fails
these tests). Expected values come from the state document the test wrote, never from the library's answers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _realclients import DRIVER_VERSION, REPO, RealClientError, RealClients, fetch

from gpufleet_sim import hardware
from gpufleet_sim.presets import build_state, list_presets

PRESETS = list_presets()
# NVIDIA's R535 nvidia-smi run here predates Blackwell (MIG User Guide "Getting Started": B200 needs R570, RTX PRO
# 6000 Blackwell R575): its default view cuts a 4-digit power limit, a 6-digit MiB total and a long name to its
# column widths. Its column layout is checked on the boards that branch drives; the other views on all presets.
R535_BOARDS = [p for p in PRESETS if p not in ("8xB200-NVSwitch", "4xGB200", "4xRTX-PRO-6000")]


@pytest.fixture(scope="session")
def real() -> RealClients:
    """NVIDIA's unpacked clients; a fetch failure is a test failure, never a skip."""
    try:
        return fetch()
    except RealClientError as exc:
        pytest.fail(f"NVIDIA's nvidia-smi could not be fetched: {exc}")


@pytest.fixture(scope="session")
def lib535() -> Path:
    """The simulated library built as driver 535.261.03 (the branch of NVIDIA's binary)."""
    from gpufleet_sim.build import build_library

    return build_library(REPO / "build" / "sim-test-535", DRIVER_VERSION).parent


@dataclass
class Host:
    """A state file and the way to run NVIDIA's nvidia-smi on it."""

    real: RealClients
    libdir: Path
    state_path: Path

    def read(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def write(self, doc: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    def smi(self, *args: str, rc: int = 0) -> str:
        """Run NVIDIA's nvidia-smi; fail the test unless it exits ``rc``; return stdout."""
        proc: subprocess.CompletedProcess[str] = self.real.run("nvidia-smi", list(args), self.libdir,
                                                                self.state_path)
        assert proc.returncode == rc, f"nvidia-smi {' '.join(args)} exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        return proc.stdout


@pytest.fixture
def host(real: RealClients, lib535: Path, tmp_path: Path) -> Callable[..., Host]:
    """Factory: ``host(preset)`` or ``host(doc=...)`` writes a state and returns a Host."""

    def make(preset: str = "2xA100-40GB", doc: dict[str, Any] | None = None) -> Host:
        folder = tmp_path / f"host-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        made = Host(real, lib535, folder / "state.json")
        made.write(doc if doc is not None else build_state(preset, f"seed-{preset}"))
        return made

    return make


def test_the_binary_is_nvidias_and_every_name_it_resolves_is_exported(real: RealClients, lib535: Path) -> None:
    binary = real.path("nvidia-smi").read_bytes()
    wanted = set(re.findall(rb"(?<=\x00)(nvml[A-Z]\w+)(?=\x00)", binary))
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib535 / "libnvidia-ml.so.1")], check=True,
                              capture_output=True, text=True).stdout
    names = {line.split()[-1].encode() for line in exported.splitlines() if line.strip()}
    assert len(wanted) == 234  # issue 14: the 535 binary resolves 234 nvml* names
    assert sorted(wanted - names) == []
    assert not list(real.root.rglob("libnvidia-ml*"))


def test_an_unreachable_archive_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(RealClientError) as caught:
        fetch(tmp_path / "rc", "deb [trusted=yes] http://127.0.0.1:9/debian bookworm non-free", retries=0)
    assert str(caught.value).startswith("apt-get update of Debian bookworm non-free failed (exit 100)")
    assert "Could not connect to 127.0.0.1:9" in str(caught.value)
    assert not (tmp_path / "rc" / "root").exists()


def test_nvidias_libnvidia_ml_next_to_the_binary_is_refused(real: RealClients, tmp_path: Path) -> None:
    base = tmp_path / "rc"
    (base / "root" / "usr" / "lib").mkdir(parents=True)
    (base / "unpacked-535.261.03-1").write_text("535.261.03-1\n", encoding="utf-8")
    (base / "root" / "usr" / "lib" / "libnvidia-ml.so.1").write_bytes(b"")
    with pytest.raises(RealClientError, match=r"NVIDIA's libnvidia-ml is unpacked under .* "
                       r"\(usr/lib/libnvidia-ml\.so\.1\); remove it so that only the simulated library can be loaded"):
        fetch(base)


@pytest.mark.parametrize("preset", PRESETS)
def test_list_gpus(host: Callable[..., Host], preset: str) -> None:
    h = host(preset)
    doc = h.read()
    expected = [f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})" for g in doc["gpus"]]
    assert h.smi("-L").splitlines() == expected


# ------------------------------------------------------------------------------------------- --query-gpu

def busy(doc: dict[str, Any]) -> dict[str, Any]:
    """Make GPU 0 of a state unlike its siblings: load, power, ECC counts, modes, a process."""
    g = doc["gpus"][0]
    g["persistence_mode"] = 1
    g["compute_mode"] = 3
    g["performance_state"] = 2
    g["utilization"] = {"gpu": 37, "memory": 12}
    g["temperature"]["gpu"] = 55
    g["power"]["limit_mw"] = g["power"]["enforced_mw"] = g["power"]["min_mw"] + 25000
    g["power"]["usage_mw"] = g["power"]["limit_mw"] - 12340
    g["clocks"]["current"] = {"graphics": 1005, "sm": 1005, "mem": g["clocks"]["max"]["mem"], "video": 795}
    g["clock_event_reasons"] = 0x4  # SW power cap
    g["ecc"]["volatile"]["corrected"] = {"dram": 3, "sram": 2}
    g["ecc"]["aggregate"]["corrected"] = {"dram": 7, "sram": 4}
    g["ecc"]["aggregate"]["uncorrected"] = {"dram": 1, "sram": 0}
    hardware.add_process_in(g, 4242, "train.py", 2048)
    return doc


ON_OFF = {0: "Disabled", 1: "Enabled"}
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
SHORT_COMPUTE_MODES = {0: "Default", 1: "E. Thread", 2: "Prohibited", 3: "E. Process"}


def _watts(mw: int) -> str:
    return f"{mw / 1000:.2f}"


# models whose display mode NVML reports 1 though no display is attached: the real H200 on 580 (getter dump of
# tests/data/ground-truth/h200-sxm-passthrough-r580; its nvidia-smi -q: "Display Attached: Yes")
DISPLAY_MODE_ENABLED = {"H200-141GB"}


def expected_query(doc: dict[str, Any], g: dict[str, Any]) -> dict[str, str]:
    """What nvidia-smi --query-gpu prints (csv,noheader,nounits) for GPU ``g``, from the state and NVIDIA's
    documented formats (nvidia-smi --help-query-gpu)."""
    pci, mem, power, clocks, ecc = g["pci"], g["memory"], g["power"], g["clocks"], g["ecc"]

    def ecc_total(kind: str, counter: str) -> str:
        return str(sum(ecc[counter][kind].values()))

    return {
        "index": str(g["index"]), "name": g["name"], "uuid": g["uuid"], "serial": g["serial"],
        "pci.bus_id": pci["bus_id"], "pci.domain": f"0x{pci['domain']:04X}", "pci.bus": f"0x{pci['bus']:02X}",
        "pci.device": f"0x{pci['device']:02X}", "pci.device_id": f"0x{pci['pci_device_id']:08X}",
        "pci.sub_device_id": f"0x{pci['pci_subsystem_id']:08X}", "driver_version": DRIVER_VERSION,
        "vbios_version": g["vbios_version"], "inforom.img": g["inforom_image_version"],
        "persistence_mode": ON_OFF[g["persistence_mode"]], "compute_mode": COMPUTE_MODES[g["compute_mode"]],
        "pstate": f"P{g['performance_state']}", "display_active": "Disabled",
        "display_mode": "Enabled" if g["model"] in DISPLAY_MODE_ENABLED else "Disabled",
        "accounting.mode": "Disabled",
        "pcie.link.gen.current": str(g["pcie"]["gen"]), "pcie.link.gen.max": str(g["pcie"]["max_gen"]),
        "pcie.link.gen.gpumax": str(g["pcie"]["gpu_max_gen"]), "pcie.link.width.current": str(g["pcie"]["width"]),
        "pcie.link.width.max": str(g["pcie"]["max_width"]),
        "memory.total": str(mem["total_mib"]), "memory.reserved": str(mem["reserved_mib"]),
        "memory.used": str(mem["used_mib"]),
        "memory.free": str(mem["total_mib"] - mem["reserved_mib"] - mem["used_mib"]),
        "utilization.gpu": str(g["utilization"]["gpu"]), "utilization.memory": str(g["utilization"]["memory"]),
        "temperature.gpu": str(g["temperature"]["gpu"]), "power.management": "Enabled",
        "power.draw": _watts(power["usage_mw"]),
        "power.limit": _watts(power["limit_mw"]), "power.default_limit": _watts(power["default_mw"]),
        "power.min_limit": _watts(power["min_mw"]), "power.max_limit": _watts(power["max_mw"]),
        "clocks.gr": str(clocks["current"]["graphics"]), "clocks.sm": str(clocks["current"]["sm"]),
        "clocks.mem": str(clocks["current"]["mem"]), "clocks.video": str(clocks["current"]["video"]),
        "clocks.max.gr": str(clocks["max"]["graphics"]), "clocks.max.sm": str(clocks["max"]["sm"]),
        "clocks.max.mem": str(clocks["max"]["mem"]),
        "ecc.mode.current": ON_OFF[ecc["current"]], "ecc.mode.pending": ON_OFF[ecc["pending"]],
        "ecc.errors.corrected.volatile.total": ecc_total("corrected", "volatile"),
        "ecc.errors.uncorrected.volatile.total": ecc_total("uncorrected", "volatile"),
        "ecc.errors.corrected.aggregate.total": ecc_total("corrected", "aggregate"),
        "ecc.errors.uncorrected.aggregate.total": ecc_total("uncorrected", "aggregate"),
        "ecc.errors.corrected.volatile.dram": str(ecc["volatile"]["corrected"]["dram"]),
        "ecc.errors.uncorrected.aggregate.dram": str(ecc["aggregate"]["uncorrected"]["dram"]),
        "mig.mode.current": ON_OFF[g["mig"]["current"]] if g["mig"]["supported"] else "[N/A]",
        "mig.mode.pending": ON_OFF[g["mig"]["pending"]] if g["mig"]["supported"] else "[N/A]",
        "clocks_event_reasons.active": f"0x{g['clock_event_reasons']:016X}",
        "clocks_event_reasons.gpu_idle": "Active" if g["clock_event_reasons"] & 1 else "Not Active",
        "clocks_event_reasons.sw_power_cap": "Active" if g["clock_event_reasons"] & 4 else "Not Active",
        "count": str(len(doc["gpus"])),
        "compute_cap": "{}.{}".format(*g["compute_capability"]),
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_query_gpu_fields_equal_the_state(host: Callable[..., Host], preset: str) -> None:
    doc = busy(build_state(preset, f"seed-{preset}"))
    h = host(doc=doc)
    fields = list(expected_query(doc, doc["gpus"][0]))
    assert len(fields) >= 40
    out = h.smi(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits")
    rows = [dict(zip(fields, line.split(", "), strict=True)) for line in out.splitlines()]
    assert rows == [expected_query(doc, g) for g in doc["gpus"]]


# ------------------------------------------------------------------------------------------- -q and -q -x

def _text(node: ET.Element | None) -> str:
    assert node is not None
    return (node.text or "").strip()


@pytest.mark.parametrize("preset", PRESETS)
def test_query_report_has_every_function_and_the_states_values(host: Callable[..., Host], preset: str) -> None:
    doc = busy(build_state(preset, f"seed-{preset}"))
    h = host(doc=doc)
    text = h.smi("-q")
    assert text.count("Function Not Found") == 0
    assert f"Attached GPUs                             : {len(doc['gpus'])}" in text.splitlines()
    root = ET.fromstring(h.smi("-q", "-x"))
    assert _text(root.find("driver_version")) == DRIVER_VERSION
    assert _text(root.find("cuda_version")) == "12.2"  # the CUDA version of the R535 driver
    gpus = root.findall("gpu")
    assert [gpu.get("id") for gpu in gpus] == [g["pci"]["bus_id"] for g in doc["gpus"]]
    for gpu, g in zip(gpus, doc["gpus"], strict=True):
        mem, power, temp = g["memory"], g["power"], g["temperature"]
        got = {
            "fb": [_text(gpu.find(f"fb_memory_usage/{k}")) for k in ("total", "reserved", "used", "free")],
            "temperature": [_text(gpu.find(f"temperature/{k}")) for k in (
                "gpu_temp", "gpu_temp_max_tlimit_threshold",
                "gpu_temp_slow_tlimit_threshold", "gpu_temp_max_gpu_tlimit_threshold",
                "gpu_temp_max_mem_tlimit_threshold")],
            "power": [_text(gpu.find(f"gpu_power_readings/{k}")) for k in (
                "power_draw", "current_power_limit", "requested_power_limit", "default_power_limit",
                "min_power_limit", "max_power_limit")],
            "clocks": [_text(gpu.find(f"clocks/{k}")) for k in ("graphics_clock", "sm_clock", "mem_clock")],
            "max_clocks": [_text(gpu.find(f"max_clocks/{k}")) for k in ("graphics_clock", "sm_clock", "mem_clock")],
            "ecc": [_text(gpu.find(f"ecc_errors/{c}/dram_{k}")) for c in ("volatile", "aggregate")
                    for k in ("correctable", "uncorrectable")],
            "uuid": _text(gpu.find("uuid")), "serial": _text(gpu.find("serial")),
            "vbios": _text(gpu.find("vbios_version")),
        }
        assert got == {
            "fb": [f"{v} MiB" for v in (mem["total_mib"], mem["reserved_mib"], mem["used_mib"],
                                        mem["total_mib"] - mem["reserved_mib"] - mem["used_mib"])],
            "temperature": [f"{temp[k]} C" for k in ("gpu", "shutdown", "slowdown", "gpu_max", "mem_max")],
            "power": [f"{_watts(power[k])} W" for k in (
                "usage_mw", "enforced_mw", "limit_mw", "default_mw", "min_mw", "max_mw")],
            "clocks": [f"{g['clocks']['current'][k]} MHz" for k in ("graphics", "sm", "mem")],
            "max_clocks": [f"{g['clocks']['max'][k]} MHz" for k in ("graphics", "sm", "mem")],
            "ecc": [str(g["ecc"][c][k]["dram"]) for c in ("volatile", "aggregate")
                    for k in ("corrected", "uncorrected")],
            "uuid": g["uuid"], "serial": g["serial"], "vbios": g["vbios_version"],
        }


# ------------------------------------------------------------------------------------------- default view

@pytest.mark.parametrize("preset", R535_BOARDS)
def test_default_view_shows_the_states_gpus(host: Callable[..., Host], preset: str) -> None:
    doc = busy(build_state(preset, f"seed-{preset}"))
    lines = host(doc=doc).smi().splitlines()
    assert f"| NVIDIA-SMI {DRIVER_VERSION}             Driver Version: {DRIVER_VERSION}   CUDA Version: 12.2     |" \
        in lines
    for g in doc["gpus"]:
        at = next(i for i, line in enumerate(lines) if f"| {g['pci']['bus_id']} Off |" in line)
        first, second = lines[at], lines[at + 1]
        assert first.startswith(f"|{g['index']:>4}  {g['name']}")
        assert ("On " if g["persistence_mode"] else "Off") in first
        total = f"{g['memory']['total_mib']}MiB"
        total = total if len(total) <= 8 else total[:5] + "..."  # the total's field holds 8 characters
        memory = f"{g['memory']['used_mib']}MiB / {total}"
        power = rf"{g['power']['usage_mw'] // 1000}W /\s+{g['power']['limit_mw'] // 1000}W"
        assert re.search(rf"^\| N/A\s+{g['temperature']['gpu']}C\s+P{g['performance_state']}\s+{power} \|"
                         rf"\s+{re.escape(memory)} \|\s+{g['utilization']['gpu']}%\s+"
                         rf"{SHORT_COMPUTE_MODES[g['compute_mode']]} \|$", second), second


# ------------------------------------------------------------------------------------------- processes

def with_processes(doc: dict[str, Any]) -> dict[str, Any]:
    """Processes of every kind on the last GPU of a state: compute, graphics (memory not available) and both."""
    g = doc["gpus"][-1]
    hardware.add_process_in(g, 4242, "train.py", 2048)
    g["processes"] += [{"pid": 999, "name": "Xorg", "used_memory_mib": None, "gi_id": None, "ci_id": None,
                        "type": "G"},
                       {"pid": 4243, "name": "render-and-compute", "used_memory_mib": 64, "gi_id": None,
                        "ci_id": None, "type": "C+G"}]
    return doc


def expected_process_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The Processes table's rows of a state whose GPUs are not in MIG mode, by NVIDIA's documented columns."""
    rows = []
    for g in doc["gpus"]:
        for p in sorted(g["processes"], key=lambda p: p["pid"]):
            used = "N/A" if p["used_memory_mib"] is None else f"{p['used_memory_mib']}MiB"
            rows.append([str(g["index"]), "N/A", "N/A", str(p["pid"]), p.get("type", "C"), p["name"], used])
    return rows


@pytest.mark.parametrize("preset", PRESETS)
def test_processes_of_the_state_in_every_view(host: Callable[..., Host], preset: str) -> None:
    doc = with_processes(build_state(preset, f"seed-{preset}"))
    h = host(doc=doc)
    view = h.smi()
    table = view[view.index("Processes:"):]
    assert _rows(table) == expected_process_rows(doc)
    assert "No running processes found" not in view

    g = doc["gpus"][-1]
    gpu = ET.fromstring(h.smi("-q", "-x")).findall("gpu")[-1]
    assert [[_text(p.find(k)) for k in ("pid", "type", "process_name", "used_memory", "gpu_instance_id",
                                        "compute_instance_id")]
            for p in gpu.findall("processes/process_info")] == [
        [str(p["pid"]), p.get("type", "C"), p["name"],
         "N/A" if p["used_memory_mib"] is None else f"{p['used_memory_mib']} MiB", "N/A", "N/A"]
        for p in sorted(g["processes"], key=lambda p: p["pid"])]
    compute = h.smi("--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader")
    assert compute.splitlines() == [f"{g['uuid']}, {p['pid']}, {p['name']}, {p['used_memory_mib']} MiB"
                                    for p in sorted(g["processes"], key=lambda p: p["pid"])
                                    if p.get("type", "C") in ("C", "C+G")]


def test_a_gpu_without_processes_shows_none(host: Callable[..., Host]) -> None:
    h = host("2xA100-40GB")
    assert "|  No running processes found" in h.smi()
    assert h.smi("-q").count("    Processes                             : None") == 2
    assert h.smi("--query-compute-apps=pid", "--format=csv,noheader") == ""


# ------------------------------------------------------------------------------------------- topo -m

def _links_up(g: dict[str, Any]) -> int:
    return sum(1 for up in g["nvlink"]["links"] if up)


def _linked(a: dict[str, Any], b: dict[str, Any]) -> int:
    """NVLinks between two GPUs of a state: the smaller count of links up, when each reaches the other ("peers":
    the GPUs its NVLink bridges reach; absent: every GPU, as through NVSwitches). docs/simulator.md."""
    reach = all(other["index"] in one["nvlink"].get("peers", [other["index"]]) for one, other in ((a, b), (b, a)))
    return min(_links_up(a), _links_up(b), 18) if reach and a is not b else 0


@pytest.mark.parametrize("preset", PRESETS)
def test_topology_matrix_follows_the_states_nvlinks(host: Callable[..., Host], preset: str) -> None:
    doc = build_state(preset, f"seed-{preset}")
    if _links_up(doc["gpus"][0]):
        hardware.inject_in(doc, doc["gpus"][0], "nvlink-down", {"link": 0})  # one link fewer on GPU 0
    h = host(doc=doc)
    lines = h.smi("topo", "-m").splitlines()
    gpus = doc["gpus"]
    assert lines[0] == ("\t\x1b[4m" + "\t".join(f"GPU{g['index']}" for g in gpus)
                        + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m")
    cpus = os.cpu_count() or 1
    # the state has no PCIe tree or NUMA layout: one NUMA node holding every CPU (docs/simulator.md)
    affinity = f"0-{cpus - 1}" if cpus > 1 else "0"
    expected = []
    for a in gpus:
        cells = [" X " if a is b else f"NV{_linked(a, b)}" if _linked(a, b) else "NODE" for b in gpus]
        expected.append("\t".join([f"GPU{a['index']}", *cells, affinity, "0", "", "N/A"]))
    assert lines[1:1 + len(gpus)] == expected
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in lines
    # P2P over NVLink (and reads) between linked GPUs only; over PCIe never claimed
    for index in ("n", "r", "p"):
        p2p = [line.split("\t")[1:-1] for line in h.smi("topo", "-p2p", index).splitlines()[1:1 + len(gpus)]]
        assert p2p == [["X" if a is b else "OK" if index != "p" and _linked(a, b) else "NS" for b in gpus]
                       for a in gpus], index


def test_bridged_a30_pairs_are_linked_only_to_their_partner(host: Callable[..., Host]) -> None:
    """4xA30: NVLink bridges join GPUs 0-1 and 2-3 (the preset's "peers"); 0 and 2 meet through the host bridges."""
    h = host("4xA30")
    rows = [line.split("\t")[1:5] for line in h.smi("topo", "-m").splitlines()[1:5]]
    assert rows == [[" X ", "NV4", "NODE", "NODE"], ["NV4", " X ", "NODE", "NODE"],
                    ["NODE", "NODE", " X ", "NV4"], ["NODE", "NODE", "NV4", " X "]]
    assert h.smi("topo", "-p", "-i", "0,2").splitlines() == [
        "Device 0 is connected to device 2 by way of an on-CPU interconnect between PCIe host bridges.", ""]
    assert h.smi("topo", "-n", "4", "-i", "1").splitlines() == [
        "Device 1 is connected by way of an on-CPU interconnect between PCIe host bridges to device(s): 0, 2, 3", ""]
    assert h.smi("topo", "-n", "3", "-i", "1").splitlines() == [
        "Device 1 is not connected to other devices by the same PCIe host bridge.", ""]
    assert h.smi("topo", "-c", "0").splitlines() == ["The GPUs that have an affinity with CPU 0 are:", "0, 1, 2, 3",
                                                     ""]
    assert h.smi("topo", "-c", str(os.cpu_count() or 1), rc=255).splitlines()[0] == \
        "Failed to display GPUs with affinity for a given CPU information"


# NVLink generation -> per-link speed NVIDIA's nvidia-smi prints (NVLink 3: 25 GB/s, 4: 26.5625, 5: 53.125 per
# direction: GB200's `nvidia-smi nvlink -s` in NVIDIA/k8s-test-infra #371)
NVLINK_SPEEDS = {3: "25 GB/s", 4: "26.562 GB/s", 5: "53.125 GB/s"}


@pytest.mark.parametrize("preset", PRESETS)
def test_nvlink_status_follows_the_state(host: Callable[..., Host], preset: str) -> None:
    doc = build_state(preset, f"seed-{preset}")
    if doc["gpus"][0]["nvlink"]["links"]:
        hardware.inject_in(doc, doc["gpus"][0], "nvlink-down", {"link": 0})
    out = host(doc=doc).smi("nvlink", "-s")
    expected = []
    for g in doc["gpus"]:
        if not g["nvlink"]["links"]:
            continue  # a GPU without NVLink is not listed
        expected.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        expected += [f"\t Link {k}: {NVLINK_SPEEDS[g['nvlink']['version']] if up else '<inactive>'}"
                     for k, up in enumerate(g["nvlink"]["links"])]
    assert out.splitlines() == expected


@pytest.mark.parametrize("preset", ["8xA100", "2xL40S"])
def test_nvlink_error_counters_are_the_states(host: Callable[..., Host], preset: str) -> None:
    doc = build_state(preset, f"seed-{preset}")
    if doc["gpus"][0]["nvlink"]["links"]:
        doc["gpus"][0]["nvlink"]["errors"] = [{"replay": 3, "recovery": 1, "crc_flit": 7, "crc_data": 2,
                                               "ecc_data": 0}]
        hardware.inject_in(doc, doc["gpus"][0], "nvlink-down", {"link": 1})
    out = host(doc=doc).smi("nvlink", "-e", "-i", "0")
    g = doc["gpus"][0]
    expected = [f"GPU 0: {g['name']} (UUID: {g['uuid']})"] if g["nvlink"]["links"] else []
    for link, up in enumerate(g["nvlink"]["links"]):
        if not up:
            continue  # only active links are listed
        counts = (g["nvlink"].get("errors") or [{}] * (link + 1))
        errors = counts[link] if link < len(counts) else {}
        expected += [f"\t Link {link}: Replay Errors: {errors.get('replay', 0)}",
                     f"\t Link {link}: Recovery Errors: {errors.get('recovery', 0)}",
                     f"\t Link {link}: CRC Errors: {errors.get('crc_flit', 0)}", ""]
    assert out.splitlines() == expected


# what public `nvidia-smi nvlink -c` transcripts of A100 and H800 boards print for every link (docs/simulator.md)
NVLINK_CAPABILITIES = [("P2P is supported", "true"), ("Access to system memory supported", "true"),
                       ("P2P atomics supported", "true"), ("System memory atomics supported", "true"),
                       ("SLI is supported", "true"), ("Link is supported", "false")]


@pytest.mark.parametrize("preset", ["8xA100", "8xH100-NVSwitch", "2xL40S"])
def test_nvlink_capabilities_of_the_states_links(host: Callable[..., Host], preset: str) -> None:
    doc = build_state(preset, f"seed-{preset}")
    if doc["gpus"][0]["nvlink"]["links"]:
        hardware.inject_in(doc, doc["gpus"][0], "nvlink-down", {"link": 2})
    out = host(doc=doc).smi("nvlink", "-c", "-i", "0")
    g = doc["gpus"][0]
    expected = [f"GPU 0: {g['name']} (UUID: {g['uuid']})"] if g["nvlink"]["links"] else []
    expected += [f"\t Link {link}, {label}: {value}" for link, up in enumerate(g["nvlink"]["links"]) if up
                 for label, value in NVLINK_CAPABILITIES]  # only active links are listed
    assert out.splitlines() == expected


# ------------------------------------------------------------------------------- MIG, processes and faults

def _rows(text: str) -> list[list[str]]:
    """The table rows of nvidia-smi's boxed output, as whitespace-split cells (header rows start with a letter)."""
    return [line.strip("|").split() for line in text.splitlines()
            if line.startswith("|") and re.match(r"^\|\s+\d", line)]


def _gib(mib: int) -> str:
    return f"{mib / 1024:.2f}"


@pytest.fixture
def mig_host(host: Callable[..., Host]) -> Host:
    """2x A100 40GB: GPU 0 in MIG mode with a BAR1 aperture in the state, GPU 1 not."""
    doc = build_state("2xA100-40GB", "mig-host")
    doc["gpus"][0]["mig"]["current"] = doc["gpus"][0]["mig"]["pending"] = 1
    for g in doc["gpus"]:
        g["bar1"] = {"total_mib": 65536, "used_mib": 3}
    return host(doc=doc)


def test_mig_profiles_and_placements_on_an_empty_mig_gpu(mig_host: Host) -> None:
    g = mig_host.read()["gpus"][0]
    rows = _rows(mig_host.smi("mig", "-lgip"))
    expected = []
    for p in g["mig"]["gi_profiles"]:
        expected.append(["0", "MIG", p["name"], str(p["id"]), f"{p['instances']}/{p['instances']}",
                         _gib(p["memory_mib"]), "Yes" if p["p2p"] else "No", str(p["sms"]), str(p["decoders"]),
                         str(p["encoders"])])
        expected.append([str(p["copy_engines"]), str(p["jpegs"]), str(p["ofas"])])
    assert rows == expected  # only the MIG-enabled GPU, in NVIDIA's profile order
    placements = mig_host.smi("mig", "-lgipp").splitlines()
    assert placements == [
        f"GPU {0:2d} Profile ID {p['id']:2d} Placement{'s' if len(p['placements']) > 1 else ' '}: "
        f"{{{','.join(str(start) for start, _ in p['placements'])}}}:{p['placements'][0][1]}"
        for p in g["mig"]["gi_profiles"]]


def test_mig_create_list_and_destroy_through_nvidias_binary(mig_host: Host) -> None:
    out = mig_host.smi("mig", "-i", "0", "-cgi", "9,19", "-C")
    assert out.count("Successfully created GPU instance") == 2
    assert out.count("Successfully created compute instance") == 2
    g = mig_host.read()["gpus"][0]
    profiles = {p["id"]: p for p in g["mig"]["gi_profiles"]}
    gis = g["mig"]["gpu_instances"]
    assert sorted(gi["profile_id"] for gi in gis) == [9, 19]
    assert sorted(_rows(mig_host.smi("mig", "-lgi"))) == sorted(
        ["0", "MIG", profiles[gi["profile_id"]]["name"], str(gi["profile_id"]), str(gi["id"]),
         f"{gi['start']}:{gi['size']}"] for gi in gis)
    ci_rows = []
    for gi in gis:
        table = {c["id"]: c for c in g["mig"]["ci_profiles"][str(profiles[gi["profile_id"]]["slices"])]}
        for ci in gi["compute_instances"]:
            gi_name, ci_profile = profiles[gi["profile_id"]]["name"], table[ci["profile_id"]]
            # NVIDIA names a CI that spans its whole GI after the GI, others "<n>c.<GI name>"
            name = gi_name if ci_profile["slices"] == profiles[gi["profile_id"]]["slices"] else \
                f"{ci_profile['slices']}c.{gi_name}"
            ci_rows.append(["0", str(gi["id"]), "MIG", name, str(ci["profile_id"]), str(ci["id"]),
                            f"{ci['start']}:{ci['size']}"])
    assert sorted(_rows(mig_host.smi("mig", "-lci"))) == sorted(ci_rows)
    assert "Function Not Found" not in mig_host.smi("-q")
    lcip = _rows(mig_host.smi("mig", "-lcip", "-i", "0"))
    assert {row[1] for row in lcip if len(row) > 3} == {str(gi["id"]) for gi in gis}

    # processes and the default view's MIG device table
    big = next(gi for gi in gis if gi["profile_id"] == 9)
    doc = mig_host.read()
    hardware.add_process_in(doc["gpus"][0], 777, "train.py", 1500, gi_id=big["id"], ci_id=0)
    mig_host.write(doc)
    view = mig_host.smi()
    at = view.index("MIG devices:")
    mig_rows = [row for row in _rows(view[at:view.index("Processes:")]) if len(row) > 6]
    ordered = sorted(gis, key=lambda gi: gi["id"])
    assert [row[:4] for row in mig_rows] == [["0", str(gi["id"]), "0", str(k)] for k, gi in enumerate(ordered)]
    assert [row[5:8] for row in mig_rows] == [
        [f"{1500 if gi is big else 0}MiB", "/", f"{profiles[gi['profile_id']]['memory_mib']}MiB"] for gi in ordered]
    procs = _rows(view[view.index("Processes:"):])
    assert procs == [["0", str(big["id"]), "0", "777", "C", "train.py", "1500MiB"]]

    gpu0 = ET.fromstring(mig_host.smi("-q", "-x", "-i", "0")).find("gpu")
    assert gpu0 is not None
    assert [[_text(d.find(k)) for k in ("index", "gpu_instance_id", "compute_instance_id",
                                        "device_attributes/shared/multiprocessor_count",
                                        "device_attributes/shared/copy_engine_count", "fb_memory_usage/total",
                                        "fb_memory_usage/used", "bar1_memory_usage/total")]
            for d in gpu0.findall("mig_devices/mig_device")] == [
        [str(k), str(gi["id"]), "0", str(g["mig"]["ci_profiles"][str(profiles[gi["profile_id"]]["slices"])][-1]["sms"]),
         str(profiles[gi["profile_id"]]["copy_engines"]), f"{profiles[gi['profile_id']]['memory_mib']} MiB",
         f"{1500 if gi is big else 0} MiB", "65536 MiB"] for k, gi in enumerate(ordered)]

    # the process holds its compute instance: NVIDIA's binary reports it and exits NVML_ERROR_IN_USE (19)
    out = mig_host.smi("mig", "-i", "0", "-dci", rc=19)
    assert f"Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID {big['id']:2d}: In use by " \
        "another client" in out.splitlines()
    doc = mig_host.read()
    hardware.remove_process_in(doc["gpus"][0], 777)
    mig_host.write(doc)
    assert mig_host.smi("mig", "-i", "0", "-dci").count("Successfully destroyed compute instance") == 1
    assert mig_host.smi("mig", "-i", "0", "-dgi").count("Successfully destroyed GPU instance") == 2
    assert mig_host.read()["gpus"][0]["mig"]["gpu_instances"] == []
    assert mig_host.smi("mig", "-lgi", rc=6).strip() == "No GPU instances found: Not Found"


def test_mig_mode_switch_through_nvidias_binary(mig_host: Host) -> None:
    out = mig_host.smi("-i", "1", "-mig", "1")
    assert "Warning: MIG mode is in pending enable state for GPU 00000000:" in out
    assert out.rstrip().endswith("All done.")
    assert [g["mig"]["pending"] for g in mig_host.read()["gpus"]] == [1, 1]
    mig_host.smi("-i", "0", "-mig", "0")
    assert [(g["mig"]["current"], g["mig"]["pending"]) for g in mig_host.read()["gpus"]] == [(1, 0), (0, 1)]


def test_injected_faults_show_in_nvidias_report(host: Callable[..., Host]) -> None:
    doc = build_state("2xA100-40GB", "faults")
    hardware.inject_in(doc, doc["gpus"][0], "ecc-uncorrectable", {"count": 2})
    hardware.inject_in(doc, doc["gpus"][0], "remap-pending", {})
    hardware.inject_in(doc, doc["gpus"][1], "thermal-slowdown", {})
    h = host(doc=doc)
    root = ET.fromstring(h.smi("-q", "-x"))
    gpu0, gpu1 = root.findall("gpu")
    assert _text(gpu0.find("ecc_errors/volatile/dram_uncorrectable")) == "2"
    assert _text(gpu0.find("ecc_errors/aggregate/dram_uncorrectable")) == "2"
    assert _text(gpu0.find("remapped_rows/remapped_row_unc")) == "1"
    assert _text(gpu0.find("remapped_rows/remapped_row_pending")) == "Yes"
    assert _text(gpu1.find("clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown")) == "Active"
    assert _text(gpu1.find("temperature/gpu_temp")) == f"{doc['gpus'][1]['temperature']['slowdown']} C"
    view = h.smi()
    assert re.search(r"\| 00000000:\w\w:00\.0 Off \|\s+2 \|", view)


def test_a_lost_gpu_is_reported_as_nvidia_reports_it(host: Callable[..., Host]) -> None:
    doc = build_state("2xA100-40GB", "lost")
    hardware.inject_in(doc, doc["gpus"][1], "fallen-off-bus", {})
    h = host(doc=doc)
    out = h.smi("-L", rc=15)
    assert out.splitlines() == [
        f"GPU 0: {doc['gpus'][0]['name']} (UUID: {doc['gpus'][0]['uuid']})",
        "Unable to determine the device handle for gpu 1: GPU is lost.  Reboot the system to recover this GPU", "", ""]
    # -q and the default view stop at the lost GPU with exit 15 (NVML_ERROR_GPU_IS_LOST), as on hardware; 535 names
    # it by index here because it reads the bus id of a lost GPU through the export table (docs/simulator.md)
    lost = "Unable to determine the device handle for GPU1: GPU is lost.  Reboot the system to recover this GPU"
    assert h.smi("-q", rc=15).splitlines()[0] == lost
    assert h.smi(rc=15).splitlines()[0] == lost


def _without_timestamp(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("Timestamp")]


def test_an_xid_shows_in_no_report_line(host: Callable[..., Host]) -> None:
    """An XID is an event, not a reading: -q has no line for it (535's report has no XID section); what an XID's
    fault changes (ECC counts, a lost GPU) shows through its own lines, checked above."""
    doc = build_state("2xA100-40GB", "xid")
    h = host(doc=doc)
    before = _without_timestamp(h.smi("-q"))
    hardware.inject_in(doc, doc["gpus"][0], "xid", {"code": 13})
    h.write(doc)
    assert doc["gpus"][0]["events"], "the XID event was not recorded"
    assert _without_timestamp(h.smi("-q")) == before


def test_fabric_state_on_an_nvswitch_host(host: Callable[..., Host]) -> None:
    doc = build_state("8xH100-NVSwitch", "fabric")
    h = host(doc=doc)
    fields = ["--query-gpu=fabric.state,fabric.status", "--format=csv,noheader"]
    assert h.smi(*fields).splitlines() == ["state  Not Started, status N/A"] * 8
    doc["clients"] = [{"pid": os.getpid(), "name": "nv-fabricmanager"}]
    h.write(doc)
    assert h.smi(*fields).splitlines() == ["state  Completed, status Success"] * 8
    assert "Function Not Found" not in h.smi("-q")


def test_settings_through_nvidias_binary_change_the_state(host: Callable[..., Host]) -> None:
    h = host("2xA100-40GB")
    before = h.read()
    bus = before["gpus"][0]["pci"]["bus_id"]
    assert h.smi("-i", "0", "-pm", "1").splitlines() == [f"Enabled persistence mode for GPU {bus}.", "All done."]
    assert h.smi("-i", "0", "-c", "3").splitlines() == [
        f"Set compute mode to EXCLUSIVE_PROCESS for GPU {bus}.", "All done."]
    assert h.smi("-i", "0", "-pl", "300").splitlines()[0] == \
        f"Power limit for GPU {bus} was set to 300.00 W from 400.00 W."
    assert h.smi("-i", "0", "-e", "0").splitlines() == [
        f"Disabled ECC support for GPU {bus}.", "All done.", "Reboot required."]
    after = h.read()
    g = after["gpus"][0]
    assert [g["persistence_mode"], g["compute_mode"], g["power"]["limit_mw"], g["power"]["enforced_mw"],
            g["ecc"]["current"], g["ecc"]["pending"]] == [1, 3, 300000, 300000, 1, 0]
    assert after["gpus"][1] == before["gpus"][1]

    out = h.smi("-i", "0", "-pl", "30", rc=2)
    assert out.splitlines() == [f"Provided power limit 30.00 W is not a valid power limit which should be between "
                                f"100.00 W and 400.00 W for GPU {bus}", "Terminating early due to previous errors."]
    assert h.read() == after
