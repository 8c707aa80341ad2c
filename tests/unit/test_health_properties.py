"""Property tests of the health evaluation (hypothesis, bounded): no uncaught exception, never a false green.

``health_checks.evaluate_host`` runs over measurement documents whose shape follows what nvml_health produces but
whose values are arbitrary (missing keys, None, negative and huge numbers, wrong types, unsupported and unreadable
metrics), with thresholds drawn from the module's argument spec and validated as AnsibleModule does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_HERE = Path(__file__).resolve().parent
for _path in (_HERE, _HERE.parents[1] / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc  # noqa: E402
from test_health_checks import th  # noqa: E402

METRICS = ("name", "brand", "vbios_version", "persistence_mode", "ecc_mode", "ecc", "retired_pages", "remapped_rows",
           "pcie", "nvlink", "temperature", "clock_event_reasons", "processes", "xid", "mig")
NUMBER = st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70), st.booleans(),
                   st.text(max_size=4), st.floats(allow_nan=True, allow_infinity=True))
JUNK = st.recursive(NUMBER, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                   st.dictionaries(st.text(max_size=12), kids, max_size=3)),
                    max_leaves=6)


def _like(value: Any) -> st.SearchStrategy[Any]:
    """Values shaped like ``value`` (same keys, arbitrary leaves), or junk."""
    if isinstance(value, dict):
        shaped = st.fixed_dictionaries({k: _like(v) for k, v in value.items()})
        return st.one_of(shaped, JUNK)
    if isinstance(value, list) and value:
        return st.one_of(st.lists(_like(value[0]), max_size=4), JUNK)
    return NUMBER


SAMPLE_VALUES: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3", "brand": 14, "vbios_version": "96.00.99.00.01", "persistence_mode": 1,
    "ecc_mode": {"current": True, "pending": True},
    "ecc": {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 0, "uncorrected_aggregate": 0},
    "retired_pages": {"sbe": 0, "dbe": 0, "pending": False},
    "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 0},
    "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}, "nvlink": [1, 1],
    "temperature": {"gpu": 33, "slowdown": 89, "shutdown": 92, "unreadable": {"slowdown": "not supported"}},
    "clock_event_reasons": 1, "processes": [{"pid": 7, "name": "python3", "used_memory_mib": 5}],
    "xid": [{"code": 79}],
    "mig": {"enabled": True, "gpu_instances": [{"profile_name": "1g.10gb", "start": 0, "size": 1,
                                                "compute_instances": [{"name": "1g.10gb"}]}]},
}


@st.composite
def gpus(draw: st.DrawFn, index: int) -> dict[str, Any]:
    values = {}
    for metric in METRICS:
        if draw(st.booleans()):
            values[metric] = draw(_like(SAMPLE_VALUES[metric]))
    return {"index": index, "uuid": draw(st.one_of(st.none(), st.just(f"GPU-{index}"))),
            "pci_bus_id": draw(st.one_of(st.none(), st.just(f"00000000:{index + 16:02X}:00.0"))),
            "lost": draw(st.booleans()), "values": values,
            "unsupported": draw(st.lists(st.sampled_from(METRICS), max_size=4)),
            "errors": draw(st.dictionaries(st.sampled_from(METRICS), st.text(max_size=20), max_size=3))}


@st.composite
def hosts(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(min_value=0, max_value=3))
    return {"driver_version": draw(st.one_of(st.none(), st.text(max_size=12))),
            "gpu_count": draw(NUMBER), "fabric_manager": draw(st.one_of(st.none(), st.text(max_size=10))),
            "gpus": [draw(gpus(i)) for i in range(count)],
            "xid_sources": draw(st.lists(st.fixed_dictionaries(
                {"source": st.sampled_from(["nvml", "kernel"]), "error": st.one_of(st.none(), st.text(max_size=20))}),
                max_size=2)),
            "mig_expected": draw(st.one_of(st.none(), st.just({"GPU-0": SAMPLE_VALUES["mig"]})))}


THRESHOLDS = st.fixed_dictionaries({}, optional={
    "expected_gpu_count": st.integers(min_value=0, max_value=16),
    "expected_gpu_models": st.lists(st.text(max_size=6), max_size=2),
    "expected_driver_version": st.text(max_size=8),
    "ecc_mode_expected": st.sampled_from(["auto", "enabled", "disabled", "any"]),
    "ecc_corrected_volatile_warn": st.integers(min_value=0, max_value=2**40),
    "retired_pages_fail": st.integers(min_value=0, max_value=100),
    "remapped_rows_uncorrectable_fail": st.integers(min_value=0, max_value=1000),
    "xid_critical": st.lists(st.integers(min_value=0, max_value=200), max_size=4),
    "temperature_fail_c": st.integers(min_value=-10, max_value=120),
    "temperature_warn_margin_c": st.integers(min_value=0, max_value=20),
    "pcie_gen_status": st.sampled_from(["ok", "warn", "fail"]),
    "nvswitch_expected": st.booleans(),
    "idle_expected": st.booleans(),
})


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(meas=hosts(), overrides=THRESHOLDS)
def test_evaluation_never_raises_and_every_check_is_well_formed(meas: dict[str, Any], overrides: dict) -> None:
    checks = hc.evaluate_host(meas, th(**overrides))
    summary = hc.summarize(checks)
    assert summary["status"] in ("ok", "warn", "fail")
    for item in checks:
        assert set(item) == {"name", "gpu", "status", "level", "action", "value", "threshold", "message", "evidence"}
        assert item["status"] in ("ok", "warn", "fail")
        # The level says at least as much as the status: never a green level on a failing check, or the reverse.
        assert item["status"] == {"PASS": "ok", "INFO": "ok", "WARNING": "warn", "UNKNOWN": "fail",
                                  "CRITICAL": "fail"}[item["level"]]
        assert isinstance(item["message"], str)
        assert item["message"]


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu=gpus(0), missing=st.sampled_from(["persistence_mode", "ecc", "remapped_rows", "pcie", "nvlink",
                                             "temperature", "clock_event_reasons", "processes", "xid"]),
       error=st.booleans())
def test_a_missing_or_unreadable_reading_never_passes(gpu: dict[str, Any], missing: str, error: bool) -> None:
    """A metric that was not read (absent, None) or could not be read (an NVML error) fails its check."""
    gpu = dict(gpu, lost=False, unsupported=[m for m in gpu["unsupported"] if m != missing],
               values={k: v for k, v in gpu["values"].items() if k != missing})
    gpu["errors"] = {k: v for k, v in gpu["errors"].items() if k != missing}
    if error:
        gpu["errors"][missing] = "nvmlDeviceGetSomething failed: Unknown Error"
    names = {"persistence_mode": ["persistence_mode"],
             "ecc": ["ecc_uncorrected_volatile", "ecc_corrected_volatile"],
             "remapped_rows": ["remapped_rows"], "pcie": ["pcie_link_width", "pcie_link_gen"], "nvlink": ["nvlink"],
             "temperature": ["temperature"], "clock_event_reasons": ["clock_events"], "processes": ["processes"],
             "xid": ["xid"]}[missing]
    checks = hc.check_gpu(gpu, th(), None)
    assert [c["status"] for c in checks if c["name"] in names] == ["fail"] * len(names)
    assert [c["level"] for c in checks if c["name"] in names] == ["UNKNOWN"] * len(names)
