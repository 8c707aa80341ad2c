"""The ``gpufleet`` command: run the collection's use cases against an inventory.

::

    gpufleet provision  -i INVENTORY [options]     playbooks/site.yml
    gpufleet mig plan   -i INVENTORY [options]     mig_reconfigure.yml, check mode, plan only
    gpufleet mig plan   --offline LAYOUT_FILE (--model M | --facts FILE)    no hosts
    gpufleet mig apply  -i INVENTORY [--yes]       plan, confirm, then mig_reconfigure.yml
    gpufleet mig validate LAYOUT_FILE [--model M]  no hosts
    gpufleet mig import MIG_PARTED_FILE / gpufleet mig export LAYOUT_FILE       no hosts
    gpufleet verify     -i INVENTORY [options]     playbooks/verify.yml
    gpufleet facts      -i INVENTORY [options]     playbooks/facts.yml
    gpufleet report RESULT_JSON [--html FILE]      fleet view of a saved `verify --json` (no hosts)
    gpufleet run PLAYBOOK -i INVENTORY [options]   any playbook of the collection, or a playbook file

Exit codes: 0 ok, 2 a host failed, 3 a host was unreachable (wins over 2), 4 bad input (also: inventory that does
not parse, no host matched, bad limit, refused confirmation), 5 runner error or canceled, 6 Ansible error outside
host tasks (YAML, vault, syntax). ``verify`` raises the code to its health verdict: 1 when the worst level is
WARNING, 2 when it is UNKNOWN or CRITICAL (docs/health.md).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn, TextIO

import yaml
from rich.console import Console

from gpufleet import __version__, api, mig
from gpufleet._extravars import parse_extra_vars
from gpufleet._output import load_renderers, make_progress, renderers_for
from gpufleet.errors import GpufleetError, InputError
from gpufleet.fleet_report import fleet_from_result, load_result, write_html
from gpufleet.health_verdict import verify_exit_code
from gpufleet.junit import write_junit_xml
from gpufleet.renderers.fleet_text import render_fleet_text
from gpufleet.results import SCHEMA_VERSION, ExitCode, RunResult

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

#: Commands that need no inventory and run no playbook.
OFFLINE_COMMANDS = frozenset({"mig validate", "mig import", "mig export"})


EXIT_CODES = """exit codes:
  0  ok
  2  a host failed
  3  a host was unreachable (wins over 2)
  4  bad input: options, inventory that does not parse, no host matched, bad --limit, refused confirmation,
     invalid MIG layout (the reason is printed, and in --json's "error")
  5  runner error, canceled or timed out
  6  Ansible stopped outside host tasks: YAML, vault, syntax errors (Ansible's message is printed and in "error")
"""

EXAMPLES: dict[str, str] = {
    "gpufleet": "gpufleet verify -i inventories/sim\n  gpufleet mig validate layouts.yml --model A100-SXM4-80GB\n"
    "  gpufleet mig apply -i hosts.yml -l gpu-a100-01 --yes",
    "provision": "gpufleet provision -i hosts.yml -u admin -b -K\n"
    "  gpufleet provision -i hosts.yml -e @secrets.yml --vault-password-file ~/.vault_pass --json > run.json",
    "verify": "gpufleet verify -i hosts.yml --junit health.xml\n"
    "  gpufleet verify -i hosts.yml -l 'gpu_nodes:!gpu-h100-*' --json",
    "facts": "gpufleet facts -i hosts.yml --json > facts.json\n  gpufleet facts -i hosts.yml -l gpu-a100-01",
    "mig plan": "gpufleet mig plan -i hosts.yml\n"
    "  gpufleet mig plan --offline layouts.yml --model A100-SXM4-80GB --gpus 8\n"
    "  gpufleet mig plan --offline layouts.yml --facts facts.json --host gpu-a100-01",
    "mig apply": "gpufleet mig apply -i hosts.yml            (shows the plan, asks at the terminal)\n"
    "  gpufleet mig apply -i hosts.yml --yes      (pipelines: no question)",
    "mig validate": "gpufleet mig validate layouts.yml\n"
    "  gpufleet mig validate layouts.yml --model H100-SXM5-80GB --gpus 8",
    "mig import": "gpufleet mig import config.yaml > group_vars/gpu_nodes/mig.yml\n"
    "  gpufleet mig import config.yaml --config all-1g.10gb",
    "mig export": "gpufleet mig export group_vars/gpu_nodes/mig.yml > config.yaml\n"
    "  gpufleet mig export layouts.yml --layout balanced",
    "report": "gpufleet verify -i hosts.yml --json > verify.json; gpufleet report verify.json --html fleet.html\n"
    "  gpufleet verify -i hosts.yml --html fleet.html      (run and write the page at once)",
    "run": "gpufleet run driver_upgrade -i hosts.yml -l gpu-a100-01\n"
    "  gpufleet run ./my_play.yml -i hosts.yml --list-hosts",
}


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on bad usage, which is our "hosts failed" code: use 4 (bad input) instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: error: {message}\n")


def _epilog(command: str) -> str:
    return f"examples:\n  {EXAMPLES[command]}\n\n{EXIT_CODES}"


def _sub(commands: Any, name: str, key: str, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=_epilog(key),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _add_run_options(parser: argparse.ArgumentParser, *, check: bool = True, tags: bool = True) -> None:
    """Options of the commands that run a playbook; ``check``/``tags`` only where they make sense."""
    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        metavar="INVENTORY",
        help=f"inventory path or shipped inventory name (repeatable; default: ${INVENTORY_ENV}, split on ':')",
    )
    parser.add_argument("-l", "--limit", help="limit to hosts matching this Ansible pattern")
    if check:
        parser.add_argument("-C", "--check", action="store_true", help="check mode: report changes, make none")
        parser.add_argument("-D", "--diff", action="store_true", help="show the differences of changed files")
    parser.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="key=value words, @file.yml (vaulted files too) or an inline YAML/JSON mapping (repeatable; later "
        "wins); parsed by Ansible's loader and handed over in a 0600 file, never on a command line",
    )
    if tags:
        parser.add_argument("-t", "--tags", action="append", help="only run tasks with these tags (comma-separated)")
        parser.add_argument("--skip-tags", action="append", help="skip tasks with these tags (comma-separated)")
    parser.add_argument("-f", "--forks", type=int, help="hosts to run in parallel (default: ansible.cfg)")
    parser.add_argument("--timeout", type=int, help="cancel the run after this many seconds")
    ansible = parser.add_argument_group("Ansible options (passed to ansible-playbook)")
    ansible.add_argument("-u", "--user", help="connect as this user")
    ansible.add_argument("-b", "--become", action="store_true", help="run operations with become")
    ansible.add_argument("-K", "--ask-become-pass", action="store_true", help="ask for the become password")
    ansible.add_argument("--private-key", metavar="FILE", help="SSH private key file")
    ansible.add_argument("--vault-id", action="append", default=[], help="vault identity (label@source)")
    ansible.add_argument(
        "--vault-password-file", action="append", default=[], metavar="FILE", help="vault password file"
    )
    ansible.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the vault password")
    ansible.add_argument("--list-hosts", action="store_true", help="list the matched hosts, run nothing")
    ansible.add_argument(
        "-v", "--verbose", action="count", default=0, help="Ansible verbosity; shows Ansible's own output"
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout (and nothing else there); progress goes to stderr",
    )
    out.add_argument("-q", "--quiet", action="store_true", help="no live progress")
    out.add_argument(
        "--artifact-dir",
        metavar="DIR",
        help="keep ansible-runner's artifacts (job events, stdout, rc, status) in DIR/<run id>/",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the ``gpufleet`` argument parser."""
    parser = _Parser(
        prog="gpufleet",
        description="Provision and operate NVIDIA GPU servers with Ansible.",
        epilog=_epilog("gpufleet"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    provision = _sub(commands, "provision", "provision", "install and configure everything (playbooks/site.yml)")
    _add_run_options(provision)
    verify = _sub(
        commands, "verify", "verify", "check drivers, tools, MIG layouts and GPU health (playbooks/verify.yml)"
    )
    _add_run_options(verify, check=False, tags=False)
    verify.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the GPU health checks as JUnit XML (one testcase per host and GPU check) to FILE",
    )
    verify.add_argument(
        "--html",
        metavar="FILE",
        help="also write the fleet report (one self-contained HTML page: hosts, GPUs, MIG slices, verdicts) to FILE",
    )
    report = _sub(
        commands,
        "report",
        "report",
        "show a saved `gpufleet verify --json` result as a fleet: a line per host, a cell per GPU (--html: a page)",
    )
    report.add_argument("result", metavar="RESULT_JSON", help="the file `gpufleet verify --json` wrote (- for stdin)")
    report.add_argument("--html", metavar="FILE", help="write the self-contained HTML fleet report to FILE (- stdout)")
    _add_run_options(
        _sub(commands, "facts", "facts", "collect GPU facts (playbooks/facts.yml)"), check=False, tags=False
    )

    mig = commands.add_parser(
        "mig",
        help="MIG layouts: validate, plan, apply, import, export",
        description="MIG layouts: validate, plan, apply, import, export",
        epilog=_epilog("gpufleet"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mig_commands = mig.add_subparsers(dest="mig_command", required=True, metavar="ACTION", parser_class=_Parser)
    plan = _sub(
        mig_commands,
        "plan",
        "mig plan",
        "show the MIG changes the inventory (or, --offline, a layout file) asks for; change nothing",
    )
    _add_run_options(plan, check=False, tags=False)
    offline = plan.add_argument_group("offline planning (no hosts)")
    offline.add_argument("--offline", metavar="LAYOUT_FILE", help="plan this layout file without hosts")
    offline.add_argument("--model", help="against GPUs of this model, MIG off and empty")
    offline.add_argument("--facts", metavar="FILE", help="against the GPUs of a saved `gpufleet facts --json`")
    offline.add_argument("--host", help="the host of the facts file (when it has several)")
    offline.add_argument("--gpus", type=int, default=8, help="GPUs per host with --model (default 8)")
    offline.add_argument("--layout", help="the layout of the file (default: nvidia_mig_layout, or the only one)")
    apply = _sub(
        mig_commands, "apply", "mig apply", "plan, show the plan, confirm, then apply the inventory's MIG layouts"
    )
    _add_run_options(apply, tags=False)
    apply.add_argument("-y", "--yes", action="store_true", help="apply without asking (for pipelines)")
    validate = _sub(
        mig_commands, "validate", "mig validate", "check a layout file offline, with the validator's messages"
    )
    validate.add_argument("layout_file", metavar="LAYOUT_FILE")
    validate.add_argument("--model", help="also validate against GPUs of this model")
    validate.add_argument("--gpus", type=int, default=8, help="GPUs of that model (default 8)")
    validate.add_argument("--layout", help="only this layout of the file")
    validate.add_argument("--json", action="store_true", help="print the result as JSON")
    imp = _sub(mig_commands, "import", "mig import", "turn an NVIDIA mig-parted config into gpufleet layouts (YAML)")
    imp.add_argument("mig_parted_file", metavar="MIG_PARTED_FILE")
    imp.add_argument("--config", help="only this mig-config label")
    imp.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    exp = _sub(mig_commands, "export", "mig export", "write gpufleet layouts as an NVIDIA mig-parted config (YAML)")
    exp.add_argument("layout_file", metavar="LAYOUT_FILE")
    exp.add_argument("--layout", help="only this layout")
    exp.add_argument("--allow-lossy", action="store_true", help="drop what mig-parted cannot express")
    exp.add_argument("--json", action="store_true", help="print JSON instead of YAML")

    run = _sub(commands, "run", "run", "run any playbook of the collection, or a playbook file")
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
        json.dump({"schema_version": SCHEMA_VERSION, "error": message, "exit_code": int(code)}, stdout)
        stdout.write("\n")
    return int(code)


def _dump(data: Any, *, as_json: bool, out: TextIO) -> None:
    if as_json:
        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        yaml.safe_dump(data, out, sort_keys=False, default_flow_style=False)


def _offline(args: argparse.Namespace, command: str, out: TextIO) -> int:
    """The MIG commands that need no host."""
    as_json: bool = args.json
    if command == "mig validate":
        checked = mig.validate_layout(args.layout_file, model=args.model, gpus=args.gpus, layout=args.layout)
        if as_json:
            _dump({"schema_version": SCHEMA_VERSION, "valid": True, **checked}, as_json=True, out=out)
        else:
            against = (
                f" against {args.gpus} x {args.model}" if args.model else " (structure; --model also checks a GPU)"
            )
            for name in checked["layouts"]:
                out.write(f"layout {name}: valid{against}\n")
    elif command == "mig plan":
        plan = mig.plan_offline(
            args.offline, model=args.model, facts=args.facts, host=args.host, gpus=args.gpus, layout=args.layout
        )
        if as_json:
            _dump({"schema_version": SCHEMA_VERSION, **plan}, as_json=True, out=out)
        else:
            out.write(f"layout {plan['layout']}:\n{plan['summary']}\n")
    elif command == "mig import":
        _dump(mig.import_mig_parted(args.mig_parted_file, config=args.config), as_json=as_json, out=out)
    else:
        _dump(
            mig.export_mig_parted(args.layout_file, layout=args.layout, allow_lossy=args.allow_lossy),
            as_json=as_json,
            out=out,
        )
    return int(ExitCode.OK)


def _report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``gpufleet report``: the fleet view of a saved verify result; 0 when shown (and written), 4 on bad input."""
    try:
        doc = load_result(args.result)
        fleet = write_html(doc, args.html) if args.html else fleet_from_result(doc)
    except GpufleetError as exc:
        return _error(str(exc), ExitCode.BAD_INPUT, as_json=False, stdout=out, stderr=err)
    if args.html == "-":
        return int(ExitCode.OK)
    # a pipe gets each host's line and each finding whole (one line, for grep), whatever its length
    render_fleet_text(fleet, Console(file=out, width=None if out.isatty() else 160, soft_wrap=not out.isatty()))
    if args.html:
        out.write(f"wrote {args.html}\n")
    return int(ExitCode.OK)


def _ansible_options(args: argparse.Namespace, ask: Callable[[str], str]) -> api.AnsibleOptions:
    return api.AnsibleOptions(
        user=args.user,
        become=args.become,
        become_password=ask("BECOME password: ") if args.ask_become_pass else None,
        private_key=args.private_key,
        vault_ids=tuple(args.vault_id),
        vault_password_files=tuple(args.vault_password_file),
        vault_password=ask("Vault password: ") if args.ask_vault_pass else None,
        list_hosts=args.list_hosts,
    )


def _confirm(stdin: TextIO, err: TextIO, hosts: int) -> bool:
    err.write(f"Apply this MIG plan to {hosts} host(s)? Running GPU work on changed GPUs stops. [y/N] ")
    err.flush()
    return stdin.readline().strip().lower() in ("y", "yes")


def _show(result: RunResult, command: str, out: TextIO, err: TextIO, *, as_json: bool) -> None:
    if result.error:
        err.write(f"gpufleet: error: {result.error}\n")
    if as_json:
        json.dump(result.to_dict(), out, indent=2, sort_keys=False)
        out.write("\n")
        return
    load_renderers()
    # A pipe gets wide lines (no terminal width to honour) instead of rich's 80-column default.
    console = Console(file=out, width=None if out.isatty() else 160)
    if result.hosts:
        for render in renderers_for(command):
            render(result, console)
    else:
        console.print(f"result: {result.status} (exit {int(result.exit_code)}), no host ran")


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run the ``gpufleet`` command; returns the exit code (see the module docstring and ``docs/api.md``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    inp = stdin or sys.stdin
    args = build_parser().parse_args(argv)
    command = _command_name(args)
    if command == "report":
        return _report(args, out, err)
    as_json: bool = args.json

    if command in OFFLINE_COMMANDS or (command == "mig plan" and args.offline):
        try:
            return _offline(args, command, out)
        except mig.MigLayoutError as exc:
            return _error(
                "invalid MIG layout:\n" + str(exc), ExitCode.BAD_INPUT, as_json=as_json, stdout=out, stderr=err
            )
        except GpufleetError as exc:
            return _error(str(exc), ExitCode.BAD_INPUT, as_json=as_json, stdout=out, stderr=err)

    if command == "mig apply" and not args.yes and not (inp.isatty() and err.isatty()):
        return _error(
            "refusing to apply MIG layouts without a confirmation: there is no terminal to ask at; review "
            "`gpufleet mig plan` and pass --yes to apply",
            ExitCode.BAD_INPUT,
            as_json=as_json,
            stdout=out,
            stderr=err,
        )

    options: dict[str, Any] = {
        "limit": args.limit,
        "tags": getattr(args, "tags", None),
        "skip_tags": getattr(args, "skip_tags", None),
        "check": getattr(args, "check", False),
        "diff": getattr(args, "diff", False),
        "forks": args.forks,
        "verbosity": min(args.verbose, 6),
        "timeout": args.timeout,
        "artifact_dir": args.artifact_dir,
    }
    cancel = threading.Event()
    progress = None
    html = getattr(args, "html", None)
    if html is not None and (html == "-" or not os.path.isdir(os.path.dirname(os.path.abspath(html)))):
        return _error(
            f"--html {html}: not a file in an existing directory; name the page's file, e.g. fleet.html",
            ExitCode.BAD_INPUT,
            as_json=as_json,
            stdout=out,
            stderr=err,
        )
    junit = getattr(args, "junit", None)
    if junit is not None and (os.path.isdir(junit) or not os.path.isdir(os.path.dirname(os.path.abspath(junit)))):
        return _error(
            f"--junit {junit}: not a file in an existing directory; name the report's file, e.g. health.xml",
            ExitCode.BAD_INPUT,
            as_json=as_json,
            stdout=out,
            stderr=err,
        )
    try:
        inventories = _inventories(args, os.environ)
        ansible = _ansible_options(args, getpass.getpass)
        options["ansible"] = ansible
        options["extravars"] = parse_extra_vars(
            args.extra_vars,
            vault_ids=ansible.vault_ids,
            vault_password_files=ansible.vault_password_files,
            vault_password=ansible.vault_password,
        )
        show_text = args.verbose > 0 or args.list_hosts
        progress = make_progress(err if as_json else out, quiet=args.quiet, ansible_text=show_text)
        with _cancel_on_signals(cancel, err):
            if command == "run":
                result = api.run(args.playbook, inventories, on_event=progress, cancel=cancel, **options)
            elif command == "mig apply":
                plan_options = {**options, "check": False, "diff": False}
                plan = USE_CASES["mig plan"](inventories, on_event=progress, cancel=cancel, **plan_options)
                if progress is not None:
                    progress.close()
                    progress = None
                _show(plan, "mig plan", err if as_json else out, err, as_json=False)
                if not plan.ok:
                    err.write("gpufleet: the plan failed; nothing was applied\n")
                    return int(plan.exit_code)
                planned = sum(1 for host in plan.hosts.values() if host.mig is not None)
                if not args.yes and not _confirm(inp, err, planned):
                    return _error(
                        "not confirmed; nothing was applied",
                        ExitCode.BAD_INPUT,
                        as_json=as_json,
                        stdout=out,
                        stderr=err,
                    )
                progress = make_progress(err if as_json else out, quiet=args.quiet, ansible_text=show_text)
                result = USE_CASES["mig apply"](inventories, on_event=progress, cancel=cancel, **options)
            else:
                result = USE_CASES[command](inventories, on_event=progress, cancel=cancel, **options)
    except InputError as exc:
        return _error(str(exc), ExitCode.BAD_INPUT, as_json=as_json, stdout=out, stderr=err)
    except GpufleetError as exc:
        return _error(str(exc), ExitCode.RUNNER_ERROR, as_json=as_json, stdout=out, stderr=err)
    finally:
        if progress is not None:
            progress.close()

    if getattr(args, "junit", None):
        write_junit_xml(result, args.junit)
    if getattr(args, "html", None):
        try:
            write_html(result.to_dict(), args.html)
        except InputError as exc:
            _show(result, command, out, err, as_json=as_json)
            return _error(str(exc), ExitCode.BAD_INPUT, as_json=False, stdout=out, stderr=err)
    _show(result, command, out, err, as_json=as_json)
    if command == "verify":
        return verify_exit_code(result)
    return int(result.exit_code)


if __name__ == "__main__":  # pragma: no cover - python -m gpufleet.cli
    sys.exit(main())
