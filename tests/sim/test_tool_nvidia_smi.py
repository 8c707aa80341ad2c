"""nvidia-smi against the built library and a temporary state, compared with NVIDIA's output formats.

Reference strings come from NVIDIA's documentation transcripts: the MIG User Guide ("Getting Started with MIG":
``nvidia-smi -i 0 -mig 1``, ``nvidia-smi mig -lgi``, ``nvidia-smi -L``) and the nvidia-smi manual page
(``--query-gpu`` CSV with ``--format=csv``, exit codes).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import build_lib, make_state, run_tool, tool_env, write_state

from gpufleet_sim import hardware, store

# NVIDIA nvidia-smi 535.261.03 `mig -lgi` (its binary, run by test_real_nvidia_smi_parity.py): 57 columns wide
LGI_REFERENCE = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.5gb          19        7          0:1     |
+-------------------------------------------------------+"""
# MIG User Guide, "Enable MIG Mode" (a GPU held by a client)
MIG_PENDING_REFERENCE = (
    "Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:In use by another client\n"
    "00000000:07:00.0 is currently being used by one or more other processes (e.g. CUDA application or a monitoring "
    "application such as another instance of nvidia-smi). Please first kill all processes using the device and "
    "retry the command or reboot the system to make MIG mode effective.\nAll done.\n")


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_lib()


@pytest.fixture
def host(tmp_path: Path, libdir: Path) -> tuple[Path, dict[str, str]]:
    state = write_state(tmp_path / "state.json", make_state(2))
    return state, tool_env(state, libdir)


def smi(env: dict[str, str], *args: str) -> Any:
    return run_tool("nvidia_smi", list(args), env)


def test_list_gpus_format(host: tuple[Path, dict[str, str]]) -> None:
    state, env = host
    doc = store.load(state)
    result = smi(env, "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(f"GPU {g['index']}: NVIDIA A100-SXM4-80GB (UUID: {g['uuid']})\n"
                                    for g in doc["gpus"])


def test_mig_flow_and_listing_formats(host: tuple[Path, dict[str, str]]) -> None:
    state, env = host
    doc = store.load(state)
    doc["gpus"][0]["mig"]["reset_required_for_mode"] = False
    store.create(state, doc)
    enable = smi(env, "-i", "0", "-mig", "1")
    assert enable.stdout == "Enabled MIG Mode for GPU 00000000:07:00.0\nAll done.\n"
    created = smi(env, "mig", "-i", "0", "-cgi", "19:0,1g.10gb:1", "-C")
    assert created.returncode == 0, created.stdout + created.stderr
    assert created.stdout.splitlines()[0] == ("Successfully created GPU instance ID  7 on GPU  0 using profile "
                                              "MIG 1g.10gb (ID 19)")
    lgi = smi(env, "mig", "-lgi").stdout.splitlines()
    reference = LGI_REFERENCE.splitlines()
    assert lgi[:5] == reference[:5]
    assert [len(line) for line in lgi] == [len(reference[0])] * len(lgi)
    row = reference[5].replace("1g.5gb ", "1g.10gb")
    assert lgi[5] == row
    assert lgi[7] == row.replace("  7  ", "  8  ").replace("0:1", "1:1")
    listing = smi(env, "-L").stdout.splitlines()
    mig_uuid = re.compile(r"^  MIG 1g\.10gb     Device  (\d): \(UUID: MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                          r"[0-9a-f]{4}-[0-9a-f]{12}\)$")
    assert [bool(mig_uuid.match(line)) for line in listing] == [False, True, True, False]


def test_mig_enable_pending_while_a_client_holds_the_gpu(host: tuple[Path, dict[str, str]]) -> None:
    state, env = host
    hardware.register_client(1, "init-holds-the-gpu", state)  # pid 1 is always alive
    result = smi(env, "-i", "0", "-mig", "1")
    assert result.stdout == MIG_PENDING_REFERENCE
    assert store.load(state)["gpus"][0]["mig"]["pending"] == 1
    refused = smi(env, "-r", "-i", "0")
    assert refused.returncode == 255
    assert refused.stdout.startswith("The following GPUs could not be reset:\n"
                                     "  GPU 00000000:07:00.0: In use by another client\n\n1 device is currently")
    hardware.unregister_client(1, state)
    reset = smi(env, "-r", "-i", "0")
    assert reset.stdout == "GPU 00000000:07:00.0 was successfully reset.\nAll done.\n"
    assert smi(env, "--query-gpu=mig.mode.current", "--format=csv,noheader", "-i", "0").stdout == "Enabled\n"


