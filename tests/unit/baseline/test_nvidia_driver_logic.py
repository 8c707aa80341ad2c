"""nvidia_driver: repository URLs, version choice, downgrade and change detection, reboot reasons.

Every expression comes from the role's own files (vars/main.yml, the task files) and is rendered by Ansible's
templating engine, so these tables test what the role really evaluates.
"""

from __future__ import annotations

import base64

import pytest

from .conftest import find_task

ROLE = "nvidia_driver"

PACKAGES_INDEX = """\
Package: cuda-drivers-550
Architecture: amd64
Version: 550.163.01-1
Depends: nvidia-driver (= 550.163.01-1)

Package: cuda-drivers-570
Architecture: amd64
Version: 570.86.10-1

Package: cuda-drivers-570
Architecture: amd64
Version: 570.172.08-1
Depends: nvidia-driver (= 570.172.08-1)

Package: cuda-drivers-570
Architecture: amd64
Version: 570.124.06-1

Package: nvidia-fabricmanager-570
Architecture: amd64
Version: 570.172.08-1

Package: cuda-drivers-5700
Architecture: amd64
Version: 5700.1.1-1
"""


def _facts(arch: str = "x86_64", packages: dict[str, str] | None = None) -> dict:
    return {
        "architecture": arch,
        "kernel": "6.1.0-28-amd64",
        "packages": {name: [{"version": version}] for name, version in (packages or {}).items()},
    }


@pytest.mark.parametrize(
    ("os_vars", "arch", "url", "suite", "base", "index", "key"),
    [
        ("Debian-12", "x86_64", "", "/",
         "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
         "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/Packages",
         "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub"),
        ("Ubuntu-22.04", "aarch64", "", "/",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/Packages",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/3bf863cc.pub"),
        ("Ubuntu-24.04", "x86_64", "", "/",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/Packages",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub"),
        ("Debian-12", "x86_64", "http://mirror.example/cuda//", "./",
         "http://mirror.example/cuda/", "http://mirror.example/cuda/Packages",
         "http://mirror.example/cuda/3bf863cc.pub"),
        ("Debian-12", "x86_64", "http://127.0.0.1:8765", "x86_64/",
         "http://127.0.0.1:8765/", "http://127.0.0.1:8765/x86_64/Packages", "http://127.0.0.1:8765/3bf863cc.pub"),
    ],
)
def test_repository_urls(render, os_vars, arch, url, suite, base, index, key) -> None:
    values = render(ROLE, ["{{ __nvidia_driver_repo_base }}", "{{ __nvidia_driver_index_url }}",
                           "{{ __nvidia_driver_key_url }}"],
                    os_vars=os_vars, ansible_facts=_facts(arch), nvidia_driver_repo_url=url,
                    nvidia_driver_repo_suite=suite)
    assert values == [base, index, key]


@pytest.mark.parametrize(
    ("os_vars", "pinned", "expected"),
    [
        # NVIDIA's CUDA repository key 3bf863cc ("cudatools <cudatools@nvidia.com>"), as NVIDIA publishes it.
        ("Debian-12", "", "EB693B3035CD5710E231E123A4B469963BF863CC"),
        ("Ubuntu-24.04", "", "EB693B3035CD5710E231E123A4B469963BF863CC"),
        ("Debian-12", "ab12 cd34 ef56 ab12 cd34  ef56 ab12 cd34 ef56 ab12",
         "ab12 cd34 ef56 ab12 cd34  ef56 ab12 cd34 ef56 ab12"),
    ],
)
def test_pinned_key_fingerprint(render, os_vars, pinned, expected) -> None:
    assert render(ROLE, "{{ __nvidia_driver_key_fingerprint }}", os_vars=os_vars,
                  nvidia_driver_repo_key_fingerprint=pinned) == expected


def test_only_tested_oses_have_variables() -> None:
    """Preflight refuses an OS without a vars file: only the apt OSes the role installs on have one."""
    from .conftest import ROLES
    assert sorted(p.name for p in (ROLES / ROLE / "vars").glob("*-*.yml")) == [
        "Debian-12.yml", "Ubuntu-22.04.yml", "Ubuntu-24.04.yml"]


