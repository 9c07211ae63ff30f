"""The alert rules and the Grafana dashboard in docs/ name metrics that exist."""

from __future__ import annotations

import json
import re

from jobledger.observability.metrics import Metrics
from jobledger.observability.snapshot import SnapshotCache

from ..support.metrics import parse
from ..support.processes import ROOT

METRIC = re.compile(r"\bjobledger_[a-z_]+\b")
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_info", "_created")


def _exported(ledger) -> set[str]:
    metrics = Metrics(process=False)
    metrics.add_ledger(SnapshotCache(ledger, live_seconds=0))
    names = set()
    for family in parse(metrics.render()[0].decode()).values():
        names.add(family.name)
        names.update(s.name for s in family.samples)
        names.update(family.name + suffix for suffix in SUFFIXES)
    return names


def test_the_docs_alert_and_chart_only_metrics_that_exist(tmp_path):
    from jobledger import Ledger

    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    exported = _exported(ledger)
    ledger.close()
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs, "the Grafana dashboard has panels"
    texts = {
        "grafana-dashboard.json": "\n".join(exprs),
        "operations.md": (ROOT / "docs" / "operations.md").read_text(),
        "observability.md": (ROOT / "docs" / "observability.md").read_text(),
    }
    for name, text in texts.items():
        unknown = sorted(set(METRIC.findall(text)) - exported - {"jobledger_minute_stats"})
        assert unknown == [], f"{name} names metrics nobody exports: {unknown}"
    assert "jobledger_oldest_due_pending_age_seconds" in texts["operations.md"]
