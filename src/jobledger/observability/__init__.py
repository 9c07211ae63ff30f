"""What operators see: Prometheus metrics, structured logs, per-minute rollups for the
dashboard's charts, and cached snapshots of the ledger's state. See docs/observability.md.

The submodules are imported on first use, so that importing the ledger (which records
rollups) does not import ``prometheus_client``.
"""

from __future__ import annotations

from .._lazy import lazy_attributes

_EXPORTS = {
    "ConsoleFormatter": "logs",
    "JsonFormatter": "logs",
    "configure_logging": "logs",
    "LedgerCollector": "metrics",
    "Metrics": "metrics",
    "MetricsServer": "metrics",
    "install_metrics": "metrics",
    "metrics_for": "metrics",
    "MinuteStatsRecorder": "rollup",
    "install_rollups": "rollup",
    "rollups_of": "rollup",
    "LedgerSnapshot": "snapshot",
    "QueueView": "snapshot",
    "SnapshotCache": "snapshot",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_attributes(__name__, _EXPORTS, globals())
