"""Testinfra checks (podman backend) of the nvidia_mig scenario: the layout is on the GPUs, recorded, the GPU
clients stopped for the change run again, and gpufleet-mig-apply.service brings the layout back."""

from __future__ import annotations

import json
import re

STATE = "/etc/gpufleet/mig-state.json"
VENV_PYTHON = "/opt/gpufleet/venv/bin/python3"
APPLY = "/usr/local/libexec/gpufleet/gpufleet-mig-apply"
#: where the role installs the module_utils the entry point imports (gpufleet_lib_dir's documented default)
LIB = "/opt/gpufleet/lib"
#: `nvidia-smi mig -lgi` rows: GPU, name, profile id, instance id, placement
LGI_ROW = re.compile(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$")
EXPECTED = {
    "mig-a100": {i: [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)] for i in range(4)},
    "mig-h100": {i: [("3g.40gb", 0), ("3g.40gb", 4)] for i in range(8)},
}


def _name(host) -> str:
    return host.check_output("hostname")


def _instances(host) -> dict[int, list[tuple[str, int]]]:
    found: dict[int, list[tuple[str, int]]] = {}
    for line in host.check_output("nvidia-smi mig -lgi").splitlines():
        match = LGI_ROW.match(line.strip())
        if match:
            found.setdefault(int(match.group(1)), []).append((match.group(2), int(match.group(5))))
    return {gpu: sorted(gis, key=lambda g: g[1]) for gpu, gis in found.items()}


def test_nvidia_smi_shows_the_layout(host) -> None:
    assert _instances(host) == EXPECTED[_name(host)]


def test_mig_mode_per_gpu(host) -> None:
    out = host.check_output("nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader")
    modes = dict(line.split(", ") for line in out.splitlines())
    enabled = {str(i) for i in EXPECTED[_name(host)]}
    assert modes == {str(i): ("Enabled" if str(i) in enabled else "Disabled") for i in range(8)}


#: compute instances on GPU 0, from the layout: the H100 entry asks for 1c + 2c in each 3g.40gb GI; the A100 entry
#: names none, so each GI gets one CI that fills it, named like the GI (docs/mig.md)
EXPECTED_CIS_GPU0 = {
    "mig-a100": {"2g.20gb": 1, "1g.10gb": 2, "3g.40gb": 1},
    "mig-h100": {"1c.3g.40gb": 2, "2c.3g.40gb": 2},
}
#: `nvidia-smi mig -lci` rows: GPU, GI id, name, profile id, CI id, placement
LCI_ROW = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$")


def test_compute_instances_on_gpu0(host) -> None:
    names: dict[str, int] = {}
    for line in host.check_output("nvidia-smi mig -lci -i 0").splitlines():
        match = LCI_ROW.match(line.strip())
        if match:
            names[match.group(3)] = names.get(match.group(3), 0) + 1
    assert names == EXPECTED_CIS_GPU0[_name(host)]


def test_state_file_records_success(host) -> None:
    state = host.file(STATE)
    assert (state.user, state.mode) == ("root", 0o644)
    record = json.loads(state.content_string)
    assert (record["state"], record["layout_name"], record["managed_by"]) == ("success", "mixed",
                                                                               "gpufleet.nvidia.nvidia_mig")
    # the GPUs in NVML order, as nvidia-smi lists them (parsed here on the controller: the hosts have no jq)
    uuids = host.check_output("nvidia-smi --query-gpu=uuid --format=csv,noheader").split()
    assert len(uuids) == 8
    assert [g["uuid"] for g in record["gpus"]] == uuids


def test_gpu_clients_stopped_for_the_change_run_again(host) -> None:
    units = ["nvidia-persistenced"] + (["nvidia-fabricmanager"] if _name(host) == "mig-h100" else [])
    for unit in units:
        service = host.service(unit)
        assert service.is_running, unit
        assert service.is_enabled, unit


def test_boot_unit_installed_and_enabled(host) -> None:
    unit = host.file("/etc/systemd/system/gpufleet-mig-apply.service")
    assert unit.contains("Before=nvidia-dcgm.service nvidia-dcgm-exporter.service nvidia-mps.service kubelet.service")
    assert unit.contains("After=nvidia-persistenced.service")
    assert host.service("gpufleet-mig-apply").is_enabled
    # by hand, as an operator would: without --lib the entry point says what it needs
    bare = host.run(f"{VENV_PYTHON} {APPLY} --check")
    assert bare.rc == 2, bare.stderr
    assert "--lib (or $GPUFLEET_MIG_LIB) is required" in bare.stderr
    check = host.run(f"{VENV_PYTHON} {APPLY} --lib {LIB} --check")
    assert check.rc == 0, check.stderr
    assert "MIG layout already applied" in check.stdout


def test_boot_unit_restores_lost_instances(host) -> None:
    # what a reboot does to GPU instances: they are gone (the MIG mode stays on Ampere)
    host.run_test("nvidia-smi mig -dci -i 1")
    host.run_test("nvidia-smi mig -dgi -i 1")
    assert 1 not in _instances(host)
    restart = host.run("systemctl restart gpufleet-mig-apply.service")
    assert restart.rc == 0, host.run("journalctl -u gpufleet-mig-apply --no-pager -n 30").stdout
    assert _instances(host) == EXPECTED[_name(host)]
