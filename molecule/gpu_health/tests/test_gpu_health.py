"""Testinfra checks (podman backend) of the gpu_health scenario: the report on the host after converge/side_effect."""

from __future__ import annotations

import json
import re

REPORT = "/var/lib/gpufleet/health.json"
TEXTFILE = "/var/lib/node_exporter/textfile_collector/gpufleet_health.prom"
STATE = "/var/lib/nvidia-sim/state.json"


def _report(host) -> dict:
    return json.loads(host.file(REPORT).content_string)


def test_report_is_healthy_after_the_fault_was_cleared(host) -> None:
    report = _report(host)
    assert report["status"] == "ok", [c for c in report["checks"] if c["status"] != "ok"]
    assert report["gpu_count"] == 8
    gpus = json.loads(host.file(STATE).content_string)["gpus"]
    assert [(g["index"], g["uuid"], g["pci_bus_id"]) for g in report["gpus"]] == [
        (g["index"], g["uuid"], g["pci"]["bus_id"]) for g in gpus]


def test_kernel_log_read_from_kmsg_where_the_journal_has_no_kernel_message(host) -> None:
    """Issue 27: the container's journald holds no kernel message, so the XID window comes from /dev/kmsg."""
    (kernel,) = [s for s in _report(host)["xid_sources"] if s["source"] == "kernel"]
    assert (kernel["read_from"], kernel["error"]) == ("kmsg", None)
    assert kernel["tried"] == {"journal": "the journal holds no kernel message of this boot (journald does not "
                                          "read the kernel log here)"}


def test_fabric_is_single_node_with_clique_zero(host) -> None:
    """An HGX H100 completes its fabric with clique 0 and a zero cluster UUID (real 580 transcript): healthy."""
    fabric = [c for c in _report(host)["checks"] if c["name"] == "fabric"]
    assert {(c["status"], c["message"]) for c in fabric} == {
        ("ok", "GPU fabric completed (single-node: clique 0, no cluster UUID)")}


def test_fabric_manager_checked_and_active(host) -> None:
    (fm,) = [c for c in _report(host)["checks"] if c["name"] == "fabric_manager"]
    assert (fm["status"], fm["value"]) == ("ok", "active")


def test_report_files_root_owned_0644(host) -> None:
    for path in (REPORT, TEXTFILE):
        f = host.file(path)
        assert (f.user, f.group, f.mode) == ("root", "root", 0o644), path


def test_textfile_has_a_status_per_gpu_check(host) -> None:
    text = host.file(TEXTFILE).content_string
    nvlink = re.findall(r'(?m)^gpufleet_health_check_status\{check="nvlink",gpu="(\d)",uuid="GPU-[^"]+",'
                        r'pci_bus_id="[^"]+"\} 0$', text)
    assert sorted(nvlink) == [str(i) for i in range(8)]
    assert "gpufleet_health_status 0" in text.splitlines()


def test_gpusim_faults_cleared(host) -> None:
    doc = json.loads(host.file(STATE).content_string)
    assert all(not g.get("faults") for g in doc["gpus"])
