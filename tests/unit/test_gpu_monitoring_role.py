"""The gpu_monitoring role run for real (ansible-playbook, connection local, into a temporary directory): the targets
it writes from a small inventory, a second run and a check-mode run that change nothing, a bad inventory string that
stops it before any file is written; then the rules it rendered through promtool (Debian's prometheus package,
unpacked into build/prometheus by scripts/bootstrap.sh): ``check rules``, and ``test rules`` with
tests/data/monitoring/gpufleet_rules_test.yml, which must test every alert firing and not firing."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = REPO / "build/prometheus/usr/bin/promtool"
RULES_TEST = REPO / "tests/data/monitoring/gpufleet_rules_test.yml"
HEALTH_DOC = REPO / "docs/health.md"

INVENTORY = {
    "all": {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "children": {"gpu_nodes": {"children": {
            "ampere": {"hosts": {"sim-a100-1": {"gpu_monitoring_address": "127.0.2.1",
                                                "nvidia_dcgm_exporter_listen": "127.0.2.1:9400",
                                                "nvidia_mig_layout": "balanced"}}},
            "hopper": {"hosts": {"gpu-h100-01": {"ansible_host": "10.1.0.1",
                                                 "nvidia_dcgm_exporter_listen": "0.0.0.0:9400"}}},
            "ada": {"hosts": {"gpu-l40s-01": {"ansible_host": "10.1.0.2", "nvidia_dcgm_exporter_enabled": False}}},
        }}},
    }
}
PLAYBOOK = "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: gpufleet.nvidia.gpu_monitoring\n"


def _run(tmp: Path, out: Path, inventory: dict, *args: str) -> tuple[int, str]:
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (tmp / "playbook.yml").write_text(PLAYBOOK, encoding="utf-8")
    extra = {"gpu_monitoring_file_sd_dir": str(out / "file_sd"), "gpu_monitoring_rules_dir": str(out / "rules"),
             "gpu_monitoring_grafana_dashboards_dir": str(out / "dashboards"),
             "gpu_monitoring_grafana_provisioning_dir": str(out / "provisioning"),
             "gpu_monitoring_promtool": str(PROMTOOL)}
    (tmp / "vars.json").write_text(json.dumps(extra), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), XDG_CACHE_HOME=str(tmp / "cache"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                           str(tmp / "playbook.yml"), "-e", f"@{tmp / 'vars.json'}", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _changed(output: str) -> int:
    match = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", output)
    assert match, output
    return int(match.group(1))


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Check mode on an empty directory, a real run, a second run, and check mode again: their results."""
    assert PROMTOOL.is_file(), f"{PROMTOOL} is missing: run scripts/bootstrap.sh (it unpacks Debian's prometheus)"
    tmp = tmp_path_factory.mktemp("gpu_monitoring")
    out = tmp / "out"
    results = {"check_empty": _run(tmp, out, INVENTORY, "--check", "--diff")}
    results["check_empty_files"] = _snapshot(out) if out.exists() else {}
    results["first"] = _run(tmp, out, INVENTORY)
    before = _snapshot(out)
    results["second"] = _run(tmp, out, INVENTORY)
    results["second_same"] = _snapshot(out) == before
    moved = json.loads(json.dumps(INVENTORY))
    moved["all"]["children"]["gpu_nodes"]["children"]["ada"]["hosts"]["gpu-l40s-01"]["ansible_host"] = "10.1.0.9"
    results["check_moved"] = _run(tmp, out, moved, "--check", "--diff")
    results["check_moved_same"] = _snapshot(out) == before
    results["out"] = out
    return results


def test_check_mode_on_a_new_host_writes_nothing(rendered: dict) -> None:
    rc, output = rendered["check_empty"]
    assert rc == 0, output
    assert _changed(output) > 0
    assert rendered["check_empty_files"] == {}


def test_the_targets_from_the_inventory(rendered: dict) -> None:
    rc, output = rendered["first"]
    assert rc == 0, output
    sd = rendered["out"] / "file_sd"
    groups = {"ada": ",ada,gpu_nodes,", "ampere": ",ampere,gpu_nodes,", "hopper": ",gpu_nodes,hopper,"}
    assert json.loads((sd / "dcgm_exporter.json").read_text(encoding="utf-8")) == [
        {"labels": {"exporter": "dcgm-exporter", "groups": groups["hopper"], "host": "gpu-h100-01"},
         "targets": ["10.1.0.1:9400"]},
        {"labels": {"exporter": "dcgm-exporter", "groups": groups["ampere"], "host": "sim-a100-1",
                    "mig_layout": "balanced"}, "targets": ["127.0.2.1:9400"]},
    ]
    assert json.loads((sd / "node_exporter.json").read_text(encoding="utf-8")) == [
        {"labels": {"exporter": "node_exporter", "groups": groups["hopper"], "host": "gpu-h100-01"},
         "targets": ["10.1.0.1:9100"]},
        {"labels": {"exporter": "node_exporter", "groups": groups["ada"], "host": "gpu-l40s-01"},
         "targets": ["10.1.0.2:9100"]},
        {"labels": {"exporter": "node_exporter", "groups": groups["ampere"], "host": "sim-a100-1",
                    "mig_layout": "balanced"}, "targets": ["127.0.2.1:9100"]},
    ]


