"""Reading Prometheus metrics in tests: parse the exposition with prometheus_client's parsers
(the classic text format and the stricter OpenMetrics one) and check the naming conventions."""

from __future__ import annotations

import re
from typing import Any

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
PREFIXES = ("jobledger_", "process_", "python_")
FORBIDDEN_LABELS = {"id", "job_id", "key", "job", "message_id", "lease_token", "token", "receipt"}
NOT_BASE_UNITS = ("_milliseconds", "_ms", "_minutes", "_hours", "_days", "_bytes_kb", "_percent")


def parse(text: str) -> dict[str, Any]:
    """Families by name from the text format (raises on a malformed exposition)."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def parse_openmetrics(text: str) -> dict[str, Any]:
    assert text.rstrip().endswith("# EOF"), "an OpenMetrics exposition ends with # EOF"
    return {f.name: f for f in openmetrics_families(text)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """The value of one sample, by sample name and labels (0 when absent)."""
    for family in families.values():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def convention_problems(families: dict[str, Any]) -> list[str]:
    """What breaks the Prometheus naming conventions (https://prometheus.io/docs/practices/naming)."""
    problems = []
    for name, family in families.items():
        if not NAME.match(name):
            problems.append(f"{name}: not a valid metric name")
        if not name.startswith(PREFIXES):
            problems.append(f"{name}: no jobledger_ prefix")
        if not family.documentation:
            problems.append(f"{name}: no HELP text")
        if any(name.endswith(bad) or f"{bad}_" in name for bad in NOT_BASE_UNITS):
            problems.append(f"{name}: not in a base unit")
        if "timestamp" in name and not name.endswith("_timestamp_seconds"):
            problems.append(f"{name}: a unix time is named *_timestamp_seconds")
        if family.type == "counter" and name.endswith("_total"):
            problems.append(f"{name}: the family of a counter is named without _total")
        if family.type != "counter" and name.endswith("_total"):
            problems.append(f"{name}: only counters end in _total")
        for sample in family.samples:
            if family.type == "counter" and not sample.name.endswith(("_total", "_created")):
                problems.append(f"{sample.name}: a counter's sample must end in _total")
            bad = FORBIDDEN_LABELS & set(sample.labels)
            if bad:
                problems.append(f"{sample.name}: unbounded label(s) {sorted(bad)}")
        if (
            family.type == "histogram"
            and name.startswith("jobledger_")
            and ("seconds" not in name and "attempts" not in name)
        ):
            problems.append(f"{name}: a histogram names its unit")
    return problems
