"""Property test: gpufleet's offline MIG validator agrees with the simulated driver.

* A layout the validator accepts always builds on the simulated GPU through the exact
  ``nvmlDeviceCreateGpuInstanceWithPlacement`` calls that ``placements_for`` lists (plus the compute instances).
* A layout it rejects for capacity or placement cannot be built by the driver in any way: a depth-first search
  over the driver's own offered placements (real create/destroy calls) never places every instance.

The unmodified pynvml runs in this process against the simulator's ``libnvidia-ml.so.1`` (loaded through
pynvml's ``nvmlLib`` hook, as ``LD_LIBRARY_PATH`` cannot change inside a running process) with a temporary state.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings  # a test dependency: missing is an error, never a skip
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_layout import (  # noqa: E402
    GpuConfig,
    LayoutError,
    placements_for,
    validate,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import get_model  # noqa: E402

from gpufleet_sim import presets, store  # noqa: E402

PRESET_BY_MODEL = {"A100-SXM4-80GB": "8xA100", "A100-SXM4-40GB": "2xA100-40GB", "H100-SXM5-80GB": "8xH100-NVSwitch",
                   "H200-141GB": "1xH200", "A30-24GB": "4xA30",
                   # issue 15: every catalogue model has a simulated board
                   "B200-180GB": "8xB200-NVSwitch", "GB200-186GB": "4xGB200", "GH200-96GB": "1xGH200",
                   "H100-NVL-94GB": "2xH100-NVL", "A100-PCIE-80GB": "1xA100-80GB-PCIe",
                   "RTX-PRO-6000-96GB": "4xRTX-PRO-6000", "A100-PCIE-40GB": "1xA100-40GB-PCIe",
                   "H100-PCIE-80GB": "2xH100-PCIe", "GH200-144GB": "1xGH200-144GB", "H200-NVL-141GB": "2xH200-NVL"}
# the catalogue rows without a preset of their own (issue 15, second slice): one GPU built from the model file
MODELS_WITHOUT_PRESET = ("A800-SXM4-80GB", "A800-PCIE-80GB", "A800-PCIE-40GB", "H800-80GB", "H800-PCIE-80GB",
                         "H20-96GB", "B300-288GB")
CATALOGUE_MODELS = sorted([*PRESET_BY_MODEL, *MODELS_WITHOUT_PRESET])
MAX_DFS_NODES = 20000


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """pynvml bound to the simulator's library; yields (pynvml, state path). Restores pynvml afterwards."""
    from gpufleet_sim.build import build_library, pynvml_bound

    lib = build_library(REPO / "build" / "mig" / "lib", "550.163.01")
    state = tmp_path_factory.mktemp("mig-property") / "state.json"
    with pynvml_bound(lib, state) as pynvml:
        yield pynvml, state


_DOCS: dict[str, dict[str, Any]] = {}


def mig_enabled_state(model: str) -> dict[str, Any]:
    """A one-GPU host of ``model`` with MIG on and no instances (built once per model, copied per example)."""
    if model not in _DOCS:
        doc = presets.build_state(PRESET_BY_MODEL.get(model, "1xH200"), "prop")
        if model not in PRESET_BY_MODEL:
            doc["gpus"][0] = presets.build_gpu(model, 0, "prop", doc["gpus"][0]["pci"]["bus"])
        doc["gpus"] = doc["gpus"][:1]
        doc.pop("nvswitch", None)
        doc["require_root"] = False
        doc["gpus"][0]["mig"].update(current=1, pending=1, gpu_instances=[])
        _DOCS[model] = doc
    return _copy(_DOCS[model])


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    import json

    copied: dict[str, Any] = json.loads(json.dumps(doc))
    return copied


@st.composite
def layouts(draw: st.DrawFn) -> tuple[str, dict[str, int]]:
    """A model and GPU-instance counts over its profiles (often over capacity)."""
    model = get_model(draw(st.sampled_from(CATALOGUE_MODELS)))
    names = draw(st.lists(st.sampled_from(model.profile_names), min_size=1, max_size=4, unique=True))
    counts = {name: draw(st.integers(min_value=1, max_value=min(model.profile(name).instance_count + 1, 8)))
              for name in names}
    return model.name, counts


def gpu_of(doc: dict[str, Any]) -> dict[str, Any]:
    gpu = doc["gpus"][0]
    return {"index": 0, "name": gpu["name"], "pci_device_id": gpu["pci"]["pci_device_id"], "mig_capable": True}


