#!/usr/bin/env python3
# Provenance: copied unchanged (except this header) from ../shared/ground-truth/tools/nvml_getters_dump.py,
# the tool that produced tests/data/ground-truth/h200-sxm-passthrough-r580/nvml/getters-nvidia-ml-py-13.615.71.jsonl
# on the real H200 (2026-11-28). Keep it in step with that tool: the fidelity report compares its output call by call.
# Its docstring's compare_dumps.py is `gpusim fidelity` (gpufleet_sim.fidelity) in this project.
# ruff: noqa: RUF100, B009, SIM115  (kept as it ran on the real machine, so both dumps come from the same code)
"""Dump every read-only NVML getter that pynvml binds, for every GPU, as JSON lines.

Run on a real GPU machine and on a simulated host with the same bindings; compare the two dumps with
compare_dumps.py. Read-only: only nvml*Get* functions are called, never a setter, reset or MIG change.
Arguments are chosen by the binding's parameter names; a getter that takes a caller-made pointer is skipped
unless a struct for it is built here. Each line: {"fn", "gpu", "args", "rc" ("OK" or the error's name), "value", "ms"}.
Before each call its key is written to $DUMP_PROGRESS (if set), so a wrapper can skip a call that crashes the
process (keys listed in $DUMP_SKIP, one a line).
"""
import ctypes
import inspect
import itertools
import json
import os
import sys
import time

import pynvml as N

SKIP_FN = {
    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleBySerial", "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetHandleByUUIDV", "nvmlDeviceGetAccountingStats", "nvmlDeviceGetAccountingStats_v2",
    "nvmlDeviceGetSupportedGraphicsClocks",
}
SMALL = list(range(0, 8))
VALUES = {
    "link": list(range(0, 18)), "capability": list(range(0, 6)), "counter": [0, 1, 2, 3, 4],
    "type": SMALL, "sensor": SMALL, "threshold": list(range(0, 12)), "apiType": [0, 1], "encoderQueryType": [0, 1, 2],
    "perfPolicyType": SMALL, "errorType": [0, 1], "counterType": [0, 1], "locationType": list(range(0, 7)),
    "clockType": [0, 1, 2, 3], "pstate": [0, 1, 2, 8, 15], "id": [0, 1, 2], "sourceFilter": [0, 1],
    "infoRomObject": [0, 1, 2, 3], "level": [0, 10, 20, 30, 40, 50], "sampling_type": list(range(0, 10)),
    "scope": [0, 1], "fan": [0], "sensorindex": [0, 1, 2], "timeStamp": [0], "cpuSetSize": [4], "nodeSetSize": [4],
    "profile": list(range(0, 16)), "profileId": list(range(0, 16)), "gpuInstanceId": list(range(0, 16)),
    "index": list(range(0, 8)), "vgpuTypeId": [1], "version": None, "mode": None,
}
HANDLE = {"handle", "device"}