def test_credentials_of_the_repository_url_are_masked_where_shown(render) -> None:
    shown = render(ROLE, ["{{ __nvidia_driver_repo_shown }}", "{{ __nvidia_driver_index_shown }}",
                          "{{ __nvidia_driver_repo_has_credentials }}"],
                   ansible_facts=_facts(), nvidia_driver_repo_url="https://ci:t0k3n@mirror.example/cuda/")
    assert shown == ["https://***@mirror.example/cuda/", "https://***@mirror.example/cuda/Packages", True]


@pytest.mark.parametrize(
    ("branch", "version", "branches", "versions", "target", "driver"),
    [
        ("570", "", ["550", "570", "5700"], ["570.86.10-1", "570.172.08-1", "570.124.06-1"], "570.172.08-1",
         "570.172.08"),
        ("570", "570.124.06", ["550", "570", "5700"], ["570.86.10-1", "570.172.08-1", "570.124.06-1"],
         "570.124.06-1", "570.124.06"),
        ("570", "570.124.06-1", ["550", "570", "5700"], ["570.86.10-1", "570.172.08-1", "570.124.06-1"],
         "570.124.06-1", "570.124.06"),
        ("570", "570.1", ["550", "570", "5700"], ["570.86.10-1", "570.172.08-1", "570.124.06-1"], "", ""),
        ("550", "", ["550", "570", "5700"], ["550.163.01-1"], "550.163.01-1", "550.163.01"),
        ("999", "", ["550", "570", "5700"], [], "", ""),
    ],
)
def test_version_choice_from_the_index(render, branch, version, branches, versions, target, driver) -> None:
    values = render(ROLE, ["{{ __nvidia_driver_repo_branches }}", "{{ __nvidia_driver_repo_driver_versions }}",
                           "{{ __nvidia_driver_target_version }}", "{{ __nvidia_driver_target_driver }}"],
                    nvidia_driver_branch=branch, nvidia_driver_version=version,
                    __nvidia_driver_index={"content": PACKAGES_INDEX})
    assert values == [branches, versions, target, driver]


@pytest.mark.parametrize(
    ("installed", "target", "downgrade"),
    [
        ("", "570.172.08-1", False),
        ("550.163.01-1", "570.172.08-1", False),
        ("570.172.08-1", "570.172.08-1", False),
        ("570.172.08-1", "550.163.01-1", True),
        ("570.172.08-1", "570.124.06-1", True),
        ("570.86.10-1", "570.124.06-1", False),
    ],
)
def test_downgrade_detection(render, installed, target, downgrade) -> None:
    packages = {"nvidia-driver": installed} if installed else {}
    assert render(ROLE, "{{ __nvidia_driver_downgrade }}", ansible_facts=_facts(packages=packages),
                  __nvidia_driver_target_version=target) is downgrade


FULL_570 = {
    "cuda-drivers-570": "570.172.08-1", "nvidia-driver": "570.172.08-1",
    "nvidia-kernel-open-dkms": "570.172.08-1", "nvidia-fabricmanager-570": "570.172.08-1",
}


