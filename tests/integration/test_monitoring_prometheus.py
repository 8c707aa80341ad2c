"""Issue 31 with real parts: a real Prometheus scrapes two lab hosts through the targets and rules that
``playbooks/monitoring.yml`` wrote, gpufleet's alerts fire for the faulty host only and resolve, and every Grafana
dashboard query answers.

What runs, all for real:

* two podman hosts from the prepared ``plain-550`` baseline image (driver and NVML bindings already there):
  ``prom-a100`` (2xA100-40GB, 127.0.221.1) and ``prom-h100`` (2xH100-NVL, 127.0.221.2), converged with the product's
  roles that make metrics: ``nvidia_mig`` on ``prom-h100`` only (GPU 0 split into two ``3g.47gb`` instances, GPU 1
  whole: the MIG dashboard needs GPU instances, the node dashboard a whole GPU), then ``nvidia_dcgm`` (its
  dcgm-exporter on the host's own loopback, ``<address>:9400``, as inventories/sim sets it: the hosts share this
  machine's network) and ``gpu_health`` (its textfile);
* node_exporter from Debian's ``prometheus-node-exporter`` package, which scripts/bootstrap.sh downloads (never at
  test time) and this test installs in each host with ``dpkg -i``: its dependencies (adduser, libc6,
  init-system-helpers) are already in the lab image, so nothing is fetched. ``/etc/default/prometheus-node-exporter``
  is written first (``--force-confold`` keeps it) with ``ARGS="--web.listen-address=<address>:9100"``, so the unit
  the package starts never binds ``:9100`` on every address of this machine. Debian's node_exporter reads textfiles
  from ``/var/lib/prometheus/node-exporter`` (the package's compiled-in default and directory), not
  ``/var/lib/node_exporter/textfile_collector`` (gpu_health's default): the inventory sets
  ``gpu_health_textfile_path`` to Debian's directory, as docs/health.md tells Debian operators;
* ``playbooks/monitoring.yml`` with ``-e gpufleet_monitoring_gpu_facts=true`` on a ``prometheus`` group holding this
  machine (connection local): file_sd targets, rules (checked by promtool on the way) and dashboards in a temporary
  directory, the alerts' ``for`` shortened (``0s``; exporters ``5s``);
* Debian's Prometheus 2.42 server (``build/prometheus/usr/bin/prometheus``, unpacked by bootstrap) on 127.0.0.1 with a
  free port, scraping and evaluating every second, with the docs' ``file_sd_configs`` and ``rule_files``; stopped at
  the end.

What it proves, in order (the tests share the hosts and the server):

1. Prometheus finds the four targets in the generated files and scrapes them (up), with the labels the role wrote
   (host, exporter, groups, gpu_model from NVML, mig_layout on the MIG host only); every rule of the generated file
   evaluates without error; both hosts publish PASS through Debian's node_exporter; no alert is pending or firing.
2. On ``prom-h100`` GPU 1: uncorrectable ECC errors and NVLink 2 down (the simulated driver's own fault injection,
   what ``gpusim fault inject`` calls, run inside the host), and XID 79 in the
   host's kernel log (``/dev/kmsg``, as the driver writes it: an XID raised before the check is read from the kernel
   log, not from NVML's events). ``gpufleet verify --limit prom-h100`` (the documented way to refresh the report)
   exits 2 with those three checks CRITICAL; Prometheus then fires exactly GpufleetHealthCritical,
   GpufleetEccUncorrectable, GpufleetXidReboot and GpufleetNvlinkDown for prom-h100 (GPU 1), nothing for prom-a100.
3. With dcgm-exporter stopped and the health textfile moved away on ``prom-a100`` (the fleet's problem panels need a
   problem): GpufleetExporterDown and GpufleetHealthReportMissing fire for prom-a100, and every panel query of every
   dashboard (roles/gpu_monitoring/files/dashboards/*.json) returns at least one series. Template variables are
   resolved through Prometheus: ``label_values(<selector>, <label>)`` as the label's values among the series present
   now (``group by (<label>) (<selector>)``; Grafana reads them over the dashboard's time range, which would still
   list the host whose report was just removed); a multi-value variable with
   "All" becomes Grafana's All regex ``(v1|v2|...)`` of every value (regex-escaped), a single-value one is tried
   with each of its values. A failure names the dashboard, the panel title and the expression as sent.
4. The fleet dashboard drawn from Prometheus' answers (instant queries for its stat and table panels, query_range for
   its time series, as Grafana asks) into a self-made HTML/SVG page (tests/integration/_dashboard_page.py; Grafana
   is not in Debian and no registry here ships it), screenshot by headless Chromium into
   ``build/monitoring-fleet-dashboard.png`` (docs/images/monitoring-fleet-dashboard.png is one such picture).
5. Faults cleared, ``prom-a100`` repaired, ``gpufleet verify`` exits 0 with PASS: every alert resolves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _chromium import png_pixels, screenshot
from _dashboard_page import COLOURS, Panel, render
from _lab_play import failed_messages, run_playbook
from _prometheus import PROMTOOL, Prometheus, poll

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import containers_conf, podman, project_root

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
A100, H100 = "prom-a100", "prom-h100"
ADDRESSES = {A100: "127.0.221.1", H100: "127.0.221.2"}
PRESETS = {A100: "2xA100-40GB", H100: "2xH100-NVL"}
#: NVML's names of the presets' GPUs (what gpu_facts reads, and the gpu_model label must carry)
MODELS = {A100: "NVIDIA A100-SXM4-40GB", H100: "NVIDIA H100 NVL"}
MIG_LAYOUT = "prom-mig"
#: Debian's node_exporter reads textfiles from here (its compiled-in --collector.textfile.directory)
DEBIAN_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
TEXTFILE = f"{DEBIAN_TEXTFILE_DIR}/gpufleet_health.prom"
NODE_EXPORTER_DEB = "prometheus-node-exporter_*.deb"
FAULT_GPU = 1
NVLINK = 2
DASHBOARDS = ROOT / "roles" / "gpu_monitoring" / "files" / "dashboards"
SCREENSHOT = ROOT / "build" / "monitoring-fleet-dashboard.png"
#: the alerts the three faults on prom-h100 GPU 1 fire: (alertname, gpu label; "" for host-wide)
FAULT_ALERTS = {("GpufleetHealthCritical", ""), ("GpufleetEccUncorrectable", str(FAULT_GPU)),
                ("GpufleetXidReboot", str(FAULT_GPU)), ("GpufleetNvlinkDown", str(FAULT_GPU))}
CONVERGE = f"""\
- name: MIG on GPU 0 of the H100 host (the MIG dashboard reads GPU instances)
  hosts: {H100}
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_mig

