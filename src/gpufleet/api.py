"""The gpufleet Python API: run the collection's playbooks through ansible-runner and get typed results.

The layer is thin on purpose. :class:`RunSpec` is the one object that builds every argument given to
``ansible_runner.run``; :func:`run` gives it a fresh private data directory, feeds ansible-runner's events to
:class:`~gpufleet._collect.EventCollector` (and to the caller's ``on_event``), and builds a
:class:`~gpufleet.results.RunResult` from ``Runner.status``, ``Runner.rc``, ``Runner.stats`` and those events.
Host results are never read from Ansible's text output; the one exception is :attr:`RunResult.error`, Ansible's
own message when it stops outside host tasks (inventory, YAML, vault, syntax errors), for which there is no event.

Before ansible-playbook starts, :mod:`gpufleet._preflight` resolves the inventory, the plays' host patterns and
the limit with Ansible's InventoryManager: an inventory that does not parse, a limit that is empty, malformed or
matches nothing, or plays that match no host give a ``not_started`` result with the reason, and nothing runs.

Example::

    from gpufleet import api

    result = api.verify("inventories/sim", limit="gpu-a100-01")
    for host in result.hosts.values():
        print(host.name, host.status, host.health)
    raise SystemExit(result.exit_code)
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack

import ansible_runner

from gpufleet import _paths
from gpufleet._collect import EventCallback, EventCollector, plain_text
from gpufleet.errors import InputError, RunnerError
from gpufleet.results import MODULE_DATA_KEYS, RunResult

__all__ = [
    "MIG_PLAN_ONLY_VAR",
    "AnsibleOptions",
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
class AnsibleOptions:
    """ansible-playbook options passed through as they are (paths and names only, never a secret).

    Attributes:
        user: ``-u``/``--user``, the remote user.
        become: ``-b``/``--become``.
        become_password: The become password (``-K``): answered to ansible-playbook's prompt through
            ansible-runner's ``passwords``, never on a command line or in a file.
        private_key: ``--private-key`` file.
        vault_ids: ``--vault-id`` values (``label@source``).
        vault_password_files: ``--vault-password-file`` files.
        vault_password: The vault password (``--ask-vault-pass``), answered to the prompt like ``become_password``.
        list_hosts: ``--list-hosts``: print the matched hosts, run nothing.
    """

    user: str | None = None
    become: bool = False
    become_password: str | None = field(default=None, repr=False)
    private_key: str | None = None
    vault_ids: tuple[str, ...] = ()
    vault_password_files: tuple[str, ...] = ()
    vault_password: str | None = field(default=None, repr=False)
    list_hosts: bool = False

    def argv(self) -> list[str]:
        """The ansible-playbook options, in order."""
        args: list[str] = []
        if self.user:
            args += ["--user", self.user]
        if self.become:
            args.append("--become")
        if self.become_password is not None:
            args.append("--ask-become-pass")
        if self.private_key:
            args += ["--private-key", self.private_key]
        for vault_id in self.vault_ids:
            args += ["--vault-id", vault_id]
        for path in self.vault_password_files:
            args += ["--vault-password-file", path]
        if self.vault_password is not None:
            args.append("--ask-vault-pass")
        if self.list_hosts:
            args.append("--list-hosts")
        return args

    def passwords(self) -> dict[str, str]:
        """ansible-runner's ``passwords``: prompt regex -> answer."""
        answers: dict[str, str] = {}
        if self.become_password is not None:
            answers[r"^BECOME password.*:\s*?$"] = self.become_password
        if self.vault_password is not None:
            answers[r"^Vault password.*:\s*?$"] = self.vault_password
        return answers


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
    ansible: AnsibleOptions = field(default_factory=AnsibleOptions)
    artifact_dir: Path | None = None
    cwd: Path = field(default_factory=Path.cwd)

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
        ansible: AnsibleOptions | None = None,
        artifact_dir: str | os.PathLike[str] | None = None,
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
            limit=limit,
            extravars=dict(extravars or {}),
            tags=_split_tags(tags),
            skip_tags=_split_tags(skip_tags),
            check=check,
            diff=diff,
            forks=forks,
            verbosity=verbosity,
            timeout=timeout,
            module_keys={**MODULE_DATA_KEYS, **(module_keys or {})},
            ansible=ansible or AnsibleOptions(),
            artifact_dir=Path(artifact_dir).expanduser().resolve() if artifact_dir is not None else None,
        )

    def config_file(self, environ: Mapping[str, str]) -> Path:
        """The ansible.cfg the run uses: ``ANSIBLE_CONFIG``, else ``./ansible.cfg`` of the working directory, else
        the collection's own (see docs/api.md, "Ansible configuration")."""
        if environ.get("ANSIBLE_CONFIG"):
            return Path(environ["ANSIBLE_CONFIG"]).expanduser()
        local = self.cwd / "ansible.cfg"
        if local.is_file():
            return local
        return self.ansible_cfg

    def envvars(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Environment for ansible-playbook on top of the caller's ``environ``.

        * ``ANSIBLE_COLLECTIONS_PATH``: this collection's directory first, then the caller's own value (or
          Ansible's default locations), so that ``gpufleet.nvidia.*`` always means this copy.
        * ``ANSIBLE_CONFIG``: :meth:`config_file` (the run's working directory is the private data directory,
          where Ansible would find no ansible.cfg of its own).
        * ``ANSIBLE_HOST_KEY_CHECKING``: the caller's value when set, else the ``host_key_checking`` of that
          ansible.cfg, else ``True``; ansible-runner would otherwise switch host key checking off.
        * ``ANSIBLE_NOCOLOR``: ``True``, so that Ansible's error messages reach :attr:`RunResult.error` as text.
        * ``PATH``: the directory of this Python's scripts first, so a venv that is not activated still runs its
          own ``ansible-playbook`` (not another installation's, or none at all: rc 127).
        """
        tail = environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(_DEFAULT_COLLECTIONS_PATHS)
        config = self.config_file(environ)
        return {
            "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(self.collections_dir), tail]),
            "ANSIBLE_CONFIG": str(config),
            "ANSIBLE_HOST_KEY_CHECKING": environ.get("ANSIBLE_HOST_KEY_CHECKING") or _host_key_checking(config),
            "ANSIBLE_NOCOLOR": "True",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), environ.get("PATH", os.defpath)]),
        }

    def cmdline(self) -> str | None:
        """ansible-playbook options that ansible-runner has no argument for (check, diff, :class:`AnsibleOptions`)."""
        options = [flag for flag, on in (("--check", self.check), ("--diff", self.diff)) if on]
        options += self.ansible.argv()
        return " ".join(shlex.quote(o) for o in options) or None

    def write_extravars(self, private_data_dir: str | os.PathLike[str]) -> None:
        """Write the extra vars to ``env/extravars`` (mode 0600) of the private data directory.

        ansible-runner passes that file as ``-e @<private_data_dir>/env/extravars``: the values (passwords
        included) are never on a command line, where any local user could read them in ``/proc/<pid>/cmdline``.
        """
        if not self.extravars:
            return
        env = Path(private_data_dir) / "env"
        env.mkdir(mode=0o700, exist_ok=True)
        path = env / "extravars"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(dict(self.extravars), handle, default=str)

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
            "limit": self.limit,
            "tags": ",".join(self.tags) or None,
            "skip_tags": ",".join(self.skip_tags) or None,
            "forks": self.forks,
            "verbosity": self.verbosity,
            "cmdline": self.cmdline(),
            # ansible-runner writes no env/ files itself; the extra vars are in env/extravars (write_extravars).
            "suppress_env_files": True,
            "passwords": self.ansible.passwords(),
            "artifact_dir": str(self.artifact_dir) if self.artifact_dir is not None else None,
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
    ansible: AnsibleOptions | None
    artifact_dir: str | os.PathLike[str] | None
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
    ansible: AnsibleOptions | None = None,
    artifact_dir: str | os.PathLike[str] | None = None,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run a playbook and return its typed result.

    Args:
        playbook: A playbook of the collection by name (``site``, ``verify.yml``, ``gpufleet.nvidia.facts``) or
            a path to a playbook file.
        inventory: One inventory (path, or the name of a shipped inventory such as ``sim``) or a list of them.
        limit: Ansible's ``--limit`` pattern; an empty or malformed one, or one that matches no host the plays
            target, gives a ``not_started`` result (Ansible itself would run on every host).
        extravars: Extra variables (``-e``); values keep their JSON types. Written to ansible-runner's private
            data directory (mode 0600), never to a command line; :func:`gpufleet.extravars.load_extra_vars` parses
            ``-e`` arguments the way ansible-playbook does.
        tags: Only run tasks with these tags (a comma-separated string or a list).
        skip_tags: Skip tasks with these tags.
        check: Check mode (``--check``): report what would change, change nothing.
        diff: Diff mode (``--diff``).
        forks: Parallel hosts (default: ansible.cfg's ``forks``).
        verbosity: 0-6, Ansible's ``-v`` count (the text is in each event's ``raw["stdout"]``).
        timeout: Stop the run after this many seconds (status ``timeout``), the same way as ``cancel``.
        module_keys: Extra ``resolved action -> key`` pairs for :attr:`HostResult.module_data`, merged over
            :data:`~gpufleet.results.MODULE_DATA_KEYS`.
        ansible: ansible-playbook options passed through (user, become, vault, private key, ``--list-hosts``).
        artifact_dir: Keep ansible-runner's artifacts (``<dir>/<ident>/job_events/*.json``, ``stdout``,
            ``status``, ``rc``) here; by default they are removed with the private data directory.
        on_event: Called with every :class:`~gpufleet.results.Event`, in the calling thread, as the run goes.
            If it raises, the run is canceled and a :class:`RunnerError` raised from that exception.
        cancel: Set this event (from another thread or a signal handler) to stop the run; ansible-runner polls it
            every 5 seconds, gpufleet then sends ansible-playbook SIGTERM (which stops its workers and the
            commands they run) and the result's status becomes ``canceled``.

    Raises:
        InputError: bad playbook, inventory path or option (nothing was started).
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
        ansible=ansible,
        artifact_dir=artifact_dir,
    )
    return execute(spec, on_event=on_event, cancel=cancel)


def execute(
    spec: RunSpec,
    *,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run a prepared :class:`RunSpec` in a fresh private data directory, removed afterwards (also on error).

    :func:`preflight` comes first; when it finds a reason not to run, the result is ``not_started``.
    """
    started = _now()
    refusal = preflight(spec)
    if refusal is not None:
        return RunResult(
            playbook=str(spec.playbook),
            status="not_started",
            rc=-1,
            check=spec.check,
            error=refusal,
            inventory=[str(p) for p in spec.inventories],
            limit=spec.limit,
            started_at=started,
            ended_at=_now(),
        )
    collector = EventCollector(spec.module_keys, on_event=on_event, cancel=cancel, timeout=spec.timeout)
    private_data_dir = tempfile.mkdtemp(prefix="gpufleet-run-")
    try:
        spec.write_extravars(private_data_dir)
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
        result = collector.build_result(
            playbook=str(spec.playbook),
            status=str(runner.status),
            rc=int(runner.rc) if runner.rc is not None else -1,
            stats=stats,
            check=spec.check,
        )
    finally:
        shutil.rmtree(private_data_dir, ignore_errors=True)
    result.inventory = [str(p) for p in spec.inventories]
    result.limit = spec.limit
    result.started_at = started
    result.ended_at = _now()
    return result


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_limit(limit: str | None) -> str | None:
    """gpufleet's sentence for a ``--limit`` that Ansible would not refuse but must not run, or None when fine.

    ansible-playbook treats an empty limit as no limit and splits a malformed pattern into pieces, so both can
    select every host.
    """
    if limit is None:
        return None
    if not limit.strip():
        return (
            "the limit is empty, and Ansible would run on every host: give a host, group or pattern "
            "(-l gpu-a100-01, -l 'gpu_nodes:!gpu-h100-*'), or leave -l out to target every host"
        )
    terms = [t for piece in limit.split(",") for t in ([piece] if "~" in piece else piece.split(":"))]
    for term in (t.strip().lstrip("!&") for t in terms):
        if term.startswith("~"):
            try:
                re.compile(term[1:])
            except re.error as exc:
                return (
                    f"the limit {limit!r} is not a valid pattern: the regular expression {term[1:]!r} is malformed "
                    f"({exc}); fix the expression after '~' or use a host or group name"
                )
        elif term.count("[") != term.count("]") or term.count("(") != term.count(")"):
            return (
                f"the limit {limit!r} is not a valid pattern: {term!r} has unbalanced brackets; use a host or group "
                "name, a range such as gpu[01:04], or '~REGEX'"
            )
    return None


def preflight(spec: RunSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """Resolve the inventory, the plays' hosts and the limit with Ansible's InventoryManager (in a child process,
    with the run's environment); return the reason not to run, or None.

    Refuses: an empty or malformed limit, an inventory source that does not parse (Ansible's messages included),
    an inventory with no host, plays that match no host, a limit that matches none of them.
    """
    problem = check_limit(spec.limit)
    if problem is not None:
        return problem
    env = {**(os.environ if environ is None else environ)}
    env.update(spec.envvars(env))
    request = {
        "sources": [str(p) for p in spec.inventories],
        "limit": spec.limit,
        "playbook": str(spec.playbook),
        "extravars": json.loads(json.dumps(dict(spec.extravars), default=str)),
    }
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("_preflight.py"))],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            cwd=spec.cwd,
            check=False,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunnerError(f"could not resolve the inventory with Ansible: {exc}") from exc
    messages = plain_text(proc.stderr).strip()
    if proc.returncode != 0:
        return f"Ansible could not resolve the inventory {_sources(spec)}:\n{messages}"
    answer = json.loads(proc.stdout)
    if answer["unparsed"]:
        details = "\n".join(
            line for line in messages.splitlines() if "Could not match supplied host pattern" not in line
        )
        return (
            f"the inventory {', '.join(answer['unparsed'])} could not be parsed by any inventory plugin; fix the "
            f"file (Ansible's messages follow) or pass the right path with -i:\n{details}".rstrip()
        )
    patterns = answer["patterns"]
    if patterns and all(p in _LOCAL_PATTERNS for p in patterns):
        return None  # a playbook for the controller itself (implicit localhost): no inventory host needed
    if not answer["inventory_hosts"]:
        return (
            f"the inventory {_sources(spec)} has no hosts; add your GPU servers to it (in the group gpu_nodes) "
            "or pass the right inventory with -i"
        )
    if patterns is None:
        return None  # the playbook could not be read here: ansible-playbook reports why, in RunResult.error
    wanted = ", ".join(patterns) or "(none)"
    if not answer["play_hosts"]:
        return (
            f"no host of the inventory {_sources(spec)} matches the playbook's hosts ({wanted}); put your GPU "
            "servers in the group gpu_nodes, or choose the hosts with the playbook's variable "
            "(-e gpufleet_hosts=GROUP and the like, see docs/api.md)"
        )
    if answer["limit_error"]:
        return f"the limit {spec.limit!r} is not a valid pattern: {answer['limit_error']}"
    if not answer["matched"]:
        return (
            f"the limit {spec.limit!r} matches none of the {len(answer['play_hosts'])} host(s) the playbook "
            f"targets ({wanted}); check the host or group name (gpufleet run ... --list-hosts shows them)"
        )
    return None


#: Play patterns that Ansible answers with the implicit localhost when the inventory does not list it.
_LOCAL_PATTERNS = frozenset({"localhost", "127.0.0.1", "::1"})


def _sources(spec: RunSpec) -> str:
    return ", ".join(str(p) for p in spec.inventories)


def _host_key_checking(config: Path) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(config, encoding="utf-8")
        value = parser.getboolean("defaults", "host_key_checking", fallback=True)
    except (configparser.Error, ValueError, OSError):
        value = True
    return "True" if value else "False"


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
