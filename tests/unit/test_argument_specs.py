"""meta/argument_specs.yml (entry point main) must match defaults/main.yml, in every role of the collection.

The checker (tools/check_argument_specs.py) is tested first against fixture roles, then run on the real roles.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE_ROLES = REPO / "tests" / "fixtures" / "argument_specs"


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_argument_specs", REPO / "tools" / "check_argument_specs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checker = _load_checker()


@pytest.mark.parametrize(
    ("role", "problems"),
    [
        ("good", []),
        ("split", []),
        ("nodefaults", []),
        ("nospec", ["nospec: meta/argument_specs.yml is missing"]),
        ("nomain", ["nomain: meta/argument_specs.yml has no entry point 'main' under argument_specs"]),
        (
            "drift",
            [
                "drift: drift_branch default differs: meta/argument_specs.yml has 570, defaults/main.yml has 550",
                "drift: drift_list default differs: meta/argument_specs.yml has ['a'], defaults/main.yml has "
                "['a', 'b']",
                "drift: drift_only_in_defaults is in defaults/main.yml but not in the options of 'main'",
                "drift: drift_only_in_spec is an option of 'main' but not in defaults/main.yml (give it a default "
                "there or mark it required)",
                "drift: drift_required is required in meta/argument_specs.yml but has a value in defaults/main.yml",
                "drift: unprefixed_var does not start with the role prefix 'drift_'",
            ],
        ),
        (
            "badyaml",
            [
                "badyaml: main.yml is not valid YAML: while parsing a flow node",
                "badyaml: badyaml_x is an option of 'main' but not in defaults/main.yml (give it a default there or "
                "mark it required)",
            ],
        ),
    ],
)
def test_checker_on_fixture_roles(role, problems):
    assert checker.check_role(FIXTURE_ROLES / role) == problems


def test_checker_main_exit_codes(capsys):
    assert checker.main([str(FIXTURE_ROLES / "missing-dir")]) == 0
    assert checker.main([str(FIXTURE_ROLES)]) == 1
    out, err = capsys.readouterr()
    assert "drift: drift_branch default differs" in out
    assert err.splitlines()[-1] == "7 role(s) checked, 10 problem(s)"
    assert checker.main(["--help"]) == 2


def _repo_roles() -> list[Path]:
    return checker.role_dirs([REPO / "roles"])


#: the roles the collection ships: one may be added, none may go missing unnoticed
COLLECTION_ROLES = {"gpu_health", "gpu_monitoring", "nvidia_container_toolkit", "nvidia_dcgm", "nvidia_driver",
                    "nvidia_gpu_sharing", "nvidia_mig", "nvidia_mps", "nvml_python"}


def test_the_checker_sees_every_role():
    # the parametrized test below runs once per role it finds: it must find them all, not an empty set
    assert {p.name for p in _repo_roles()} >= COLLECTION_ROLES


@pytest.mark.parametrize("role_dir", _repo_roles(), ids=lambda p: p.name)
def test_collection_roles_match_their_argument_specs(role_dir):
    assert checker.check_role(role_dir) == []