- name: DCGM with its exporter, then the health checks and their textfile
  hosts: gpu_nodes
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_dcgm
    - role: gpufleet.nvidia.gpu_health
"""


def _inventory(work: Path) -> dict[str, Any]:
    """Both GPU hosts in gpu_nodes (no MIG group: the sim inventory's ``ampere`` would give prom-a100 a layout it
    does not have), and this machine as the Prometheus host, writing into ``work``."""
    gpu_hosts: dict[str, Any] = {name: {**ANSIBLE_HOST_VARS, "gpufleet_sim_loopback": address,
                                        "gpu_monitoring_address": address} for name, address in ADDRESSES.items()}
    gpu_hosts[H100].update({
        "nvidia_mig_layouts": {MIG_LAYOUT: [
            {"devices": [0], "mig_enabled": True, "gpu_instances": {"3g.47gb": 2}},
            {"devices": [1], "mig_enabled": False}]},
        "nvidia_mig_layout": MIG_LAYOUT,
        # an H100 NVL pair runs with its NVLink bridges fitted: a bridge link down then fails instead of warning
        "gpu_health_thresholds": {"nvlink_bridges_expected": True}})
    monitoring = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "gpu_monitoring_file_sd_dir": str(work / "prometheus" / "file_sd"),
        "gpu_monitoring_rules_dir": str(work / "prometheus" / "rules"),
        "gpu_monitoring_grafana_dashboards_dir": str(work / "grafana" / "dashboards"),
        "gpu_monitoring_grafana_provisioning_dir": str(work / "grafana" / "provisioning"),
        "gpu_monitoring_promtool": str(PROMTOOL),
        "gpu_monitoring_health_for": "0s", "gpu_monitoring_report_missing_for": "0s",
        "gpu_monitoring_exporter_down_for": "5s"}
    return {"all": {"children": {
        "gpu_nodes": {"hosts": gpu_hosts, "vars": {"gpu_health_textfile_path": TEXTFILE}},
        "prometheus": {"hosts": {"prom-server": monitoring}}}}}


def _prometheus_config(work: Path) -> dict[str, Any]:
    """docs/health.md's scrape_configs and rule_files, on the generated files; scrape and evaluate every second."""
    file_sd = work / "prometheus" / "file_sd"
    return {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(work / "prometheus" / "rules" / "*.yml")],
            "scrape_configs": [
                {"job_name": "gpufleet_dcgm", "file_sd_configs": [{"files": [str(file_sd / "dcgm_exporter.json")]}]},
                {"job_name": "gpufleet_node", "file_sd_configs": [{"files": [str(file_sd / "node_exporter.json")]}]}]}


