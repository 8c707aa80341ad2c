"""The catalogue's simulated GPUs (issue 15): what the simulated driver reports through the unmodified pynvml
matches the cited table, and every gpu-operator label the validator accepts on a model applies on the simulated
GPU of that model and reads back as the planned instances.

The simulator's ``libnvidia-ml.so.1`` is built into ``build/mig/lib`` (as tests/sim/test_mig_property_sim.py
does) and loaded through pynvml's ``nvmlLib`` hook with a temporary state document per case.
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "collections", REPO / "simulator" / "src", Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_parted as mpp  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_profiles as mp  # noqa: E402
from test_mig_catalogue import CONFIG, LABELS, LISTED_IDS, OFFERED, expected_verdict  # noqa: E402

from gpufleet_sim import presets, store  # noqa: E402
from gpufleet_sim.models import list_models, load_model  # noqa: E402

# preset of each catalogue model that has a simulated host (issue 15's list plus the earlier five)
PRESET_BY_MODEL = {
    "A100-SXM4-40GB": "2xA100-40GB", "A100-SXM4-80GB": "8xA100", "A30-24GB": "4xA30",
    "H100-SXM5-80GB": "8xH100-NVSwitch", "H200-141GB": "1xH200",
    "B200-180GB": "8xB200-NVSwitch", "GB200-186GB": "4xGB200", "GH200-96GB": "1xGH200",
    "H100-NVL-94GB": "2xH100-NVL", "A100-PCIE-80GB": "1xA100-80GB-PCIe", "RTX-PRO-6000-96GB": "4xRTX-PRO-6000",
    "A100-PCIE-40GB": "1xA100-40GB-PCIe", "H100-PCIE-80GB": "2xH100-PCIe", "GH200-144GB": "1xGH200-144GB",
    "H200-NVL-141GB": "2xH200-NVL",
}


# every other catalogue row: a simulator model file, no preset (issue 15, second slice)
SIMULATED = sorted([*PRESET_BY_MODEL, "A800-SXM4-80GB", "A800-PCIE-80GB", "A800-PCIE-40GB", "H800-80GB",
                    "H800-PCIE-80GB", "H20-96GB", "B300-288GB"])


def test_the_simulator_and_the_catalogue_know_the_same_mig_models() -> None:
    simulated = {name for name in list_models() if load_model(name)["mig"]["supported"]}
    assert simulated == set(mp.known_model_names()) == set(SIMULATED)


@pytest.mark.parametrize("model", SIMULATED)
def test_model_file_holds_the_catalogues_table(model: str) -> None:
    """The two tables are kept apart (the simulator never imports the product), so they are compared here: names,
    NVML enums, ids, compute slices, counts, MiB and placements, and the listing and driver the MiB are read from
    (both held to the real listings by test_mig_listings.py)."""
    gpu = mp.get_model(model)
    mig = load_model(model)["mig"]
    catalogue = {p.name: (p.nvml_enum, p.profile_id, p.compute_slices, p.instance_count, p.memory_mib,
                          [[start, p.memory_slices] for start in p.starts]) for p in gpu.gi_profiles}
    simulator = {p["name"]: (p["index"], p["id"], p["slices"], p["instances"], p["memory_mib"], p["placements"])
                 for p in mig["gi_profiles"]}
    assert simulator == catalogue
    cited = {"listing": gpu.memory_from[0], "driver": gpu.memory_from[1]} if gpu.memory_from else None
    assert mig.get("memory_from") == cited


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """pynvml bound to the simulator's library; yields (pynvml, state path). Restores pynvml afterwards."""
    from gpufleet_sim.build import build_library, pynvml_bound

    lib = build_library(REPO / "build" / "mig" / "lib", "550.163.01")
    state = tmp_path_factory.mktemp("mig-catalogue") / "state.json"
    with pynvml_bound(lib, state) as pynvml:
        yield pynvml, state


def one_gpu_host(model: str) -> dict[str, Any]:
    """GPU 0 of the model's preset, MIG on, no instances, no root needed."""
    doc = presets.build_state(PRESET_BY_MODEL.get(model, "1xH200"), "catalogue")
    if model not in PRESET_BY_MODEL:  # a catalogue row with a model file but no preset: one GPU of it
        doc["gpus"][0] = presets.build_gpu(model, 0, "catalogue", doc["gpus"][0]["pci"]["bus"])
    doc["gpus"] = doc["gpus"][:1]
    doc.pop("nvswitch", None)
    doc["require_root"] = False
    doc["gpus"][0]["mig"].update(current=1, pending=1, gpu_instances=[])
    copied: dict[str, Any] = json.loads(json.dumps(doc))
    return copied


def start(nv: Any, state: Path, doc: dict[str, Any]) -> Any:
    state.unlink(missing_ok=True)
    store.create(state, doc)
    nv.nvmlInit()
    return nv.nvmlDeviceGetHandleByIndex(0)


def facts_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    gpu = doc["gpus"][0]
    return [{"index": 0, "name": gpu["name"], "pci_device_id": gpu["pci"]["pci_device_id"], "mig_capable": True}]


# every GI profile enum NVML defines (nvml.h NVML_GPU_INSTANCE_PROFILE_* 0..17)
ENUMS = range(18)


