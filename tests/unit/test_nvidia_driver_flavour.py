"""nvidia_driver's kernel module flavour as the role evaluates it (issue 17): the installed flavour, the swap, the
package the install step names, and the swap as a reboot reason on every host (container or not).

The expressions are the role's own (vars/main.yml, tasks/preflight.yml), rendered by Ansible's templating engine
with the baseline tests' helpers; the expected package names are NVIDIA's (nvidia-kernel-dkms,
nvidia-kernel-open-dkms in the CUDA repository).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

REPO = Path(__file__).resolve().parents[2]
B200 = [{"bus_id": f"0000:{n:02x}:00.0", "device_id": "0x2901"} for n in (0x05, 0x28)]
H100 = [{"bus_id": "0000:18:00.0", "device_id": "0x2330"}]


def _helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpufleet_baseline_helpers",
                                                  REPO / "tests" / "unit" / "baseline" / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HELPERS = _helpers()


def render(template: Any, **overrides: Any) -> Any:
    variables = HELPERS.role_variables("nvidia_driver", "Debian-12", overrides)
    return Templar(loader=DataLoader(), variables=variables).template(HELPERS.trust(template))


def facts(**packages: str) -> dict[str, Any]:
    return {"architecture": "x86_64", "kernel": "6.1.0-28-amd64",
            "packages": {name.replace("_", "-"): [{"version": v}] for name, v in packages.items()}}


@pytest.mark.parametrize(("installed", "requested", "gpus", "flavour", "package", "swap"), [
    ({}, "auto", B200, "open", "nvidia-kernel-open-dkms", False),
    ({"nvidia_kernel_dkms": "570.172.08-1"}, "open", H100, "open", "nvidia-kernel-open-dkms", True),
    ({"nvidia_kernel_dkms": "570.172.08-1"}, "auto", B200, "open", "nvidia-kernel-open-dkms", True),
    ({"nvidia_kernel_dkms": "570.172.08-1"}, "proprietary", H100, "proprietary", "nvidia-kernel-dkms", False),
    ({"nvidia_kernel_open_dkms": "570.172.08-1"}, "proprietary", H100, "proprietary", "nvidia-kernel-dkms", True),
    ({"nvidia_kernel_open_dkms": "570.172.08-1"}, "auto", H100, "open", "nvidia-kernel-open-dkms", False),
])
def test_flavour_package_and_swap(installed: dict[str, str], requested: str, gpus: list[dict[str, str]],
                                  flavour: str, package: str, swap: bool) -> None:
    values = render(["{{ __nvidia_driver_kernel_flavour }}", "{{ __nvidia_driver_kernel_package }}",
                     "{{ __nvidia_driver_flavour_swap }}"],
                    ansible_facts=facts(**installed), nvidia_driver_kernel_module=requested,
                    __nvidia_driver_pci={"gpus": gpus}, __nvidia_driver_today="2026-11-24")
    assert values == [flavour, package, swap]


def _preflight_reasons(container: bool, **installed: str) -> list[str]:
    tasks = HELPERS.find_task("nvidia_driver", "preflight.yml", "Work out whether the change needs a reboot")
    expression = tasks["ansible.builtin.set_fact"]["__nvidia_driver_reboot_reasons_before"]
    return render(expression, **tasks["vars"], ansible_facts=facts(**installed), nvidia_driver_kernel_module="open",
                  __nvidia_driver_pci={"gpus": H100}, __nvidia_driver_today="2026-11-24",
                  __nvidia_driver_is_container=container, __nvidia_driver_reboot_pkgs={},
                  __nvidia_driver_target_version="570.172.08-1")


def test_a_flavour_swap_is_a_reboot_reason_even_in_a_container() -> None:
    assert _preflight_reasons(True, nvidia_kernel_dkms="570.172.08-1") == [
        "the kernel modules change from proprietary to open and the running kernel keeps the proprietary module"]


def test_a_host_already_on_the_flavour_has_no_reason_in_a_container() -> None:
    assert _preflight_reasons(True, nvidia_kernel_open_dkms="570.172.08-1") == []
