"""The gpufleet command's surface: --version on every entry point, help pages with examples and the exit-code table,
options only where they do something, and Hypothesis over the argument handling (no uncaught exception)."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet import api, cli
from gpufleet.results import ExitCode, RunResult

REPO = Path(__file__).resolve().parents[2]
HELP_PAGES = [
    [], ["provision"], ["verify"], ["facts"], ["run"], ["mig"], ["mig", "plan"], ["mig", "apply"],
    ["mig", "validate"], ["mig", "import"], ["mig", "export"],
]


def help_text(words: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args([*words, "--help"])
    assert info.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("words", HELP_PAGES, ids=lambda w: " ".join(w) or "gpufleet")
def test_every_help_page_has_examples_and_every_exit_code(words: list[str]):
    text = help_text(words)
    assert "examples:\n  gpufleet " in text
    for code in ExitCode:
        assert f"\n  {int(code)}  " in text, f"exit code {int(code)} missing from the help of {words}"


@pytest.mark.parametrize(
    ("words", "option"),
    [
        (["mig", "plan"], "--junit"), (["facts"], "--junit"), (["provision"], "--junit"),
        (["mig", "plan"], "--check"), (["verify"], "--tags"), (["mig", "validate"], "--limit"),
        (["mig", "import"], "--inventory"),
    ],
)
def test_options_only_where_they_do_something(words: list[str], option: str):
    assert option not in help_text(words).partition("examples:")[0]
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args([*words, "x", option, "y"])
    assert info.value.code == ExitCode.BAD_INPUT
    assert f"unrecognized arguments: {option}" in err.getvalue() or "error:" in err.getvalue()


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        ([sys.executable, "-m", "gpufleet.cli", "--version"], "gpufleet"),
        ([sys.executable, "-m", "gpufleet_sim.cli", "--version"], "gpusim"),
        ([sys.executable, "-m", "gpufleet_lab.cli", "--version"], "gpufleet-lab"),
    ],
)
def test_version_on_every_entry_point(argv: list[str], prog: str):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'simulator' / 'src'}"})
    assert proc.returncode == 0, proc.stderr
    name, _, version = proc.stdout.strip().partition(" ")
    assert name == prog
    assert version[0].isdigit()


WORDS = st.sampled_from([
    "provision", "verify", "facts", "run", "mig", "plan", "apply", "validate", "import", "export", "-i", "inv",
    "-l", "", "~[(", "-e", "a=1", "@", "{bad", "-f", "0", "-f", "x", "--timeout", "-1", "--json", "-q", "-v",
    "-vvvv", "--yes", "--offline", "--model", "A100-SXM4-80GB", "--gpus", "-3", "--facts", "--layout", "-C", "-D",
    "--junit", "--list-hosts", "-u", "-b", "--private-key", "--vault-id", "--vault-password-file", "--artifact-dir",
    "--version", "--help", "-t", "--skip-tags", "/nonexistent", "site", "ö", "--", "-",
])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.one_of(WORDS, st.text(max_size=8)), max_size=8))
def test_argument_handling_never_raises(argv: list[str], monkeypatch: pytest.MonkeyPatch):
    """Any argv ends in an exit code (argparse's SystemExit included), never in a traceback; nothing runs."""
    result = RunResult("/p.yml", "successful", 0)

    def fake(*_args: Any, **_kwargs: Any) -> RunResult:
        return result

    for command in list(cli.USE_CASES):
        monkeypatch.setitem(cli.USE_CASES, command, fake)
    monkeypatch.setattr(api, "run", fake)
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt: "pw")
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(argv, stdout=out, stderr=err, stdin=io.StringIO(""))
    except SystemExit as exc:  # argparse: usage errors (4), --help and --version (0)
        code = exc.code if isinstance(exc.code, int) else 1
    assert code in {int(c) for c in ExitCode}
