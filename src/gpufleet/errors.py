"""Typed errors of the gpufleet Python API.

Every error raised on purpose by :mod:`gpufleet.api` is a :class:`GpufleetError`; the CLI maps the two families
to its exit codes (:class:`InputError` -> 4, :class:`RunnerError` -> 5, see ``docs/api.md``).
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base class of the errors that gpufleet raises on purpose."""


class InputError(GpufleetError, ValueError):
    """The caller asked for something that cannot run: unknown playbook, missing inventory, bad extra vars."""


class PlaybookNotFoundError(InputError):
    """The playbook is neither a file nor one of the collection's playbooks."""


class InventoryNotFoundError(InputError):
    """The inventory is neither a path nor one of the collection's shipped inventories."""


class ExtraVarsError(InputError):
    """An ``-e``/``--extra-vars`` argument could not be parsed."""


class CollectionNotFoundError(GpufleetError):
    """Neither an installed copy of the collection nor a checkout was found next to the package."""


class RunnerError(GpufleetError):
    """ansible-runner could not run the playbook, or a callback given to the API raised."""
