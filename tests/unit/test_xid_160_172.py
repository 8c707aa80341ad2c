"""XID 160-172 as NVIDIA's catalogue lists them (its sheet as leptonai/gpud's catalog_generated.go transcribes it,
generated 2025-10-29 from NVIDIA's Xid-Catalog.xlsx): 160/161 IGNORE, 162-170 with no resolution bucket (WARNING,
look it up), 171/172 "additional to Xid 48" (judged as Xid 48). Expected values are the catalogue's, typed here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import xid  # noqa: E402

CASES = [
    (160, "CHANNEL_RETIREMENT_EVENT", "INFO", "none"),
    (161, "CHANNEL_RETIREMENT_FAILURE", "INFO", "none"),
    (162, "PSHC_REENGAGED", "WARNING", "none"),
    (163, "PSHC_DISENGAGED", "WARNING", "none"),
    (164, "PSHC_LOW_LIFETIME", "WARNING", "none"),
    (165, "PSHC_ZERO_LIFETIME", "WARNING", "none"),
    (166, "NVLINK_SECURE_CRYPTO_ERR", "WARNING", "none"),
    (167, "PCIE_FATAL_TIMEOUT", "WARNING", "none"),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "WARNING", "none"),
    (169, "SEC2_HALT_ERROR", "WARNING", "none"),
    (170, "NVLINK_SECURE_OTHER", "WARNING", "none"),
    (171, "UNCORRECTABLE_DRAM_ERROR", "CRITICAL", "reset_gpu"),
    (172, "UNCORRECTABLE_SRAM_ERROR", "CRITICAL", "reset_gpu"),
]


@pytest.mark.parametrize(("code", "mnemonic", "level", "action"), CASES, ids=[str(c[0]) for c in CASES])
def test_codes_160_to_172(code: int, mnemonic: str, level: str, action: str) -> None:
    got = xid.classify({"code": code})
    assert (got["mnemonic"], got["level"], got["action"]) == (mnemonic, level, action)
    assert got["description"] != "not in gpufleet's copy of NVIDIA's XID catalogue"


def test_no_bucket_says_so() -> None:
    assert xid.classify({"code": 165})["why"] == (
        "NVIDIA's catalogue gives no resolution for this code yet; look it up at "
        "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html")
    assert xid.classify({"code": 171})["why"] == (
        "details of XID 48 (DBE (Double Bit Error) ECC Error): judged as XID 48")


def test_the_first_code_past_the_catalogue_is_still_unknown() -> None:
    assert xid.classify({"code": 173})["description"] == "not in gpufleet's copy of NVIDIA's XID catalogue"
