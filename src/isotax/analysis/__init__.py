"""Analysis: from stored samples to answers. Statistics (ratios with bootstrap intervals, the A/A
noise floor), latency distributions pooled, sequential verdicts, CPU cost per unit of work,
the suspected limiter and its explanation, layer attribution, and run-to-run comparison.

Reads the store and the plan; may import store, workloads (their declared facts), loadgen,
environments, telemetry, host, plan, protocols, image, parsers and model. Never run, report or
cli: the runner consults it during a run, the report renders what it decided.
"""