def start_host(nv: Any, state: Path, doc: dict[str, Any]) -> Any:
    state.unlink(missing_ok=True)
    store.create(state, doc)
    nv.nvmlInit()
    return nv.nvmlDeviceGetHandleByIndex(0)


def create_with_placement(nv: Any, handle: Any, profile_id: int, start: int, size: int) -> Any:
    placement = nv.c_nvmlGpuInstancePlacement_t(start, size)
    return nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


def driver_can_place(nv: Any, handle: Any, wanted: list[tuple[int, list[tuple[int, int]]]]) -> bool:
    """DFS over the driver's offered placements with real create/destroy calls; True when all were created."""
    nodes = 0

    def place(i: int, floor: dict[int, int]) -> bool:
        nonlocal nodes
        if i == len(wanted):
            return True
        profile_id, offered = wanted[i]
        for start, size in offered:
            nodes += 1
            assert nodes < MAX_DFS_NODES, "search too large"
            if start <= floor.get(profile_id, -1):
                continue  # identical instances in increasing order
            try:
                gi = create_with_placement(nv, handle, profile_id, start, size)
            except nv.NVMLError_InsufficientResources:
                continue
            if place(i + 1, {**floor, profile_id: start}):
                return True
            nv.nvmlGpuInstanceDestroy(gi)
        return False

    return place(0, {})


SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(layouts())
def test_validator_agrees_with_the_simulated_driver(nvml: tuple[Any, Path], case: tuple[str, dict[str, int]]) -> None:
    nv, state = nvml
    model_name, counts = case
    doc = mig_enabled_state(model_name)
    entries = [{"devices": "all", "mig_enabled": True, "gpu_instances": counts}]
    try:
        configs: list[GpuConfig] | None = validate(entries, [gpu_of(doc)])
    except LayoutError:
        configs = None
    handle = start_host(nv, state, doc)
    try:
        if configs is not None:
            config = configs[0]
            for (profile_id, start), spec in zip(placements_for(config), config.gpu_instances, strict=True):
                gi = create_with_placement(nv, handle, profile_id, start, spec.size)
                for ci in spec.compute_instances:
                    info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                        gi, ci.profile_id, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                    nv.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
            gis = store.load(state)["gpus"][0]["mig"]["gpu_instances"]
            assert sorted((g["profile_id"], g["start"]) for g in gis) == sorted(placements_for(config))
            assert all(len(g["compute_instances"]) == 1 for g in gis)
        else:
            model = get_model(model_name)
            wanted = []
            for name, count in sorted(counts.items(), key=lambda kv: -model.profile(kv[0]).memory_slices):
                profile = model.profile(name)
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile.nvml_enum)
                assert info.id == profile.profile_id, f"{model_name} {name}: table id vs driver id"
                array = (nv.c_nvmlGpuInstancePlacement_t * 16)()
                num = ctypes.c_uint(16)
                nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(num))
                offered = [(array[k].start, array[k].size) for k in range(num.value)]
                wanted += [(info.id, offered)] * count
            assert not driver_can_place(nv, handle, wanted), f"the driver built {counts} on {model_name}"
    finally:
        nv.nvmlShutdown()


def test_every_catalogue_model_is_drawn() -> None:
    """The property above draws from every model of the catalogue, no fewer."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import MODELS

    assert sorted(m.name for m in MODELS) == CATALOGUE_MODELS


def test_known_rejection_is_rejected_by_the_driver(nvml: tuple[Any, Path]) -> None:
    """A fixed case, so the property above is known to exercise the rejection path: 4g.40gb + 2g.20gb x2."""
    nv, state = nvml
    doc = mig_enabled_state("A100-SXM4-80GB")
    with pytest.raises(LayoutError):
        validate([{"devices": "all", "mig_enabled": True, "gpu_instances": {"4g.40gb": 1, "2g.20gb": 2}}],
                 [gpu_of(doc)])
    handle = start_host(nv, state, doc)
    try:
        offered_4g = [(0, 4)]
        offered_2g = [(0, 2), (2, 2), (4, 2)]
        assert not driver_can_place(nv, handle, [(5, offered_4g), (14, offered_2g), (14, offered_2g)])
    finally:
        nv.nvmlShutdown()
