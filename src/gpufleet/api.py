"""The gpufleet Python API: run the collection's playbooks through ansible-runner and get typed results.

The layer is thin on purpose. :class:`RunSpec` is the one object that builds every argument given to
``ansible_runner.run``; :func:`run` gives it a fresh private data directory, feeds ansible-runner's events to
:class:`~gpufleet._collect.EventCollector` (and to the caller's ``on_event``), and builds a
:class:`~gpufleet.results.RunResult` from ``Runner.status``, ``Runner.rc``, ``Runner.stats`` and those events.
Nothing is read from Ansible's text output or from artifact files.

Example::

    from gpufleet import api

    result = api.verify("inventories/sim", limit="gpu-a100-01")
    for host in result.hosts.values():
        print(host.name, host.status, host.health)
    raise SystemExit(result.exit_code)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import ansible_runner

from gpufleet import _paths
from gpufleet._collect import EventCallback, EventCollector
from gpufleet.errors import InputError, RunnerError
from gpufleet.results import MODULE_DATA_KEYS, RunResult

__all__ = [
    "MIG_PLAN_ONLY_VAR",
    "RunOptions",
    "RunSpec",
    "facts",
    "plan_mig",
    "provision",
    "reconfigure_mig",
    "run",
    "verify",
]

#: Extra variable that tells mig_reconfigure.yml to compute and return the plan and change nothing.
MIG_PLAN_ONLY_VAR = "gpufleet_mig_plan_only"

#: Ansible's own defaults, kept after the collection's directory on ANSIBLE_COLLECTIONS_PATH.
_DEFAULT_COLLECTIONS_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")

InventoryArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


@dataclass(frozen=True)
class RunSpec:
    """Everything one ansible-runner invocation needs; :meth:`to_kwargs` builds ``ansible_runner.run``'s arguments.

    Build it with :meth:`build`, which resolves and validates names and paths; the fields are already resolved.
    """

    playbook: Path
    inventories: tuple[Path, ...]
    collections_dir: Path
    ansible_cfg: Path
    limit: str | None = None
    extravars: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    forks: int | None = None
    verbosity: int = 0
    timeout: int | None = None
    module_keys: Mapping[str, str] = field(default_factory=lambda: dict(MODULE_DATA_KEYS))

    @classmethod
    def build(
        cls,
        playbook: str | os.PathLike[str],
        inventory: InventoryArg,
        *,
        limit: str | None = None,
        extravars: Mapping[str, Any] | None = None,
        tags: str | Sequence[str] | None = None,
        skip_tags: str | Sequence[str] | None = None,
        check: bool = False,
        diff: bool = False,
        forks: int | None = None,
        verbosity: int = 0,
        timeout: int | None = None,
        module_keys: Mapping[str, str] | None = None,
    ) -> RunSpec:
        """Resolve a playbook name and inventories against the collection, validate the options, build a spec.

        Raises:
            PlaybookNotFoundError: unknown playbook.
            InventoryNotFoundError: an inventory path that does not exist.
            InputError: an option out of range.
        """
        layout = _paths.layout()
        inventories = _inventory_list(inventory)
        if not inventories:
            raise InputError("no inventory given: pass at least one inventory path")
        if forks is not None and forks < 1:
            raise InputError(f"forks must be at least 1, got {forks}")
        if not 0 <= verbosity <= 6:
            raise InputError(f"verbosity must be between 0 and 6, got {verbosity}")
        if timeout is not None and timeout < 1:
            raise InputError(f"timeout must be at least 1 second, got {timeout}")
        return cls(
            playbook=_paths.resolve_playbook(playbook, layout.root),
            inventories=tuple(_paths.resolve_inventory(i, layout.root) for i in inventories),
            collections_dir=layout.collections_dir,
            ansible_cfg=layout.ansible_cfg,
            limit=limit or None,
            extravars=dict(extravars or {}),
            tags=_split_tags(tags),
            skip_tags=_split_tags(skip_tags),
            check=check,
            diff=diff,
            forks=forks,
            verbosity=verbosity,
            timeout=timeout,
            module_keys={**MODULE_DATA_KEYS, **(module_keys or {})},
        )

    def envvars(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Environment for ansible-playbook on top of the caller's ``environ``.

        * ``ANSIBLE_COLLECTIONS_PATH``: this collection's directory first, then the caller's own value (or
          Ansible's default locations), so that ``gpufleet.nvidia.*`` always means this copy.
        * ``ANSIBLE_CONFIG``: the caller's choice when set, else the ansible.cfg that goes with this copy (the
          run's working directory is the private data directory, where Ansible would find no ansible.cfg).
        * ``ANSIBLE_HOST_KEY_CHECKING``: the caller's value when set, else ``True``; ansible-runner would
          otherwise switch host key checking off.
        * ``PATH``: the directory of this Python's scripts first, so a venv that is not activated still runs its
          own ``ansible-playbook`` (not another installation's, or none at all: rc 127).
        """
        tail = environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(_DEFAULT_COLLECTIONS_PATHS)
        return {
            "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(self.collections_dir), tail]),
            "ANSIBLE_CONFIG": environ.get("ANSIBLE_CONFIG") or str(self.ansible_cfg),
            "ANSIBLE_HOST_KEY_CHECKING": environ.get("ANSIBLE_HOST_KEY_CHECKING") or "True",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), environ.get("PATH", os.defpath)]),
        }

    def cmdline(self) -> str | None:
        """ansible-playbook options that ansible-runner has no argument for (check and diff mode)."""
        options = [flag for flag, on in (("--check", self.check), ("--diff", self.diff)) if on]
        return " ".join(options) or None

    def to_kwargs(
        self,
        private_data_dir: str | os.PathLike[str],
        *,
        event_handler: Callable[[Mapping[str, Any]], bool],
        cancel_callback: Callable[[], bool],
        environ: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Return the keyword arguments for ``ansible_runner.run``.

        Args:
            private_data_dir: A fresh, empty directory owned by this run.
            event_handler: Called with every job event; must return True (ansible-runner keeps the event so that
                ``Runner.stats`` works).
            cancel_callback: Polled by ansible-runner; returning True stops ansible-playbook. The run's
                ``timeout`` is enforced through it too (ansible-runner's own timeout would SIGKILL ansible-playbook
                and leave its workers running).
            environ: The environment to start from (default: ``os.environ``).
        """
        return {
            "private_data_dir": os.fspath(private_data_dir),
            "playbook": str(self.playbook),
            "inventory": [str(p) for p in self.inventories],
            "envvars": self.envvars(os.environ if environ is None else environ),
            "extravars": dict(self.extravars),
            "limit": self.limit,
            "tags": ",".join(self.tags) or None,
            "skip_tags": ",".join(self.skip_tags) or None,
            "forks": self.forks,
            "verbosity": self.verbosity,
            "cmdline": self.cmdline(),
            # No env/ files (extra vars, environment) are written into the private data directory.
            "suppress_env_files": True,
            # Ansible's text output is not printed; results come from events.
            "quiet": True,
            # Facts live in memory for one run; ansible-runner's default would write them to disk.
            "fact_cache_type": "memory",
            "event_handler": event_handler,
            "cancel_callback": cancel_callback,
        }


class RunOptions(TypedDict, total=False):
    """Keyword options shared by :func:`run` and the use-case functions."""

    limit: str | None
    extravars: Mapping[str, Any] | None
    tags: str | Sequence[str] | None
    skip_tags: str | Sequence[str] | None
    check: bool
    diff: bool
    forks: int | None
    verbosity: int
    timeout: int | None
    module_keys: Mapping[str, str] | None
    on_event: EventCallback | None
    cancel: threading.Event | None


def run(
    playbook: str | os.PathLike[str],
    inventory: InventoryArg,
    *,
    limit: str | None = None,
    extravars: Mapping[str, Any] | None = None,
    tags: str | Sequence[str] | None = None,
    skip_tags: str | Sequence[str] | None = None,
    check: bool = False,
    diff: bool = False,
    forks: int | None = None,
    verbosity: int = 0,
    timeout: int | None = None,
    module_keys: Mapping[str, str] | None = None,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run a playbook and return its typed result.

    Args:
        playbook: A playbook of the collection by name (``site``, ``verify.yml``, ``gpufleet.nvidia.facts``) or
            a path to a playbook file.
        inventory: One inventory (path, or the name of a shipped inventory such as ``sim``) or a list of them.
        limit: Ansible's ``--limit`` pattern.
        extravars: Extra variables (``-e``); values keep their JSON types.
        tags: Only run tasks with these tags (a comma-separated string or a list).
        skip_tags: Skip tasks with these tags.
        check: Check mode (``--check``): report what would change, change nothing.
        diff: Diff mode (``--diff``).
        forks: Parallel hosts (default: ansible.cfg's ``forks``).
        verbosity: 0-6, Ansible's ``-v`` count (only visible in event data; output is quiet).
        timeout: Stop the run after this many seconds (status ``timeout``), the same way as ``cancel``.
        module_keys: Extra ``resolved action -> key`` pairs for :attr:`HostResult.module_data`, merged over
            :data:`~gpufleet.results.MODULE_DATA_KEYS`.
        on_event: Called with every :class:`~gpufleet.results.Event`, in the calling thread, as the run goes.
            If it raises, the run is canceled and a :class:`RunnerError` raised from that exception.
        cancel: Set this event (from another thread or a signal handler) to stop the run; ansible-runner polls it
            every 5 seconds, gpufleet then sends ansible-playbook SIGTERM (which stops its workers and the
            commands they run) and the result's status becomes ``canceled``.

    Raises:
        InputError: bad playbook, inventory or option (nothing was started).
        RunnerError: ansible-runner failed to start or run the playbook, or ``on_event`` raised.
    """
    spec = RunSpec.build(
        playbook,
        inventory,
        limit=limit,
        extravars=extravars,
        tags=tags,
        skip_tags=skip_tags,
        check=check,
        diff=diff,
        forks=forks,
        verbosity=verbosity,
        timeout=timeout,
        module_keys=module_keys,
    )
    return execute(spec, on_event=on_event, cancel=cancel)


def execute(
    spec: RunSpec,
    *,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run a prepared :class:`RunSpec` in a fresh private data directory, removed afterwards (also on error)."""
    collector = EventCollector(spec.module_keys, on_event=on_event, cancel=cancel, timeout=spec.timeout)
    private_data_dir = tempfile.mkdtemp(prefix="gpufleet-run-")
    try:
        kwargs = spec.to_kwargs(private_data_dir, event_handler=collector, cancel_callback=collector.should_cancel)
        try:
            runner = ansible_runner.run(**kwargs)
        except Exception as exc:  # ansible-runner raises bare exceptions for configuration and callback problems
            raise RunnerError(f"ansible-runner could not run {spec.playbook}: {exc}") from exc
        if collector.callback_error is not None:
            raise RunnerError(
                f"on_event callback raised {type(collector.callback_error).__name__}: {collector.callback_error}; "
                "the run was canceled"
            ) from collector.callback_error
        # Runner.stats re-reads the events ansible-runner kept; only ask when the playbook got as far as its recap.
        stats = runner.stats if collector.saw_stats else None
        return collector.build_result(
            playbook=str(spec.playbook),
            status=str(runner.status),
            rc=int(runner.rc) if runner.rc is not None else -1,
            stats=stats,
            check=spec.check,
        )
    finally:
        shutil.rmtree(private_data_dir, ignore_errors=True)


def provision(inventory: InventoryArg, **options: Unpack[RunOptions]) -> RunResult:
    """Provision GPU servers end to end (``playbooks/site.yml``)."""
    return run("site", inventory, **options)


def reconfigure_mig(inventory: InventoryArg, **options: Unpack[RunOptions]) -> RunResult:
    """Apply the inventory's MIG layouts (``playbooks/mig_reconfigure.yml``)."""
    return run("mig_reconfigure", inventory, **options)


def plan_mig(inventory: InventoryArg, **options: Unpack[RunOptions]) -> RunResult:
    """Compute the MIG changes that :func:`reconfigure_mig` would make, changing nothing.

    Runs ``mig_reconfigure.yml`` in check mode with ``gpufleet_mig_plan_only=true``; the plans are in each
    host's :attr:`~gpufleet.results.HostResult.mig`.
    """
    options["extravars"] = {**(options.get("extravars") or {}), MIG_PLAN_ONLY_VAR: True}
    options["check"] = True
    return run("mig_reconfigure", inventory, **options)


def verify(inventory: InventoryArg, **options: Unpack[RunOptions]) -> RunResult:
    """Check that drivers, tools, MIG layouts and GPU health are as configured (``playbooks/verify.yml``)."""
    return run("verify", inventory, **options)


def facts(inventory: InventoryArg, **options: Unpack[RunOptions]) -> RunResult:
    """Collect GPU facts from every host (``playbooks/facts.yml``); read them from each host's ``facts``."""
    return run("facts", inventory, **options)


def _inventory_list(inventory: InventoryArg) -> list[str | os.PathLike[str]]:
    if isinstance(inventory, str | os.PathLike):
        return [inventory]
    return list(inventory)


def _split_tags(tags: str | Sequence[str] | None) -> tuple[str, ...]:
    if tags is None:
        return ()
    items = [tags] if isinstance(tags, str) else list(tags)
    return tuple(t.strip() for item in items for t in item.split(",") if t.strip())
