"""-e parsing with Ansible's own loader (gpufleet._extravars): the forms ansible-playbook accepts, vault included."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpufleet._extravars import parse_extra_vars
from gpufleet.errors import ExtraVarsError


def test_forms_merge_later_wins(tmp_path: Path):
    (tmp_path / "v.yml").write_text("branch: 570\nname: file\n")
    got = parse_extra_vars(["name=kv other='a b'", f"@{tmp_path / 'v.yml'}", '{"flag": true, "n": [1, 2]}'])
    assert got == {"name": "file", "other": "a b", "branch": 570, "flag": True, "n": [1, 2]}


def test_vaulted_file_needs_and_uses_the_password(tmp_path: Path):
    secret = tmp_path / "secret.yml"
    secret.write_text("mirror_password: hunter2\n")
    password = tmp_path / "pw"
    password.write_text("correct horse\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", str(password), str(secret)], check=True)
    assert "hunter2" not in secret.read_text()
    assert parse_extra_vars([f"@{secret}"], vault_password_files=[str(password)]) == {"mirror_password": "hunter2"}
    assert parse_extra_vars([f"@{secret}"], vault_password="correct horse") == {"mirror_password": "hunter2"}
    with pytest.raises(ExtraVarsError) as info:
        parse_extra_vars([f"@{secret}"])
    assert str(info.value) == f"bad extra vars '@{secret}': Attempting to decrypt but no vault secrets found."


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("", "empty extra vars argument: expected key=value, @file or a YAML/JSON mapping"),
        ("@", "bad extra vars '@': a file name must follow '@'"),
        ("oops", "bad extra vars 'oops': 'oops' is not key=value; use key=value, @file or a YAML/JSON mapping"),
        ("./v.yml", "bad extra vars './v.yml': prepend the file name with '@' (-e @./v.yml)"),
        ("[1, 2]", "bad extra vars '[1, 2]': could not be made into a dictionary; use key=value, @file or a "
                   "YAML/JSON mapping"),
    ],
)
def test_errors(argument: str, message: str):
    with pytest.raises(ExtraVarsError) as info:
        parse_extra_vars([argument])
    assert str(info.value) == message


LAUGHS = "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']\n" + "".join(
    f"{chr(c)}: &{chr(c)} [*{chr(c - 1)},*{chr(c - 1)},*{chr(c - 1)},*{chr(c - 1)},*{chr(c - 1)},*{chr(c - 1)},"
    f"*{chr(c - 1)},*{chr(c - 1)},*{chr(c - 1)}]\n" for c in range(ord("b"), ord("j")))


def test_a_billion_laughs_file_is_refused_before_it_expands(tmp_path: Path):
    """Issue 27: -e @laughs.yml ended in a MemoryError; it is one InputError (exit 4) and nothing expands it."""
    laughs = tmp_path / "laughs.yml"
    laughs.write_text(LAUGHS)
    with pytest.raises(ExtraVarsError) as info:
        parse_extra_vars([f"@{laughs}"])
    assert str(info.value) == (f"bad extra vars '@{laughs}': it expands to 100001 values (YAML aliases repeat what "
                               "they name), more than the 100000 gpufleet reads; write the values out, or pass fewer")


def test_aliases_that_stay_small_are_read(tmp_path: Path):
    small = tmp_path / "small.yml"
    small.write_text("base: &b {x: 1}\none: *b\ntwo: *b\n")
    assert parse_extra_vars([f"@{small}"]) == {"base": {"x": 1}, "one": {"x": 1}, "two": {"x": 1}}
