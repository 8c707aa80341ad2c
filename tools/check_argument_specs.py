#!/usr/bin/env python3
"""Check that every role's ``meta/argument_specs.yml`` (entry point ``main``) matches its ``defaults/main.yml``.

The argument spec is the contract of a role (types, choices, defaults, descriptions) and the README tables are
generated from it, so it must not drift from the defaults the role really uses. For each role:

* every variable in ``defaults/main.yml`` (or ``defaults/main/*.yml``) is an option of ``main``, with the same
  default value;
* every option of ``main`` is in the defaults, unless it is ``required: true`` (then it must have no default);
* every option carries the role's prefix (``<role>_``).

Usage: ``python tools/check_argument_specs.py [ROLES_DIR ...]`` (default: ``roles``). Exit 0 when clean, 1 when a
problem was found (each printed on its own line), 2 on bad usage.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

SPEC_FILE = "meta/argument_specs.yml"
ENTRY_POINT = "main"


def _load_yaml(path: Path, role: str, problems: list[str]) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        problems.append(f"{role}: {path.name} is not valid YAML: {str(exc).splitlines()[0]}")
        return None


def load_defaults(role_dir: Path, problems: list[str]) -> dict[str, Any]:
    """The role's default variables: ``defaults/main.yml``/``.yaml``, or every file of ``defaults/main/``."""
    role = role_dir.name
    files = [role_dir / "defaults" / name for name in ("main.yml", "main.yaml")]
    split = role_dir / "defaults" / "main"
    if split.is_dir():
        files += sorted(p for p in split.iterdir() if p.suffix in (".yml", ".yaml"))
    merged: dict[str, Any] = {}
    for path in files:
        if not path.is_file():
            continue
        data = _load_yaml(path, role, problems)
        if data is None:
            continue
        if not isinstance(data, Mapping):
            problems.append(f"{role}: {path.relative_to(role_dir)} must be a mapping of variables")
            continue
        merged.update(data)
    return merged


def load_options(role_dir: Path, problems: list[str]) -> dict[str, Mapping[str, Any]] | None:
    """The options of entry point ``main``, or None (with a problem recorded) when there are none to read."""
    role = role_dir.name
    path = role_dir / SPEC_FILE
    if not path.is_file():
        problems.append(f"{role}: {SPEC_FILE} is missing")
        return None
    data = _load_yaml(path, role, problems)
    if data is None:
        return None
    specs = data.get("argument_specs") if isinstance(data, Mapping) else None
    entry = specs.get(ENTRY_POINT) if isinstance(specs, Mapping) else None
    if not isinstance(entry, Mapping):
        problems.append(f"{role}: {SPEC_FILE} has no entry point '{ENTRY_POINT}' under argument_specs")
        return None
    options = entry.get("options") or {}
    if not isinstance(options, Mapping):
        problems.append(f"{role}: options of entry point '{ENTRY_POINT}' must be a mapping")
        return None
    return {str(name): (spec if isinstance(spec, Mapping) else {}) for name, spec in options.items()}


def check_role(role_dir: Path) -> list[str]:
    """Return the problems of one role, as one sentence each (empty when the role is consistent)."""
    role = role_dir.name
    problems: list[str] = []
    defaults = load_defaults(role_dir, problems)
    options = load_options(role_dir, problems)
    if options is None:
        return problems
    prefix = f"{role}_"
    for name in sorted(set(defaults) | set(options)):
        if not name.startswith(prefix):
            problems.append(f"{role}: {name} does not start with the role prefix '{prefix}'")
        if name not in options:
            problems.append(f"{role}: {name} is in defaults/main.yml but not in the options of '{ENTRY_POINT}'")
            continue
        spec = options[name]
        required = bool(spec.get("required"))
        if name not in defaults:
            if not required:
                problems.append(
                    f"{role}: {name} is an option of '{ENTRY_POINT}' but not in defaults/main.yml "
                    "(give it a default there or mark it required)"
                )
            continue
        if required:
            problems.append(f"{role}: {name} is required in {SPEC_FILE} but has a value in defaults/main.yml")
            continue
        if spec.get("default") != defaults[name]:
            problems.append(
                f"{role}: {name} default differs: {SPEC_FILE} has {spec.get('default')!r}, "
                f"defaults/main.yml has {defaults[name]!r}"
            )
    return problems


def role_dirs(roots: list[Path]) -> list[Path]:
    """The role directories under the given roots (directories that contain ``tasks/`` or ``meta/``)."""
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        found += sorted(p for p in root.iterdir() if p.is_dir() and any((p / d).is_dir() for d in ("tasks", "meta")))
    return found


def main(argv: list[str] | None = None) -> int:
    """Check the roles under each directory given (default ``roles``); print problems; return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if any(a.startswith("-") for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    roots = [Path(a) for a in args] or [Path("roles")]
    roles = role_dirs(roots)
    problems = [problem for role in roles for problem in check_role(role)]
    for problem in problems:
        print(problem)
    print(f"{len(roles)} role(s) checked, {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
