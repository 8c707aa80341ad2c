"""The offline MIG commands (no inventory, no host): validate, plan --offline, import, export, through the CLI and
the Python API (gpufleet.mig), on fixed layout files (tests/fixtures/runner/mig)."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpufleet import cli, mig
from gpufleet.errors import InputError

MIG = Path(__file__).resolve().parents[1] / "fixtures" / "runner" / "mig"
# docs/mig.md, "Validation": the validator's message for mig_enabled: false with GPU instances.
BROKEN = ("layout 'broken': layout entry[0]: mig_enabled is false but GPU instances are requested (1g.10gb x2); "
          "remove them or set mig_enabled: true")


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_validate_valid_layouts_against_a_model():
    code, out, err = run_cli("mig", "validate", str(MIG / "layouts.yml"), "--model", "A100-SXM4-80GB", "--gpus", "2")
    assert (code, err) == (0, "")
    assert out == (
        "layout balanced: valid against 2 x A100-SXM4-80GB\nlayout disabled: valid against 2 x A100-SXM4-80GB\n"
    )


@pytest.mark.parametrize("model", [[], ["--model", "A100-SXM4-80GB"]], ids=["structure", "model"])
def test_validate_prints_the_validators_message_as_it_is(model: list[str]):
    code, out, err = run_cli("mig", "validate", str(MIG / "bad_layout.yml"), *model, "--json")
    assert code == 4
    assert err == f"gpufleet: error: invalid MIG layout:\n{BROKEN}\n"
    assert json.loads(out) == {"schema_version": 2, "error": f"invalid MIG layout:\n{BROKEN}", "exit_code": 4}


def test_validate_unknown_model_names_the_known_ones():
    with pytest.raises(InputError) as info:
        mig.validate_layout(MIG / "layouts.yml", model="B9000")
    assert str(info.value).startswith("unknown GPU model 'B9000': use one of ")
    assert "A100-SXM4-80GB" in str(info.value)


def test_plan_offline_for_a_model_creates_what_the_layout_asks():
    code, out, _ = run_cli("mig", "plan", "--offline", str(MIG / "layouts.yml"), "--model", "A100-SXM4-80GB",
                           "--gpus", "1", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["layout"] == "balanced"  # the file's nvidia_mig_layout
    (gpu,) = document["plan"]
    kinds = [a["action"] for a in gpu["actions"]]
    assert kinds[0] == "set_mig_mode"  # MIG is off on a fresh GPU
    created = Counter(a["profile"] for a in gpu["actions"] if a["action"] == "create_gi")
    assert created == Counter({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})  # layouts.yml, "balanced"


def test_plan_offline_from_a_saved_facts_document(tmp_path: Path):
    facts = {"hosts": {"gpu-1": {"module_data": {"facts": {"gpus": [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20B210DE",
         "mig": {"supported": True, "current": True, "pending": True}, "gpu_instances": []},
    ]}}}}}
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    plan = mig.plan_offline(MIG / "layouts.yml", facts=tmp_path / "facts.json", layout="disabled")
    assert [a["action"] for a in plan["plan"][0]["actions"]] == ["set_mig_mode"]
    assert plan["plan"][0]["actions"][0]["mode"] == 0


def test_plan_offline_needs_a_model_or_facts():
    code, _, err = run_cli("mig", "plan", "--offline", str(MIG / "layouts.yml"))
    assert code == 4
    assert err == "gpufleet: error: an offline plan needs exactly one of --model MODEL or --facts FILE\n"


def test_import_then_export_round_trip(tmp_path: Path):
    code, out, _ = run_cli("mig", "import", str(MIG / "mig-parted.yml"))
    assert code == 0
    imported = yaml.safe_load(out)
    # mig-parted.yml: all-disabled and all-1g.10gb (7 x 1g.10gb on every GPU)
    assert imported == {"nvidia_mig_layouts": {
        "all-disabled": [{"devices": "all", "mig_enabled": False}],
        "all-1g.10gb": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"1g.10gb": 7}}],
    }}
    (tmp_path / "layouts.yml").write_text(out)
    code, out, _ = run_cli("mig", "export", str(tmp_path / "layouts.yml"))
    assert code == 0
    assert yaml.safe_load(out) == yaml.safe_load((MIG / "mig-parted.yml").read_text())


def test_import_refuses_a_file_past_the_size_limit_before_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "huge.yml"
    big.write_text("version: v1\n" + "#" * (1024 * 1024), encoding="utf-8")
    code, out, err = run_cli("mig", "import", str(big))
    assert (code, out) == (4, "")
    assert "it is 1048588 bytes, more than the 1048576 this reads" in err
    assert err.count("\n") <= 2, err


def test_import_selects_one_config_and_names_the_others():
    assert mig.import_mig_parted(MIG / "mig-parted.yml", config="all-disabled") == {
        "nvidia_mig_layouts": {"all-disabled": [{"devices": "all", "mig_enabled": False}]}}
    code, _, err = run_cli("mig", "import", str(MIG / "mig-parted.yml"), "--config", "nope")
    assert code == 4
    assert err == "gpufleet: error: no mig-config 'nope' in the file; available: all-disabled, all-1g.10gb\n"
