"""The ``gpufleet`` command: run the collection's use cases against an inventory.

::

    gpufleet provision  -i INVENTORY [options]     playbooks/site.yml
    gpufleet mig plan   -i INVENTORY [options]     mig_reconfigure.yml, check mode, plan only
    gpufleet mig apply  -i INVENTORY [options]     mig_reconfigure.yml
    gpufleet verify     -i INVENTORY [options]     playbooks/verify.yml
    gpufleet facts      -i INVENTORY [options]     playbooks/facts.yml
    gpufleet run PLAYBOOK -i INVENTORY [options]   any playbook of the collection, or a playbook file

Exit codes: 0 ok, 2 a host failed, 3 a host was unreachable (wins over 2), 4 bad input, 5 runner error or canceled.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn, TextIO

from rich.console import Console

from gpufleet import __version__, api
from gpufleet._extravars import parse_extra_vars
from gpufleet._output import load_renderers, make_progress, renderers_for
from gpufleet.errors import GpufleetError, InputError
from gpufleet.junit import write_junit_xml
from gpufleet.results import ExitCode, RunResult

INVENTORY_ENV = "GPUFLEET_INVENTORY"

UseCase = Callable[..., RunResult]

#: command (as typed) -> API function.
USE_CASES: dict[str, UseCase] = {
    "provision": api.provision,
    "mig plan": api.plan_mig,
    "mig apply": api.reconfigure_mig,
    "verify": api.verify,
    "facts": api.facts,
}


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on bad usage, which is our "hosts failed" code: use 4 (bad input) instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: error: {message}\n")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        metavar="INVENTORY",
        help=f"inventory path or shipped inventory name (repeatable; default: ${INVENTORY_ENV}, split on ':')",
    )
    parser.add_argument("-l", "--limit", help="limit to hosts matching this Ansible pattern")
    parser.add_argument("-C", "--check", action="store_true", help="check mode: report changes, make none")
    parser.add_argument("-D", "--diff", action="store_true", help="show the differences of changed files and settings")
    parser.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="key=value words, @file.yml|@file.json, or an inline YAML/JSON mapping (repeatable; later wins)",
    )
    parser.add_argument("-t", "--tags", action="append", help="only run tasks with these tags (comma-separated)")
    parser.add_argument("--skip-tags", action="append", help="skip tasks with these tags (comma-separated)")
    parser.add_argument("-f", "--forks", type=int, help="hosts to run in parallel (default: ansible.cfg, 20)")
    parser.add_argument("--timeout", type=int, help="cancel the run after this many seconds")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="Ansible verbosity (in the events)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout (and nothing else there); progress goes to stderr",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no live progress")
    parser.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the GPU health checks as JUnit XML (one testcase per host and GPU check) to FILE",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the ``gpufleet`` argument parser."""
    parser = _Parser(prog="gpufleet", description="Provision and operate NVIDIA GPU servers with Ansible.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    for name, help_text in (
        ("provision", "install and configure everything (playbooks/site.yml)"),
        ("verify", "check drivers, tools, MIG layouts and GPU health (playbooks/verify.yml)"),
        ("facts", "collect GPU facts (playbooks/facts.yml)"),
    ):
        _add_run_options(commands.add_parser(name, help=help_text, description=help_text))

    mig = commands.add_parser("mig", help="MIG layouts: plan or apply", description="MIG layouts: plan or apply")
    mig_commands = mig.add_subparsers(dest="mig_command", required=True, metavar="ACTION", parser_class=_Parser)
    for name, help_text in (
        ("plan", "show the MIG changes the inventory asks for, change nothing"),
        ("apply", "apply the inventory's MIG layouts (playbooks/mig_reconfigure.yml)"),
    ):
        _add_run_options(mig_commands.add_parser(name, help=help_text, description=help_text))

    run = commands.add_parser("run", help="run any playbook of the collection, or a playbook file")
    run.add_argument("playbook", help="playbook name (site, gpufleet.nvidia.verify) or path to a playbook file")
    _add_run_options(run)
    return parser


def _command_name(args: argparse.Namespace) -> str:
    return f"mig {args.mig_command}" if args.command == "mig" else str(args.command)


def _inventories(args: argparse.Namespace, environ: dict[str, str] | os._Environ[str]) -> list[str]:
    if args.inventory:
        return list(args.inventory)
    from_env = [p for p in environ.get(INVENTORY_ENV, "").split(os.pathsep) if p]
    if not from_env:
        raise InputError(f"no inventory: pass -i/--inventory or set {INVENTORY_ENV}")
    return from_env


@contextmanager
def _cancel_on_signals(cancel: threading.Event, stderr: TextIO) -> Iterator[None]:
    """Turn SIGINT/SIGTERM into a clean cancel of the run (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if not cancel.is_set():
            stderr.write(f"gpufleet: {signal.Signals(signum).name}: canceling the run...\n")
        cancel.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _error(message: str, code: ExitCode, *, as_json: bool, stdout: TextIO, stderr: TextIO) -> int:
    stderr.write(f"gpufleet: error: {message}\n")
    if as_json:
        json.dump({"error": message, "exit_code": int(code)}, stdout)
        stdout.write("\n")
    return int(code)


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the ``gpufleet`` command; returns the exit code (see the module docstring and ``docs/api.md``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = build_parser().parse_args(argv)
    command = _command_name(args)
    as_json: bool = args.json

    options: dict[str, Any] = {
        "limit": args.limit,
        "tags": args.tags,
        "skip_tags": args.skip_tags,
        "check": args.check,
        "diff": args.diff,
        "forks": args.forks,
        "verbosity": min(args.verbose, 6),
        "timeout": args.timeout,
    }
    cancel = threading.Event()
    progress = None
    try:
        inventories = _inventories(args, os.environ)
        options["extravars"] = parse_extra_vars(args.extra_vars)
        progress = make_progress(err if as_json else out, quiet=args.quiet)
        with _cancel_on_signals(cancel, err):
            if command == "run":
                result = api.run(args.playbook, inventories, on_event=progress, cancel=cancel, **options)
            else:
                result = USE_CASES[command](inventories, on_event=progress, cancel=cancel, **options)
    except InputError as exc:
        return _error(str(exc), ExitCode.BAD_INPUT, as_json=as_json, stdout=out, stderr=err)
    except GpufleetError as exc:
        return _error(str(exc), ExitCode.RUNNER_ERROR, as_json=as_json, stdout=out, stderr=err)
    finally:
        if progress is not None:
            progress.close()

    if args.junit:
        write_junit_xml(result, args.junit)
    if as_json:
        json.dump(result.to_dict(), out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        load_renderers()
        # A pipe gets wide lines (no terminal width to honour) instead of rich's 80-column default.
        console = Console(file=out, width=None if out.isatty() else 160)
        for render in renderers_for(command):
            render(result, console)
    return int(result.exit_code)


if __name__ == "__main__":  # pragma: no cover - python -m gpufleet.cli
    sys.exit(main())
