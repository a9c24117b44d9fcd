"""Running a plan: the runner (cells interleaved across environments, every sample committed as
it arrives), launchers, applicability, identity checks and leak finding.

May import everything below it (store, workloads, loadgen, environments, telemetry, host, plan,
image, parsers, model); never analysis, report or cli.
"""
