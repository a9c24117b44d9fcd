"""Workloads: one module per benchmark, each registering itself with its parameters and facts
(ports, packages, unit of work, figure hints). Tool output goes through pure parsers.

May import loadgen, environments, telemetry, host, protocols, parsers and model; never run,
store, analysis, report or cli.
"""
