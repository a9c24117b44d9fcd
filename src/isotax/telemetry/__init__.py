"""Telemetry: what the host and each environment did while a cell ran. Exact CPU accounting
(cgroups), /proc sampling, perf counters, process footprints, and one typed summary per
measured cell (summary.TelemetrySummary).

Environments use its accounting and footprint helpers, so it sits below them: it may import
host, protocols, parsers and model, never environments, workloads or anything above.
"""
