"""Parse ``-e``/``--extra-vars`` arguments with Ansible's own loader, exactly as ansible-playbook does.

The steps are those of ``ansible.utils.vars.load_extra_vars`` (which reads ansible-core's global CLI context and
caches its result, so it cannot be called here directly): ``@file`` through the DataLoader (YAML or JSON, vault
aware), an inline ``{...}``/``[...]`` through ``DataLoader.load``, everything else through ``parse_kv``; the
results are merged with ``combine_vars``, later arguments winning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from gpufleet.errors import ExtraVarsError

#: the most values (mapping keys, list items and scalars, aliases counted each time they are used) one ``-e``
#: argument may hold: a YAML "billion laughs" file is refused before anything expands it in memory
MAX_VALUES = 100_000


def expanded_size(data: Any, _seen: dict[int, int] | None = None) -> int:
    """How many values ``data`` holds once every alias is expanded, counted over the shared (unexpanded) graph
    in time proportional to its distinct nodes. A cycle counts as more than :data:`MAX_VALUES`."""
    seen = {} if _seen is None else _seen
    key = id(data)
    if key in seen:
        if seen[key] < 0:  # still being counted: a cycle
            return MAX_VALUES + 1
        return seen[key]
    if isinstance(data, Mapping):
        seen[key] = -1
        total = 1 + sum(1 + expanded_size(value, seen) for value in data.values())
    elif isinstance(data, (list, tuple)):
        seen[key] = -1
        total = 1 + sum(expanded_size(item, seen) for item in data)
    else:
        return 1
    seen[key] = min(total, MAX_VALUES + 1)
    return seen[key]


def parse_extra_vars(
    arguments: Iterable[str],
    *,
    base_dir: Path | None = None,
    vault_ids: Iterable[str] = (),
    vault_password_files: Iterable[str] = (),
    vault_password: str | None = None,
) -> dict[str, Any]:
    """Merge ``-e`` arguments, later ones winning, like ansible-playbook.

    Args:
        arguments: The ``-e`` values as typed.
        base_dir: Where relative ``@file`` paths are found (default: the working directory).
        vault_ids, vault_password_files, vault_password: The run's vault secrets (``--vault-id``,
            ``--vault-password-file``, ``--ask-vault-pass``), to read vaulted ``@file`` arguments.

    Raises:
        ExtraVarsError: Ansible's message, naming the argument.
    """
    from ansible.errors import AnsibleError  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
    from ansible.parsing.splitter import parse_kv  # type: ignore[import-untyped]
    from ansible.utils.vars import combine_vars  # type: ignore[import-untyped]

    items = list(arguments)
    loader = DataLoader()
    loader.set_basedir(str(base_dir or Path.cwd()))
    if any(a.startswith("@") for a in items):
        loader.set_vault_secrets(_vault_secrets(loader, vault_ids, vault_password_files, vault_password))
    merged: dict[str, Any] = {}
    for argument in items:
        if not argument:
            raise ExtraVarsError("empty extra vars argument: expected key=value, @file or a YAML/JSON mapping")
        try:
            if argument.startswith("@"):
                if not argument[1:]:
                    raise ExtraVarsError("bad extra vars '@': a file name must follow '@'")
                data = loader.load_from_file(argument[1:], trusted_as_template=True)
            elif argument[0] in "/.":
                raise ExtraVarsError(f"bad extra vars {argument!r}: prepend the file name with '@' (-e @{argument})")
            elif argument[0] in "[{":
                data = loader.load(argument)
            else:
                data = parse_kv(argument)
                if "_raw_params" in data:  # words without "=": ansible-playbook would make a variable "_raw_params"
                    raise ExtraVarsError(
                        f"bad extra vars {argument!r}: {data['_raw_params']!r} is not key=value; use key=value, "
                        "@file or a YAML/JSON mapping"
                    )
        except AnsibleError as exc:
            raise ExtraVarsError(f"bad extra vars {argument!r}: {str(exc.message).strip()}") from exc
        if not isinstance(data, MutableMapping):
            raise ExtraVarsError(
                f"bad extra vars {argument!r}: could not be made into a dictionary; use key=value, @file or a "
                "YAML/JSON mapping"
            )
        try:
            size = expanded_size(data)
        except RecursionError:
            size = MAX_VALUES + 1
        if size > MAX_VALUES:
            raise ExtraVarsError(
                f"bad extra vars {argument!r}: it expands to {size} values (YAML aliases repeat what they name), more "
                f"than the {MAX_VALUES} gpufleet reads; write the values out, or pass fewer"
            )
        merged = combine_vars(merged, data)
    return dict(merged)


def _vault_secrets(
    loader: Any, vault_ids: Iterable[str], password_files: Iterable[str], password: str | None
) -> list[tuple[str, Any]]:
    from ansible.cli import CLI  # type: ignore[import-untyped]
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultSecret  # type: ignore[import-untyped]

    try:
        secrets: list[tuple[str, Any]] = list(
            CLI.setup_vault_secrets(
                loader,
                vault_ids=list(vault_ids),
                vault_password_files=list(password_files),
                ask_vault_pass=False,
                auto_prompt=False,
                initialize_context=False,
            )
        )
    except AnsibleError as exc:
        raise ExtraVarsError(f"cannot read the vault secrets: {str(exc.message).strip()}") from exc
    if password is not None:
        secrets.append(("default", VaultSecret(password.encode("utf-8"))))
    return secrets
