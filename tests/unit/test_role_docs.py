"""tools/gen_role_docs.py: README variable tables generated from meta/argument_specs.yml, and its --check mode."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_tool():
    spec = importlib.util.spec_from_file_location("gen_role_docs", REPO / "tools" / "gen_role_docs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


docs = _load_tool()

SPECS = textwrap.dedent("""\
    ---
    argument_specs:
      main:
        short_description: A demo role
        description:
          - Does C(one) thing with O(demo_flag).
        options:
          demo_branch:
            type: str
            default: "570"
            description: Branch, see V(570).
          demo_flag:
            type: bool
            default: false
            description:
              - First line.
              - Second | line.
          demo_mode:
            type: str
            default: open
            choices: [open, proprietary]
            description: Mode.
          demo_list:
            type: list
            elements: str
            required: false
            description: I(Null) means auto.
    """)


def _role(tmp_path: Path, readme: str | None = None) -> Path:
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(SPECS, encoding="utf-8")
    if readme is not None:
        (role / "README.md").write_text(readme, encoding="utf-8")
    return role


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("C(/etc/x)", "`/etc/x`"),
        ("V(true) or V(false)", "`true` or `false`"),
        ("see O(demo_flag)", "see `demo_flag`"),
        ("M(ansible.builtin.reboot)", "`ansible.builtin.reboot`"),
        ("I(italic) B(bold)", "*italic* **bold**"),
        ("U(https://example.com)", "<https://example.com>"),
        ("L(docs,https://example.com)", "[docs](https://example.com)"),
        ("plain (parenthesis)", "plain (parenthesis)"),
    ],
)
def test_markup(text: str, expected: str) -> None:
    assert docs.markup(text) == expected


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ({"default": "570"}, '`"570"`'),
        ({"default": ""}, '`""`'),
        ({"default": "open"}, "`open`"),
        ({"default": False}, "`false`"),
        ({"default": 30}, "`30`"),
        ({"default": {}}, "`{}`"),
        ({"default": ["a", "b"]}, "`[a, b]`"),
        ({}, "`null`"),
        ({"required": True}, "(required)"),
    ],
)
def test_format_default(option: dict, expected: str) -> None:
    assert docs.format_default(option) == expected


@pytest.mark.parametrize(
    ("option", "expected"),
    [({"type": "list", "elements": "str"}, "list of str"), ({"type": "bool"}, "bool"), ({}, "str")],
)
def test_format_type(option: dict, expected: str) -> None:
    assert docs.format_type(option) == expected


def test_new_readme_gets_title_description_and_table(tmp_path: Path) -> None:
    role = _role(tmp_path)
    assert docs.main(["--roles-dir", str(role.parent), "demo"]) == 0
    text = (role / "README.md").read_text(encoding="utf-8")
    assert text.startswith("# demo\n\nA demo role\n\n" + docs.BEGIN)
    assert "- Does `one` thing with `demo_flag`." in text
    assert '| `demo_branch` | str | `"570"` | Branch, see `570`. |' in text
    assert "| `demo_flag` | bool | `false` | First line. Second \\| line. |" in text
    assert "| `demo_mode` | str | `open` | Mode. Choices: `open`, `proprietary`. |" in text
    assert "| `demo_list` | list of str | `null` | *Null* means auto. |" in text
    assert text.rstrip().endswith(docs.END)


def test_hand_written_parts_survive(tmp_path: Path) -> None:
    readme = f"# demo\n\nIntro by hand.\n\n{docs.BEGIN}\nold table\n{docs.END}\n\n## Examples\n\nBy hand too.\n"
    role = _role(tmp_path, readme)
    assert docs.main(["--roles-dir", str(role.parent), "demo"]) == 0
    text = (role / "README.md").read_text(encoding="utf-8")
    assert text.startswith("# demo\n\nIntro by hand.\n\n" + docs.BEGIN)
    assert "old table" not in text
    assert text.endswith(f"{docs.END}\n\n## Examples\n\nBy hand too.\n")


def test_check_mode_reports_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = f"# demo\n\n{docs.BEGIN}\nstale\n{docs.END}\n"
    role = _role(tmp_path, readme)
    assert docs.main(["--check", "--roles-dir", str(role.parent), "demo"]) == 1
    assert (role / "README.md").read_text(encoding="utf-8") == readme
    assert f"{role / 'README.md'} is out of date; run tools/gen_role_docs.py" in capsys.readouterr().err
    assert docs.main(["--roles-dir", str(role.parent), "demo"]) == 0
    assert docs.main(["--check", "--roles-dir", str(role.parent), "demo"]) == 0


def test_readme_without_markers_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    role = _role(tmp_path, "# demo\n\nNo markers here.\n")
    assert docs.main(["--roles-dir", str(role.parent), "demo"]) == 1
    assert "README of demo has no generated section" in capsys.readouterr().err
    assert (role / "README.md").read_text(encoding="utf-8") == "# demo\n\nNo markers here.\n"


def test_broken_specs_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    role = _role(tmp_path)
    (role / "meta" / "argument_specs.yml").write_text("argument_specs: {other: {}}\n", encoding="utf-8")
    assert docs.main(["--check", "--roles-dir", str(role.parent), "demo"]) == 1
    assert "has no argument_specs.main entry point" in capsys.readouterr().err


@pytest.mark.parametrize("role", ["nvml_python", "nvidia_driver", "nvidia_container_toolkit"])
def test_baseline_role_readmes_are_current(role: str) -> None:
    """The node-baseline roles' READMEs match their argument specs (rerun the tool after changing a spec)."""
    current = docs.role_docs(REPO / "roles" / role)
    assert not current.stale, f"roles/{role}/README.md is out of date; run tools/gen_role_docs.py {role}"
