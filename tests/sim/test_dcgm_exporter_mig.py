"""The simulated dcgm-exporter on a MIG host and with HPC job mapping, as NVIDIA's exporter behaves:

* profiling fields (``DCGM_FI_PROF_*``) per GPU instance with ``GPU_I_PROFILE``/``GPU_I_ID`` (label order of
  NVIDIA/dcgm-exporter ``pkg/dcgmexporter/expcollector.go``); no ``DCGM_FI_DEV_GPU_UTIL`` for a GPU in MIG mode
  (dcgm-exporter issue #430);
* ``--hpc-job-mapping-dir`` / ``DCGM_HPC_JOB_MAPPING_DIR``: a file per GPU index, a job id a line, an ``hpc_job``
  label per job (NVIDIA's README, "Enabling HPC Job Mapping").

The MIG layout is made with the simulated ``nvidia-smi mig`` through the simulated driver.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import build_lib, free_port, run_tool, tool_env

from gpufleet_sim import presets, store

COUNTERS = ("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
            "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.\n")


def _scrape(env: dict[str, str], counters: Path, *args: str) -> str:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet_sim.tools.dcgm_exporter", "-f", str(counters), "-a",
                             f"127.0.0.1:{port}", *args], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    return str(response.read().decode())
            except OSError:
                subprocess.run(["sleep", "0.05"], check=True)
        raise AssertionError("the exporter did not answer")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


@pytest.fixture
def mig_host(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """2x A100 40GB: GPU 0 in MIG mode (1g.5gb at 0 running a process, 3g.20gb at 4), GPU 1 whole at 40 %."""
    doc = presets.build_state("2xA100-40GB", "exporter")
    doc["require_root"] = False
    doc["gpus"][0]["mig"]["current"] = doc["gpus"][0]["mig"]["pending"] = 1
    doc["gpus"][1]["utilization"] = {"gpu": 40, "memory": 10}
    state = store.create(tmp_path / "state.json", doc)
    env = tool_env(state, build_lib())
    made = run_tool("nvidia_smi", ["mig", "-i", "0", "-cgi", "1g.5gb:0,3g.20gb:4", "-C"], env)
    assert made.returncode == 0, made.stdout + made.stderr
    with store.transaction(state) as live:
        gpu = live["gpus"][0]
        small = next(gi for gi in gpu["mig"]["gpu_instances"] if gi["start"] == 0)
        gpu["utilization"] = {"gpu": 60, "memory": 20}
        gpu["processes"] = [{"pid": 4242, "name": "train", "used_memory_mib": 100, "gi_id": small["id"], "ci_id": 0}]
    counters = tmp_path / "counters.csv"
    counters.write_text(COUNTERS, encoding="utf-8")
    return env, counters


def _base(doc: dict, index: int) -> str:
    gpu = doc["gpus"][index]
    return (f'gpu="{index}",UUID="{gpu["uuid"]}",pci_bus_id="{gpu["pci"]["bus_id"]}",device="nvidia{index}",'
            f'modelName="{gpu["name"]}"')


def test_mig_gpu_reports_profiling_per_instance_and_no_gpu_util(mig_host: tuple[dict[str, str], Path]) -> None:
    env, counters = mig_host
    body = _scrape(env, counters).splitlines()
    doc = store.load(env["NVML_SIM_STATE"])
    host = socket.gethostname()
    gis = {gi["start"]: gi["id"] for gi in doc["gpus"][0]["mig"]["gpu_instances"]}
    prof = [line for line in body if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{")]
    assert prof == [
        f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{_base(doc, 0)},GPU_I_PROFILE="{name}",GPU_I_ID="{gi}",Hostname="{host}"}} '
        f"{value}"
        for gi, name, value in sorted([(gis[0], "1g.5gb", "0.600000"), (gis[4], "3g.20gb", "0.000000")])
    ] + [f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{_base(doc, 1)},Hostname="{host}"}} 0.400000']
    util = [line for line in body if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert util == [f'DCGM_FI_DEV_GPU_UTIL{{{_base(doc, 1)},Hostname="{host}"}} 40']
    assert f'DCGM_FI_DEV_GPU_TEMP{{{_base(doc, 0)},Hostname="{host}"}}' in "\n".join(body)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_hpc_job_mapping_labels_each_sample_with_its_jobs(mig_host: tuple[dict[str, str], Path], tmp_path: Path,
                                                          how: str) -> None:
    env, counters = mig_host
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "1").write_text("1234\n1235\n", encoding="utf-8")
    args = ["--hpc-job-mapping-dir", str(jobs)] if how == "flag" else []
    if how == "env":
        env = {**env, "DCGM_HPC_JOB_MAPPING_DIR": str(jobs)}
    body = _scrape(env, counters, *args).splitlines()
    doc = store.load(env["NVML_SIM_STATE"])
    host = socket.gethostname()
    assert [line for line in body if line.startswith("DCGM_FI_DEV_GPU_UTIL{")] == [
        f'DCGM_FI_DEV_GPU_UTIL{{{_base(doc, 1)},Hostname="{host}",hpc_job="{job}"}} 40' for job in ("1234", "1235")]
    assert not [line for line in body if 'gpu="0"' in line and "hpc_job" in line]
