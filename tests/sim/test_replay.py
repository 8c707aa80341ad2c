"""``gpusim host import``: a host's state from a real host's ``nvidia-smi -q -x`` (``replay.py``) or its text
``nvidia-smi -q`` (``replay_text.py``), so that the simulated and NVIDIA's own ``nvidia-smi`` print the report's
static fields unchanged.

The reports are real ones kept as test data with their provenance: the H200 passed through to a VM (driver
580.159.04, tests/data/ground-truth/h200-sxm-passthrough-r580) and public transcripts (tests/data/ground-truth/public,
README there). Expected values in the tables below are typed from those files, not computed by the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _realclients import DRIVER_VERSION, REPO, RealClientError, fetch

from gpufleet_sim import replay, replay_text

DATA = Path(__file__).resolve().parents[1] / "data" / "ground-truth"
H200 = DATA / "h200-sxm-passthrough-r580"
REPORTS = {
    "H200-vm-580": H200 / "nvidia-smi" / "qx.xml",
    "A100-40GB-vm-570": DATA / "public" / "A100_SXM4_40GB__xml__1.txt",
    "A100-80GB-mig-535": DATA / "public" / "A100_SXM4_80GB__xml__1.txt",
    "GB200-tray-580": DATA / "public" / "GB200__xml__1.txt",
    "H100-HGX-580": DATA / "public" / "H100_SXM_HGX__xml__1.txt",
}

# report -> (GPUs, model, first GPU's UUID, its bus id, virtualization mode, host "fabric", host "nvswitch")
EXPECTED = {
    "H200-vm-580": (1, "H200-141GB", "GPU-3a263293-6d8a-f1f0-18a4-c1af043489ce", "00000000:00:06.0", 1, None, None),
    "A100-40GB-vm-570": (1, "A100-SXM4-40GB", "GPU-00000000-0000-0000-0000-000000000000", "00000000:06:00.0", 1,
                         None, None),
    "A100-80GB-mig-535": (1, "A100-SXM4-80GB", "GPU-513536b6-7d19-9063-b049-1e69664bb298", "00000000:01:00.0", 0,
                          None, None),
    "GB200-tray-580": (4, "GB200-186GB", "GPU-00000000-0000-0000-0000-000000000000", "00000000:29:00.0", 1,
                       {"multinode": True, "clique_id": 2, "cluster_uuid": "00000001-0000-0000-0000-000000000001"},
                       None),
    "H100-HGX-580": (8, "H100-SXM5-80GB", "GPU-00000000-0000-0000-0000-000000000000", "00000000:53:00.0", 1, None,
                     {"count": 4, "fabric_manager_required": True}),
}

# report -> the first GPU's temperature (gpu, shutdown, slowdown, gpu_max) and power limits (mW: enforced, default,
# min, max). Hopper and newer on R580 print thresholds below T.Limit: H200 33 C + T.Limit 54 = 87 max operating,
# shutdown -8 -> 95, slowdown -2 -> 89 (the same machine's NVML: nvmlDeviceGetTemperatureThreshold 95, 89, 87)
READINGS = {
    "H200-vm-580": ((33, 95, 89, 87), (700000, 700000, 200000, 700000)),
    "A100-40GB-vm-570": ((33, 92, 89, 85), (400000, 400000, 100000, 400000)),
    "A100-80GB-mig-535": ((27, 92, 89, 85), (500000, 500000, 100000, 500000)),
    "GB200-tray-580": ((27, 92, 89, 87), (1200000, 1200000, 200000, 1200000)),
    "H100-HGX-580": ((29, 95, 89, 87), (700000, 700000, 200000, 700000)),
}

# The static fields the simulated nvidia-smi -q -x must print as the real one did (paths under <gpu>). Left out:
# what 535's report (the simulator's voice) names or computes otherwise -- the Hopper+ temperature thresholds (R580
# prints them relative to T.Limit, 535 absolute; checked in the state above), the fabric's clique and cluster UUID
# (535 prints only state and status; checked through NVML in test_nvml_fabric.py) -- and readings that change.
STATIC = (
    "product_name", "serial", "uuid", "minor_number", "vbios_version", "board_part_number",
    "inforom_version/img_version", "persistence_mode", "mig_mode/current_mig", "mig_mode/pending_mig",
    "gpu_virtualization_mode/virtualization_mode", "pci/pci_bus", "pci/pci_device", "pci/pci_domain",
    "pci/pci_device_id", "pci/pci_bus_id", "pci/pci_sub_system_id",
    "pci/pci_gpu_link_info/pcie_gen/max_link_gen", "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    "pci/pci_gpu_link_info/link_widths/max_link_width", "pci/pci_gpu_link_info/link_widths/current_link_width",
    "pci/replay_counter", "performance_state", "fb_memory_usage/total", "fb_memory_usage/reserved",
    "fb_memory_usage/used", "bar1_memory_usage/total", "compute_mode", "ecc_mode/current_ecc", "ecc_mode/pending_ecc",
    "ecc_errors/volatile/dram_correctable", "ecc_errors/volatile/dram_uncorrectable",
    "ecc_errors/aggregate/dram_correctable", "ecc_errors/aggregate/dram_uncorrectable",
    "retired_pages/multiple_single_bit_retirement/retired_count", "retired_pages/double_bit_retirement/retired_count",
    "retired_pages/pending_retirement", "remapped_rows/remapped_row_corr", "remapped_rows/remapped_row_unc",
    "remapped_rows/remapped_row_pending", "remapped_rows/remapped_row_failure",
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_max", "temperature/gpu_temp",
    "gpu_power_readings/current_power_limit", "gpu_power_readings/requested_power_limit",
    "gpu_power_readings/default_power_limit", "gpu_power_readings/min_power_limit",
    "gpu_power_readings/max_power_limit", "clocks/graphics_clock", "clocks/sm_clock", "clocks/mem_clock",
    "clocks/video_clock", "max_clocks/graphics_clock", "max_clocks/sm_clock", "max_clocks/mem_clock",
    "max_clocks/video_clock", "fabric/state", "fabric/status",
)
#: Ampere and older: the report's absolute thresholds -> the tags 535.261.03 prints the same absolute values under
AMPERE_THRESHOLDS = {"temperature/gpu_temp_max_threshold": "temperature/gpu_temp_max_tlimit_threshold",
                     "temperature/gpu_temp_slow_threshold": "temperature/gpu_temp_slow_tlimit_threshold",
                     "temperature/gpu_temp_max_gpu_threshold": "temperature/gpu_temp_max_gpu_tlimit_threshold",
                     "temperature/gpu_temp_max_mem_threshold": "temperature/gpu_temp_max_mem_tlimit_threshold"}


def _state(name: str, **kwargs: Any) -> dict[str, Any]:
    return replay.state_from_xml(REPORTS[name].read_text(encoding="utf-8"), source=str(REPORTS[name]), **kwargs)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_report_becomes_a_host(name: str) -> None:
    count, model, uuid, bus_id, virtualization, fabric, nvswitch = EXPECTED[name]
    doc = _state(name)
    gpu = doc["gpus"][0]
    assert (len(doc["gpus"]), gpu["model"], gpu["uuid"], gpu["pci"]["bus_id"], gpu["virtualization_mode"]) == (
        count, model, uuid, bus_id, virtualization)
    assert doc.get("fabric") == fabric
    assert doc.get("nvswitch") == nvswitch
    assert [g["index"] for g in doc["gpus"]] == list(range(count))
    (temperature, power) = READINGS[name]
    assert tuple(gpu["temperature"][k] for k in ("gpu", "shutdown", "slowdown", "gpu_max")) == temperature
    assert tuple(gpu["power"][k] for k in ("enforced_mw", "default_mw", "min_mw", "max_mw")) == power
    assert doc["replay"]["source"] == str(REPORTS[name])
    assert "processes" in doc["replay"]["not_replayed"]


def test_the_h200_reports_static_fields_land_in_the_state() -> None:
    gpu = _state("H200-vm-580")["gpus"][0]
    assert (gpu["serial"], gpu["vbios_version"], gpu["board_part_number"], gpu["inforom_image_version"]) == (
        "1653724024608", "96.00.A5.00.1A", "692-2G520-0282-000", "G520.0282.02.02")
    assert (gpu["pci"]["pci_device_id"], gpu["pci"]["pci_subsystem_id"], gpu["pci"]["bus"], gpu["pci"]["device"]) == (
        0x233510DE, 0x18BF10DE, 0, 6)
    assert (gpu["persistence_mode"], gpu["ecc"]["current"], gpu["mig"]["current"]) == (1, 1, 0)
    assert (gpu["memory"]["total_mib"], gpu["memory"]["reserved_mib"]) == (143771, 616)
    assert gpu["remapped_rows"]["histogram"]["max"] == 3072
    assert gpu["retired_pages"]["supported"] is False
    assert gpu["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "gpu_max_gen": 5,
                           "replay_counter": 1}
    assert gpu["clock_event_reasons"] == 1  # GPU idle


def test_the_getter_dump_adds_what_the_xml_does_not_say() -> None:
    calls = replay.read_getters(H200 / "nvml" / "getters-nvidia-ml-py-13.615.71.jsonl")
    without, with_dump = _state("H200-vm-580"), _state("H200-vm-580", getters=calls)
    assert len(without["gpus"][0]["nvlink"]["links"]) == 18       # the board's, from the model file
    assert with_dump["gpus"][0]["nvlink"]["links"] == []           # every NvLink getter NOT_SUPPORTED in the VM
    assert with_dump["gpus"][0]["temperature"]["mem_max"] == 95    # nvmlDeviceGetTemperatureThreshold(2)


def test_mig_devices_become_gpu_and_compute_instances() -> None:
    gpu = _state("A100-80GB-mig-535")["gpus"][0]
    assert (gpu["mig"]["current"], gpu["mig"]["pending"]) == (1, 1)
    # four MIG devices of GPU instances 3-6, 14 SMs, 19968 MiB, one copy engine and decoder: 1g.20gb (profile 15) at
    # memory slots 0, 2, 4, 6 (ids 3-6 = 3 + start / 2), one 1c.1g compute instance (profile 0) each
    assert gpu["mig"]["gpu_instances"] == [
        {"id": gi, "profile_id": 15, "start": 2 * (gi - 3), "size": 2,
         "compute_instances": [{"id": 0, "profile_id": 0, "start": 0, "size": 1}]} for gi in (3, 4, 5, 6)]
    assert gpu["remapped_rows"]["supported"] is False   # the report: <remapped_rows>N/A</remapped_rows>


@pytest.mark.parametrize(("gi_id", "slots", "placement"), [
    (0, 8, (0, 8)), (2, 8, (4, 4)), (3, 8, (0, 2)), (6, 8, (6, 2)), (7, 8, (0, 1)), (14, 8, (7, 1)),
    (0, 4, (0, 4)), (2, 4, (2, 2)), (6, 4, (3, 1)),   # A30: four memory slots
])
def test_gpu_instance_ids_follow_the_placement_rule(gi_id: int, slots: int, placement: tuple[int, int]) -> None:
    assert replay.gi_placement(gi_id, slots) == placement


def test_a_gpu_instance_id_past_the_gpu_is_refused() -> None:
    with pytest.raises(replay.ReplayError) as caught:
        replay.gi_placement(15, 8)
    assert str(caught.value) == "GPU instance id 15 does not fit a GPU of 8 memory slots"


@pytest.mark.parametrize(("text", "message"), [
    ("not xml at all", "no nvidia_smi_log element: pass the output of `nvidia-smi -q -x`"),
    ("<nvidia_smi_log><gpu>", "the nvidia-smi XML does not parse (no element found: line 1, column 21); pass the "
                              "unchanged output of `nvidia-smi -q -x`"),
    ("<nvidia_smi_log></nvidia_smi_log>", "the report lists no GPU (<gpu> element): nothing to replay"),
])
def test_reports_that_cannot_be_replayed_say_why(text: str, message: str) -> None:
    with pytest.raises(replay.ReplayError) as caught:
        replay.state_from_xml(text)
    assert str(caught.value) == message


def test_an_unknown_board_names_itself_and_the_models_folder() -> None:
    text = ("<nvidia_smi_log><gpu id=\"00000000:01:00.0\"><product_name>NVIDIA X1</product_name>"
            "<pci><pci_device_id>FFFF10DE</pci_device_id></pci></gpu></nvidia_smi_log>")
    with pytest.raises(replay.ReplayError) as caught:
        replay.state_from_xml(text)
    assert str(caught.value).startswith("no simulator model for 'NVIDIA X1' (PCI device id 0xFFFF10DE); add a model "
                                        "file to simulator/src/gpufleet_sim/models/ (known: A100-PCIE-40GB, ")


def _our_xml(sim: Any) -> ET.Element:
    proc = subprocess.run([sys.executable, "-m", "gpufleet_sim.tools.nvidia_smi", "-q", "-x"],
                          env=sim.env({"TZ": "UTC"}), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ET.fromstring(proc.stdout)


def _text(gpu: ET.Element, path: str) -> str | None:
    """The text at ``path``; where it is absent because an element above it is N/A (``<remapped_rows>N/A``), that
    element's "N/A (<path>)"; None when it is absent otherwise."""
    found = gpu.find(path)
    if found is not None:
        return (found.text or "").strip()
    parent = path.rsplit("/", 1)[0] if "/" in path else None
    while parent:
        above = gpu.find(parent)
        if above is not None:
            return f"N/A ({parent})" if (above.text or "").strip() == "N/A" else None
        parent = parent.rsplit("/", 1)[0] if "/" in parent else None
    return None


