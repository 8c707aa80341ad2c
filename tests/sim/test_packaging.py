"""The Debian packages: names, versions, dependencies, contents and maintainer scripts (dpkg-deb -f / -c)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import REPO

from gpufleet_sim import packaging

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkgbuild")
    cached = sorted((REPO / "build" / "sim" / "wheels").glob("nvidia_ml_py-*.whl"))
    if cached:
        (out / "sim" / "wheels").mkdir(parents=True)
        shutil.copy(cached[0], out / "sim" / "wheels")
    packaging.build_all(out)
    return out / "repo" / "pool"


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout.strip()


def contents(deb: Path) -> list[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return [line.split()[5] for line in out.splitlines()]


#: the package table of docs/simulator.md, typed as data: three driver branches (550.163.01, 570.172.08,
#: 580.105.08), two container toolkit versions (1.17.8, 1.18.0), DCGM 4.4.1 with its exporter. From R580 the fabric
#: manager, NSCQ and IMEX packages lose the branch suffix ({s}: "-<branch>" before 580, nothing from it), as in
#: NVIDIA's CUDA repository (NVIDIA/gpu-driver-container ubuntu22.04/install.sh).
DRIVER_PACKAGES = ("cuda-drivers-{b}", "nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms",
                   "libnvidia-ml1", "nvidia-smi", "nvidia-persistenced", "nvidia-cuda-mps", "nvidia-fabricmanager{s}",
                   "nvidia-imex{s}", "nvlsm",
                   "libnvidia-nscq{s}")
BRANCHES = (("550", "550.163.01", "-550"), ("570", "570.172.08", "-570"), ("580", "580.105.08", ""))
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
EXPECTED_DEBS = sorted(
    [f"{name.format(b=branch, s=suffix)}_{version}-1_amd64.deb"
     for branch, version, suffix in BRANCHES for name in DRIVER_PACKAGES]
    + [f"nvidia-driver-pinning-{branch}_{version}-1_all.deb" for branch, version, _ in BRANCHES]
    + [f"{name}_{version}-1_amd64.deb" for version in ("1.17.8", "1.18.0") for name in TOOLKIT_PACKAGES]
    + ["datacenter-gpu-manager-4-core_4.4.1-1_amd64.deb", "datacenter-gpu-manager-4-cuda12_4.4.1-1_amd64.deb",
       "datacenter-gpu-manager-4-cuda13_4.4.1-1_amd64.deb", "datacenter-gpu-manager-exporter_4.4.1-4.5.2-1_amd64.deb"])


def test_package_set(pool: Path) -> None:
    assert sorted(p.name for p in pool.glob("*.deb")) == EXPECTED_DEBS


@pytest.mark.parametrize(
    ("deb", "version", "depends"),
    [
        ("nvidia-driver_570.172.08-1_amd64.deb", "570.172.08-1",
         "libnvidia-ml1 (= 570.172.08-1), nvidia-smi (= 570.172.08-1), nvidia-persistenced (= 570.172.08-1), "
         "nvidia-cuda-mps (= 570.172.08-1), nvidia-kernel-dkms (= 570.172.08-1) | "
         "nvidia-kernel-open-dkms (= 570.172.08-1)"),
        ("cuda-drivers-550_550.163.01-1_amd64.deb", "550.163.01-1", "nvidia-driver (= 550.163.01-1)"),
        ("nvidia-smi_550.163.01-1_amd64.deb", "550.163.01-1", "libnvidia-ml1 (= 550.163.01-1), python3"),
        ("libnvidia-ml1_570.172.08-1_amd64.deb", "570.172.08-1", "libcjson1, libc6"),
        ("nvidia-fabricmanager-570_570.172.08-1_amd64.deb", "570.172.08-1", "nvidia-driver (= 570.172.08-1), python3"),
        ("nvlsm_580.105.08-1_amd64.deb", "580.105.08-1", "libnvidia-ml1 (= 580.105.08-1), python3"),
        ("nvidia-fabricmanager_580.105.08-1_amd64.deb", "580.105.08-1", "nvidia-driver (= 580.105.08-1), python3"),
        ("nvidia-imex_580.105.08-1_amd64.deb", "580.105.08-1", "libnvidia-ml1 (= 580.105.08-1), python3"),
        ("nvidia-container-toolkit_1.17.8-1_amd64.deb", "1.17.8-1",
         "nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (= 1.17.8-1)"),
        ("datacenter-gpu-manager-4-cuda12_4.4.1-1_amd64.deb", "1:4.4.1-1",
         "datacenter-gpu-manager-4-core (= 1:4.4.1-1)"),
        ("datacenter-gpu-manager-exporter_4.4.1-4.5.2-1_amd64.deb", "4.4.1-4.5.2-1",
         "datacenter-gpu-manager-4-core, python3"),
    ],
)
def test_control_fields(pool: Path, deb: str, version: str, depends: str) -> None:
    assert field(pool / deb, "Version") == version
    assert field(pool / deb, "Depends") == depends


def test_kernel_flavours_conflict(pool: Path) -> None:
    assert field(pool / "nvidia-kernel-dkms_570.172.08-1_amd64.deb", "Conflicts") == "nvidia-kernel-open-dkms"
    assert field(pool / "nvidia-kernel-open-dkms_570.172.08-1_amd64.deb", "Conflicts") == "nvidia-kernel-dkms"


@pytest.mark.parametrize(
    ("deb", "paths"),
    [
        ("libnvidia-ml1_570.172.08-1_amd64.deb",
         ["./usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.172.08", "./usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
          "./usr/lib/nvidia-sim/python/pynvml.py", "./usr/lib/nvidia-sim/python/nvidia_sim/store.py",
          "./var/lib/nvidia-sim/"]),
        ("nvidia-smi_570.172.08-1_amd64.deb",
         ["./usr/bin/nvidia-smi", "./usr/lib/nvidia-sim/python/nvidia_sim/tools/smi_mig.py"]),
        ("nvidia-persistenced_550.163.01-1_amd64.deb", ["./lib/systemd/system/nvidia-persistenced.service"]),
        ("nvidia-fabricmanager-550_550.163.01-1_amd64.deb",
         ["./usr/bin/nv-fabricmanager", "./usr/share/nvidia/nvswitch/fabricmanager.cfg",
          "./lib/systemd/system/nvidia-fabricmanager.service"]),
        ("nvidia-container-toolkit-base_1.18.0-1_amd64.deb",
         ["./usr/bin/nvidia-ctk", "./lib/systemd/system/nvidia-cdi-refresh.service",
          "./etc/nvidia-container-runtime/config.toml"]),
        ("datacenter-gpu-manager-4-core_4.4.1-1_amd64.deb",
         ["./usr/bin/nv-hostengine", "./usr/bin/dcgmi", "./lib/systemd/system/nvidia-dcgm.service"]),
        ("datacenter-gpu-manager-exporter_4.4.1-4.5.2-1_amd64.deb",
         ["./usr/bin/dcgm-exporter", "./etc/dcgm-exporter/default-counters.csv",
          "./lib/systemd/system/nvidia-dcgm-exporter.service"]),
        ("nvidia-driver-pinning-570_570.172.08-1_all.deb", ["./etc/apt/preferences.d/nvidia-driver-pinning-570"]),
        ("nvidia-driver-pinning-580_580.105.08-1_all.deb", ["./etc/apt/preferences.d/nvidia-driver-pinning-580"]),
        ("nvlsm_580.105.08-1_amd64.deb", ["./opt/nvidia/nvlsm/sbin/nvlsm", "./usr/share/nvidia/nvlsm/nvlsm.conf",
                                          "./lib/systemd/system/nvlsm.service"]),
    ],
)
def test_contents(pool: Path, deb: str, paths: list[str]) -> None:
    assert set(paths) <= set(contents(pool / deb))


def test_preinst_refuses_real_driver_and_wrapper_pins_version(pool: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-R", str(pool / "nvidia-fabricmanager-550_550.163.01-1_amd64.deb"), str(tmp_path)],
                   check=True)
    preinst = (tmp_path / "DEBIAN" / "preinst").read_text()
    assert "if [ -e /proc/driver/nvidia ]; then" in preinst
    assert "nvidia-fabricmanager-550: refusing to install the simulated NVIDIA driver" in preinst
    wrapper = (tmp_path / "usr/bin/nv-fabricmanager").read_text()
    assert wrapper.startswith("#!/usr/bin/python3\n")
    assert 'sys.exit(main(version="550.163.01"))' in wrapper
    pinning = packaging.pinning_file("570").decode()
    assert "Package: nvidia-* libnvidia-* cuda-drivers*\nPin: version 570.*\nPin-Priority: 1000\n" in pinning


def test_local_tools_run(pool: Path) -> None:
    bindir = pool.parent.parent / "sim" / "bin"
    result = subprocess.run([str(bindir / "nvidia-ctk"), "--version"], capture_output=True, text=True, check=False)
    assert result.stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.18.0"
