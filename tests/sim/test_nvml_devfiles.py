"""Simulated driver: the MIG device files (/proc/driver/nvidia/capabilities, /proc/driver/nvidia-caps/mig-minors,
/dev/nvidia*, /dev/nvidia-caps/nvidia-cap*) follow the MIG state, as NVIDIA's kernel driver keeps them.

The expected minors are the driver's published numbering (MIG user guide, "Device Nodes and Capabilities":
``config 1``, ``monitor 2``, ``gpu0/gi0/access 3``, its CIs 4-11, ``gpu0/gi1/access 12``, ...), written out here by
hand, not computed by the code under test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def _access(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_files_follow_gpu_and_compute_instances(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any],
                                                tmp_path: Path) -> None:
    from gpufleet_sim.presets import build_state

    root = tmp_path / "root"
    (root / "proc" / "driver").mkdir(parents=True)  # the tmpfs a simulated host mounts over /proc/driver
    sim = nvml_sim(doc=mig_on(build_state("2xA100-40GB", "host-a"), 0))
    caps = root / "proc/driver/nvidia/capabilities"
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        gi = N.nvmlDeviceCreateGpuInstance(h, 9)   # 3g.20gb, first free placement: slots 4-7, id 2
        R["gi"] = N.nvmlGpuInstanceGetInfo(gi).id
        ci = N.nvmlGpuInstanceCreateComputeInstance(gi, 2)   # the full 3c of the GI
        R["ci"] = N.nvmlComputeInstanceGetInfo(ci).id
    """, extra_env={"NVML_SIM_DEVROOT": str(root)})
    assert r == {"gi": 2, "ci": 0}
    # gi0 is 3, gi1 12, gi2 21 (9 minors per GI); its ci0 is 22
    assert _access(caps / "gpu0/mig/gi2/access") == "DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    assert _access(caps / "gpu0/mig/gi2/ci0/access").startswith("DeviceFileMinor: 22\n")
    assert _access(caps / "mig/config").startswith("DeviceFileMinor: 1\n")
    assert _access(caps / "mig/monitor").startswith("DeviceFileMinor: 2\n")
    minors = (root / "proc/driver/nvidia-caps/mig-minors").read_text(encoding="utf-8").splitlines()
    assert minors[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert "gpu0/gi1/access 12" in minors
    assert "gpu0/gi1/ci0/access 13" in minors
    assert "gpu0/gi0/ci7/access 11" in minors
    dev = root / "dev"
    assert sorted(p.name for p in (dev / "nvidia-caps").iterdir()) == [
        "nvidia-cap1", "nvidia-cap2", "nvidia-cap21", "nvidia-cap22"]
    assert {"nvidia0", "nvidia1", "nvidiactl"} <= {p.name for p in dev.iterdir()}
    assert not (caps / "gpu1").exists()  # GPU 1 is not in MIG mode

    r2 = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        gi = N.nvmlDeviceGetGpuInstanceById(h, 2)
        N.nvmlComputeInstanceDestroy(N.nvmlGpuInstanceGetComputeInstanceById(gi, 0))
        R["after_ci"] = sorted(os.listdir(os.environ["NVML_SIM_DEVROOT"] + "/dev/nvidia-caps"))
        caps = os.environ["NVML_SIM_DEVROOT"] + "/proc/driver/nvidia/capabilities"
        R["gi_left"] = os.path.exists(caps + "/gpu0/mig/gi2/access")
        N.nvmlGpuInstanceDestroy(gi)
    """, extra_env={"NVML_SIM_DEVROOT": str(root)})
    assert r2 == {"after_ci": ["nvidia-cap1", "nvidia-cap2", "nvidia-cap21"], "gi_left": True}
    assert not (caps / "gpu0/mig/gi2").exists()
    assert sorted(p.name for p in (dev / "nvidia-caps").iterdir()) == ["nvidia-cap1", "nvidia-cap2"]


def test_first_mig_query_writes_the_files_after_a_boot(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any],
                                                      tmp_path: Path) -> None:
    from gpufleet_sim.presets import build_state

    root = tmp_path / "root"
    (root / "proc" / "driver").mkdir(parents=True)
    doc = mig_on(build_state("2xA100-40GB", "host-a"), 1)
    doc["gpus"][1]["mig"]["gpu_instances"] = [
        {"id": 2, "profile_id": 9, "start": 4, "size": 4,
         "compute_instances": [{"id": 0, "profile_id": 2, "start": 0, "size": 3}]}]
    sim = nvml_sim(doc=doc)
    sim.run("""
        N.nvmlInit()
        R["max"] = N.nvmlDeviceGetMaxMigDeviceCount(N.nvmlDeviceGetHandleByIndex(1))
    """, extra_env={"NVML_SIM_DEVROOT": str(root)})
    # GPU 1 starts at minor 3 + 135 (15 GIs x 9 minors per GPU); gi2 = +18, its ci0 one more
    gi_access = root / "proc/driver/nvidia/capabilities/gpu1/mig/gi2/access"
    assert _access(gi_access).startswith("DeviceFileMinor: 156\n")
    assert (root / "dev/nvidia-caps/nvidia-cap157").exists()


def test_nothing_is_written_where_proc_driver_is_not_writable(nvml_sim: Callable[..., Any],
                                                              mig_on: Callable[..., Any], tmp_path: Path) -> None:
    from gpufleet_sim.presets import build_state

    root = tmp_path / "root"   # no proc/driver: like procfs on a host without the lab's tmpfs
    root.mkdir()
    sim = nvml_sim(doc=mig_on(build_state("2xA100-40GB", "host-a"), 0))
    sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        N.nvmlDeviceCreateGpuInstance(h, 19)
    """, extra_env={"NVML_SIM_DEVROOT": str(root)})
    assert list(root.iterdir()) == []
