"""One definition of every gpu_health threshold: the module's ARGUMENT_SPEC (issue 13, issue 11).

Everything else is derived from it or checked against it here:

* the module's DOCUMENTATION (what ``ansible-doc`` shows) states the same type, default, choices and elements;
* the ``gpu_health`` role passes every threshold option through, has no default of its own for one (null means
  the module's default), and its ``gpu_health_thresholds`` key list names exactly the options it passes that way;
* the options table of docs/health.md is generated from the spec (``python tests/unit/test_health_thresholds_source.py
  --write`` rewrites it) and must be current.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "collections") not in sys.path:
    sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gpufleet.nvidia.plugins.modules import gpu_health  # noqa: E402

DOC = yaml.safe_load(gpu_health.DOCUMENTATION)
ROLE = ROOT / "roles" / "gpu_health"
HEALTH_MD = ROOT / "docs" / "health.md"
BEGIN = "<!-- options table: generated from plugins/modules/gpu_health.py ARGUMENT_SPEC; do not edit -->"
END = "<!-- end of options table -->"


def _spec_view(option: dict[str, Any]) -> dict[str, Any]:
    """What must agree between the spec and the documentation of one option."""
    return {key: option.get(key) for key in ("type", "default", "choices", "elements")}


def test_documentation_states_the_argument_spec() -> None:
    documented = {name: _spec_view(opt) for name, opt in DOC["options"].items()}
    spec = {name: _spec_view(opt) for name, opt in gpu_health.ARGUMENT_SPEC.items()}
    assert documented == spec


def test_thresholds_are_the_spec_less_the_operational_options() -> None:
    assert set(gpu_health.NOT_THRESHOLDS) <= set(gpu_health.ARGUMENT_SPEC)
    th = gpu_health.thresholds({name: opt.get("default") for name, opt in gpu_health.ARGUMENT_SPEC.items()})
    assert set(th) == set(gpu_health.ARGUMENT_SPEC) - set(gpu_health.NOT_THRESHOLDS)
    assert "temperature_fail_c" in th
    assert "ecc_mode_expected" in th


def _configure_args() -> dict[str, str]:
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text(encoding="utf-8"))
    (task,) = [t for t in tasks if "gpufleet.nvidia.gpu_health" in t]
    return {key: str(value) for key, value in task["gpufleet.nvidia.gpu_health"].items()}


def test_role_threshold_keys_are_exactly_the_ones_it_passes_through() -> None:
    keys = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))["__gpu_health_threshold_keys"]
    args = _configure_args()
    passed = sorted(name for name, value in args.items()
                    if value == f"{{{{ gpu_health_thresholds.{name} | default(omit) }}}}")
    assert sorted(keys) == passed
    assert set(keys) <= set(gpu_health.ARGUMENT_SPEC)


def test_role_passes_every_option_it_may_set_and_keeps_no_default_of_its_own() -> None:
    args = _configure_args()
    assert set(args) <= set(gpu_health.ARGUMENT_SPEC)
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    # The one option the role never sets: the fabric manager unit keeps the module's value.
    assert set(gpu_health.ARGUMENT_SPEC) - set(args) == {"fabric_manager_service"}
    # The MIG record and IMEX's node list are read where the roles that write them put them (issue 27)
    assert args["mig_state_file"] == "{{ gpu_health_mig_state_file | default(omit, true) }}"
    assert defaults["gpu_health_mig_state_file"] == "{{ nvidia_mig_state_file | default(None) }}"
    assert defaults["gpu_health_imex_nodes_config_file"] == "{{ nvidia_imex_nodes_config_file | default(None) }}"
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    pattern = re.compile(r"^\{\{ (gpu_health_\w+) if \1 is not none else omit \}\}$")
    mirrored = {name: m.group(1) for name, value in args.items() if (m := pattern.match(value))}
    assert len(mirrored) >= 6, mirrored
    assert {var: defaults[var] for var in mirrored.values()} == dict.fromkeys(mirrored.values())


# --------------------------------------------------------------------------------------------------- docs table


def _markup(text: str) -> str:
    return re.sub(r"\b(?:C|O|RV|V|I)\(([^)]*)\)", r"`\1`", text)


def _default(value: Any) -> str:
    return "null" if value is None else json.dumps(value)


def options_table() -> str:
    """The Markdown table of every option of the module: default and choices from the spec, text from its docs."""
    lines = ["| option | type | default | choices | what it does |", "| --- | --- | --- | --- | --- |"]
    for name, opt in sorted(gpu_health.ARGUMENT_SPEC.items()):
        kind = opt["type"] + (f" of {opt['elements']}" if opt.get("elements") else "")
        choices = ", ".join(f"`{c}`" for c in opt.get("choices") or []) or "-"
        described = DOC["options"][name]["description"]
        text = " ".join(described) if isinstance(described, list) else str(described)
        role = "threshold" if name not in gpu_health.NOT_THRESHOLDS else "how to read / what to run"
        lines.append(f"| `{name}` | {kind} | `{_default(opt.get('default'))}` | {choices} | "
                     f"{_markup(text).replace('|', '/')} ({role}) |")
    return "\n".join(lines)


def _current_block(text: str) -> str:
    assert BEGIN in text, f"{HEALTH_MD} lacks the generated options table's first marker"
    assert END in text, f"{HEALTH_MD} lacks the generated options table's last marker"
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def test_docs_options_table_is_generated_from_the_spec() -> None:
    text = HEALTH_MD.read_text(encoding="utf-8")
    assert _current_block(text) == options_table(), (
        "docs/health.md's options table is out of date: run python tests/unit/test_health_thresholds_source.py --write")


def test_docs_state_no_threshold_default_outside_the_generated_table() -> None:
    """The hand-written part of docs/health.md names options, never their default numbers (one fact, one place)."""
    text = HEALTH_MD.read_text(encoding="utf-8")
    outside = text.replace(text.split(BEGIN, 1)[1].split(END, 1)[0], "")
    for name in ("ecc_corrected_volatile_warn", "ecc_corrected_volatile_fail", "retired_pages_warn",
                 "retired_pages_fail", "remapped_rows_uncorrectable_fail", "xid_window_s",
                 "temperature_warn_margin_c"):
        default = str(gpu_health.ARGUMENT_SPEC[name]["default"])
        assert f"**{default}**" not in outside, f"docs/health.md restates the default of {name} ({default})"


def write() -> None:
    text = HEALTH_MD.read_text(encoding="utf-8")
    old = text.split(BEGIN, 1)[1].split(END, 1)[0]
    HEALTH_MD.write_text(text.replace(BEGIN + old + END, f"{BEGIN}\n{options_table()}\n{END}"), encoding="utf-8")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write()