@pytest.mark.parametrize(
    ("packages", "module", "fm", "change", "kernel_change", "other_branch"),
    [
        ({}, "open", False, True, True, []),
        (FULL_570, "open", True, False, False, []),
        (FULL_570, "open", False, False, False, []),
        (FULL_570, "proprietary", False, True, True, []),
        ({**FULL_570, "nvidia-fabricmanager-570": "570.124.06-1"}, "open", True, True, False, []),
        ({k: v for k, v in FULL_570.items() if k != "nvidia-fabricmanager-570"}, "open", True, True, False, []),
        ({**FULL_570, "nvidia-driver-pinning-550": "550.163.01-1", "libnvidia-nscq-550": "550.163.01-1"},
         "open", False, True, False, ["nvidia-driver-pinning-550", "libnvidia-nscq-550"]),
        ({"cuda-drivers-550": "550.163.01-1", "nvidia-driver": "550.163.01-1",
          "nvidia-kernel-open-dkms": "550.163.01-1", "nvidia-fabricmanager-550": "550.163.01-1"},
         "open", True, True, True, ["cuda-drivers-550", "nvidia-fabricmanager-550"]),
    ],
)
def test_change_detection(render, packages, module, fm, change, kernel_change, other_branch) -> None:
    values = render(ROLE, ["{{ __nvidia_driver_change_needed }}", "{{ __nvidia_driver_kernel_change }}",
                           "{{ __nvidia_driver_other_branch_packages }}"],
                    ansible_facts=_facts(packages=packages), nvidia_driver_kernel_module=module,
                    __nvidia_driver_fm_wanted=fm, __nvidia_driver_target_version="570.172.08-1",
                    nvidia_driver_branch="570")
    assert values == [change, kernel_change, other_branch]


@pytest.mark.parametrize(
    ("module", "kernel_package"),
    [("open", "nvidia-kernel-open-dkms"), ("proprietary", "nvidia-kernel-dkms")],
)
def test_install_list_pins_every_component_to_one_version(render, module, kernel_package) -> None:
    task = find_task(ROLE, "install.yml", "Install the driver at version {{ __nvidia_driver_target_version }}")
    names = render(ROLE, task["ansible.builtin.apt"]["name"], nvidia_driver_kernel_module=module,
                   __nvidia_driver_target_version="570.172.08-1", nvidia_driver_branch="570")
    assert names == [
        "cuda-drivers-570=570.172.08-1", "nvidia-driver=570.172.08-1", f"{kernel_package}=570.172.08-1",
        "libnvidia-ml1=570.172.08-1", "nvidia-smi=570.172.08-1", "nvidia-persistenced=570.172.08-1",
        "nvidia-cuda-mps=570.172.08-1",
    ]


FULL_580 = {"cuda-drivers-580": "580.105.08-1", "nvidia-driver": "580.105.08-1",
            "nvidia-kernel-open-dkms": "580.105.08-1", "nvidia-fabricmanager": "580.105.08-1"}


@pytest.mark.parametrize(
    ("packages", "branch", "change", "other_branch", "carried", "renamed"),
    [
        (FULL_580, "580", False, [], [], []),
        # 570 -> 580: the branch-suffixed fabric manager is purged, 580's is unsuffixed
        (FULL_570, "580", True, ["cuda-drivers-570", "nvidia-fabricmanager-570"], [], []),
        # IMEX installed by nvidia_imex under 570's name: carried along as nvidia-imex, the old name removed
        ({**FULL_570, "nvidia-imex-570": "570.172.08-1"}, "580", True,
         ["cuda-drivers-570", "nvidia-fabricmanager-570"], ["nvidia-imex"], ["nvidia-imex-570"]),
        # NVLSM (no suffix) on the way from 570 to 580
        ({**FULL_570, "nvlsm": "570.172.08-1"}, "580", True, ["cuda-drivers-570", "nvidia-fabricmanager-570"],
         ["nvlsm"], []),
        # everything on 580 already, IMEX and NVLSM included: nothing to do
        ({**FULL_580, "nvidia-imex": "580.105.08-1", "nvlsm": "580.105.08-1"}, "580", False, [],
         ["nvidia-imex", "nvlsm"], []),
        # an IMEX left at another version is reason enough for the change
        ({**FULL_580, "nvidia-imex": "580.65.06-1"}, "580", True, [], ["nvidia-imex"], []),
        # 580 -> 570 (a downgrade): 580's unsuffixed fabric manager and NSCQ are the other branch's
        ({**FULL_580, "libnvidia-nscq": "580.105.08-1"}, "570", True,
         ["cuda-drivers-580", "nvidia-fabricmanager", "libnvidia-nscq"], [], []),
    ],
)
def test_branch_580_names_and_the_packages_carried_along(render, packages, branch, change, other_branch, carried,
                                                         renamed) -> None:
    target = {"570": "570.172.08-1", "580": "580.105.08-1"}[branch]
    values = render(ROLE, ["{{ __nvidia_driver_change_needed }}", "{{ __nvidia_driver_other_branch_packages }}",
                           "{{ __nvidia_driver_carried_packages }}", "{{ __nvidia_driver_renamed_imex }}"],
                    ansible_facts=_facts(packages=packages), nvidia_driver_kernel_module="open",
                    __nvidia_driver_fm_wanted=True, __nvidia_driver_target_version=target,
                    nvidia_driver_branch=branch)
    assert values == [change, other_branch, carried, renamed]


