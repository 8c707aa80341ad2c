"""One nvidia-smi voice: the simulator's nvidia-smi and NVIDIA's 535 binary on the same state, line for line.

Every command both support runs on the same state through the same simulated library. The result per command
("same" or "differs") must be the one docs/simulator.md lists, so a difference nobody wrote down fails here, and
so does a documented difference that has gone away.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings  # a test dependency: missing is an error, never a skip
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from _realclients import DRIVER_VERSION, REPO, RealClientError, RealClients, fetch

from gpufleet_sim import hardware
from gpufleet_sim.presets import build_state, list_presets

DOC = REPO / "docs" / "simulator.md"
# fields both nvidia-smis know, by the name NVIDIA prints in the CSV header
QUERY = ("index,name,uuid,serial,pci.bus_id,pci.domain,pci.bus,pci.device,pci.device_id,pci.sub_device_id,"
         "driver_version,vbios_version,inforom.img,persistence_mode,compute_mode,pstate,pcie.link.gen.current,"
         "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total,memory.reserved,memory.used,"
         "memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,"
         "clocks.current.graphics,clocks.current.sm,clocks.current.memory,clocks.max.graphics,clocks.max.sm,"
         "ecc.mode.current,ecc.mode.pending,ecc.errors.corrected.volatile.total,"
         "ecc.errors.uncorrected.aggregate.total,mig.mode.current,mig.mode.pending,clocks_event_reasons.active,"
         "count,compute_cap")
COMMANDS = {
    "-L": ["-L"],
    "--query-gpu": [f"--query-gpu={QUERY}", "--format=csv"],
    "(default view)": [],
    "mig -lgip": ["mig", "-lgip"],
    "mig -lgipp": ["mig", "-lgipp"],
    "mig -lgi": ["mig", "-lgi"],
    "mig -lci": ["mig", "-lci"],
    "mig -lcip": ["mig", "-lcip"],
    "topo -m": ["topo", "-m"],
    "--query-compute-apps": ["--query-compute-apps=gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,name,used_memory",
                             "--format=csv"],
    "--query-gpu=index": ["--query-gpu=index"],
    "-q": ["-q"],
    "-q -d MEMORY,PIDS": ["-q", "-d", "MEMORY,PIDS"],
    "-q -x": ["-q", "-x"],
    "-L (a lost GPU)": ["-L"],
    "nvlink -s": ["nvlink", "-s"],
    "nvlink -e": ["nvlink", "-e"],
    "nvlink -c": ["nvlink", "-c"],
    "topo -p2p n": ["topo", "-p2p", "n"],
    "topo -p2p r": ["topo", "-p2p", "r"],
    "topo -c 0": ["topo", "-c", "0"],
    "topo -n 4 -i 0": ["topo", "-n", "4", "-i", "0"],
    "topo -p -i 0,1": ["topo", "-p", "-i", "0,1"],
}


@pytest.fixture(scope="module")
def real() -> RealClients:
    try:
        return fetch()
    except RealClientError as exc:
        pytest.fail(f"NVIDIA's nvidia-smi could not be fetched: {exc}")


@pytest.fixture(scope="module")
def lib535() -> Path:
    from gpufleet_sim.build import build_library

    return build_library(REPO / "build" / "sim-test-535", DRIVER_VERSION).parent


def documented() -> dict[str, str]:
    """command -> "same" | "differs", from the parity table of docs/simulator.md."""
    rows = re.findall(r"^\| `nvidia-smi ?([^`]*)` \| (same|differs) \|", DOC.read_text(encoding="utf-8"), re.M)
    return {command or "(default view)": verdict for command, verdict in rows}


def _ours(args: list[str], libdir: Path, state: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NVML_SIM_STATE")}
    env.update({"LD_LIBRARY_PATH": str(libdir), "NVML_SIM_STATE": str(state), "LC_ALL": "C", "TZ": "UTC"})
    return subprocess.run([sys.executable, "-m", "gpufleet_sim.tools.nvidia_smi", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


def _lines(proc: subprocess.CompletedProcess[str], default_view: bool) -> list[str]:
    lines = [line.rstrip() for line in (proc.stdout + proc.stderr).splitlines()]
    if default_view:
        lines = lines[1:]  # the timestamp
    return [*lines, f"exit {proc.returncode}"]


def test_both_nvidia_smis_on_one_state(real: RealClients, lib535: Path, tmp_path: Path) -> None:
    doc = build_state("2xA100-40GB", "parity")
    gpu = doc["gpus"][0]
    gpu["mig"]["current"] = gpu["mig"]["pending"] = 1
    state = tmp_path / "state.json"

    state.write_text(json.dumps(doc), encoding="utf-8")
    created = real.run("nvidia-smi", ["mig", "-i", "0", "-cgi", "9,19", "-C"], lib535, state)
    assert created.returncode == 0, created.stdout + created.stderr
    doc = json.loads(state.read_text(encoding="utf-8"))
    gis = {gi["profile_id"]: gi["id"] for gi in doc["gpus"][0]["mig"]["gpu_instances"]}
    # processes of every kind: on MIG devices (listed MIG device by MIG device), a name longer than the column,
    # graphics with no memory figure, compute+graphics, a memory figure wider than the cell
    hardware.add_process_in(doc["gpus"][0], 777, "train.py", 1500, gi_id=gis[9], ci_id=0)
    hardware.add_process_in(doc["gpus"][0], 555, "infer.py", 300, gi_id=gis[19], ci_id=0)
    hardware.add_process_in(doc["gpus"][0], 111, "/opt/conda/envs/research/bin/python3.11-worker", 200,
                            gi_id=gis[9], ci_id=0)
    hardware.add_process_in(doc["gpus"][1], 4242, "python3", 512)
    doc["gpus"][1]["processes"] += [
        {"pid": 999, "name": "Xorg", "used_memory_mib": None, "gi_id": None, "ci_id": None, "type": "G"},
        {"pid": 4243, "name": "render", "used_memory_mib": 123456, "gi_id": None, "ci_id": None, "type": "C+G"}]
    state.write_text(json.dumps(doc), encoding="utf-8")

    doc["gpus"][1]["nvlink"]["errors"] = [{"replay": 2, "recovery": 0, "crc_flit": 5, "crc_data": 1, "ecc_data": 0}]
    state.write_text(json.dumps(doc), encoding="utf-8")
    lost = tmp_path / "lost.json"
    lost_doc = build_state("8xA100", "parity-lost")
    hardware.inject_in(lost_doc, lost_doc["gpus"][3], "fallen-off-bus", {})
    lost.write_text(json.dumps(lost_doc), encoding="utf-8")

    verdicts = {}
    for name, args in COMMANDS.items():
        on = lost if "lost" in name else state
        theirs = _lines(real.run("nvidia-smi", args, lib535, on), not args)
        ours = _lines(_ours(args, lib535, on), not args)
        if args[:1] == ["-q"]:  # the report's time
            theirs, ours = ([line for line in lines if not line.lstrip().startswith(("Timestamp", "<timestamp>"))]
                            for lines in (theirs, ours))
        verdicts[name] = "same" if theirs == ours else "differs"
        expected_exit = {"--query-gpu=index": "exit 2", "-L (a lost GPU)": "exit 15"}.get(name, "exit 0")
        assert theirs[-1] == expected_exit, f"NVIDIA's nvidia-smi {name}: {theirs}"
    assert verdicts == documented()


# commands that change the state: each runs on its own copy, ours and NVIDIA's; output, exit status and the state
# afterwards must be the same. GPU 0 is in MIG mode with four instances, a process holds GPU instance 9's CI.
CHANGES = [["-i", "1", "-c", "3"], ["-i", "1", "-pm", "1"], ["-i", "1", "-mig", "1"], ["-i", "0", "-mig", "0"],
           ["mig", "-i", "0", "-dci"], ["mig", "-i", "0", "-dgi"], ["mig", "-i", "0", "-dgi", "-gi", "7"],
           ["mig", "-i", "0", "-cgi", "19"], ["mig", "-i", "1", "-cgi", "19"]]


def test_commands_that_change_the_state_do_what_nvidias_do(real: RealClients, lib535: Path, tmp_path: Path) -> None:
    doc = build_state("2xA100-40GB", "parity-changes")
    doc["gpus"][0]["mig"]["current"] = doc["gpus"][0]["mig"]["pending"] = 1
    setup = tmp_path / "setup.json"
    setup.write_text(json.dumps(doc), encoding="utf-8")
    created = real.run("nvidia-smi", ["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"], lib535, setup)
    assert created.returncode == 0, created.stdout + created.stderr
    doc = json.loads(setup.read_text(encoding="utf-8"))
    held = next(gi for gi in doc["gpus"][0]["mig"]["gpu_instances"] if gi["profile_id"] == 9)
    hardware.add_process_in(doc["gpus"][0], 777, "train.py", 1500, gi_id=held["id"], ci_id=0)
    small = str(next(gi["id"] for gi in doc["gpus"][0]["mig"]["gpu_instances"] if gi["profile_id"] == 19))
    full = [["mig", "-i", "0", "-cgi", "19,19,19"], ["mig", "-i", "0", "-cci", "-gi", small],  # no room left
            ["mig", "-i", "0", "-cci", "0,0", "-gi", str(held["id"])], ["mig", "-i", "0", "-cci", "9", "-gi", small]]
    for args in CHANGES + full:
        results = []
        for run in (real.run, None):
            state = tmp_path / f"{'theirs' if run else 'ours'}.json"
            state.write_text(json.dumps(doc), encoding="utf-8")
            proc = run("nvidia-smi", args, lib535, state) if run else _ours(args, lib535, state)
            results.append((_lines(proc, False), json.loads(state.read_text(encoding="utf-8"))))
        (theirs, their_state), (ours, our_state) = results
        assert ours == theirs, f"nvidia-smi {' '.join(args)}"
        assert our_state == their_state, f"nvidia-smi {' '.join(args)}: the state differs"


# process names nvidia-smi can print: printable ASCII (spaces too) without the table's border character
NAMES = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters="|"),
                min_size=1, max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(procs=st.lists(st.tuples(st.integers(1, 4_194_304), NAMES, st.one_of(st.none(), st.integers(0, 9_999_999)),
                                st.sampled_from(["C", "G", "C+G"])),
                      min_size=1, max_size=4, unique_by=lambda p: p[0]),
       spaces=st.integers(0, 2))
def test_processes_table_rows_are_nvidias_for_any_process(real: RealClients, lib535: Path, tmp_path: Path,
                                                          procs: list[tuple[int, str, int | None, str]],
                                                          spaces: int) -> None:
    """The Processes rows of ours equal NVIDIA's for any pid, name (long, padded with spaces, blank), memory figure
    (none, or wider than the cell) and type."""
    doc = build_state("2xA100-40GB", "fuzz")
    doc["gpus"][1]["processes"] = [{"pid": pid, "name": " " * spaces + name, "used_memory_mib": used, "gi_id": None,
                                    "ci_id": None, "type": kind} for pid, name, used, kind in procs]
    state = tmp_path / "fuzz.json"
    state.write_text(json.dumps(doc), encoding="utf-8")

    def rows(proc: subprocess.CompletedProcess[str]) -> list[str]:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = [line.rstrip() for line in proc.stdout.splitlines()]
        return lines[lines.index("| Processes:" + " " * 76 + "|"):]

    theirs = rows(real.run("nvidia-smi", [], lib535, state))
    # title, two header lines, rule, a row per process with a name that is not blank (else one "No running
    # processes found" row), closing rule
    assert len(theirs) == 5 + max(1, sum(1 for _, name, _, _ in procs if name.strip(" ")))
    assert rows(_ours([], lib535, state)) == theirs


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_byte_for_byte(real: RealClients, lib535: Path, tmp_path: Path, preset: str) -> None:
    """The default view, -L, nvlink -s/-e/-c, topo -m/-p2p n and the MIG listings: the same bytes (trailing spaces
    included) on every preset, also the Blackwell boards whose columns 535 cuts; only the time differs."""
    state = tmp_path / "state.json"
    state.write_text(json.dumps(build_state(preset, f"bytes-{preset}")), encoding="utf-8")
    for args in ([], ["-L"], ["nvlink", "-s"], ["nvlink", "-e"], ["nvlink", "-c"], ["topo", "-m"],
                 ["topo", "-p2p", "n"], ["mig", "-lgip"], ["mig", "-lgipp"]):
        theirs, ours = real.run("nvidia-smi", args, lib535, state), _ours(args, lib535, state)
        their_out, our_out = theirs.stdout, ours.stdout
        if not args:  # the first line is the time, padded to 31 columns
            assert len(our_out.split("\n", 1)[0]) == len(their_out.split("\n", 1)[0]) == 31
            their_out, our_out = their_out.split("\n", 1)[1], our_out.split("\n", 1)[1]
        assert (our_out, ours.stderr, ours.returncode) == (their_out, theirs.stderr, theirs.returncode), args


# ---------------------------------------------------------------------------------------------- -q line for line

# Lines NVIDIA's 535 binary fills from export-table slots the simulated library leaves empty: it prints
# "Uninitialized" there, ours "N/A" (docs/simulator.md, parity table, row "-q").
UNINITIALIZED = "Uninitialized"
# NVIDIA's 535 reads the SRAM ECC counters of Ampere and newer through the export table too (N/A); ours prints
# the state's counters.
SRAM_LINES = ("SRAM Correctable", "SRAM Uncorrectable SEC-DED")


def _query_log_state(kind: str) -> dict[str, object]:
    """A state for the -q comparison: a preset as built, or an A100 pair with MIG devices, processes and faults."""
    if kind != "A100 with MIG, processes and faults":
        return build_state(kind, f"q-{kind}")
    doc = build_state("2xA100-40GB", "q-mig")
    doc["gpus"][0]["mig"]["current"] = doc["gpus"][0]["mig"]["pending"] = 1
    hardware.inject_in(doc, doc["gpus"][1], "ecc-uncorrectable", {"count": 2})
    hardware.inject_in(doc, doc["gpus"][1], "remap-pending", {})
    hardware.inject_in(doc, doc["gpus"][1], "thermal-slowdown", {})
    g1 = doc["gpus"][1]
    g1["ecc"]["volatile"]["corrected"] = {"dram": 3, "sram": 2}
    g1["persistence_mode"], g1["compute_mode"], g1["performance_state"] = 1, 3, 2
    hardware.add_process_in(g1, 4242, "python3", 512)
    g1["processes"].append({"pid": 999, "name": "Xorg", "used_memory_mib": None, "gi_id": None, "ci_id": None,
                            "type": "G"})
    return doc


XML_LEAF = re.compile(r"^(\s*<(\w+)>)(.*)(</\2>)$")
SRAM_TAGS = ("sram_correctable", "sram_uncorrectable_secded")


def _normalised(theirs: list[str], ours: list[str], blackwell: bool) -> list[str]:
    """NVIDIA's lines (text or XML) with the documented differences replaced by what ours prints there (only
    there)."""
    out = []
    for their, our in zip(theirs, ours, strict=False):
        xml, our_xml = XML_LEAF.match(their), XML_LEAF.match(our)
        if xml and our_xml and xml.group(1) == our_xml.group(1):
            key, value, our_value, name = xml.group(1), xml.group(3), our_xml.group(3), xml.group(2)
            timestamp = name == "timestamp"
            uninitialized = value == UNINITIALIZED and our_value == "N/A"
            sram = name in SRAM_TAGS and value == "N/A" and our_value.isdigit()
            architecture = blackwell and name == "product_architecture" and value == "Unknown"
            if timestamp or uninitialized or sram or architecture:
                their = our
            out.append(their)
            continue
        key, _, value = their.partition(": ")
        our_key, _, our_value = our.partition(": ")
        timestamp = key.startswith("Timestamp") and our_key == key
        uninitialized = value == UNINITIALIZED and our == f"{key}: N/A"
        sram = key.strip() in SRAM_LINES and value == "N/A" and our_key == key and our_value.isdigit()
        if timestamp or uninitialized or sram:
            their = our
        elif blackwell and their == f"{key}: Unknown" and key.strip() == "Product Architecture":
            their = f"{key}: Blackwell"  # 535 predates Blackwell
        out.append(their)
    return out + theirs[len(ours):]


DISPLAY_KINDS = ("1xT4", "A100 with MIG, processes and faults")


@pytest.mark.parametrize("kind", [*list_presets(), "A100 with MIG, processes and faults"])
def test_query_log_is_nvidias_line_for_line(real: RealClients, lib535: Path, tmp_path: Path, kind: str) -> None:
    """Ours prints NVIDIA's -q, -q -x and every -q -d type line for line; only the documented lines may differ."""
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_query_log_state(kind)), encoding="utf-8")
    if kind.startswith("A100 with MIG"):
        created = real.run("nvidia-smi", ["mig", "-i", "0", "-cgi", "9,19", "-C"], lib535, state)
        assert created.returncode == 0, created.stdout + created.stderr
        doc = json.loads(state.read_text(encoding="utf-8"))
        gi = next(gi for gi in doc["gpus"][0]["mig"]["gpu_instances"] if gi["profile_id"] == 9)
        hardware.add_process_in(doc["gpus"][0], 777, "train.py", 1500, gi_id=gi["id"], ci_id=0)
        state.write_text(json.dumps(doc), encoding="utf-8")
    blackwell = json.loads(state.read_text(encoding="utf-8"))["gpus"][0]["architecture"] == 10
    runs = [["-q"], ["-q", "-i", "0"], ["-q", "-x"]]
    if kind in DISPLAY_KINDS:  # every -d type (and a bad one) on two layouts: Turing's ECC block and Ampere's
        runs += [["-q", "-d", "memory,ECC,PIDS,accounting"], ["-q", "-d", "BOGUS"]]
        runs += [["-q", "-d", shown] for shown in (
            "MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
            "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "SUPPORTED_GPU_TARGET_TEMP",
            "VOLTAGE", "FBC_STATS", "ROW_REMAPPER", "RESET_STATUS")]
    for args in runs:
        theirs = _lines(real.run("nvidia-smi", args, lib535, state), False)
        ours = _lines(_ours(args, lib535, state), False)
        assert theirs[-1] == ("exit 2" if "BOGUS" in args else "exit 0"), theirs
        assert ours == _normalised(theirs, ours, blackwell), f"nvidia-smi {' '.join(args)}"
        if "-x" in args:
            assert ET.fromstring("\n".join(ours[:-1])).tag == "nvidia_smi_log"
    full = _lines(real.run("nvidia-smi", ["-q"], lib535, state), False)
    assert "Function Not Found" not in "\n".join(full)
    assert sum(line.startswith("GPU 0000") for line in full) == len(json.loads(state.read_text())["gpus"])
