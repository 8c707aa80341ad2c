"""Simulated NVML: event sets (XID delivery after registration, type filters, timeouts, lost GPUs)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any


def _append_event(doc: dict[str, Any], gpu: int, etype: int, data: int, gi: int = 0xFFFFFFFF) -> None:
    doc["event_seq"] += 1
    doc["gpus"][gpu]["events"].append({"seq": doc["event_seq"], "type": etype, "data": data, "gi_id": gi,
                                       "ci_id": 0xFFFFFFFF, "time": 1763769600})


def test_events_after_registration_are_delivered_once_in_order(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("2xA100-40GB")
    with sim.edit() as doc:
        _append_event(doc, 0, 8, 13)  # before registration: never delivered
    r = sim.run("""
        N.nvmlInit()
        h0 = N.nvmlDeviceGetHandleByIndex(0); h1 = N.nvmlDeviceGetHandleByIndex(1)
        R["supported"] = N.nvmlDeviceGetSupportedEventTypes(h0)
        es = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h0, N.nvmlEventTypeXidCriticalError, es)
        N.nvmlDeviceRegisterEvents(h1, N.nvmlEventTypeXidCriticalError | N.nvmlEventTypeDoubleBitEccError, es)
        t0 = time.monotonic()
        R["timeout"] = err(N.nvmlEventSetWait, es, 200)
        R["waited_ms"] = int((time.monotonic() - t0) * 1000)
        doc = state()
        for gpu, etype, data in ((1, 8, 79), (0, 4, 0), (0, 8, 48), (1, 2, 0)):
            doc["event_seq"] += 1
            doc["gpus"][gpu]["events"].append({"seq": doc["event_seq"], "type": etype, "data": data,
                                               "gi_id": 4294967295, "ci_id": 4294967295, "time": 0})
        save(doc)
        got = []
        for _ in range(3):
            e = N.nvmlEventSetWait(es, 1000)
            got.append([N.nvmlDeviceGetIndex(e.device), e.eventType, e.eventData, e.gpuInstanceId])
        R["got"] = got
        R["drained"] = code(N.nvmlEventSetWait, es, 0)
        N.nvmlEventSetFree(es)
        R["freed"] = code(N.nvmlEventSetWait, es, 0)
        R["unsupported_type"] = code(N.nvmlDeviceRegisterEvents, h0, 1 << 40, N.nvmlEventSetCreate())
    """)
    assert r["supported"] == 0x1F
    assert r["timeout"] == [10, "Timeout"]
    assert 180 <= r["waited_ms"] < 1500
    assert r["got"] == [[1, 8, 79, 0xFFFFFFFF], [0, 8, 48, 0xFFFFFFFF], [1, 2, 0, 0xFFFFFFFF]]
    assert r["drained"] == 10
    assert r["freed"] == 2
    assert r["unsupported_type"] == 3


def test_xid_written_by_another_process_wakes_a_waiter(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("1xH200")
    proc = subprocess.Popen(sim.command("""
        N.nvmlInit()
        es = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(0), N.nvmlEventTypeXidCriticalError, es)
        open(os.environ["NVML_SIM_STATE"] + ".ready", "w").close()
        t0 = time.monotonic()
        e = N.nvmlEventSetWait(es, 10000)
        R["event"] = [e.eventType, e.eventData, e.gpuInstanceId]
        R["waited_ms"] = int((time.monotonic() - t0) * 1000)
    """), env=sim.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = sim.state_path.with_name("state.json.ready")
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    with sim.edit() as doc:
        _append_event(doc, 0, 8, 94, gi=3)
    out, errs = proc.communicate(timeout=30)
    assert proc.returncode == 0, errs
    assert '"event": [8, 94, 3]' in out
    waited = int(out.split('"waited_ms": ')[1].split("}")[0])
    assert 150 <= waited < 5000


def test_wait_on_a_lost_gpu_without_events(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim("1xT4").run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        es = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
        doc = state(); doc["event_seq"] = 1
        doc["gpus"][0]["events"].append({"seq": 1, "type": 8, "data": 79, "gi_id": 4294967295,
                                         "ci_id": 4294967295, "time": 0})
        doc["gpus"][0]["lost"] = True; save(doc)
        e = N.nvmlEventSetWait(es, 100)
        R["xid"] = e.eventData
        R["then"] = err(N.nvmlEventSetWait, es, 100)
    """)
    assert r == {"xid": 79, "then": [15, "GPU is lost"]}