def test_imex_and_nvlsm_move_in_the_driver_transaction(render) -> None:
    task = find_task(ROLE, "install.yml", "Install the driver at version {{ __nvidia_driver_target_version }}")
    names = render(ROLE, task["ansible.builtin.apt"]["name"], nvidia_driver_kernel_module="open",
                   __nvidia_driver_target_version="580.105.08-1", nvidia_driver_branch="580",
                   ansible_facts=_facts(packages={**FULL_570, "nvidia-imex-570": "570.172.08-1",
                                                  "nvlsm": "570.172.08-1"}))
    assert names == [
        "cuda-drivers-580=580.105.08-1", "nvidia-driver=580.105.08-1", "nvidia-kernel-open-dkms=580.105.08-1",
        "libnvidia-ml1=580.105.08-1", "nvidia-smi=580.105.08-1", "nvidia-persistenced=580.105.08-1",
        "nvidia-cuda-mps=580.105.08-1", "nvidia-imex=580.105.08-1", "nvlsm=580.105.08-1",
    ]


def _reboot_reasons(render, *, pkgs: str | None, container: bool, kernel_before: str, kernel_after: str,
                    nouveau_changed: bool = False, modprobe_changed: bool = False, check_mode: bool = False):
    task = find_task(ROLE, "reboot.yml", "Collect why a reboot is needed")
    variables = dict(task["vars"])
    slurped = {"content": base64.b64encode(pkgs.encode()).decode()} if pkgs is not None else {"skipped": True}
    packages = {"nvidia-kernel-open-dkms": kernel_after} if kernel_after else {}
    return render(ROLE, task["ansible.builtin.set_fact"]["__nvidia_driver_reboot_reasons"],
                  ansible_facts=_facts(packages=packages), ansible_check_mode=check_mode,
                  __nvidia_driver_reboot_pkgs=slurped, __nvidia_driver_is_container=container,
                  __nvidia_driver_kernel_version_before=kernel_before, __nvidia_driver_kernel_change=True,
                  __nvidia_driver_target_version="570.172.08-1",
                  __nvidia_driver_nouveau={"changed": nouveau_changed},
                  __nvidia_driver_modprobe={"changed": modprobe_changed}, **variables)


KERNEL_REASON = "the NVIDIA kernel module package changed to 570.172.08-1 and the running kernel keeps the old module"


@pytest.mark.parametrize(
    ("kwargs", "reasons"),
    [
        ({"pkgs": None, "container": True, "kernel_before": "", "kernel_after": "570.172.08-1"}, []),
        ({"pkgs": None, "container": False, "kernel_before": "", "kernel_after": "570.172.08-1"}, [KERNEL_REASON]),
        ({"pkgs": None, "container": False, "kernel_before": "570.172.08-1", "kernel_after": "570.172.08-1"}, []),
        ({"pkgs": "linux-image-6.1.0-29-amd64\nnvidia-kernel-open-dkms\nlibnvidia-ml1\nnvidia-kernel-open-dkms\n",
          "container": True, "kernel_before": "570.172.08-1", "kernel_after": "570.172.08-1"},
         ["/run/reboot-required.pkgs names nvidia-kernel-open-dkms, libnvidia-ml1"]),
        ({"pkgs": "linux-image-6.1.0-29-amd64\n", "container": False, "kernel_before": "1", "kernel_after": "1"}, []),
        ({"pkgs": None, "container": False, "kernel_before": "1", "kernel_after": "1", "nouveau_changed": True,
          "modprobe_changed": True},
         ["nouveau was just blacklisted", "the NVIDIA module parameters changed"]),
        ({"pkgs": None, "container": True, "kernel_before": "1", "kernel_after": "1", "nouveau_changed": True,
          "modprobe_changed": True}, []),
        ({"pkgs": None, "container": False, "kernel_before": "1", "kernel_after": "1", "check_mode": True},
         [KERNEL_REASON]),
    ],
)
def test_reboot_reasons(render, kwargs, reasons) -> None:
    assert _reboot_reasons(render, **kwargs) == reasons


