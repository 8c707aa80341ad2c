"""-e/--extra-vars parsing: accepted forms and exact error messages."""

from __future__ import annotations

import pytest

from gpufleet._extravars import parse_extra_vars
from gpufleet.errors import ExtraVarsError


@pytest.fixture
def files(tmp_path):
    (tmp_path / "vars.yml").write_text("branch: 570\nlayout:\n  - 1g.10gb\n")
    (tmp_path / "vars.json").write_text('{"branch": 550, "enabled": true}')
    (tmp_path / "list.yml").write_text("- a\n- b\n")
    (tmp_path / "empty.yml").write_text("")
    (tmp_path / "broken.yml").write_text("a: [1,\n")
    (tmp_path / "badkey.yml").write_text("1: x\nok: y\n")
    return tmp_path


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ([], {}),
        (["a=1"], {"a": "1"}),
        (["a=1 b=two"], {"a": "1", "b": "two"}),
        (["msg='hello world' x=y=z"], {"msg": "hello world", "x": "y=z"}),
        (["a="], {"a": ""}),
        (['{"a": 1, "b": [true]}'], {"a": 1, "b": [True]}),
        (["{a: 1, b: yes}"], {"a": 1, "b": True}),
        (["@vars.yml"], {"branch": 570, "layout": ["1g.10gb"]}),
        (["@vars.json"], {"branch": 550, "enabled": True}),
        (["@empty.yml"], {}),
        (["@vars.yml", "branch=575"], {"branch": "575", "layout": ["1g.10gb"]}),
        (["branch=575", "@vars.json"], {"branch": 550, "enabled": True}),
    ],
    ids=["none", "one", "two", "quoted", "empty-value", "json", "yaml", "yaml-file", "json-file", "empty-file",
         "later-wins", "file-later-wins"],
)
def test_parse(files, arguments, expected):
    assert parse_extra_vars(arguments, base_dir=files) == expected


def test_absolute_file_ignores_base_dir(files, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    assert parse_extra_vars([f"@{files / 'vars.json'}"], base_dir=elsewhere) == {"branch": 550, "enabled": True}


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("", "empty extra vars argument: expected key=value, @file or a YAML/JSON mapping"),
        ("novalue", "bad extra var 'novalue': expected key=value with a variable name as key, @file or a YAML/JSON "
                    "mapping"),
        ("1a=2", "bad extra var '1a=2': expected key=value with a variable name as key, @file or a YAML/JSON "
                 "mapping"),
        ("a=1 b", "bad extra var 'b': expected key=value with a variable name as key, @file or a YAML/JSON mapping"),
        ("a='open", "bad extra vars \"a='open\": No closing quotation"),
        ("@", "bad extra vars '@': a file name must follow '@'"),
        ("@missing.yml", "extra vars file 'missing.yml' not found"),
        ("@list.yml", "extra vars file 'list.yml' must be a mapping at the top level, got list"),
        ("@broken.yml", "extra vars file 'broken.yml' is not valid YAML or JSON: expected the node content, but "
                        "found '<stream end>'"),
        ("@badkey.yml", "extra vars file 'badkey.yml' has keys that are not variable names: 1"),
        ("{a: 1", "extra vars '{a: 1' is not valid YAML or JSON: expected ',' or '}', but got '<stream end>'"),
        ("{'bad key': 1}", "extra vars \"{'bad key': 1}\" has keys that are not variable names: 'bad key'"),
    ],
)
def test_errors(files, argument, message):
    with pytest.raises(ExtraVarsError) as info:
        parse_extra_vars([argument], base_dir=files)
    assert str(info.value) == message


def test_directory_is_not_readable_as_file(files):
    (files / "adir").mkdir()
    with pytest.raises(ExtraVarsError) as info:
        parse_extra_vars(["@adir"], base_dir=files)
    assert str(info.value) == "extra vars file 'adir' cannot be read: Is a directory"