def _install_node_exporter(deb: Path, host: str) -> None:
    """Debian's package, offline, listening on the host's loopback only (ARGS written before the package starts it)."""
    podman(["cp", str(deb), f"{host}:/tmp/{deb.name}"])
    args = f'ARGS="--web.listen-address={ADDRESSES[host]}:9100"'
    exec_in(host, ["sh", "-c", f"printf '%s\\n' '{args}' > /etc/default/prometheus-node-exporter && "
                               f"dpkg -i --force-confold /tmp/{deb.name} >/dev/null && rm /tmp/{deb.name}"])
    assert exec_in(host, ["systemctl", "is-active", "prometheus-node-exporter"]).strip() == "active"
    assert exec_in(host, ["cat", "/etc/default/prometheus-node-exporter"]).strip() == args


def _playbook(inventory: Path, playbook: Path, work: Path, *extra: str) -> None:
    rc, doc = run_playbook(inventory, playbook, extra, work=work, timeout=900)
    assert rc == 0, f"{playbook.name} failed (rc {rc}): {failed_messages(doc)}"


def _same_repository() -> None:
    """The server on 127.0.0.1:8765 serves this checkout's repository (another checkout's run may hold the port)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{reposerver.DEFAULT_PORT}/InRelease", timeout=10) as answer:
        served = answer.read()
    assert served == (reposerver.repo_dir() / "InRelease").read_bytes(), (
        f"127.0.0.1:{reposerver.DEFAULT_PORT} serves another repository than {reposerver.repo_dir()} (another "
        "checkout's tests hold the port?): the hosts' apt would fetch packages that do not match their lists")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The two converged hosts with node_exporter, the monitoring playbook's files, and a running Prometheus."""
    debs = sorted((ROOT / "build" / "prometheus" / "deb").glob(NODE_EXPORTER_DEB))
    assert debs, ("build/prometheus/deb holds no prometheus-node-exporter .deb: run scripts/bootstrap.sh (it "
                  "downloads Debian's package there)")
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("monitoring-prometheus")
    inventory = work / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(json.dumps(_inventory(work)), encoding="utf-8")
    (inventory / "group_vars").symlink_to(ROOT / "inventories" / "sim" / "group_vars")
    (work / "converge.yml").write_text(CONVERGE, encoding="utf-8")
    (work / "prometheus.yml").write_text(yaml.safe_dump(_prometheus_config(work)), encoding="utf-8")
    server_pid = reposerver.start()  # nvidia_dcgm installs DCGM from the simulated repository
    prometheus: Prometheus | None = None
    try:
        _same_repository()
        image = lab_hosts().ensure_baselines({"plain-550"})["plain-550"]
        start_hosts([HostSpec(name, PRESETS[name], ADDRESSES[name]) for name in (A100, H100)], image=image)
        for host in (A100, H100):
            _install_node_exporter(debs[-1], host)
        _playbook(inventory, work / "converge.yml", work)
        _playbook(inventory, ROOT / "playbooks" / "monitoring.yml", work, "gpufleet_monitoring_gpu_facts=true")
        started = time.time()
        prometheus = Prometheus(work / "prometheus.yml", work)
        prometheus.wait_ready()
        yield {"work": work, "inventory": inventory, "prometheus": prometheus, "started": started}
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_hosts([A100, H100])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def verify(lab: dict[str, Any], host: str) -> tuple[int, dict[str, Any]]:
    """``gpufleet verify --limit host --json``: the operator's command that refreshes the health report."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))
    proc = subprocess.run([sys.executable, "-m", "gpufleet.cli", "verify", "-i", str(lab["inventory"]), "--limit",
                           host, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"gpufleet verify printed no JSON (rc {proc.returncode}): {proc.stdout[-3000:]} "
                    f"{proc.stderr[-3000:]}")


def failing_checks(doc: dict[str, Any], host: str) -> list[tuple[str, int | None, str, str]]:
    report = doc["hosts"][host]["module_data"]["health"]["health"]
    return sorted((c["name"], c["gpu"]["index"] if c["gpu"] else None, c["level"], c["action"])
                  for c in report["checks"] if c["status"] != "ok")


def alert_keys(alerts: list[dict[str, Any]], host: str, state: str = "firing") -> set[tuple[str, str]]:
    return {(a["labels"]["alertname"], a["labels"].get("gpu", "")) for a in alerts
            if a["state"] == state and a["labels"].get("host") == host}


# --------------------------------------------------------------------------------------------------- 1. scraping


def test_prometheus_scrapes_both_hosts_through_the_generated_targets(lab: dict[str, Any]) -> None:
    prom: Prometheus = lab["prometheus"]
    targets = poll(lambda: prom.api("targets", state="active")["activeTargets"],
                   lambda ts: len(ts) == 4 and all(t["health"] == "up" for t in ts), 60,
                   "Prometheus scraping the four generated targets")
    got = sorted((t["labels"]["job"], t["labels"]["instance"], t["labels"]["host"], t["labels"]["exporter"],
                  t["labels"]["groups"], t["labels"].get("gpu_model"), t["labels"].get("mig_layout"))
                 for t in targets)
    expected = [(job, f"{ADDRESSES[host]}:{port}", host, exporter, ",gpu_nodes,", MODELS[host],
                 MIG_LAYOUT if host == H100 else None)
                for job, port, exporter in (("gpufleet_dcgm", 9400, "dcgm-exporter"),
                                            ("gpufleet_node", 9100, "node_exporter"))
                for host in (A100, H100)]
    assert got == sorted(expected)
    # the health textfile in Debian's textfile directory reaches Prometheus through Debian's node_exporter
    levels = sorted((s["metric"]["host"], s["metric"]["level"], s["metric"]["action"], s["value"][1])
                    for s in prom.query("gpufleet_health_info"))
    assert levels == [(A100, "PASS", "none", "1"), (H100, "PASS", "none", "1")]
    # every rule of the generated file loaded and evaluated without an error
    rules_file = lab["work"] / "prometheus" / "rules" / "gpufleet.rules.yml"
    names = sorted(r.get("alert") or r["record"] for g in yaml.safe_load(rules_file.read_text("utf-8"))["groups"]
                   for r in g["rules"])
    loaded = poll(lambda: prom.api("rules")["groups"],
                  lambda gs: all(r.get("health") == "ok" for g in gs for r in g["rules"])
                  and len([r for g in gs for r in g["rules"]]) == len(names), 30, "every rule evaluated")
    assert sorted(r["name"] for g in loaded for r in g["rules"]) == names
    assert {g["file"] for g in loaded} == {str(rules_file)}
    poll(prom.alerts, lambda alerts: alerts == [], 20, "no alert on two healthy hosts")


# --------------------------------------------------------------------------------------------------- 2. faults


def hardware(host: str, call: str) -> None:
    """The simulated driver's hardware module on the host, what ``gpusim fault inject|clear`` calls on the controller
    (shipped with libnvidia-ml1; the host has no ``gpusim``), as molecule/_shared/tasks/sim_hardware.yml does.
    """
    exec_in(host, ["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python'); "
                   f"from nvidia_sim import hardware; print(hardware.{call})"])


def _kernel_xid(host: str, gpu: int, code: int, text: str) -> None:
    """The driver's ``NVRM: Xid`` record in the host's kernel log (/dev/kmsg: priority,sequence,usec,flags;text)."""
    bus = exec_in(host, ["nvidia-smi", "-i", str(gpu), "--query-gpu=pci.bus_id", "--format=csv,noheader"]).strip()
    kernel_bus = re.sub(r"\.[0-9]$", "", bus[4:])  # 00000000:BB:DD.F -> the kernel's 0000:BB:DD
    record = f"NVRM: Xid (PCI:{kernel_bus}): {code}, pid='<unknown>', name=<unknown>, {text}"
    script = ('usec=$(python3 -c "import time; print(int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6))") && '
              "printf '3,90001,%s,-;%s\\n' \"$usec\" \"$1\" >> /dev/kmsg")
    exec_in(host, ["sh", "-c", script, "xid", record])


def test_faults_on_one_host_fire_their_alerts_for_that_host_only(lab: dict[str, Any]) -> None:
    prom: Prometheus = lab["prometheus"]
    hardware(H100, f"inject('ecc-uncorrectable', '{FAULT_GPU}', {{'count': 2}})")
    hardware(H100, f"inject('nvlink-down', '{FAULT_GPU}', {{'link': {NVLINK}}})")
    _kernel_xid(H100, FAULT_GPU, 79, "GPU has fallen off the bus.")
    rc, doc = verify(lab, H100)
    assert rc == 2, doc.get("error") or doc["hosts"][H100].get("failed_tasks")
    assert failing_checks(doc, H100) == [("ecc_uncorrected_volatile", FAULT_GPU, "CRITICAL", "reset_gpu"),
                                         ("nvlink", FAULT_GPU, "CRITICAL", "drain"),
                                         ("xid", FAULT_GPU, "CRITICAL", "reboot")]
    alerts = poll(prom.alerts, lambda al: alert_keys(al, H100) == FAULT_ALERTS, 60,
                  f"alerts {sorted(FAULT_ALERTS)} firing for {H100}")
    assert [a["labels"] for a in alerts if a["labels"].get("host") != H100] == []
    by_name = {a["labels"]["alertname"]: a for a in alerts}
    critical = by_name["GpufleetHealthCritical"]
    assert (critical["labels"]["action"], critical["labels"]["severity"]) == ("reboot", "critical")
    assert critical["annotations"]["summary"] == f"GPU health CRITICAL on {H100} (action: reboot)"
    uuid = by_name["GpufleetNvlinkDown"]["labels"]["uuid"]
    assert uuid == exec_in(H100, ["nvidia-smi", "-i", str(FAULT_GPU), "--query-gpu=uuid",
                                  "--format=csv,noheader"]).strip()
    assert by_name["GpufleetNvlinkDown"]["annotations"]["summary"] == f"NVLink down on {H100} GPU {FAULT_GPU}"
    assert by_name["GpufleetXidReboot"]["annotations"]["runbook_url"] == "docs/health.md#runbook-gpufleetxid"
    assert by_name["GpufleetEccUncorrectable"]["annotations"]["summary"] == (
        f"Uncorrectable ECC errors on {H100} GPU {FAULT_GPU}")


# --------------------------------------------------------------------------------------------------- 3, 4. dashboards


def _grafana_regex_escape(value: str) -> str:
    """What Grafana's Prometheus data source escapes in a multi-value variable's values."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\1", value)


