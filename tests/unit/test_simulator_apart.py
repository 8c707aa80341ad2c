"""The simulator is a distribution of its own (issue 32): nothing under simulator/ imports the product - not
``gpufleet``, not the collection's plugins - so that what the simulator does can never be shaped by what the
product believes. The one program that drives both, the demo, is tools/demo.py."""

from __future__ import annotations

import ast
from pathlib import Path

SIMULATOR = Path(__file__).resolve().parents[2] / "simulator"
PRODUCT = ("gpufleet", "ansible_collections.gpufleet")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_simulator_module_imports_the_product() -> None:
    sources = sorted(SIMULATOR.rglob("*.py"))
    assert len(sources) > 20, f"expected the simulator's Python sources under {SIMULATOR}"
    product = (*PRODUCT, *(p + "." for p in PRODUCT))
    offending = [f"{path.relative_to(SIMULATOR)}:{line}: import {name}" for path in sources
                 for line, name in _imports(path) if name in PRODUCT or name.startswith(product)]
    assert offending == []


def test_the_check_sees_a_product_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from gpufleet import api\n    import ansible_collections.gpufleet.nvidia\n")
    assert _imports(probe) == [(2, "gpufleet"), (3, "ansible_collections.gpufleet.nvidia")]
