"""The simulator is a distribution of its own (issue 32): nothing under simulator/ imports the product - not
``gpufleet``, not the collection's plugins - so that what the simulator does can never be shaped by what the
product believes. The one program that drives both, the demo, is tools/demo.py."""

from __future__ import annotations

import ast
from pathlib import Path

SIMULATOR = Path(__file__).resolve().parents[2] / "simulator"
PRODUCT = ("gpufleet", "ansible_collections.gpufleet")
INSIDE = tuple(p + "." for p in PRODUCT)  # gpufleet.api is the product, gpufleet_sim is not


def _product_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name in PRODUCT or name.startswith(INSIDE)]


def test_no_simulator_module_imports_the_product() -> None:
    sources = sorted(SIMULATOR.rglob("*.py"))
    assert len(sources) > 20, f"expected the simulator's Python sources under {SIMULATOR}"
    offending = [f"{path.relative_to(SIMULATOR)}:{line}: import {name}" for path in sources
                 for line, name in _product_imports(path)]
    assert offending == []


def test_the_check_tells_the_product_from_the_simulators_own_packages(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import gpufleet_sim.store\nfrom gpufleet_lab import hosts\n\n\ndef f():\n"
                     "    from gpufleet import api\n    import ansible_collections.gpufleet.nvidia\n"
                     "    import gpufleet.cli\n")
    assert _product_imports(probe) == [(6, "gpufleet"), (7, "ansible_collections.gpufleet.nvidia"),
                                       (8, "gpufleet.cli")]
