"""The gpufleet command: arguments -> API call, output, exit codes (the API is replaced by a recorder)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpufleet import _output, api, cli
from gpufleet.errors import PlaybookNotFoundError, RunnerError
from gpufleet.results import Event, ExitCode, FailedTask, HostResult, RunResult


def sample_result(exit_kind: str = "ok") -> RunResult:
    hosts = {"a": HostResult("a", ok=2, changed=1, module_data={"facts": {"gpus": 8}})}
    if exit_kind == "failed":
        hosts["b"] = HostResult("b", ok=1, failed=1, failed_tasks=[FailedTask("Install", "x.y.z", "apt broke")])
    if exit_kind == "unreachable":
        unreachable = FailedTask("Gather", "x", "refused", unreachable=True)
        hosts["c"] = HostResult("c", unreachable=1, failed_tasks=[unreachable])
    status, rc = ("successful", 0) if exit_kind == "ok" else ("failed", 2)
    return RunResult("/c/playbooks/site.yml", status, rc, hosts)


class Recorder:
    def __init__(self, result: RunResult | Exception) -> None:
        self.result = result
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def make(self, name: str):
        def function(*args: Any, **kwargs: Any) -> RunResult:
            self.calls.append((name, args, kwargs))
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

        return function


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder(sample_result())
    for command in list(cli.USE_CASES):
        monkeypatch.setitem(cli.USE_CASES, command, rec.make(command))
    monkeypatch.setattr(api, "run", rec.make("run"))
    monkeypatch.delenv(cli.INVENTORY_ENV, raising=False)
    # only the generic host summary: command renderers of gpufleet.renderers are tested by their owners
    monkeypatch.setattr(_output, "_RENDERERS", {})
    monkeypatch.setattr(cli, "load_renderers", lambda: None)
    return rec


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "name", "args"),
    [
        (["provision", "-i", "inv"], "provision", (["inv"],)),
        (["verify", "-i", "a", "-i", "b"], "verify", (["a", "b"],)),
        (["facts", "-i", "inv"], "facts", (["inv"],)),
        (["mig", "plan", "-i", "inv"], "mig plan", (["inv"],)),
        (["run", "gpufleet.nvidia.site", "-i", "inv"], "run", ("gpufleet.nvidia.site", ["inv"])),
    ],
)
def test_commands_call_their_use_case(recorder, argv, name, args):
    code, _, _ = run_cli(*argv, "--quiet")
    assert code == 0
    called, called_args, _ = recorder.calls[0]
    assert (called, called_args) == (name, args)


def test_mig_apply_without_terminal_or_yes_refuses_before_running_anything(recorder):
    code, out, err = run_cli("mig", "apply", "-i", "inv")
    assert (code, out, recorder.calls) == (4, "", [])
    assert err == (
        "gpufleet: error: refusing to apply MIG layouts without a confirmation: there is no terminal to ask at; "
        "review `gpufleet mig plan` and pass --yes to apply\n"
    )


def test_mig_apply_with_yes_plans_then_applies(recorder):
    code, _, _ = run_cli("mig", "apply", "-i", "inv", "--yes", "--quiet")
    assert code == 0
    assert [c[0] for c in recorder.calls] == ["mig plan", "mig apply"]


def test_options_reach_the_api(recorder, tmp_path):
    (tmp_path / "v.yml").write_text("x: 1\n")
    run_cli(
        "provision", "-i", "inv", "-l", "gpu*", "-C", "-D", "-e", "a=1 b=2", "-e", f"@{tmp_path / 'v.yml'}",
        "-t", "a,b", "-t", "c", "--skip-tags", "d", "-f", "7", "--timeout", "30", "-vvv", "-q",
    )
    _, _, kwargs = recorder.calls[0]
    assert kwargs.pop("on_event") is None  # --quiet
    assert kwargs.pop("cancel").is_set() is False
    assert kwargs == {
        "limit": "gpu*", "tags": ["a,b", "c"], "skip_tags": ["d"], "check": True, "diff": True, "forks": 7,
        "verbosity": 3, "timeout": 30, "extravars": {"a": "1", "b": "2", "x": 1}, "artifact_dir": None,
        "ansible": api.AnsibleOptions(),
    }


def test_inventory_from_environment(recorder, monkeypatch):
    monkeypatch.setenv(cli.INVENTORY_ENV, "one:two")
    assert run_cli("facts", "-q")[0] == 0
    assert recorder.calls[0][1] == (["one", "two"],)


@pytest.mark.parametrize("as_json", [False, True])
def test_missing_inventory_is_bad_input(recorder, as_json):
    code, out, err = run_cli("verify", *(["--json"] if as_json else []))
    assert code == 4
    assert err == "gpufleet: error: no inventory: pass -i/--inventory or set GPUFLEET_INVENTORY\n"
    expected = {
        "schema_version": 2,
        "error": "no inventory: pass -i/--inventory or set GPUFLEET_INVENTORY",
        "exit_code": 4,
    }
    assert (json.loads(out) if as_json else out) == (expected if as_json else "")
    assert recorder.calls == []


def test_bad_extra_vars_is_bad_input(recorder):
    code, _, err = run_cli("verify", "-i", "x", "-e", "oops")
    assert (code, recorder.calls) == (4, [])
    assert err == (
        "gpufleet: error: bad extra vars 'oops': 'oops' is not key=value; use key=value, @file or a YAML/JSON "
        "mapping\n"
    )


@pytest.mark.parametrize(
    ("error", "code"),
    [(PlaybookNotFoundError("unknown playbook 'x'"), 4), (RunnerError("ansible-runner could not run p: boom"), 5)],
)
def test_api_errors_map_to_exit_codes(recorder, error, code):
    recorder.result = error
    got, out, err = run_cli("run", "x", "-i", "inv", "--json")
    assert got == code
    assert json.loads(out) == {"schema_version": 2, "error": str(error), "exit_code": code}
    assert err == f"gpufleet: error: {error}\n"


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["mig"], ["mig", "destroy"], ["verify", "--forks", "many"], ["verify", "--nope"]],
    ids=["no-command", "unknown-command", "mig-no-action", "mig-unknown", "bad-int", "unknown-option"],
)
def test_usage_errors_exit_4(recorder, argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 4
    assert "gpufleet" in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "code"), [("ok", 0), ("failed", 2), ("unreachable", 3)])
def test_exit_code_is_the_results(recorder, kind, code):
    recorder.result = sample_result(kind)
    assert run_cli("verify", "-i", "inv", "-q")[0] == code


def test_json_output_is_the_result_document_only(recorder):
    recorder.result = sample_result("failed")
    code, out, _ = run_cli("verify", "-i", "inv", "--json", "-q")
    assert code == 2
    assert json.loads(out) == sample_result("failed").to_dict()


def test_json_sends_progress_to_stderr(recorder):
    def fake_verify(inventories: list[str], **kwargs: Any) -> RunResult:
        kwargs["on_event"](Event.from_runner({
            "event": "runner_on_failed",
            "event_data": {"host": "b", "task": "Install", "resolved_action": "x", "res": {"msg": "apt broke"}},
        }))
        return sample_result()

    cli.USE_CASES["verify"] = fake_verify
    code, out, err = run_cli("verify", "-i", "inv", "--json")
    assert code == 0
    assert json.loads(out)["ok"] is True
    assert err == "b: failed: Install: apt broke\n"


def test_text_output_has_the_host_summary(recorder):
    recorder.result = sample_result("failed")
    code, out, _ = run_cli("verify", "-i", "inv", "-q")
    assert code == 2
    lines = out.splitlines()
    assert any(line.split() == ["│", "b", "│", "failed", "│", "1", "│", "0", "│", "1", "│", "0", "│", "0", "│",
                                "0", "│", "0", "│"] for line in lines), out
    assert "b: failed: Install (x.y.z): apt broke" in lines
    assert lines[-1] == "result: failed (exit 2)"


def test_command_renderers_run_after_the_summary(recorder):
    seen: list[str] = []

    @_output.register_renderer("mig plan")
    def render_plan(result: RunResult, console: Console) -> None:
        seen.append(result.playbook)
        console.print("PLAN-VIEW")

    _, out, _ = run_cli("mig", "plan", "-i", "inv", "-q")
    assert seen == ["/c/playbooks/site.yml"]
    assert out.rstrip().endswith("PLAN-VIEW")
    assert _output.renderers_for("verify") == [_output.render_host_summary]


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ({"event": "runner_on_ok", "event_data": {"host": "a", "task": "T", "res": {"changed": True}}},
         "a: changed: T\n"),
        ({"event": "runner_on_unreachable", "event_data": {"host": "a", "task": "T", "res": {"msg": "down"}}},
         "a: unreachable: T: down\n"),
        ({"event": "runner_on_failed", "event_data": {"host": "a", "task": "T", "res": {}}}, "a: failed: T\n"),
        ({"event": "runner_on_start", "event_data": {"host": "a", "task": "T"}}, ""),
        ({"event": "playbook_on_stats", "event_data": {}}, ""),
    ],
)
def test_plain_progress_lines(raw, line):
    stream = io.StringIO()
    _output.PlainProgress(stream)(Event.from_runner(raw))
    assert stream.getvalue() == line


def test_make_progress_kinds():
    assert _output.make_progress(io.StringIO(), quiet=True) is None
    assert isinstance(_output.make_progress(io.StringIO()), _output.PlainProgress)


def test_live_progress_tracks_hosts():
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    live = _output.LiveProgress(console)
    for raw in (
        {"event": "runner_on_start", "event_data": {"host": "a", "task": "Install"}},
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": "Install", "res": {"changed": True}}},
        {"event": "runner_on_failed", "event_data": {"host": "b", "task": "Install", "res": {}}},
    ):
        live(Event.from_runner(raw))
    live.close()
    rows = live._rows
    assert (rows["a"].task, rows["a"].ok, rows["a"].changed, rows["b"].failed) == ("Install", 1, 1, 1)


def test_exit_codes_are_documented():
    text = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"| {int(code)} |" in text, f"exit code {int(code)} missing from docs/api.md"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


PROMPT = "Apply this MIG plan to 0 host(s)? Running GPU work on changed GPUs stops. [y/N] "
REFUSED = "gpufleet: error: not confirmed; nothing was applied\n"


@pytest.mark.parametrize(
    ("answer", "code", "called", "err_tail"),
    [("y\n", 0, ["mig plan", "mig apply"], PROMPT), ("\n", 4, ["mig plan"], PROMPT + REFUSED),
     ("no\n", 4, ["mig plan"], PROMPT + REFUSED)],
)
def test_mig_apply_asks_at_a_terminal(recorder, answer, code, called, err_tail):
    out, err = _Terminal(), _Terminal()
    got = cli.main(["mig", "apply", "-i", "inv", "-q"], stdout=out, stderr=err, stdin=_Terminal(answer))
    assert (got, [c[0] for c in recorder.calls]) == (code, called)
    assert err.getvalue().endswith(err_tail)
