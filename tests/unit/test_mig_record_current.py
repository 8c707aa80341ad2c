"""The mig_record_current filter: the nvidia_mig role decides with it whether the state file must be recorded
again (through the host-side transaction, under the host lock)."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.mig import mig_record_current
from hypothesis import given
from hypothesis import strategies as st

#: a record as gpufleet-mig-apply.py writes it (json.dumps, indent 4, sorted keys)
RECORD = {"managed_by": "gpufleet.nvidia.nvidia_mig", "layout_name": "balanced",
          "layout": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"1g.10gb": 7}}],
          "gpu_indexes": None, "allow_reset": True, "state": "success",
          "gpus": [{"index": 0, "uuid": "GPU-1", "gpu_instances": [{"uuid": "MIG-a"}]}]}
TEXT = json.dumps(RECORD, indent=4, sort_keys=True) + "\n"


def test_the_same_record_is_current_whatever_the_gpus_showed() -> None:
    desired = dict(RECORD, gpus=[{"index": 0, "uuid": "GPU-1", "gpu_instances": [{"uuid": "MIG-b"}]}])
    assert mig_record_current(TEXT, desired) is True


@pytest.mark.parametrize(("key", "value"), [
    ("layout_name", "other"), ("state", "pending"), ("allow_reset", False), ("gpu_indexes", [0]),
    ("layout", [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 2}}]),
])
def test_a_different_intent_or_state_is_not_current(key: str, value: object) -> None:
    assert mig_record_current(TEXT, dict(RECORD, **{key: value})) is False


def test_a_record_with_a_key_more_or_less_is_not_current() -> None:
    assert mig_record_current(TEXT, {k: v for k, v in RECORD.items() if k != "allow_reset"}) is False


@pytest.mark.parametrize("text", ["", "{", "null", "[]", '"text"', "{\"layout\": [}", "\x00"])
def test_missing_empty_or_damaged_text_is_not_current(text: str) -> None:
    assert mig_record_current(text, RECORD) is False


def test_a_desired_record_that_is_not_a_mapping_is_one_sentence() -> None:
    with pytest.raises(AnsibleFilterError, match="the desired record must be a mapping"):
        mig_record_current(TEXT, ["layout"])


@given(st.text(max_size=300))
def test_any_text_gives_a_bool(text: str) -> None:
    assert mig_record_current(text, RECORD) in (True, False)
