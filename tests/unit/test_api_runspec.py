"""RunSpec and api.run: the exact arguments handed to ansible-runner (ansible_runner.run is replaced by a recorder)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from gpufleet import _paths, api
from gpufleet.errors import InputError, InventoryNotFoundError, PlaybookNotFoundError, RunnerError
from gpufleet.results import MODULE_DATA_KEYS, ExitCode


class FakeRunner:
    """Stands in for ansible_runner.Runner: the attributes api.execute reads."""

    def __init__(self, status: str = "successful", rc: int = 0, stats: dict[str, Any] | None = None) -> None:
        self.status = status
        self.rc = rc
        self.stats = stats


@pytest.fixture
def collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _paths.CollectionLayout:
    """A checkout-like collection in tmp_path with the use-case playbooks and one shipped inventory."""
    root = tmp_path / "repo"
    (root / "playbooks").mkdir(parents=True)
    for name in ("site", "mig_reconfigure", "verify", "facts"):
        (root / "playbooks" / f"{name}.yml").write_text("---\n[]\n")
    (root / "inventories" / "sim").mkdir(parents=True)
    (root / "inventories" / "sim" / "hosts.yml").write_text("all: {}\n")
    layout = _paths.CollectionLayout("checkout", root, root / "collections", root / "ansible.cfg")
    monkeypatch.setattr(_paths, "layout", lambda: layout)
    return layout


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no ./ansible.cfg in the working directory
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_HOST_KEY_CHECKING"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """Replace ansible_runner.run and tempfile.mkdtemp; returns what was recorded."""
    record: dict[str, Any] = {"runner": FakeRunner()}
    private = tmp_path / "private"

    def fake_mkdtemp(prefix: str) -> str:
        private.mkdir()
        record["mkdtemp_prefix"] = prefix
        return str(private)

    def fake_run(**kwargs: Any) -> FakeRunner:
        record["kwargs"] = kwargs
        record["dir_existed_during_run"] = private.is_dir()
        return record["runner"]

    def fake_run_checking_files(**kwargs: Any) -> FakeRunner:
        extravars = private / "env" / "extravars"
        record["extravars_file"] = None
        if extravars.exists():
            record["extravars_file"] = (extravars.read_text(), extravars.stat().st_mode & 0o777)
        return fake_run(**kwargs)

    monkeypatch.setattr(api.tempfile, "mkdtemp", fake_mkdtemp)
    monkeypatch.setattr(ansible_runner, "run", fake_run_checking_files)
    # The preflight (Ansible's InventoryManager in a child process) is proven by tests/integration/test_cli_errors.py.
    monkeypatch.setattr(api, "preflight", lambda spec: None)
    record["private"] = private
    return record


def test_run_passes_exactly_these_kwargs(collection, clean_env, recorder):
    root = collection.root
    api.run(
        "verify",
        "sim",
        limit="gpu-*",
        extravars={"nvidia_driver_branch": 570, "flag": True},
        tags="preflight, verify",
        skip_tags=["install"],
        check=True,
        diff=True,
        forks=5,
        verbosity=2,
        timeout=600,
    )
    kwargs = dict(recorder["kwargs"])
    assert callable(kwargs.pop("event_handler"))
    assert callable(kwargs.pop("cancel_callback"))
    assert kwargs == {
        "private_data_dir": str(recorder["private"]),
        "playbook": str(root / "playbooks" / "verify.yml"),
        "inventory": [str(root / "inventories" / "sim")],
        "envvars": {
            "ANSIBLE_COLLECTIONS_PATH": f"{root}/collections:~/.ansible/collections:/usr/share/ansible/collections",
            "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_NOCOLOR": "True",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
        "limit": "gpu-*",
        "tags": "preflight,verify",
        "skip_tags": "install",
        "forks": 5,
        "verbosity": 2,
        "cmdline": "--check --diff",
        "suppress_env_files": True,
        "passwords": {},
        "artifact_dir": None,
        "quiet": True,
        "fact_cache_type": "memory",
    }
    assert recorder["mkdtemp_prefix"] == "gpufleet-run-"
    # ansible-runner reads env/extravars and passes "-e @<private_data_dir>/env/extravars" (its documented
    # private data directory layout): the values are in a 0600 file, not in the argv.
    assert recorder["extravars_file"] == ('{"nvidia_driver_branch": 570, "flag": true}', 0o600)


def test_run_defaults_pass_nothing_optional(collection, clean_env, recorder, tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("local ansible_connection=local\n")
    api.run("site.yml", inventory)
    kwargs = recorder["kwargs"]
    assert {k: kwargs[k] for k in ("limit", "tags", "skip_tags", "forks", "verbosity", "cmdline")} == {
        "limit": None,
        "tags": None,
        "skip_tags": None,
        "forks": None,
        "verbosity": 0,
        "cmdline": None,
    }
    assert "timeout" not in kwargs  # enforced through cancel_callback, see test_api_results
    assert recorder["extravars_file"] is None
    assert kwargs["inventory"] == [str(inventory)]
    assert kwargs["playbook"] == str(collection.root / "playbooks" / "site.yml")


BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {},
            {
                "ANSIBLE_COLLECTIONS_PATH": "/c:~/.ansible/collections:/usr/share/ansible/collections",
                "ANSIBLE_CONFIG": "/cfg/ansible.cfg",
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_NOCOLOR": "True",
                "PATH": f"{BIN}:{os.defpath}",
            },
        ),
        (
            {"ANSIBLE_COLLECTIONS_PATH": "/mine:/yours", "ANSIBLE_CONFIG": "/etc/site.cfg", "PATH": "/usr/bin"},
            {
                "ANSIBLE_COLLECTIONS_PATH": "/c:/mine:/yours",
                "ANSIBLE_CONFIG": "/etc/site.cfg",
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_NOCOLOR": "True",
                "PATH": f"{BIN}:/usr/bin",
            },
        ),
        (
            {"ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_COLLECTIONS_PATH": ""},
            {
                "ANSIBLE_COLLECTIONS_PATH": "/c:~/.ansible/collections:/usr/share/ansible/collections",
                "ANSIBLE_CONFIG": "/cfg/ansible.cfg",
                "ANSIBLE_HOST_KEY_CHECKING": "False",
                "ANSIBLE_NOCOLOR": "True",
                "PATH": f"{BIN}:{os.defpath}",
            },
        ),
    ],
    ids=["defaults", "caller-paths-and-config-kept", "caller-disables-host-key-checking"],
)
def test_envvars(environ, expected, tmp_path):
    spec = api.RunSpec(
        playbook=Path("/p.yml"),
        inventories=(Path("/i"),),
        collections_dir=Path("/c"),
        ansible_cfg=Path("/cfg/ansible.cfg"),
        cwd=tmp_path,
    )
    assert spec.envvars(environ) == expected


def test_ansible_cfg_of_the_working_directory_wins_over_the_collections(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    spec = api.RunSpec(Path("/p.yml"), (Path("/i"),), Path("/c"), Path("/cfg/ansible.cfg"), cwd=tmp_path)
    env = spec.envvars({})
    assert (env["ANSIBLE_CONFIG"], env["ANSIBLE_HOST_KEY_CHECKING"]) == (str(tmp_path / "ansible.cfg"), "False")
    assert spec.envvars({"ANSIBLE_CONFIG": "/etc/site.cfg"})["ANSIBLE_CONFIG"] == "/etc/site.cfg"


def test_ansible_options_reach_the_cmdline_and_passwords_do_not():
    options = api.AnsibleOptions(
        user="admin",
        become=True,
        become_password="b-secret",
        private_key="/k/id rsa",
        vault_ids=("prod@/v/prod",),
        vault_password_files=("/v/pw",),
        vault_password="v-secret",
        list_hosts=True,
    )
    spec = api.RunSpec(Path("/p.yml"), (Path("/i"),), Path("/c"), Path("/a.cfg"), ansible=options)
    # ansible-playbook's option names (ansible-playbook --help).
    assert spec.cmdline() == (
        "--user admin --become --ask-become-pass --private-key '/k/id rsa' --vault-id prod@/v/prod "
        "--vault-password-file /v/pw --ask-vault-pass --list-hosts"
    )
    # ansible-runner answers these prompts (its "passwords" mapping: prompt regex -> answer).
    assert options.passwords() == {r"^BECOME password.*:\s*?$": "b-secret", r"^Vault password.*:\s*?$": "v-secret"}
    assert "secret" not in repr(options)


@pytest.mark.parametrize(
    ("check", "diff", "expected"),
    [(False, False, None), (True, False, "--check"), (False, True, "--diff"), (True, True, "--check --diff")],
)
def test_cmdline(check, diff, expected):
    spec = api.RunSpec(Path("/p.yml"), (Path("/i"),), Path("/c"), Path("/a.cfg"), check=check, diff=diff)
    assert spec.cmdline() == expected


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (None, ()),
        ("", ()),
        ("a", ("a",)),
        ("a, b,,c ", ("a", "b", "c")),
        (["a,b", "c"], ("a", "b", "c")),
    ],
)
def test_tags_are_split_and_trimmed(collection, tags, expected):
    spec = api.RunSpec.build("site", "sim", tags=tags)
    assert spec.tags == expected


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"playbook": "nope"},
            PlaybookNotFoundError,
            "unknown playbook 'nope': not a playbook file and not one of the collection's playbooks "
            "(facts, mig_reconfigure, site, verify)",
        ),
        (
            {"inventory": "missing"},
            InventoryNotFoundError,
            "inventory 'missing' not found: no such file or directory, and not one of the shipped inventories (sim)",
        ),
        ({"inventory": []}, InputError, "no inventory given: pass at least one inventory path"),
        ({"forks": 0}, InputError, "forks must be at least 1, got 0"),
        ({"verbosity": 7}, InputError, "verbosity must be between 0 and 6, got 7"),
        ({"timeout": 0}, InputError, "timeout must be at least 1 second, got 0"),
    ],
    ids=["playbook", "inventory", "no-inventory", "forks", "verbosity", "timeout"],
)
def test_build_rejects_bad_input_with_exact_message(collection, kwargs, error, message):
    args = {"playbook": "site", "inventory": "sim", **kwargs}
    with pytest.raises(error) as info:
        api.RunSpec.build(args.pop("playbook"), args.pop("inventory"), **args)
    assert str(info.value) == message


def test_module_keys_extend_the_defaults(collection):
    spec = api.RunSpec.build("site", "sim", module_keys={"my.col.thing": "thing"})
    assert spec.module_keys == {**MODULE_DATA_KEYS, "my.col.thing": "thing"}


@pytest.mark.parametrize(
    ("function", "playbook", "extra", "cmdline"),
    [
        (api.provision, "site.yml", {}, None),
        (api.reconfigure_mig, "mig_reconfigure.yml", {}, None),
        (api.verify, "verify.yml", {}, None),
        (api.facts, "facts.yml", {}, None),
        (api.plan_mig, "mig_reconfigure.yml", {"gpufleet_mig_plan_only": True}, "--check"),
    ],
    ids=["provision", "reconfigure_mig", "verify", "facts", "plan_mig"],
)
def test_use_cases_pick_their_playbook(collection, clean_env, recorder, function, playbook, extra, cmdline):
    function("sim", extravars={"keep": "me"})
    kwargs = recorder["kwargs"]
    assert kwargs["playbook"] == str(collection.root / "playbooks" / playbook)
    assert json.loads(recorder["extravars_file"][0]) == {"keep": "me", **extra}
    assert kwargs["cmdline"] == cmdline


def test_plan_mig_cannot_be_talked_out_of_plan_only(collection, clean_env, recorder):
    api.plan_mig("sim", extravars={"gpufleet_mig_plan_only": False}, check=False)
    assert json.loads(recorder["extravars_file"][0]) == {"gpufleet_mig_plan_only": True}
    assert recorder["kwargs"]["cmdline"] == "--check"


def test_private_data_dir_is_removed_after_the_run(collection, clean_env, recorder):
    api.run("site", "sim")
    assert recorder["dir_existed_during_run"] is True
    assert not recorder["private"].exists()


def test_runner_exception_becomes_runner_error_and_dir_is_removed(collection, clean_env, recorder, monkeypatch):
    def broken_run(**kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(ansible_runner, "run", broken_run)
    with pytest.raises(RunnerError) as info:
        api.run("site", "sim")
    assert str(info.value) == f"ansible-runner could not run {collection.root / 'playbooks' / 'site.yml'}: boom"
    assert isinstance(info.value.__cause__, RuntimeError)
    assert not recorder["private"].exists()


def test_result_comes_from_status_rc_and_stats(collection, clean_env, recorder, monkeypatch):
    recorder["runner"] = FakeRunner(
        status="failed", rc=2, stats={"ok": {"a": 3, "b": 1}, "failures": {"b": 1}, "changed": {"a": 1}}
    )

    def fake_run(**kwargs: Any) -> FakeRunner:
        # the recap event is what makes api.execute ask Runner.stats
        kwargs["event_handler"]({"event": "playbook_on_stats", "event_data": {}})
        return recorder["runner"]

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    result = api.run("site", "sim")
    assert (result.status, result.rc, list(result.hosts)) == ("failed", 2, ["a", "b"])
    assert (result.hosts["a"].ok, result.hosts["a"].changed, result.hosts["b"].failed) == (3, 1, 1)
    assert result.exit_code is ExitCode.FAILED


def test_stats_are_not_read_without_a_recap(collection, clean_env, recorder):
    class NoStats(FakeRunner):
        @property
        def stats(self) -> dict[str, Any]:
            raise AssertionError("Runner.stats must not be read when no playbook_on_stats event came")

        @stats.setter
        def stats(self, value: Any) -> None:
            pass

    recorder["runner"] = NoStats(status="failed", rc=4)
    result = api.run("site", "sim")
    assert (result.status, result.rc, result.hosts, result.exit_code) == ("failed", 4, {}, ExitCode.RUNNER_ERROR)


def test_cancel_event_drives_cancel_callback(collection, clean_env, recorder):
    cancel = threading.Event()
    api.run("site", "sim", cancel=cancel)
    should_cancel = recorder["kwargs"]["cancel_callback"]
    assert should_cancel() is False
    cancel.set()
    assert should_cancel() is True


def test_event_handler_keeps_events_and_feeds_on_event(collection, clean_env, recorder):
    seen: list[str] = []
    api.run("site", "sim", on_event=lambda e: seen.append(e.kind))
    handler = recorder["kwargs"]["event_handler"]
    assert handler({"event": "playbook_on_start", "event_data": {}}) is True
    assert seen == ["playbook_on_start"]


def test_on_event_exception_cancels_and_is_raised(collection, clean_env, recorder, monkeypatch):
    def fake_run(**kwargs: Any) -> FakeRunner:
        kwargs["event_handler"]({"event": "playbook_on_start", "event_data": {}})
        recorder["cancel_after_error"] = kwargs["cancel_callback"]()
        return FakeRunner(status="canceled", rc=254)

    def on_event(event: Any) -> None:
        raise KeyError("oops")

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    with pytest.raises(RunnerError) as info:
        api.run("site", "sim", on_event=on_event)
    assert str(info.value) == "on_event callback raised KeyError: 'oops'; the run was canceled"
    assert recorder["cancel_after_error"] is True


def test_inventory_paths_are_absolute(collection, clean_env, recorder, tmp_path, monkeypatch):
    (tmp_path / "inv").mkdir()
    monkeypatch.chdir(tmp_path)
    api.run("site", ["inv", "sim"])
    assert recorder["kwargs"]["inventory"] == [str(tmp_path / "inv"), str(collection.root / "inventories" / "sim")]
    assert all(os.path.isabs(p) for p in recorder["kwargs"]["inventory"])
