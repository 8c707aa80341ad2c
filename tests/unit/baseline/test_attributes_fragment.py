"""The baseline modules take their ``attributes:`` block from the shared doc fragment, not a copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def _documentation(module: str) -> dict:
    tree = ast.parse((REPO / "plugins" / "modules" / f"{module}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DOCUMENTATION" for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value))
    raise LookupError(module)


@pytest.mark.parametrize(("module", "fragments"), [
    ("pci_devices", ["gpufleet.nvidia.attributes.read_only"]),
    ("gpu_facts", ["gpufleet.nvidia.attributes.read_only", "gpufleet.nvidia.attributes.facts"]),
])
def test_module_uses_the_shared_attributes_fragment(module: str, fragments: list[str]) -> None:
    doc = _documentation(module)
    assert "attributes" not in doc
    assert doc["extends_documentation_fragment"] == fragments