def _fields(root: ET.Element, paths: dict[str, str]) -> list[dict[str, str | None]]:
    """Per GPU: key -> the text at paths[key]."""
    return [{key: _text(gpu, path) for key, path in paths.items()} for gpu in root.findall("gpu")]


#: what a MIG device of the report must show again (the GPU and compute instance the replay rebuilt from its ids)
MIG_DEVICE = ("gpu_instance_id", "compute_instance_id", "device_attributes/shared/multiprocessor_count",
              "device_attributes/shared/copy_engine_count", "device_attributes/shared/encoder_count",
              "device_attributes/shared/decoder_count", "device_attributes/shared/ofa_count",
              "device_attributes/shared/jpg_count", "fb_memory_usage/total")


def _mig_devices(root: ET.Element) -> list[list[dict[str, str | None]]]:
    """Per GPU, its MIG devices' MIG_DEVICE fields (``mig_device`` anywhere under the GPU: 535.261.03 writes them
    beside ``mig_devices``)."""
    return [[{path: device.findtext(path) for path in MIG_DEVICE} for device in gpu.iterfind(".//mig_device")]
            for gpu in root.findall("gpu")]


def _imported(nvml_sim: Callable[..., Any], name: str) -> tuple[Any, list[dict[str, str | None]], dict[str, str]]:
    """The imported host (its fabric manager running where it has NVSwitches: a single-node fabric completes once
    it runs, as on the real host), the report's static fields and the paths to read them from a 535 report."""
    doc = _state(name)
    sim = nvml_sim(doc=doc)
    if doc.get("nvswitch"):
        with sim.edit() as live:
            live["clients"] = [{"pid": os.getpid(), "name": "nv-fabricmanager"}]
    real = replay.parse_xml(REPORTS[name].read_text(encoding="utf-8"))
    thresholds = AMPERE_THRESHOLDS if doc["gpus"][0]["architecture"] < 9 else {}
    expected = _fields(real, {path: path for path in (*STATIC, *thresholds)})
    assert all(value is not None for gpu in expected for value in gpu.values()), "a path the report lacks"
    return sim, expected, {**{path: path for path in STATIC}, **thresholds}