def conv(v, depth=0):
    if depth > 6:
        return repr(v)
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)):
        return [conv(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {str(k): conv(x, depth + 1) for k, x in v.items()}
    if isinstance(v, ctypes.Array):
        return [conv(x, depth + 1) for x in v]
    if hasattr(v, "_fields_"):
        out = {}
        for f in v._fields_:
            try:
                out[f[0]] = conv(getattr(v, f[0]), depth + 1)
            except Exception as e:  # noqa: BLE001
                out[f[0]] = f"<{e!r}>"
        return out
    if hasattr(v, "value") and isinstance(getattr(v, "value"), (int, float, bytes)):
        return conv(v.value, depth + 1)
    if hasattr(v, "__dict__"):
        return {k: conv(x, depth + 1) for k, x in vars(v).items() if not k.startswith("_")}
    return repr(v)


def rcname(e):
    val = getattr(e, "value", None)
    for k in dir(N):
        if k.startswith("NVML_ERROR_") and getattr(N, k) == val:
            return k
    return f"{type(e).__name__}:{val}"


SKIP_KEYS = set()
if os.environ.get("DUMP_SKIP") and os.path.exists(os.environ["DUMP_SKIP"]):
    SKIP_KEYS = {line.strip() for line in open(os.environ["DUMP_SKIP"]) if line.strip()}
PROGRESS = os.environ.get("DUMP_PROGRESS")


def call(out, fn, gpu, f, args, shown, post=None):
    key = json.dumps([fn, gpu, shown])
    if key in SKIP_KEYS:
        out.write(json.dumps({"fn": fn, "gpu": gpu, "args": shown, "rc": "CRASHED"}) + "\n")
        return
    if PROGRESS:
        with open(PROGRESS, "w") as p:
            p.write(key + "\n")
    t0 = time.perf_counter()
    try:
        v = f(*args)
        rec = {"fn": fn, "gpu": gpu, "args": shown, "rc": "OK", "value": conv(post() if post else v)}
    except N.NVMLError as e:
        rec = {"fn": fn, "gpu": gpu, "args": shown, "rc": rcname(e)}
    except Exception as e:  # noqa: BLE001
        rec = {"fn": fn, "gpu": gpu, "args": shown, "rc": f"PYEXC:{type(e).__name__}", "value": str(e)[:200]}
    rec["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    out.write(json.dumps(rec, default=repr) + "\n")
    out.flush()


def params(f):
    try:
        return [p.name for p in inspect.signature(f).parameters.values()
                if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None


def struct_call(out, n, i, h):
    """Getters that fill a caller-made, versioned struct."""
    specs = {
        "nvmlDeviceGetGpuFabricInfoV": "c_nvmlGpuFabricInfoV_t",
        "nvmlDeviceGetGpuFabricInfo": "c_nvmlGpuFabricInfo_t",
        "nvmlDeviceGetGpuFabricInfo_v4": None,
        "nvmlDeviceGetPlatformInfo": "c_nvmlPlatformInfo_v2_t",
        "nvmlDeviceGetPciInfoExt": "c_nvmlPciInfoExt_v1_t",
    }
    if n not in specs or not specs[n] or not hasattr(N, specs[n]):
        return False
    s = getattr(N, specs[n])()
    if n == "nvmlDeviceGetPlatformInfo":
        s.version = N.nvmlPlatformInfo_v2
    if n == "nvmlDeviceGetPciInfoExt":
        s.version = N.nvmlPciInfoExt_v1
    call(out, n, i, getattr(N, n), (h, ctypes.byref(s)), [specs[n]], post=lambda: s)
    return True


def main():
    out = sys.stdout
    t0 = time.perf_counter()
    N.nvmlInit()
    out.write(json.dumps({"fn": "nvmlInit", "rc": "OK", "ms": round((time.perf_counter() - t0) * 1000, 3),
                          "pynvml": getattr(N, "__version__", None)}) + "\n")
    names = sorted(n for n in dir(N) if n.startswith("nvml") and callable(getattr(N, n)))
    for n in names:
        if n.startswith("nvmlSystemGet") and params(getattr(N, n)) == []:
            call(out, n, None, getattr(N, n), (), [])
    count = N.nvmlDeviceGetCount()
    handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    for i, h in enumerate(handles):
        for n in names:
            if not n.startswith("nvmlDeviceGet") or n in SKIP_FN:
                continue
            f = getattr(N, n)
            ps = params(f)
            if ps is None or not ps or ps[0] not in HANDLE | {"device1"}:
                continue
            if struct_call(out, n, i, h):
                continue
            if n == "nvmlDeviceGetFieldValues":
                ids = list(range(1, 280))
                call(out, n, i, f, (h, ids), ["1..279"])
                continue
            if ps[0] == "device1":
                for j, h2 in enumerate(handles):
                    if len(ps) == 2:
                        call(out, n, i, f, (h, h2), [j])
                    else:
                        for k in range(0, 5):
                            call(out, n, i, f, (h, h2, k), [j, k])
                continue
            rest = ps[1:]
            if any(p not in VALUES or VALUES[p] is None for p in rest):
                continue
            combos = list(itertools.product(*[VALUES[p] for p in rest]))[:160]
            for c in combos:
                call(out, n, i, f, (h, *c), list(c))
    N.nvmlShutdown()
    out.write(json.dumps({"fn": "total", "ms": round((time.perf_counter() - t0) * 1000, 1)}) + "\n")


if __name__ == "__main__":
    main()
