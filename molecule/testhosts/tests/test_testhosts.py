"""Testinfra checks (podman backend) of the testhosts scenario: the simulated driver works on each host."""

from __future__ import annotations

import json
import re

import pytest

STATE = "/var/lib/nvidia-sim/state.json"
VENV_PYTHON = "/opt/gpufleet/venv/bin/python3"
PYNVML_SCRIPT = (
    "import json, pynvml\n"
    "pynvml.nvmlInit()\n"
    "out = [{'name': pynvml.nvmlDeviceGetName(h), 'uuid': pynvml.nvmlDeviceGetUUID(h)}"
    " for h in (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount()))]\n"
    "print(json.dumps(out))\n"
)
#: Each platform's preset (molecule.yml) and the number of GPUs it must show.
EXPECTED_GPUS = {"testhosts-h100": 8, "testhosts-a30": 4}
NVIDIA_SMI_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$")


def _preset_gpus(host) -> list[dict]:
    return json.loads(host.file(STATE).content_string)["gpus"]


def _name(host) -> str:
    return host.check_output("hostname")


def test_state_file_is_root_owned_and_readable(host) -> None:
    state = host.file(STATE)
    assert state.user == "root"
    assert state.mode == 0o644
    assert host.file("/var/lib/nvidia-sim").mode == 0o755


def test_driver_packages_from_the_550_branch(host) -> None:
    for name in ("nvidia-driver-pinning-550", "cuda-drivers-550", "libnvidia-ml1", "nvidia-smi"):
        package = host.package(name)
        assert package.is_installed, name
    assert host.package("libnvidia-ml1").version.startswith("550.")


def test_nvidia_smi_lists_the_preset_gpus(host) -> None:
    gpus = _preset_gpus(host)
    assert len(gpus) == EXPECTED_GPUS[_name(host)]
    lines = host.check_output("nvidia-smi -L").splitlines()
    listed = [NVIDIA_SMI_LINE.match(line) for line in lines]
    assert all(listed), lines
    assert [(int(m.group(1)), m.group(3)) for m in listed if m] == [(g["index"], g["uuid"]) for g in gpus]
    assert [m.group(2) for m in listed if m] == [g["name"] for g in gpus]


def test_pynvml_from_the_local_index_lists_the_preset_gpus(host) -> None:
    version = host.check_output(f"{VENV_PYTHON} -m pip show nvidia-ml-py")
    assert "Version: 13.615.71" in version
    cmd = host.run(f"{VENV_PYTHON} -c {_quote(PYNVML_SCRIPT)}")
    assert cmd.rc == 0, cmd.stderr
    seen = json.loads(cmd.stdout)
    assert seen == [{"name": g["name"], "uuid": g["uuid"]} for g in _preset_gpus(host)]


def test_pci_tree_shows_the_gpus_without_a_driver(host) -> None:
    vendors = host.check_output("cat /sys/bus/pci/devices/*/vendor").split()
    classes = host.check_output("cat /sys/bus/pci/devices/*/class").split()
    gpus = sum(1 for v, c in zip(vendors, classes, strict=True) if v == "0x10de" and c.startswith("0x0302"))
    assert gpus == EXPECTED_GPUS[_name(host)]


@pytest.mark.parametrize("unit", ["nvidia-persistenced"])
def test_persistenced_enabled_and_running(host, unit: str) -> None:
    service = host.service(unit)
    assert service.is_enabled
    assert service.is_running


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
