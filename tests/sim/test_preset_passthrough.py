"""The ``1xH200-passthrough`` preset against the real machine it stands for: one H200 SXM passed through to a VM,
driver 580.159.04 (tests/data/ground-truth/h200-sxm-passthrough-r580, README there).

Every call the real machine's getter dump made to the functions that say what kind of host this is (the
virtualization mode, every NvLink getter, the GPU fabric) is made again, with the same arguments, through the
unmodified pynvml on the simulated library; the return code and the value must be the dump's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

DUMP = (Path(__file__).resolve().parents[1] / "data" / "ground-truth" / "h200-sxm-passthrough-r580" / "nvml"
        / "getters-nvidia-ml-py-13.615.71.jsonl")
#: what says whether the host is bare metal or a VM, whether NVLink is exposed and whether the GPU has a fabric
HOST_KIND_CALLS = ("nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV",
                   "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkVersion", "nvmlDeviceGetNvLinkCapability",
                   "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetNvLinkRemotePciInfo",
                   "nvmlDeviceGetNvLinkRemoteDeviceType")

REPLAY = """
    import ctypes
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    def plain(value):
        if isinstance(value, ctypes.Structure):
            return {name: plain(getattr(value, name)) for name, _ in value._fields_}
        if isinstance(value, ctypes.Array):
            return [plain(v) for v in value]
        if isinstance(value, bytes):
            return value.decode()
        return value
    R["calls"] = []
    for call in json.loads(os.environ["CALLS"]):
        args = [getattr(N, a)() if isinstance(a, str) and a.startswith("c_nvml") else a for a in call["args"]]
        try:
            if call["args"] and isinstance(call["args"][0], str):      # a caller-made struct, passed by pointer
                getattr(N, call["fn"])(h, ctypes.byref(args[0]))
                value = plain(args[0])
            else:
                value = plain(getattr(N, call["fn"])(h, *args))
            rc = "OK"
        except N.NVMLError as e:
            # the error's nvml.h name, as the dump wrote it
            rc = next(k for k in dir(N) if k.startswith("NVML_ERROR_") and getattr(N, k) == e.value)
            value = None
        R["calls"].append({"fn": call["fn"], "args": call["args"], "rc": rc, "value": value})
"""


def _real_calls() -> list[dict[str, Any]]:
    calls = [json.loads(line) for line in DUMP.read_text(encoding="utf-8").splitlines()]
    return [{k: c[k] for k in ("fn", "args", "rc", "value") if k in c} for c in calls
            if c["fn"] in HOST_KIND_CALLS]


def _expected(call: dict[str, Any]) -> dict[str, Any]:
    return {"fn": call["fn"], "args": call["args"], "rc": call["rc"], "value": call.get("value")}


def test_the_dump_holds_the_calls_this_test_replays() -> None:
    counts: dict[str, int] = {}
    for call in _real_calls():
        counts[call["fn"]] = counts.get(call["fn"], 0) + 1
    assert counts == {"nvmlDeviceGetVirtualizationMode": 1, "nvmlDeviceGetGpuFabricInfo": 1,
                      "nvmlDeviceGetGpuFabricInfoV": 1, "nvmlDeviceGetNvLinkState": 18,
                      "nvmlDeviceGetNvLinkVersion": 18, "nvmlDeviceGetNvLinkCapability": 108,
                      "nvmlDeviceGetNvLinkErrorCounter": 90, "nvmlDeviceGetNvLinkRemotePciInfo": 18,
                      "nvmlDeviceGetNvLinkRemoteDeviceType": 18}


def _replay(nvml_sim: Callable[..., Any], preset: str) -> list[dict[str, Any]]:
    sim = nvml_sim(preset)
    calls: list[dict[str, Any]] = sim.run(REPLAY, extra_env={"CALLS": json.dumps(_real_calls())})["calls"]
    return calls


def test_passthrough_preset_answers_as_the_real_h200_in_a_vm(nvml_sim: Callable[..., Any]) -> None:
    assert _replay(nvml_sim, "1xH200-passthrough") == [_expected(c) for c in _real_calls()]


def test_the_bare_metal_h200_is_another_host(nvml_sim: Callable[..., Any]) -> None:
    # the same board on bare metal exposes its NVLinks and is no VM: the replay must tell them apart
    differ = {(c["fn"], c["rc"]) for c, real in zip(_replay(nvml_sim, "1xH200"), _real_calls(), strict=True)
              if _expected(real) != c}
    assert ("nvmlDeviceGetVirtualizationMode", "OK") in differ
    assert ("nvmlDeviceGetNvLinkState", "OK") in differ
