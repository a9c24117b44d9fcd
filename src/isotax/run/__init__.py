"""Running a plan: the runner (cells interleaved across environments, every sample committed as
it arrives), finishing a cell (finish: what the runner adds to a workload's samples and
telemetry), launchers, applicability, identity checks and leak finding.

May import everything below it: analysis (the runner asks it whether more repetitions would
decide something), store, workloads, loadgen, environments, telemetry, host, plan, protocols,
image, parsers and model; never report or cli.
"""