@pytest.mark.parametrize("model", SIMULATED)
def test_driver_reports_the_cited_table(nvml: tuple[Any, Path], model: str) -> None:
    """Walk the enums as mig-parted does: the names, counts, ids and placement sizes the simulated driver reports
    are the cited ones (OFFERED, LISTED_IDS)."""
    nv, state = nvml
    doc = one_gpu_host(model)
    handle = start(nv, state, doc)
    try:
        seen: dict[str, tuple[int, int, int]] = {}
        ids: dict[str, int] = {}
        for enum in ENUMS:
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                continue
            name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            name = name.removeprefix("MIG ")
            array = (nv.c_nvmlGpuInstancePlacement_t * 16)()
            num = ctypes.c_uint(16)
            nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(num))
            sizes = {array[k].size for k in range(num.value)}
            assert len(sizes) == 1, name
            seen[name] = (info.instanceCount, sizes.pop(), info.sliceCount)
            ids[name] = info.id
        assert seen == OFFERED[model]
        for name, profile_id in LISTED_IDS.get(model, {}).items():
            assert ids[name] == profile_id, name
    finally:
        nv.nvmlShutdown()


CASES = [(label, model) for model in SIMULATED for label in LABELS if expected_verdict(label, model)]


@pytest.mark.parametrize(("label", "model"), CASES, ids=[f"{m}:{label}" for label, m in CASES])
def test_accepted_label_applies_and_reads_back(nvml: tuple[Any, Path], label: str, model: str) -> None:
    nv, state = nvml
    doc = one_gpu_host(model)
    config = ml.validate(mpp.from_mig_parted(CONFIG, label), facts_of(doc))[0]
    handle = start(nv, state, doc)
    try:
        if not config.mig_enabled:
            return
        for (profile_id, gi_start), spec in zip(ml.placements_for(config), config.gpu_instances, strict=True):
            placement = nv.c_nvmlGpuInstancePlacement_t(gi_start, spec.size)
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))
            for ci in spec.compute_instances:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, ci.profile_id, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                nv.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
    finally:
        nv.nvmlShutdown()
    gis = store.load(state)["gpus"][0]["mig"]["gpu_instances"]
    assert sorted((g["profile_id"], g["start"], g["size"]) for g in gis) == sorted(
        (gi.profile_id, gi.start, gi.size) for gi in config.gpu_instances)
    assert all(len(g["compute_instances"]) == 1 for g in gis)


def test_every_simulated_model_has_accepted_labels() -> None:
    """The apply test above is not vacuous for any model: each has labels beyond all-disabled/all-enabled."""
    per_model = {m: sum(1 for _, model in CASES if model == m) for m in SIMULATED}
    # but the B300, whose labels came after the copied gpu-operator commit: only all-disabled / all-enabled (its
    # instances are applied by tests/sim/test_mig_property_sim.py)
    assert per_model.pop("B300-288GB") == 2
    assert min(per_model.values()) >= 6


# ------------------------------------------------------------------------------- a driver's variant profile names
EARLY_GB200_NAMES = {"1g.23gb": "1g.24gb", "1g.23gb+me": "1g.24gb+me"}  # gpu-operator #1303 vs mig-parted #227


def gb200_host(early_driver: bool) -> dict[str, Any]:
    """A simulated GB200 whose driver prints the production names, or the early boards' (the state document is
    what the simulated driver reports, so renaming its GI profiles gives that GPU the other driver's names)."""
    doc = one_gpu_host("GB200-186GB")
    if early_driver:
        for profile in doc["gpus"][0]["mig"]["gi_profiles"]:
            profile["name"] = EARLY_GB200_NAMES.get(profile["name"], profile["name"])
    return doc


@pytest.mark.parametrize(("early_driver", "written"), [
    (True, {"1g.23gb": 6, "1g.23gb+me": 1}),   # a layout in production names on an early board's driver
    (False, {"1g.24gb": 6, "1g.24gb+me": 1}),  # a layout in the early names on a production driver
    (True, {"1g.24gb": 6, "1g.24gb+me": 1}),
])
def test_layout_in_one_drivers_names_applies_on_the_other(nvml: tuple[Any, Path], early_driver: bool,
                                                          written: dict[str, int]) -> None:
    """Through gpufleet's own NVML layer: identity from the driver, the planned creates, the state read back
    under the driver's names, and a second plan that finds nothing to do."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import nvml_session

    _nv, state = nvml
    state.unlink(missing_ok=True)
    store.create(state, gb200_host(early_driver))
    with nvml_session() as session:
        gpu = session.gpu(0)
        profiles = {p["name"] for p in session.gi_profiles(0)}
        assert ("1g.24gb" in profiles) is early_driver
        assert ("1g.23gb" in profiles) is not early_driver
        desired = ml.validate([{"devices": "all", "gpu_instances": written}], [gpu])
        for gi in desired[0].gpu_instances:
            created = session.create_gpu_instance(0, gi.profile_id, gi.start)
            for ci in gi.compute_instances:
                session.create_compute_instance(0, created["id"], ci.slices, ci.start)
        current = {**gpu, "mig": session.mig_state(0)}
    reported = Counter(g["profile_name"] for g in current["mig"]["gpu_instances"])
    names = EARLY_GB200_NAMES if early_driver else {k: k for k in EARLY_GB200_NAMES}
    assert reported == Counter({names["1g.23gb"]: 6, names["1g.23gb+me"]: 1})
    assert [p.actions for p in mpl.plan([current], desired)] == [[]]
