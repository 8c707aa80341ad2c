#!/usr/bin/env python3
"""Generate each role's README variable section from its ``meta/argument_specs.yml``.

The part of ``roles/<role>/README.md`` between the markers is generated, the rest is the role author's. A README
that does not exist yet is created with a title, the role's description and the markers. (That the specs match
``defaults/main.yml`` is checked by ``tools/check_argument_specs.py``.)

Usage::

    python tools/gen_role_docs.py            # rewrite the READMEs that are out of date
    python tools/gen_role_docs.py --check    # exit 1 and name what is out of date, change nothing
    python tools/gen_role_docs.py --roles-dir roles nvidia_driver nvml_python
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BEGIN = "<!-- BEGIN GENERATED: role variables (tools/gen_role_docs.py, from meta/argument_specs.yml) -->"
END = "<!-- END GENERATED: role variables -->"
#: Ansible documentation markup -> Markdown.
_MARKUP = [
    (re.compile(r"[CVOM]\(([^)]*)\)"), r"`\1`"),
    (re.compile(r"I\(([^)]*)\)"), r"*\1*"),
    (re.compile(r"B\(([^)]*)\)"), r"**\1**"),
    (re.compile(r"RV\(([^)]*)\)"), r"`\1`"),
    (re.compile(r"U\(([^)]*)\)"), r"<\1>"),
    (re.compile(r"L\(([^,]*),([^)]*)\)"), r"[\1](\2)"),
]


class DocsError(Exception):
    """A role's argument specs or README cannot be read or have no place for the generated part."""


@dataclass(frozen=True)
class RoleDocs:
    """What the tool found for one role."""

    name: str
    readme: Path
    current: str | None
    wanted: str

    @property
    def stale(self) -> bool:
        """Whether the README differs from what the specs generate."""
        return self.current != self.wanted


def markup(text: str) -> str:
    """Turn Ansible's documentation markup (``C()``, ``V()``, ``O()``, ``I()``, ...) into Markdown."""
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return text


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(item).strip() for item in value)
    return str(value or "").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_default(option: dict[str, Any]) -> str:
    """The Default column: the YAML spelling of the default, ``null`` when there is none."""
    if "default" not in option:
        return "`null`" if not option.get("required") else "(required)"
    value = option["default"]
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" or value.strip() != value or value.isdigit() else f"`{value}`"
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return f"`{dumped.removesuffix('...').strip()}`"


def format_type(option: dict[str, Any]) -> str:
    """The Type column: ``list of str``, ``dict``, ``bool``..."""
    kind = option.get("type", "str")
    if kind == "list" and option.get("elements"):
        return f"list of {option['elements']}"
    return str(kind)


def variables_table(options: dict[str, Any]) -> str:
    """The Markdown table of a role's variables, in the order of the argument specs."""
    lines = ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name, option in options.items():
        option = option or {}
        description = markup(_text(option.get("description")))
        if option.get("choices"):
            description += " Choices: " + ", ".join(f"`{c}`" for c in option["choices"]) + "."
        lines.append(f"| `{name}` | {format_type(option)} | {_cell(format_default(option))} | {_cell(description)} |")
    return "\n".join(lines)


def generated_section(spec: dict[str, Any]) -> str:
    """The text between the markers for one entry point's spec."""
    parts = [BEGIN, "", "## Role variables", ""]
    description = spec.get("description")
    if description:
        items = description if isinstance(description, list) else [description]
        parts += [f"- {markup(_text(item))}" for item in items] + [""]
    parts += [variables_table(spec.get("options") or {}), "", END]
    return "\n".join(parts)


def render_readme(role: str, spec: dict[str, Any], current: str | None) -> str:
    """The README with its generated section replaced (or a new README when ``current`` is None)."""
    section = generated_section(spec)
    if current is None:
        title = f"# {role}\n\n{markup(_text(spec.get('short_description')))}\n\n"
        return f"{title}{section}\n"
    start, end = current.find(BEGIN), current.find(END)
    if start < 0 or end < start:
        raise DocsError(f"README of {role} has no generated section; add the lines {BEGIN!r} and {END!r}")
    return current[:start] + section + current[end + len(END):]


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DocsError(f"cannot read {path}: {exc}") from exc


def role_docs(role_dir: Path) -> RoleDocs:
    """Read one role and work out its README."""
    specs_file = role_dir / "meta" / "argument_specs.yml"
    specs = _load_yaml(specs_file)
    try:
        spec = specs["argument_specs"]["main"]
    except (TypeError, KeyError) as exc:
        raise DocsError(f"{specs_file} has no argument_specs.main entry point") from exc
    readme = role_dir / "README.md"
    current = readme.read_text(encoding="utf-8") if readme.exists() else None
    return RoleDocs(
        name=role_dir.name, readme=readme, current=current,
        wanted=render_readme(role_dir.name, spec, current),
    )


def find_roles(roles_dir: Path, names: list[str]) -> list[Path]:
    """The role directories to document: the named ones, else every role with argument specs."""
    if names:
        return [roles_dir / name for name in names]
    return sorted(p.parent.parent for p in roles_dir.glob("*/meta/argument_specs.yml"))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roles", nargs="*", help="role names (default: every role with meta/argument_specs.yml)")
    parser.add_argument("--roles-dir", type=Path, default=Path(__file__).resolve().parent.parent / "roles")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when something is out of date")
    args = parser.parse_args(argv)
    status = 0
    for role_dir in find_roles(args.roles_dir, args.roles):
        try:
            docs = role_docs(role_dir)
        except DocsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        if docs.stale:
            if args.check:
                print(f"{docs.readme} is out of date; run tools/gen_role_docs.py", file=sys.stderr)
                status = 1
            else:
                docs.readme.write_text(docs.wanted, encoding="utf-8")
                print(f"wrote {docs.readme}")
    return status


if __name__ == "__main__":
    sys.exit(main())
