"""One list of the metrics gpufleet's monitoring reads (roles/gpu_monitoring/files/metrics.yml), held to what writes
them and what reads them: gpu_health's textfile template writes exactly the gpufleet metrics and labels listed; the
rules and every dashboard query use only listed metrics (or the rules' own recordings); each dcgm-exporter field
listed is emitted by the simulated exporter and configured by the nvidia_dcgm role."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles/gpu_monitoring"
TABLE = yaml.safe_load((ROLE / "files/metrics.yml").read_text(encoding="utf-8"))
TEXTFILE_TEMPLATE = REPO / "roles/gpu_health/templates/gpufleet_health.prom.j2"
RULES_TEMPLATE = ROLE / "templates/gpufleet.rules.yml.j2"

#: PromQL words that are not metric names
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
             "inf", "nan"}


def promql_metrics(expr: str) -> set[str]:
    """Metric names of a PromQL expression: identifiers that are neither functions, keywords nor labels."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)              # string literals
    text = re.sub(r"\{[^}]*\}", "", text)                          # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)                         # ranges
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        after = text[match.end():].lstrip()
        word = match.group(0)
        if after.startswith("(") or word.lower() in _KEYWORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('up{exporter="node_exporter"} == 1 unless on (host) gpufleet_health_status', {"up", "gpufleet_health_status"}),
        ("avg by (modelName, GPU_I_PROFILE) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_PROFILE!=\"\"})",
         {"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}),
        ("time() - gpufleet_health_report_timestamp_seconds > 86400", {"gpufleet_health_report_timestamp_seconds"}),
        ("rate(x_total[5m]) or vector(0)", {"x_total"}),
        ('label_values(up{exporter="dcgm-exporter",mig_layout!=""}, host)', {"up", "host"}),
    ],
)
def test_the_extractor(expr: str, names: set[str]) -> None:
    assert promql_metrics(expr) == names


def _template_series() -> dict[str, set[str]]:
    """Metric -> label names, from the sample lines of gpu_health's textfile template."""
    found: dict[str, set[str]] = {}
    for line in TEXTFILE_TEMPLATE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^(gpufleet_[a-z_]+)(\{.*\})? ", line)
        if match:
            labels = set(re.findall(r'([a-z_]+)="', match.group(2) or ""))
            found.setdefault(match.group(1), set()).update(labels)
        help_match = re.match(r"^# (HELP|TYPE) (gpufleet_[a-z_]+) ", line)
        if help_match:
            found.setdefault(help_match.group(2), set())
    return found


def test_the_textfile_writes_exactly_the_listed_metrics_and_labels() -> None:
    listed = {name: set(spec["labels"]) for name, spec in TABLE["gpufleet_textfile"].items()}
    assert _template_series() == listed


def _rules() -> list[dict]:
    text = RULES_TEMPLATE.read_text(encoding="utf-8")
    text = re.sub(r"^\[\[ ansible_managed.*$", "", text, flags=re.M)
    text = re.sub(r"\[%.*?%\]", "", text, flags=re.S)         # the role's Jinja blocks
    text = re.sub(r"\[\[.*?\]\]", "1", text)                   # and variables
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def _recordings() -> set[str]:
    return {r["record"] for r in _rules() if "record" in r}


def _known() -> set[str]:
    return (set(TABLE["gpufleet_textfile"]) | set(TABLE["dcgm_exporter"]["fields"]) | set(TABLE["prometheus"])
            | _recordings())


def test_the_rules_use_only_listed_metrics() -> None:
    used = set().union(*(promql_metrics(str(r["expr"])) for r in _rules()))
    assert used - _known() == set()
    # and the list has nothing the rules and dashboards do not read
    assert set(TABLE["gpufleet_textfile"]) - used - _dashboard_metrics() == {"gpufleet_health_checks"}


def _dashboard_queries() -> list[tuple[str, str]]:
    queries = []
    for path in sorted((ROLE / "files/dashboards").glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        for panel in board["panels"]:
            queries += [(f"{path.name}: {panel['title']}", t["expr"]) for t in panel["targets"]]
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                query = var["query"]["query"]
                match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
                assert match, query
                queries.append((f"{path.name}: ${var['name']}", match.group(1)))
    return queries


def _dashboard_metrics() -> set[str]:
    return set().union(*(promql_metrics(expr) for _, expr in _dashboard_queries()))


def test_every_dashboard_query_uses_only_listed_metrics() -> None:
    queries = _dashboard_queries()
    assert len(queries) >= 25
    for where, expr in queries:
        assert promql_metrics(expr), where
        assert promql_metrics(expr) - _known() == set(), where


def test_dashboards_are_the_ones_the_role_copies() -> None:
    listed = yaml.safe_load((ROLE / "vars/main.yml").read_text(encoding="utf-8"))["__gpu_monitoring_dashboards"]
    assert sorted(listed) == sorted(p.name for p in (ROLE / "files/dashboards").glob("*.json"))
    uids = [json.loads((ROLE / "files/dashboards" / name).read_text(encoding="utf-8"))["uid"] for name in listed]
    assert uids == [name.removesuffix(".json") for name in listed]


def test_listed_dcgm_fields_are_emitted_by_the_simulator_and_configured_by_nvidia_dcgm() -> None:
    from gpufleet_sim.tools import dcgm_exporter

    defaults = yaml.safe_load((REPO / "roles/nvidia_dcgm/defaults/main.yml").read_text(encoding="utf-8"))
    for field, counters in TABLE["dcgm_exporter"]["fields"].items():
        assert field in dcgm_exporter.FIELDS, field
        assert field in {c["field"] for c in defaults[counters]}, (field, counters)


def test_listed_dcgm_labels_are_the_simulators() -> None:
    source = (REPO / "simulator/src/gpufleet_sim/tools/dcgm_exporter.py").read_text(encoding="utf-8")
    for label in TABLE["dcgm_exporter"]["labels"]:
        assert f'"{label}"' in source, label


def test_the_docs_name_every_textfile_metric() -> None:
    health = (REPO / "docs/health.md").read_text(encoding="utf-8")
    for name in TABLE["gpufleet_textfile"]:
        assert name in health, name
