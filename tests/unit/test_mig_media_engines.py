"""``+me.all`` holds every media engine of the GPU (NVML API reference: NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME is
"1_SLICE profile with all of GPU Decode, Encoder, JPEG, OFA engines"), so only ``-me`` instances (no media engines)
fit beside it: the validator refuses the rest, and the simulated driver refuses to create them (RTX PRO 6000
Blackwell, the board with these profiles)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "collections", REPO / "simulator" / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402

RTX = [{"index": 0, "model": "RTX-PRO-6000-96GB"}]
TITLE = "GPU 0 (RTX-PRO-6000-96GB)"


def check(counts: dict[str, int]) -> list[str]:
    try:
        return [gi.profile for gi in ml.validate([{"devices": "all", "gpu_instances": counts}], RTX)[0].gpu_instances]
    except ml.LayoutError as exc:
        return exc.problems


@pytest.mark.parametrize(("counts", "expected"), [
    ({"1g.24gb+me.all": 1, "1g.24gb-me": 3}, ["1g.24gb+me.all", "1g.24gb-me", "1g.24gb-me", "1g.24gb-me"]),
    ({"2g.48gb+me.all": 1, "2g.48gb-me": 1}, ["2g.48gb+me.all", "2g.48gb-me"]),
    ({"1g.24gb+me.all": 1, "1g.24gb": 1}, [
        f"{TITLE}: 1g.24gb+me.all takes all of the GPU's media engines (decode, encode, JPEG, OFA), so the other GPU "
        "instances beside it must be -me profiles (no media engines); 1g.24gb is not"]),
    ({"2g.48gb+me.all": 1, "1g.24gb+gfx": 1, "1g.24gb+me": 1}, [
        f"{TITLE}: 2g.48gb+me.all takes all of the GPU's media engines (decode, encode, JPEG, OFA), so the other GPU "
        "instances beside it must be -me profiles (no media engines); 1g.24gb+gfx, 1g.24gb+me are not"]),
    ({"2g.48gb+me.all": 1, "1g.24gb+me.all": 1}, [
        f"{TITLE}: 2g.48gb+me.all and 1g.24gb+me.all each take all of the GPU's media engines; request one +me.all "
        "GPU instance at most"]),
    ({"1g.24gb+me": 1, "1g.24gb-me": 1, "1g.24gb+gfx": 2}, ["1g.24gb+gfx", "1g.24gb+gfx", "1g.24gb+me", "1g.24gb-me"]),
])
def test_validator(counts: dict[str, int], expected: list[str]) -> None:
    got = check(counts)
    assert sorted(got) == sorted(expected)


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from gpufleet_sim.build import build_library, pynvml_bound

    lib = build_library(REPO / "build" / "mig" / "lib", "550.163.01")
    state = tmp_path_factory.mktemp("media") / "state.json"
    with pynvml_bound(lib, state) as pynvml:
        yield pynvml, state


@pytest.mark.parametrize(("first", "second", "created"), [
    ("1g.24gb+me.all", "1g.24gb-me", True),
    ("1g.24gb+me.all", "1g.24gb", False),
    ("1g.24gb", "2g.48gb+me.all", False),
    ("2g.48gb+me.all", "1g.24gb+gfx", False),
    ("1g.24gb-me", "2g.48gb+me.all", True),
])
def test_simulated_driver(nvml: Any, first: str, second: str, created: bool) -> None:
    from gpufleet_sim import presets, store

    nv, state = nvml
    doc = presets.build_state("4xRTX-PRO-6000", "media")
    doc["gpus"], doc["require_root"] = doc["gpus"][:1], False
    doc["gpus"][0]["mig"].update(current=1, pending=1, gpu_instances=[])
    ids = {p["name"]: p["id"] for p in doc["gpus"][0]["mig"]["gi_profiles"]}
    state.unlink(missing_ok=True)
    store.create(state, doc)
    nv.nvmlInit()
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(0)
        nv.nvmlDeviceCreateGpuInstance(handle, ids[first])
        if created:
            nv.nvmlDeviceCreateGpuInstance(handle, ids[second])
        else:
            with pytest.raises(nv.NVMLError_InsufficientResources):
                nv.nvmlDeviceCreateGpuInstance(handle, ids[second])
        accepted = not any(" " in item for item in check({first: 1, second: 1}))  # problems are sentences
        assert accepted is created
    finally:
        nv.nvmlShutdown()
