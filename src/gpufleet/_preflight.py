"""Resolve the inventory, the plays' host patterns and ``--limit`` with Ansible's own InventoryManager.

Runs in a child process (``python -m gpufleet._preflight``) with the same environment as the ansible-playbook run
that follows, so that the operator's ansible.cfg, inventory plugins and ``ANSIBLE_*`` settings are the ones Ansible
will use, and so that ansible-core's global state (configuration, display) never leaks into the caller's process.

The request is a JSON document on stdin: ``{"sources": [...], "limit": str | null, "playbook": path,
"extravars": {...}}``; the answer is a JSON document on stdout (see :func:`resolve`). Ansible's own warnings and
errors go to stderr, which the caller keeps and shows: they are the reason an inventory did not parse.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def resolve(sources: Sequence[str], limit: str | None, playbook: str, extravars: Mapping[str, Any]) -> dict[str, Any]:
    """Parse the inventory sources and match the playbook's plays and the limit against them.

    Returns ``unparsed`` (sources no inventory plugin could parse), ``inventory_hosts`` (every host, implicit
    localhost excluded), ``patterns`` (the plays' host patterns, templated with the extra vars; ``null`` when the
    playbook could not be read: ansible-playbook then reports why), ``play_hosts`` (hosts the plays match before
    the limit), ``matched`` (after the limit) and ``limit_error`` (Ansible's message for a pattern it rejects).
    """
    from ansible.errors import AnsibleError  # type: ignore[import-untyped]
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
    from ansible.template import Templar  # type: ignore[import-untyped]

    unparsed: list[str] = []
    original = InventoryManager.parse_source

    def parse_source(self: InventoryManager, source: str, cache: bool = False) -> bool:
        parsed = bool(original(self, source, cache=cache))
        if not parsed:
            unparsed.append(source)
        return parsed

    InventoryManager.parse_source = parse_source
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=list(sources))
    answer: dict[str, Any] = {
        "unparsed": unparsed,
        "inventory_hosts": sorted(h.name for h in inventory.get_hosts("all") if not h.implicit),
        "patterns": None,
        "play_hosts": [],
        "matched": [],
        "limit_error": None,
    }
    patterns: list[str] = []
    try:
        plays = loader.load_from_file(playbook, trusted_as_template=True)
        templar = Templar(loader=loader, variables=dict(extravars))
        for play in plays if isinstance(plays, list) else []:
            if isinstance(play, Mapping) and "hosts" in play:
                hosts = templar.template(play["hosts"])
                patterns.extend(hosts if isinstance(hosts, list) else [str(hosts)])
    except AnsibleError:
        return answer
    answer["patterns"] = patterns

    def matching() -> list[str]:
        names: set[str] = set()
        for pattern in patterns:
            names.update(h.name for h in inventory.get_hosts(pattern) if not h.implicit)
        return sorted(names)

    answer["play_hosts"] = matching()
    if limit is not None:
        try:
            inventory.subset(limit)
            answer["matched"] = matching()
        except AnsibleError as exc:
            answer["limit_error"] = str(exc.message).strip()
    else:
        answer["matched"] = answer["play_hosts"]
    return answer


def main() -> int:
    """Read the request from stdin, write the answer to stdout."""
    request = json.load(sys.stdin)
    answer = resolve(request["sources"], request.get("limit"), request["playbook"], request.get("extravars") or {})
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
