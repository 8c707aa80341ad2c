"""Renderers of `gpufleet mig plan`, `gpufleet mig apply` and `gpufleet facts` (src/gpufleet/renderers)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from gpufleet.renderers import facts as facts_renderer
from gpufleet.renderers import mig as mig_renderer
from gpufleet.results import HostResult, RunResult

PLAN = {"changed": True, "plan": [
    {"index": 0, "model": "A100-SXM4-80GB", "changed": True, "reset_required": True, "note": "", "actions": [
        {"action": "set_mig_mode", "gpu": 0, "mode": 1, "reset_required": True},
        {"action": "create_gi", "gpu": 0, "profile": "3g.40gb", "profile_id": 9, "start": 4, "size": 4},
        {"action": "create_ci", "gpu": 0, "profile": "3g.40gb", "gi_id": None, "gi_start": 4}]},
    {"index": 1, "model": "A100-SXM4-80GB", "changed": False, "reset_required": False, "note": "", "actions": []},
]}
APPLIED = dict(PLAN, changed_gpus=[0], reboot_required=False, layout=[
    {"index": 0, "model": "A100-SXM4-80GB", "enabled": True, "pending": True, "gpu_instances": [
        {"profile_name": "3g.40gb", "gi_id": 2, "start": 4, "size": 4,
         "compute_instances": [{"name": "3g.40gb", "ci_id": 0, "uuid": "MIG-aaaa"}]}]},
    {"index": 1, "model": "A100-SXM4-80GB", "enabled": False, "pending": True, "gpu_instances": []},
])
FACTS = {"gpu_count": 1, "driver_version": "550.163.01", "cuda_version": "12.4", "nvml_available": True, "gpus": [
    {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1234", "pci_bus_id": "00000000:18:00.0",
     "memory_total_mib": 81559, "mig": {"supported": True, "current": True, "pending": True},
     "gpu_instances": [{"profile": "7g.80gb", "start": 0}]}]}


def render(func: Any, data: dict[str, Any], key: str) -> str:
    host = HostResult(name="gpu-1", module_data={key: data})
    result = RunResult(playbook="p.yml", status="successful", rc=0, hosts={"gpu-1": host, "lone": HostResult("lone")})
    out = io.StringIO()
    func(result, Console(file=out, width=200))
    return out.getvalue()


@pytest.mark.parametrize(("func", "data", "key", "expected"), [
    (mig_renderer.render_mig_plan, PLAN, "mig",
     ["gpu-1: 1 GPU(s) to change", "enable MIG (reset)", "create 3g.40gb @4", "+ CI 3g.40gb", "no change",
      "no MIG result from: lone"]),
    (mig_renderer.render_mig_apply, APPLIED, "mig",
     ["gpu-1: changed GPU(s) 0", "3g.40gb @4", "MIG-aaaa", "off (pending on)", "no MIG result from: lone"]),
    (facts_renderer.render_facts, FACTS, "facts",
     ["gpu-1: 1 GPU(s), driver 550.163.01, CUDA 12.4", "NVIDIA H100 80GB HBM3", "81559 MiB", "7g.80gb@0",
      "no GPU facts from: lone"]),
])
def test_renderer_shows(func: Any, data: dict[str, Any], key: str, expected: list[str]) -> None:
    text = render(func, data, key)
    for fragment in expected:
        assert fragment in text, fragment


@pytest.mark.parametrize(("action", "text"), [
    ({"action": "set_mig_mode", "mode": 0}, "disable MIG"),
    ({"action": "destroy_gi", "gi_id": 3, "profile": "2g.20gb", "start": 0}, "destroy GI 3 (2g.20gb @0)"),
    ({"action": "destroy_ci", "gi_id": 3, "ci_id": 1}, "  - CI 1 of GI 3"),
    ({"action": "reset", "gpus": [0, 2]}, "reset GPUs 0, 2"),
])
def test_describe_action(action: dict[str, Any], text: str) -> None:
    assert mig_renderer.describe_action(action) == text