@pytest.mark.parametrize(
    ("os_vars", "initramfs", "headers"),
    [
        ("Debian-12", ["update-initramfs", "-u"], ["linux-headers-6.1.0-28-amd64", "dkms"]),
        ("Ubuntu-22.04", ["update-initramfs", "-u"], ["linux-headers-6.1.0-28-amd64", "dkms"]),
        ("Ubuntu-24.04", ["update-initramfs", "-u"], ["linux-headers-6.1.0-28-amd64", "dkms"]),
    ],
)
@pytest.mark.parametrize("container", [False, True])
def test_kernel_steps_skipped_in_containers_per_os(render, os_vars, initramfs, headers, container) -> None:
    """The headers install and the initramfs rebuild run on a host and are skipped in a container; the messages
    that replace them run in a container only."""
    def runs(task: dict) -> bool:
        conditions = task["when"] if isinstance(task["when"], list) else [task["when"]]
        return all(render(ROLE, "{{ " + c + " }}", os_vars=os_vars, ansible_facts=_facts(),
                          __nvidia_driver_is_container=container) for c in conditions)

    from .conftest import ROLES, load_yaml
    handlers = {h["name"]: h for h in load_yaml(ROLES / ROLE / "handlers" / "main.yml")}
    assert render(ROLE, ["{{ __nvidia_driver_initramfs_command }}", "{{ __nvidia_driver_kernel_headers_packages }}"],
                  os_vars=os_vars, ansible_facts=_facts()) == [initramfs, headers]
    assert runs(find_task(ROLE, "install.yml", "Install the kernel headers of the running kernel and dkms")) \
        is not container
    assert runs(find_task(ROLE, "install.yml", "Report the kernel headers skipped on a container host")) is container
    assert runs(handlers["Rebuild the initramfs"]) is not container
    assert runs(handlers["Report the initramfs rebuild skipped on a container host"]) is container


@pytest.mark.parametrize(
    ("value", "policy"),
    [(None, "ask"), ("", "ask"), (True, "reboot"), ("true", "reboot"), ("yes", "reboot"), (False, "report"),
     ("false", "report"), ("0", "report")],
)
def test_reboot_policy_accepts_extra_vars_strings(render, value, policy) -> None:
    assert render(ROLE, "{{ __nvidia_driver_reboot_policy }}", nvidia_driver_reboot_ok=value) == policy


@pytest.mark.parametrize(
    ("installed", "pinning_files", "other"),
    [
        ({"nvidia-driver": "1"}, ["/etc/apt/preferences.d/nvidia-driver-pinning-550"], ["nvidia-driver-pinning-550"]),
        ({"nvidia-driver-pinning-550": "1"}, ["/etc/apt/preferences.d/nvidia-driver-pinning-550"],
         ["nvidia-driver-pinning-550"]),
        ({}, ["/etc/apt/preferences.d/nvidia-driver-pinning-570"], []),
    ],
)
def test_leftover_pinning_files_are_purged(render, installed, pinning_files, other) -> None:
    assert render(ROLE, "{{ __nvidia_driver_other_branch_packages }}", ansible_facts=_facts(packages=installed),
                  __nvidia_driver_pinning_files={"files": [{"path": p} for p in pinning_files]},
                  nvidia_driver_branch="570") == other