def test_files_are_0644_and_directories_0755_root(rendered: dict) -> None:
    out = rendered["out"]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["dashboards/gpufleet-fleet.json", "dashboards/gpufleet-mig.json", "dashboards/gpufleet-node.json",
                     "file_sd/dcgm_exporter.json", "file_sd/node_exporter.json", "provisioning/gpufleet.yml",
                     "rules/gpufleet.rules.yml"]
    for path in out.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), path
        assert path.stat().st_uid == 0, path
    provisioning = yaml.safe_load((out / "provisioning/gpufleet.yml").read_text(encoding="utf-8"))
    assert provisioning["providers"][0]["options"]["path"] == str(out / "dashboards")


def test_a_second_run_changes_nothing(rendered: dict) -> None:
    rc, output = rendered["second"]
    assert rc == 0, output
    assert _changed(output) == 0, output
    assert rendered["second_same"]


def test_check_mode_reports_a_moved_host_and_writes_nothing(rendered: dict) -> None:
    rc, output = rendered["check_moved"]
    assert rc == 0, output
    assert _changed(output) == 1, output
    assert '"10.1.0.9:9100"' in output  # the diff shows the new target
    assert rendered["check_moved_same"]


@pytest.mark.parametrize(
    ("host", "hostvars", "message"),
    [
        ("gpu-h100-01", {"ansible_host": '10.1.0.1"'},
         "gpu_monitoring: gpu-h100-01: ansible_host is not an IP address or DNS name (got '10.1.0.1\"'); set "
         "gpu_monitoring_address to the address Prometheus scrapes the host on. Nothing was written."),
        ("gpu-h100-01", {"ansible_host": "10.1.0.1", "nvidia_mig_layout": "all\nbalanced"},
         "gpu_monitoring: gpu-h100-01: nvidia_mig_layout cannot be a label value (got 'all\\nbalanced'); name layouts "
         "with letters, digits and . _ - only. Nothing was written."),
    ],
    ids=["quote-in-address", "newline-in-layout"],
)
def test_a_bad_inventory_string_stops_before_any_file(tmp_path: Path, host: str, hostvars: dict,
                                                      message: str) -> None:
    bad = json.loads(json.dumps(INVENTORY))
    bad["all"]["children"]["gpu_nodes"]["children"]["hopper"]["hosts"][host] = hostvars
    out = tmp_path / "out"
    rc, output = _run(tmp_path, out, bad)
    assert rc == 2, output
    assert message in " ".join(output.split()).replace("\\\\", "\\")
    assert not out.exists()


def _alerts(rules_file: Path) -> list[dict]:
    rules = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules(rendered: dict) -> None:
    proc = subprocess.run([str(PROMTOOL), "check", "rules", str(rendered["out"] / "rules/gpufleet.rules.yml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 25 rules found" in proc.stdout


def test_promtool_test_rules(rendered: dict, tmp_path: Path) -> None:
    shutil.copy(rendered["out"] / "rules/gpufleet.rules.yml", tmp_path)
    shutil.copy(RULES_TEST, tmp_path)
    proc = subprocess.run([str(PROMTOOL), "test", "rules", RULES_TEST.name], cwd=tmp_path, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_has_a_firing_and_a_quiet_test_case(rendered: dict) -> None:
    cases = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))["tests"]
    firing, quiet = set(), set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts(rendered["out"] / "rules/gpufleet.rules.yml")}
    assert len(names) == 20
    assert names - firing == set()
    assert names - quiet == set()
    assert (firing | quiet) - names == set()


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, blanks to dashes."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in markdown.splitlines() if re.match(r"#{1,6} ", line)}


def test_every_alert_has_a_summary_a_description_and_a_runbook_that_exists(rendered: dict) -> None:
    anchors = _anchors(HEALTH_DOC.read_text(encoding="utf-8"))
    for alert in _alerts(rendered["out"] / "rules/gpufleet.rules.yml"):
        annotations = alert["annotations"]
        assert annotations["summary"], alert["alert"]
        assert annotations["description"], alert["alert"]
        url, _, anchor = annotations["runbook_url"].partition("#")
        assert url == "docs/health.md"
        assert anchor in anchors, (alert["alert"], anchor)
        assert alert["labels"]["severity"] in {"warning", "critical"}
