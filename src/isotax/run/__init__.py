"""Running a plan: the runner (cells interleaved across environments, every sample committed as
it arrives), finishing a cell (finish: what the runner adds to a workload's samples and
telemetry), launchers, applicability, identity checks and leak finding; and before any of
it, whether this host can run the plan at all (feasibility).

May import everything below it: analysis (the runner asks it whether more repetitions would
decide something), store, workloads, loadgen, environments, telemetry, host, plan, protocols,
image, parsers and model; never report or cli.
"""
