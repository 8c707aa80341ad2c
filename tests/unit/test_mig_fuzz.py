"""Hypothesis over the MIG entry points that take user input (issue 13): the validator, the planner (through the
mig_plan filter) and the mig-parted import. Whatever the input, the only exception is the documented one, whose
message is the sentence users see; never a crash (KeyError, AttributeError, RecursionError, MemoryError...).
Bounded: a fixed number of examples and no deadline flakiness, so it runs in the ordinary test suite."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.filter import mig as mig_filters  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_layout import LayoutError, validate  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_parted import (  # noqa: E402
    MigPartedError,
    from_mig_parted,
)

BOUNDED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values that look like what inventories, CMDBs and YAML give: near-miss keys and profile names included.
KEYS = st.sampled_from(["devices", "model", "device_filter", "mig_enabled", "gpu_instances", "placements",
                        "compute_instances", "profile", "start", "index", "name", "pci_device_id", "mig_capable",
                        "mig", "supported", "current", "pending", "gpu_instances", "id", "profile_id", "size",
                        "slices", "compute_instances", "uuid", "version", "mig-configs", "mig-enabled",
                        "mig-devices", "device-filter", "all"])
TEXT = st.one_of(st.sampled_from(["all", "3g.40gb", "1g.10gb", "1c.3g.40gb", "7g.80gb", "A100-SXM4-80GB",
                                  "H100-SXM5-80GB", "0x20B210DE", "0x233010DE", "548409566", "false", "true",
                                  "v1", "", "\u0663g.40gb", "3g.40gb\n", "1g.5gb", "1g.10gb+me"]),
                 st.text(max_size=12))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**40), max_value=2**40), st.floats(), TEXT)
JSONISH = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.one_of(KEYS, TEXT), inner, max_size=5)),
                       max_leaves=25)
ENTRY = st.dictionaries(KEYS, JSONISH, max_size=6)
GPU = st.fixed_dictionaries({"index": st.one_of(st.integers(0, 9), JSONISH)},
                            optional={"model": TEXT, "name": TEXT, "pci_device_id": st.one_of(TEXT, st.integers()),
                                      "mig_capable": JSONISH, "mig": JSONISH, "gpu_instances": JSONISH})


@BOUNDED
@given(entries=st.one_of(st.lists(ENTRY, max_size=3), JSONISH), gpus=st.one_of(st.lists(GPU, max_size=3), JSONISH))
def test_validate_raises_only_layout_errors(entries: Any, gpus: Any) -> None:
    message = "no error"
    try:
        validate(entries, gpus)
    except LayoutError as exc:
        message = str(exc)
    assert message.strip()


@BOUNDED
@given(current=st.one_of(st.lists(GPU, max_size=3), JSONISH), desired=st.one_of(st.lists(ENTRY, max_size=3), JSONISH))
def test_mig_plan_filter_raises_only_filter_errors(current: Any, desired: Any) -> None:
    message = "mig_plan: no error"
    try:
        mig_filters.mig_plan(current, desired)
    except AnsibleFilterError as exc:
        message = str(exc)
    assert message.startswith("mig_plan: ")


@BOUNDED
@given(entries=st.one_of(st.lists(ENTRY, max_size=3), JSONISH), gpus=st.one_of(st.lists(GPU, max_size=3), JSONISH))
def test_mig_validate_filter_raises_only_filter_errors(entries: Any, gpus: Any) -> None:
    message = "mig_validate: no error"
    try:
        mig_filters.mig_validate(entries, gpus)
    except AnsibleFilterError as exc:
        message = str(exc)
    assert message.startswith("mig_validate: ")


MIG_PARTED_ENTRY = st.dictionaries(st.sampled_from(["devices", "device-filter", "mig-enabled", "mig-devices"]),
                                   JSONISH, max_size=4)


@BOUNDED
@given(doc=st.one_of(
    st.fixed_dictionaries({"version": st.one_of(st.just("v1"), JSONISH),
                           "mig-configs": st.one_of(st.dictionaries(TEXT, st.lists(MIG_PARTED_ENTRY, max_size=3),
                                                                    max_size=2), JSONISH)}),
    JSONISH, st.text(max_size=40)))
def test_mig_parted_import_raises_only_mig_parted_errors(doc: Any) -> None:
    message = "no error"
    try:
        from_mig_parted(doc)
    except MigPartedError as exc:
        message = str(exc)
    assert message.strip()