def variable_values(prom: Prometheus, variable: dict[str, Any]) -> list[str]:
    """A query variable's values now: ``label_values(<selector>, <label>)`` as ``group by (<label>) (<selector>)``."""
    query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
    match = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)", query)
    assert match, f"variable ${variable['name']}: a query this test cannot resolve: {query}"
    series = prom.query(f"group by ({match.group(2)}) ({match.group(1)})")
    return sorted({s["metric"][match.group(2)] for s in series if match.group(2) in s["metric"]})


def panel_queries(prom: Prometheus, dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, template expression, expression as sent) for every target of every panel, each single-value
    variable tried with every value."""
    choices: dict[str, list[str]] = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable["type"] != "query":
            continue
        values = variable_values(prom, variable)
        assert values, f"{dashboard['title']}: variable ${variable['name']} has no value in Prometheus"
        if variable.get("includeAll") and variable.get("multi"):
            choices[variable["name"]] = ["(" + "|".join(_grafana_regex_escape(v) for v in values) + ")"]
        else:
            choices[variable["name"]] = values
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expressions = [target["expr"]]
            for name, values in choices.items():
                expressions = [e.replace(f"${name}", v) for e in expressions for v in values] if any(
                    f"${name}" in e for e in expressions) else expressions
            assert all("$" not in e for e in expressions), f"{panel['title']}: unresolved variable in {expressions}"
            queries += [(panel["title"], target["expr"], e) for e in expressions]
    return queries


@pytest.fixture(scope="class")
def a100_broken(lab: dict[str, Any]) -> Iterator[Prometheus]:
    """prom-a100 with its dcgm-exporter stopped and its health textfile moved away; repaired afterwards."""
    prom: Prometheus = lab["prometheus"]
    exec_in(A100, ["systemctl", "stop", "nvidia-dcgm-exporter"])
    exec_in(A100, ["mv", TEXTFILE, f"{TEXTFILE}.away"])
    try:
        poll(prom.alerts, lambda al: alert_keys(al, A100) == {("GpufleetExporterDown", ""),
                                                                ("GpufleetHealthReportMissing", "")}, 60,
             f"GpufleetExporterDown and GpufleetHealthReportMissing firing for {A100}")
        yield prom
    finally:
        exec_in(A100, ["mv", f"{TEXTFILE}.away", TEXTFILE])
        exec_in(A100, ["systemctl", "start", "nvidia-dcgm-exporter"])


class TestDashboardsWhileEveryProblemPanelHasAProblem:
    """prom-h100 keeps its faults (test 2); prom-a100 has an exporter down and no health report."""

    def test_exporter_down_and_missing_report_fire_for_that_host(self, a100_broken: Prometheus) -> None:
        down = [a for a in a100_broken.alerts() if a["labels"]["alertname"] == "GpufleetExporterDown"]
        assert [(a["labels"]["host"], a["labels"]["exporter"], a["labels"]["instance"]) for a in down] == [
            (A100, "dcgm-exporter", f"{ADDRESSES[A100]}:9400")]
        assert alert_keys(a100_broken.alerts(), H100) == FAULT_ALERTS

    def test_every_dashboard_panel_query_returns_series(self, a100_broken: Prometheus) -> None:
        empty, asked = [], 0
        for path in sorted(DASHBOARDS.glob("*.json")):
            dashboard = json.loads(path.read_text(encoding="utf-8"))
            for title, template, expr in panel_queries(a100_broken, dashboard):
                asked += 1
                if not a100_broken.query(expr):
                    empty.append(f"{dashboard['title']} / {title}: {expr}" + (
                        f" (from {template})" if template != expr else ""))
        assert empty == [], "panels whose query returned no series:\n" + "\n".join(empty)
        assert asked >= 25, f"only {asked} panel queries found in {DASHBOARDS}"

    def test_the_fleet_dashboard_drawn_from_prometheus(self, lab: dict[str, Any], a100_broken: Prometheus) -> None:
        dashboard = json.loads((DASHBOARDS / "gpufleet-fleet.json").read_text(encoding="utf-8"))
        start, end = lab["started"], time.time()
        panels = []
        for spec in dashboard["panels"]:
            target = spec["targets"][0]
            if target.get("instant"):
                series = a100_broken.query(target["expr"])
            else:
                series = a100_broken.api("query_range", query=target["expr"], start=start, end=end, step=1)["result"]
            assert series, f"{dashboard['title']} / {spec['title']}: no series for {target['expr']}"
            panels.append(Panel(spec, series))
        caption = (f"Drawn by tests/integration/test_monitoring_prometheus.py from Prometheus 2.42's answers "
                   f"(not Grafana): hosts {A100} (dcgm-exporter stopped, health report removed) and {H100} "
                   f"(ECC, XID 79, NVLink faults on GPU {FAULT_GPU}), the last {end - start:.0f} s")
        page = lab["work"] / "fleet-dashboard.html"
        page.write_text(render(dashboard, panels, start, end, caption), encoding="utf-8")
        rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
        height = rows * 30 + 90
        screenshot(page, SCREENSHOT, width=1420, height=height)
        width, got_height, pixels = png_pixels(SCREENSHOT)
        assert (width, got_height) == (1420, height)
        colours = set(pixels)
        for colour in COLOURS[:2]:  # the first two series of a panel: its values (stat) or lines (time series)
            rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
            assert any(all(abs(p[i] - rgb[i]) <= 12 for i in range(3)) for p in colours), (
                f"no pixel of the series colour {colour} in {SCREENSHOT}: nothing was drawn")


# --------------------------------------------------------------------------------------------------- 5. resolved


def test_cleared_faults_and_a_repaired_host_resolve_every_alert(lab: dict[str, Any]) -> None:
    prom: Prometheus = lab["prometheus"]
    hardware(H100, f"clear(None, '{FAULT_GPU}')")
    exec_in(H100, ["sh", "-c", ": > /dev/kmsg"])
    rc, doc = verify(lab, H100)
    assert rc == 0, doc["hosts"][H100].get("failed_tasks")
    assert failing_checks(doc, H100) == []
    poll(prom.alerts, lambda alerts: alerts == [], 60, "every alert resolved")
    levels = sorted((s["metric"]["host"], s["metric"]["level"]) for s in prom.query("gpufleet_health_info"))
    assert levels == [(A100, "PASS"), (H100, "PASS")]
    assert prom.query('up{exporter=~"dcgm-exporter|node_exporter"} == 0') == []
