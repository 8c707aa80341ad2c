"""Health verdicts on what real GPUs reported (issue 27): a healthy real node is never drained, a faulty one is.

1. The real H200 (SXM 141 GB, driver 580.159.04, a VM with the GPU passed through; tests/data/ground-truth/
   h200-sxm-passthrough-r580): its NVML getter dump is answered call by call to the product's own reader
   (``nvml_health.read_host`` over ``nvml.Nvml``, the code that runs on hosts) through a replay of pynvml, and the
   verdict must not be CRITICAL. On main before issue 27 this gave CRITICAL, drain (fabric, nvlink and, with no
   journal, xid) - the run in ``gpufleet/health.json`` of ../shared/ground-truth.
2. Public transcripts of other kinds of node (tests/data/ground-truth/README.md lists their sources), as the
   readings NVML gives for them: H100 PCIe fabric Not Supported returned with success (leptonai/gpud #1147), a
   single-node HGX H100 fabric Completed with clique 0 and a zero UUID (H100_SXM_HGX__xml__1, 580.105.08), a GB200
   NVL72 tray healthy (GB200__xml__1) and faulty with clique 0 (Azure_MNNVL_unspecified__q_fabric_block__1).

The replay answers only what the dump holds; a call the dump did not make is NOT_FOUND there, so a reader that
starts depending on a new call fails this test until the dump (or the reader) says what the real driver answers.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
for _path in (Path(__file__).resolve().parent, _ROOT / "collections"):  # the thresholds helper; the collection
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import pynvml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import Nvml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_health import read_host  # noqa: E402
from test_health_checks import th  # noqa: E402

H200 = _ROOT / "tests/data/ground-truth/h200-sxm-passthrough-r580/nvml/getters-nvidia-ml-py-13.615.71.jsonl"
ERROR_CODES = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_ERROR_")}


class Replay:
    """pynvml's functions answered from a getter dump (constants and struct classes are pynvml's own)."""

    NVMLError = pynvml.NVMLError

    def __init__(self, path: Path) -> None:
        self.answers: dict[tuple[str, int | None, str], dict[str, Any]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            self.answers[(entry["fn"], entry.get("gpu"), json.dumps(entry.get("args", [])))] = entry

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml") or name == "nvmlDeviceGetHandleByIndex":
            return getattr(pynvml, name) if name != "nvmlDeviceGetHandleByIndex" else self._handle
        return lambda *args: self._answer(name, args)

    @staticmethod
    def _handle(index: int) -> tuple[str, int]:
        return ("gpu", index)

    def _answer(self, fn: str, args: tuple[Any, ...]) -> Any:
        gpu = None
        if args and isinstance(args[0], tuple) and args[0][0] == "gpu":
            gpu, args = args[0][1], args[1:]
        struct = args[0]._obj if args and type(args[0]).__name__ == "CArgObject" else None
        if fn == "nvmlDeviceGetFieldValues":
            return self._fields(gpu, [f if isinstance(f, int) else f[0] for f in args[0]])
        # the dump names the v2 struct by pynvml's alias for it, c_nvmlGpuFabricInfoV_t
        names = {pynvml.c_nvmlGpuFabricInfoV_t: "c_nvmlGpuFabricInfoV_t"}
        key_args = [names.get(type(struct), type(struct).__name__)] if struct is not None else list(args)
        entry = self.answers.get((fn, gpu, json.dumps(key_args)))
        if fn == "nvmlDeviceGetCount":  # the dump walks every GPU instead of recording the count
            return len({g for (_fn, g, _args) in self.answers if g is not None})
        if entry is None:
            if struct is not None and fn == "nvmlDeviceGetGpuFabricInfoV":
                raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)  # v3: not in the dump
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        if entry["rc"] != "OK":
            raise pynvml.NVMLError(ERROR_CODES[entry["rc"]])
        value = entry.get("value")
        if struct is not None:
            for field, item in value.items():
                if field != "version":
                    setattr(struct, field, (ctypes.c_ubyte * len(item))(*item) if isinstance(item, list) else item)
            return pynvml.NVML_SUCCESS
        if fn == "nvmlDeviceGetPciInfo":
            return type("Pci", (), {**value, "busId": value["busId"].encode()})
        if fn == "nvmlDeviceGetUtilizationRates":
            return type("Utilization", (), value)
        return value

    def _fields(self, gpu: int | None, ids: list[int]) -> list[Any]:
        every = {f["fieldId"]: f for f in self.answers[("nvmlDeviceGetFieldValues", gpu, '["1..279"]')]["value"]}
        out = []
        for field_id in ids:
            got = every.get(field_id)
            if got is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            value = type("Value", (), got["value"])
            out.append(type("Field", (), {"nvmlReturn": got["nvmlReturn"], "value": value}))
        return out


def _h200_report(**overrides: Any) -> dict[str, list[dict]]:
    meas = read_host(Nvml(Replay(H200)), want_mig=True, xid_wait_ms=0)
    # The real machine had no journal; /dev/kmsg read and held no XID (its dmesg showed only NVRM load lines).
    meas["xid_sources"].append({"source": "kernel", "read_from": "kmsg", "error": None, "window_s": 7200})
    return {c["name"]: c for c in hc.evaluate_host(meas, th(**overrides))}


def test_the_real_h200_is_read_as_it_reported() -> None:
    meas = read_host(Nvml(Replay(H200)), want_mig=True, xid_wait_ms=0)
    (gpu,) = meas["gpus"]
    assert (meas["driver_version"], meas["cuda_version"]) == ("580.159.04", "13.0")
    assert gpu["errors"] == {}
    assert gpu["values"]["virtualization_mode"] == 1
    assert gpu["values"]["nvlink"] == []
    assert gpu["values"]["fabric"]["state"] == "Not Supported"
    assert sorted(gpu["unsupported"]) == ["retired_pages"]


def test_the_real_h200_is_not_drained() -> None:
    checks = _h200_report()
    summary = hc.summarize(list(checks.values()))
    assert (summary["level"], summary["action"], summary["failed"]) == ("PASS", "none", [])
    assert checks["nvlink"]["message"] == ("GPU passed through to a VM: its 18 NVLinks are not exposed to this "
                                           "guest; not applicable (set nvlink_expected to require them)")
    assert checks["fabric"]["message"] == ("the GPU has no NVLink fabric (NVML: state Not Supported; nvidia-smi "
                                           "prints Fabric State N/A); not applicable")
    assert checks["xid"]["message"] == "no XID event in the window (kernel log: kmsg)"
    assert checks["temperature"]["status"] == "ok"


def test_an_operator_can_still_require_the_links_in_a_vm() -> None:
    checks = _h200_report(nvlink_expected=True)
    assert (checks["nvlink"]["level"], checks["nvlink"]["action"]) == ("CRITICAL", "drain")
    assert checks["nvlink"]["message"] == ("NVML reports no NVLink on a H200-141GB, which has 18 (nvlink_expected): "
                                           "check the driver")


ZERO = "00000000-0000-0000-0000-000000000000"
GB200_CLUSTER = "cf84bb43-5f2a-4a6b-9a8e-5ae2f7a5b6c1"


def _fabric_host(name: str, pci: str, fabric: dict[str, Any] | None, count: int = 1) -> dict[str, Any]:
    gpus = []
    for index in range(count):
        values = {"name": name, "fabric": fabric, "virtualization_mode": 0}
        gpus.append({"index": index, "uuid": f"GPU-{index}", "pci_bus_id": f"00000000:{index + 0x18:02X}:00.0",
                     "pci_device_id": pci, "lost": False, "values": values,
                     "unsupported": [] if fabric is not None else ["fabric"], "errors": {}})
    return {"driver_version": "580.105.08", "gpu_count": count, "gpus": gpus, "xid_sources": []}


# (case, host, imex configured, expected fabric level, message start)
PUBLIC = [
    ("H100 PCIe: Not Supported, returned with success (gpud #1147)",
     _fabric_host("NVIDIA H100 PCIe", "0x233110DE", {"state": "Not Supported", "status": 0, "clique_id": 0,
                                                      "cluster_uuid": ZERO, "health_mask": 0}),
     False, "PASS", "the GPU has no NVLink fabric"),
    ("HGX H100 single node: Completed, clique 0, zero UUID (H100_SXM_HGX__xml__1)",
     _fabric_host("NVIDIA H100 80GB HBM3", "0x233010DE", {"state": "Completed", "status": 0, "clique_id": 0,
                                                           "cluster_uuid": ZERO, "health_mask": 0}, count=8),
     False, "PASS", "GPU fabric completed (single-node: clique 0, no cluster UUID)"),
    ("GB200 NVL72 tray healthy (GB200__xml__1)",
     _fabric_host("NVIDIA GB200", "0x294110DE", {"state": "Completed", "status": 0, "clique_id": 32766,
                                                  "cluster_uuid": GB200_CLUSTER, "health_mask": 0,
                                                  "health_summary": "Healthy"}, count=4),
     True, "PASS", "GPU fabric completed (clique 32766"),
    ("GB200 NVL72 tray, clique 0 and zero UUID in an IMEX domain (Azure_MNNVL_unspecified__q_fabric_block__1)",
     _fabric_host("NVIDIA GB200", "0x294110DE", {"state": "Completed", "status": 0, "clique_id": 0,
                                                  "cluster_uuid": ZERO, "health_mask": 0}, count=4),
     True, "CRITICAL", "GPU fabric not ready (clique id 0, cluster UUID zero)"),
    ("GB200 NVL72 tray, Insufficient Resources (Azure_MNNVL_unspecified__q_fabric_block__1)",
     _fabric_host("NVIDIA GB200", "0x294110DE", {"state": "Completed", "status": 25, "clique_id": 0,
                                                  "cluster_uuid": ZERO, "health_mask": 0}, count=4),
     True, "CRITICAL", "GPU fabric not ready (fabric status 25 (not Success), clique id 0"),
    ("GB200 tray, health summary Unhealthy with everything else fine (dra-driver-nvidia-gpu #626)",
     _fabric_host("NVIDIA GB200", "0x294110DE", {"state": "Completed", "status": 0, "clique_id": 32766,
                                                  "cluster_uuid": GB200_CLUSTER, "health_mask": 0,
                                                  "health_summary": "Unhealthy"}, count=4),
     True, "CRITICAL", "GPU fabric not ready (fabric health summary Unhealthy)"),
    ("HGX H100 with the fabric manager down: In Progress (NVSentinel #889)",
     _fabric_host("NVIDIA H100 80GB HBM3", "0x233010DE", {"state": "In Progress", "status": 27, "clique_id": 0,
                                                           "cluster_uuid": ZERO, "health_mask": 0}, count=8),
     False, "CRITICAL", "GPU fabric not ready (fabric state In Progress)"),
]


@pytest.mark.parametrize(("host", "imex", "level", "message"), [c[1:] for c in PUBLIC], ids=[c[0] for c in PUBLIC])
def test_public_fabric_readings_get_the_verdict_the_node_should(host: dict, imex: bool, level: str,
                                                                message: str) -> None:
    meas = dict(host, imex_configured=imex)
    fabric = [c for c in hc.evaluate_host(meas, th(xid_kernel_log=False)) if c["name"] == "fabric"]
    assert len(fabric) == len(host["gpus"])
    assert {c["level"] for c in fabric} == {level}
    assert all(c["message"].startswith(message) for c in fabric), fabric[0]["message"]