@pytest.mark.parametrize("name", list(REPORTS))
def test_the_simulated_nvidia_smi_prints_the_reports_static_fields(nvml_sim: Callable[..., Any], name: str) -> None:
    sim, expected, paths = _imported(nvml_sim, name)
    ours = _our_xml(sim)
    assert _fields(ours, paths) == expected
    assert _mig_devices(ours) == _mig_devices(replay.parse_xml(REPORTS[name].read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def nvidia_smi_535() -> Callable[[Any], ET.Element]:
    """NVIDIA's own nvidia-smi 535 (tests/sim/_realclients.py; a failed fetch fails) on the library built as 535."""
    from gpufleet_sim.build import build_library

    try:
        real = fetch()
    except RealClientError as exc:
        pytest.fail(f"NVIDIA's nvidia-smi could not be fetched: {exc}")
    libdir = build_library(REPO / "build" / "sim-test-535", DRIVER_VERSION, python=sys.executable).parent

    def run(sim: Any) -> ET.Element:
        proc = real.run("nvidia-smi", ["-q", "-x"], libdir, sim.state_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return ET.fromstring(proc.stdout)

    return run


@pytest.mark.parametrize("name", list(REPORTS))
def test_nvidias_nvidia_smi_prints_the_reports_static_fields(nvml_sim: Callable[..., Any], name: str,
                                                             nvidia_smi_535: Callable[[Any], ET.Element]) -> None:
    sim, expected, paths = _imported(nvml_sim, name)
    nvidias = nvidia_smi_535(sim)
    assert _fields(nvidias, paths) == expected
    assert _mig_devices(nvidias) == _mig_devices(replay.parse_xml(REPORTS[name].read_text(encoding="utf-8")))


def test_the_driver_version_is_the_reports_with_a_library_built_for_it(tmp_path: Path) -> None:
    from gpufleet_sim.build import build_library

    doc = _state("H200-vm-580")
    assert doc["replay"]["driver_version"] == "580.159.04"
    lib = build_library(REPO / "build" / "sim-test-replay",
                        doc["replay"]["driver_version"], python=sys.executable)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(doc), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NVML_SIM_STATE")}
    env.update({"LD_LIBRARY_PATH": str(lib.parent), "NVML_SIM_STATE": str(state), "LC_ALL": "C", "TZ": "UTC"})
    proc = subprocess.run([sys.executable, "-m", "gpufleet_sim.tools.nvidia_smi", "-q", "-x"], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    assert ET.fromstring(proc.stdout).findtext("driver_version") == "580.159.04"


def test_gpusim_host_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpufleet_sim import cli, store

    state = tmp_path / "state.json"
    getters = H200 / "nvml" / "getters-nvidia-ml-py-13.615.71.jsonl"
    args = ["host", "import", "--nvidia-smi-xml", str(REPORTS["H200-vm-580"]), "--getters", str(getters),
            "--state", str(state)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{state}: 1 GPUs (H200-141GB) from {REPORTS['H200-vm-580']} and {getters}; not replayed: "
                          "processes, ")
    doc = store.load(state)
    assert (doc["gpus"][0]["uuid"], doc["gpus"][0]["nvlink"]["links"]) == (
        "GPU-3a263293-6d8a-f1f0-18a4-c1af043489ce", [])
    assert cli.main(args) == 1
    assert capsys.readouterr().err == f"gpusim: {state} already exists; pass --force to replace it\n"
    neither = ("gpusim: host import: pass one report, --nvidia-smi-xml (`nvidia-smi -q -x`) or --nvidia-smi-q "
               "(`nvidia-smi -q`)\n")
    assert cli.main(["host", "import", "--state", str(state)]) == 1
    assert capsys.readouterr().err == neither
    assert cli.main(["host", "import", "--nvidia-smi-xml", str(REPORTS["H200-vm-580"]), "--nvidia-smi-q",
                     str(TEXT_REPORTS["H200-vm-580"]), "--state", str(state)]) == 1
    assert capsys.readouterr().err == neither
    assert cli.main(["host", "init", "--preset", "1xH200", "--state", str(state)]) == 1
    assert capsys.readouterr().err == "gpusim: host init: the following arguments are required: --seed\n"


# --------------------------------------------------------------------------------------------------- text reports

TEXT_REPORTS = {
    "H200-vm-580": H200 / "nvidia-smi" / "q.txt",
    "A100-80GB-x4-555": DATA / "public" / "A100_SXM4_80GB__q__1.txt",
    "GH200-vm-550": DATA / "public" / "GH200__q__1.txt",
    "H100-NVL-x2-550": DATA / "public" / "H100_NVL__q__1.txt",
    "L40S-550": DATA / "public" / "L40S__q__1.txt",
    "H200-vm-550": DATA / "public" / "H200_SXM__q__1.txt",
}
# report -> (GPUs, model, first GPU's UUID, its bus id, virtualization mode, host "nvswitch"), typed from the files
TEXT_EXPECTED = {
    "H200-vm-580": (1, "H200-141GB", "GPU-3a263293-6d8a-f1f0-18a4-c1af043489ce", "00000000:00:06.0", 1, None),
    "A100-80GB-x4-555": (4, "A100-SXM4-80GB", "GPU-31515c3d-1414-7c2c-004a-f86a898946ac", "00000000:68:00.0", 0,
                         None),
    "GH200-vm-550": (1, "GH200-96GB", "GPU-35d58415-1094-5ad1-64d1-b797587d33a7", "00000000:DD:00.0", 1, None),
    "H100-NVL-x2-550": (2, "H100-NVL-94GB", "GPU-806f8ea2-6428-1096-a076-bb687fb45fb0", "00000000:AD:00.0", 0, None),
    "L40S-550": (1, "L40S", "GPU-1db6b1cf-de5e-b497-caca-1a027578d587", "00000000:A1:00.0", 0, None),
    # fabric Completed, Success, clique 0, zero cluster UUID: a single-node NVSwitch fabric (nvmlsim_fabric.c)
    "H200-vm-550": (1, "H200-141GB", "GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732", "00000000:03:00.0", 1,
                    {"count": 4, "fabric_manager_required": True}),
}
# report -> the first GPU's temperature (gpu, shutdown, slowdown, gpu_max), power limits (mW: enforced, default, min,
# max) and remapped rows (corrected, uncorrected, pending, failure). Hopper and Ada on R550+ print thresholds below
# T.Limit (GH200: 31 C + 55 = 86 max operating, shutdown -8 -> 94, slowdown -2 -> 88; L40S: 30 + 57 = 87, -5 -> 92)
TEXT_READINGS = {
    "H200-vm-580": ((33, 95, 89, 87), (700000, 700000, 200000, 700000), (0, 0, 0, 0)),
    "A100-80GB-x4-555": ((25, 92, 89, 85), (500000, 500000, 100000, 500000), (0, 0, 0, 0)),
    "GH200-vm-550": ((31, 94, 88, 86), (700000, 900000, 100000, 900000), (0, 1, 0, 0)),
    "H100-NVL-x2-550": ((32, 95, 89, 87), (310000, 310000, 200000, 400000), (0, 0, 0, 0)),
    "L40S-550": ((30, 92, 89, 87), (350000, 350000, 100000, 350000), (0, 0, 0, 0)),
    "H200-vm-550": ((28, 95, 89, 87), (700000, 700000, 200000, 700000), (0, 0, 0, 0)),
}


def _text_state(name: str) -> dict[str, Any]:
    path = TEXT_REPORTS[name]
    return replay_text.state_from_text(path.read_text(encoding="utf-8"), source=str(path))


@pytest.mark.parametrize("name", list(TEXT_EXPECTED))
def test_a_text_report_becomes_a_host(name: str) -> None:
    count, model, uuid, bus_id, virtualization, nvswitch = TEXT_EXPECTED[name]
    doc = _text_state(name)
    gpu = doc["gpus"][0]
    assert (len(doc["gpus"]), gpu["model"], gpu["uuid"], gpu["pci"]["bus_id"], gpu["virtualization_mode"]) == (
        count, model, uuid, bus_id, virtualization)
    assert (doc.get("nvswitch"), doc.get("fabric")) == (nvswitch, None)
    temperature, power, rows = TEXT_READINGS[name]
    assert tuple(gpu["temperature"][k] for k in ("gpu", "shutdown", "slowdown", "gpu_max")) == temperature
    assert tuple(gpu["power"][k] for k in ("enforced_mw", "default_mw", "min_mw", "max_mw")) == power
    assert tuple(gpu["remapped_rows"][k] for k in ("corrected", "uncorrected", "pending", "failure")) == rows
    assert doc["replay"]["source"] == str(TEXT_REPORTS[name])


def test_the_degraded_a100s_pending_remap_lands_on_its_gpu() -> None:
    """A100_SXM4_80GB__q__1: GPU 00000000:9E:00.0 (index 1 by bus) has 353 correctable DRAM errors and one row
    remapped for them, pending; 00000000:C2:00.0 (index 2) one, not pending."""
    gpus = _text_state("A100-80GB-x4-555")["gpus"]
    assert [g["pci"]["bus_id"] for g in gpus] == ["00000000:68:00.0", "00000000:9E:00.0", "00000000:C2:00.0",
                                                  "00000000:D4:00.0"]
    assert [(g["remapped_rows"]["corrected"], g["remapped_rows"]["pending"]) for g in gpus] == [
        (0, 0), (1, 1), (1, 0), (0, 0)]
    assert [g["remapped_rows"]["histogram"]["max"] for g in gpus] == [640, 639, 639, 640]
    assert gpus[1]["ecc"]["volatile"]["corrected"]["dram"] == 353


def test_one_gpus_text_and_xml_reports_give_one_host() -> None:
    """The real H200's ``-q`` and ``-q -x`` (taken minutes apart): the same state, but for the power drawn at each
    moment (the text's Instantaneous Power Draw 78.58 W, the XML's instant_power_draw 79.23 W)."""
    text, xml = _text_state("H200-vm-580"), _state("H200-vm-580")
    assert (text["gpus"][0]["power"].pop("usage_mw"), xml["gpus"][0]["power"].pop("usage_mw")) == (78580, 79230)
    for doc in (text, xml):
        doc["replay"].pop("source")
    assert text == xml


@pytest.mark.parametrize(("text", "message"), [
    ("# source: somewhere\nFabric\n    State          : Completed\n    Status         : Insufficient Resources\n",
     "the report lists no GPU (no `GPU <bus id>` section and no NVSMI LOG header): pass the unchanged output of "
     "`nvidia-smi -q` of a whole host"),
    ("==============NVSMI LOG==============\n\nDriver Version      : 550.54.14\nAttached GPUs       : 0\n",
     "the report lists no GPU (no `GPU <bus id>` section after the NVSMI LOG header): pass the unchanged output of "
     "`nvidia-smi -q` of a whole host"),
    ("<?xml version=\"1.0\" ?>\n<nvidia_smi_log></nvidia_smi_log>\n",
     "this is the XML report (`nvidia-smi -q -x`): pass it with --nvidia-smi-xml"),
    ("GPU 00000000:01:00.0\n    Product Name      : NVIDIA A100-SXM4-80GB\n    MIG Devices\n        MIG Device\n"
     "            GPU Instance ID      : 1\n",
     "line 3: MIG devices are listed, and the text report does not say enough to rebuild them; pass the same host's "
     "`nvidia-smi -q -x` with --nvidia-smi-xml"),
    ("GPU 00000000:01:00.0\n    Product Name      : NVIDIA X1\n    PCI\n        Device Id     : 0xFFFF10DE\n",
     "no simulator model for 'NVIDIA X1' (PCI device id 0xFFFF10DE); add a model file to "
     "simulator/src/gpufleet_sim/models/ (known: "),
])
def test_text_reports_that_cannot_be_replayed_say_why(text: str, message: str) -> None:
    with pytest.raises(replay.ReplayError) as caught:
        replay_text.state_from_text(text)
    assert str(caught.value).startswith(message)


def test_gpusim_host_import_reads_a_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpufleet_sim import cli, store

    state = tmp_path / "state.json"
    report = TEXT_REPORTS["GH200-vm-550"]
    assert cli.main(["host", "import", "--nvidia-smi-q", str(report), "--state", str(state)]) == 0
    assert capsys.readouterr().out.startswith(f"{state}: 1 GPUs (GH200-96GB) from {report}; not replayed: ")
    assert store.load(state)["gpus"][0]["remapped_rows"]["uncorrected"] == 1
    fabric_block = tmp_path / "fabric.txt"
    fabric_block.write_text("Fabric\n    State          : Completed\n", encoding="utf-8")
    assert cli.main(["host", "import", "--nvidia-smi-q", str(fabric_block), "--state", str(tmp_path / "x.json")]) == 1
    assert capsys.readouterr().err == (f"gpusim: {fabric_block}: the report lists no GPU (no `GPU <bus id>` section "
                                       "and no NVSMI LOG header): pass the unchanged output of `nvidia-smi -q` of a "
                                       "whole host\n")
    assert not (tmp_path / "x.json").exists()


#: the static lines (labels under a GPU's section) NVIDIA's nvidia-smi 535 must print as the real report did; the
#: counterpart of STATIC. Left out as there: the Hopper+ temperature thresholds (R550+ print them below T.Limit, 535
#: absolute; checked in TEXT_READINGS), the fabric's clique and cluster UUID (535 prints only state and status).
TEXT_STATIC = (
    ("Product Name",), ("Serial Number",), ("GPU UUID",), ("Minor Number",), ("VBIOS Version",),
    ("Board Part Number",), ("Inforom Version", "Image Version"), ("Persistence Mode",), ("MIG Mode", "Current"),
    ("MIG Mode", "Pending"), ("GPU Virtualization Mode", "Virtualization Mode"), ("PCI", "Bus"), ("PCI", "Device"),
    ("PCI", "Domain"), ("PCI", "Device Id"), ("PCI", "Bus Id"), ("PCI", "Sub System Id"),
    ("PCI", "GPU Link Info", "PCIe Generation", "Max"), ("PCI", "GPU Link Info", "PCIe Generation", "Current"),
    ("PCI", "GPU Link Info", "Link Width", "Max"), ("PCI", "GPU Link Info", "Link Width", "Current"),
    ("PCI", "Replays Since Reset"), ("Performance State",), ("FB Memory Usage", "Total"),
    ("FB Memory Usage", "Reserved"), ("FB Memory Usage", "Used"), ("BAR1 Memory Usage", "Total"), ("Compute Mode",),
    ("ECC Mode", "Current"), ("ECC Mode", "Pending"), ("ECC Errors", "Volatile", "DRAM Correctable"),
    ("ECC Errors", "Volatile", "DRAM Uncorrectable"), ("ECC Errors", "Aggregate", "DRAM Correctable"),
    ("ECC Errors", "Aggregate", "DRAM Uncorrectable"), ("Retired Pages", "Single Bit ECC"),
    ("Retired Pages", "Double Bit ECC"), ("Retired Pages", "Pending Page Blacklist"),
    ("Remapped Rows", "Correctable Error"), ("Remapped Rows", "Uncorrectable Error"), ("Remapped Rows", "Pending"),
    ("Remapped Rows", "Remapping Failure Occurred"), ("Remapped Rows", "Bank Remap Availability Histogram", "Max"),
    ("Temperature", "GPU Current Temp"), ("GPU Power Readings", "Current Power Limit"),
    ("GPU Power Readings", "Requested Power Limit"), ("GPU Power Readings", "Default Power Limit"),
    ("GPU Power Readings", "Min Power Limit"), ("GPU Power Readings", "Max Power Limit"), ("Clocks", "Graphics"),
    ("Clocks", "SM"), ("Clocks", "Memory"), ("Clocks", "Video"), ("Max Clocks", "Graphics"), ("Max Clocks", "SM"),
    ("Max Clocks", "Memory"), ("Max Clocks", "Video"), ("Fabric", "State"), ("Fabric", "Status"),
)
#: Ampere and older (T.Limit N/A): the report's absolute thresholds -> the labels 535.261.03 prints them under
TEXT_AMPERE_THRESHOLDS = {("Temperature", f"{what} Temp"): ("Temperature", f"{what} T.Limit Temp")
                          for what in ("GPU Shutdown", "GPU Slowdown", "GPU Max Operating", "Memory Max Operating")}


def _text_fields(text: str, paths: dict[tuple[str, ...], tuple[str, ...]]) -> list[dict[tuple[str, ...], str | None]]:
    """Per GPU section of a ``nvidia-smi -q`` report: key -> the value of the line at paths[key] (None: no line)."""
    def value(lines: list[replay_text.Line], path: tuple[str, ...]) -> str | None:
        for line in lines:
            if line.label == path[0]:
                return line.value if len(path) == 1 else value(line.children, path[1:])
        return None

    gpus = [line for line in replay_text.parse_text(text) if line.label == "GPU"]
    return [{key: value(gpu.children, path) for key, path in paths.items()} for gpu in gpus]


@pytest.mark.parametrize("name", list(TEXT_REPORTS))
def test_nvidias_nvidia_smi_q_prints_the_text_reports_static_fields(
        nvml_sim: Callable[..., Any], name: str, nvidia_smi_535_text: Callable[[Any], str]) -> None:
    doc = _text_state(name)
    sim = nvml_sim(doc=doc)
    if doc.get("nvswitch"):  # a single-node fabric completes once the fabric manager runs, as on the real host
        with sim.edit() as live:
            live["clients"] = [{"pid": os.getpid(), "name": "nv-fabricmanager"}]
    report = TEXT_REPORTS[name].read_text(encoding="utf-8")
    tlimit = ("Temperature", "GPU T.Limit Temp")  # N/A where the report prints absolute thresholds (Ampere)
    thresholds = TEXT_AMPERE_THRESHOLDS if _text_fields(report, {tlimit: tlimit})[0][tlimit] == "N/A" else {}
    expected = _text_fields(report, {path: path for path in (*TEXT_STATIC, *thresholds)})
    assert all(value is not None for gpu in expected for value in gpu.values()), "a line the report lacks"
    nvidias = _text_fields(nvidia_smi_535_text(sim), {**{path: path for path in TEXT_STATIC}, **thresholds})
    assert nvidias == expected


@pytest.fixture(scope="module")
def nvidia_smi_535_text() -> Callable[[Any], str]:
    """NVIDIA's own nvidia-smi 535 ``-q`` (tests/sim/_realclients.py; a failed fetch fails) on the 535 library."""
    from gpufleet_sim.build import build_library

    try:
        real = fetch()
    except RealClientError as exc:
        pytest.fail(f"NVIDIA's nvidia-smi could not be fetched: {exc}")
    libdir = build_library(REPO / "build" / "sim-test-535", DRIVER_VERSION, python=sys.executable).parent

    def run(sim: Any) -> str:
        proc = real.run("nvidia-smi", ["-q"], libdir, sim.state_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    return run