def test_query_gpu_csv(host: tuple[Path, dict[str, str]]) -> None:
    state, env = host
    gpu = store.load(state)["gpus"][1]
    fields = ("index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode,compute_mode,"
              "mig.mode.current,mig.mode.pending,ecc.errors.uncorrected.volatile.total,temperature.gpu,power.draw,"
              "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
              "clocks_event_reasons.active,vbios_version,compute_cap")
    result = smi(env, f"--query-gpu={fields}", "--format=csv", "-i", "1")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header == ("index, name, uuid, pci.bus_id, driver_version, memory.total [MiB], persistence_mode, "
                      "compute_mode, mig.mode.current, mig.mode.pending, ecc.errors.uncorrected.volatile.total, "
                      "temperature.gpu, power.draw [W], pcie.link.gen.current, pcie.link.gen.max, "
                      "pcie.link.width.current, pcie.link.width.max, clocks_event_reasons.active, vbios_version, "
                      "compute_cap")
    assert row == (f"1, NVIDIA A100-SXM4-80GB, {gpu['uuid']}, 00000000:17:00.0, 570.172.08, 81920 MiB, Disabled, "
                   "Default, Disabled, Disabled, 0, 31, 61.00 W, 4, 4, 16, 16, 0x0000000000000001, 92.00.36.00.10, 8.0")
    nounits = smi(env, "--query-gpu=memory.total,power.draw", "--format=csv,noheader,nounits", "-i", "1")
    assert nounits.stdout == "81920, 61.00\n"


@pytest.mark.parametrize(
    ("args", "rc", "stdout"),
    [
        (["--query-gpu=index,bogus", "--format=csv"], 2, 'Field "bogus" is not a valid field to query.\n\n'),
        (["-i", "5", "-q"], 6, "No devices were found\n"),
        (["-i", "1", "-L"], 2,
         "ERROR: Option -i is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n"),
        (["-pm", "maybe"], 2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"),
        (["--query-gpu=index", "--format=xml"], 2, '"xml" is not a valid format.\n'),
    ],
)
def test_errors(host: tuple[Path, dict[str, str]], args: list[str], rc: int, stdout: str) -> None:
    result = smi(host[1], *args)
    assert (result.returncode, result.stdout) == (rc, stdout)


def test_driver_not_loaded_and_gpu_lost(host: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    state, env = host
    missing = smi({**env, "NVML_SIM_STATE": str(tmp_path / "absent.json")}, "-L")
    assert missing.returncode == 9
    assert missing.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    hardware.inject("fallen-off-bus", "1", {}, state)
    lost = smi(env, "-q")
    assert lost.returncode == 15
    assert lost.stdout == ("Unable to determine the device handle for GPU0000:17:00.0: GPU is lost.  "
                           "Reboot the system to recover this GPU\n\n\n")
    listing = smi(env, "-L")  # NVIDIA's 535: the other GPUs, the lost one's line and two empty lines, exit 15
    assert listing.returncode == 15
    assert listing.stdout.splitlines()[1:] == ["Unable to determine the device handle for gpu 1: GPU is lost.  "
                                               "Reboot the system to recover this GPU", "", ""]


def test_persistence_compute_mode_and_query(host: tuple[Path, dict[str, str]]) -> None:
    state, env = host
    assert smi(env, "-i", "0", "-pm", "1").stdout == ("Enabled persistence mode for GPU 00000000:07:00.0.\n"
                                                      "All done.\n")
    assert smi(env, "-i", "0", "-pm", "1").stdout.startswith("Persistence mode is already Enabled")
    assert smi(env, "-i", "0", "-c", "EXCLUSIVE_PROCESS").stdout == (
        "Set compute mode to EXCLUSIVE_PROCESS for GPU 00000000:07:00.0.\nAll done.\n")
    gpu = store.load(state)["gpus"][0]
    assert (gpu["persistence_mode"], gpu["compute_mode"]) == (1, 3)
    hardware.add_process(0, 4242, "trainer", 2048, path=state)
    report = smi(env, "-q", "-i", "0").stdout
    assert "    Persistence Mode                      : Enabled\n" in report
    assert ("        Process ID                        : 4242\n"
            "            Type                          : C\n"
            "            Name                          : trainer\n"
            "            Used GPU Memory               : 2048 MiB\n") in report
    remap = smi(env, "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure", "--format=csv")
    assert remap.stdout.splitlines()[1] == "00000000:07:00.0, 0, 0"
