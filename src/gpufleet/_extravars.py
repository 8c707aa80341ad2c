"""Parse ``-e``/``--extra-vars`` arguments the way ansible-playbook accepts them (pure logic)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gpufleet.errors import ExtraVarsError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_extra_vars(arguments: Iterable[str], *, base_dir: Path | None = None) -> dict[str, Any]:
    """Merge ``-e`` arguments, later ones winning, like ansible-playbook.

    Each argument is one of:

    * ``@path`` -- a YAML or JSON file whose top level is a mapping (relative to ``base_dir``, default: cwd);
    * a YAML/JSON mapping written inline, starting with ``{``;
    * one or more ``key=value`` words (shell-quoted values allowed); values stay strings, as in Ansible.

    Raises:
        ExtraVarsError: with a message that names the argument and what is wrong with it.
    """
    merged: dict[str, Any] = {}
    for argument in arguments:
        merged.update(_parse_one(argument, base_dir or Path.cwd()))
    return merged


def _parse_one(argument: str, base_dir: Path) -> dict[str, Any]:
    text = argument.strip()
    if not text:
        raise ExtraVarsError("empty extra vars argument: expected key=value, @file or a YAML/JSON mapping")
    if text.startswith("@"):
        return _load_file(text[1:], base_dir)
    if text.startswith("{"):
        return _load_mapping(text, f"extra vars {argument!r}")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ExtraVarsError(f"bad extra vars {argument!r}: {exc}") from exc
    result: dict[str, Any] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not _NAME.match(key):
            raise ExtraVarsError(
                f"bad extra var {word!r}: expected key=value with a variable name as key, @file or a YAML/JSON mapping"
            )
        result[key] = value
    return result


def _load_file(name: str, base_dir: Path) -> dict[str, Any]:
    if not name:
        raise ExtraVarsError("bad extra vars '@': a file name must follow '@'")
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExtraVarsError(f"extra vars file {name!r} not found") from None
    except OSError as exc:
        raise ExtraVarsError(f"extra vars file {name!r} cannot be read: {exc.strerror}") from exc
    return _load_mapping(text, f"extra vars file {name!r}")


def _load_mapping(text: str, what: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "not valid YAML or JSON"
        raise ExtraVarsError(f"{what} is not valid YAML or JSON: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ExtraVarsError(f"{what} must be a mapping at the top level, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str) or not _NAME.match(k)]
    if bad:
        raise ExtraVarsError(f"{what} has keys that are not variable names: {', '.join(map(repr, bad))}")
    return data
