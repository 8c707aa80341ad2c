"""Every shipped module and filter documents itself: ``ansible-doc`` is the user's manual.

A DOCUMENTATION block that is not valid YAML (a ``: `` or a ``[`` in an unquoted line) breaks ``ansible-doc`` for
that plugin without breaking the plugin itself, so nothing else would notice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if not p.name.startswith("_"))
FILTERS = sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml"))


def _doc(kind: str, name: str) -> dict:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run([str(ANSIBLE_DOC), "-t", kind, "--json", f"gpufleet.nvidia.{name}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)[f"gpufleet.nvidia.{name}"]


def test_there_is_something_to_document() -> None:
    assert "nvidia_mig" in MODULES
    assert "mig_plan" in FILTERS


@pytest.mark.parametrize("name", MODULES)
def test_module_documents_itself(name: str) -> None:
    doc = _doc("module", name)
    assert doc["doc"]["short_description"]
    assert doc["doc"]["options"] is not None
    assert doc["examples"].strip()
    assert doc["return"], f"{name}: RETURN documents nothing"
    assert {"check_mode", "diff_mode"} <= set(doc["doc"].get("attributes", {})), f"{name}: attributes block"


@pytest.mark.parametrize("name", FILTERS)
def test_filter_documents_itself(name: str) -> None:
    doc = _doc("filter", name)
    assert doc["doc"]["short_description"]
    assert doc["examples"].strip()
