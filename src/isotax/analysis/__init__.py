"""Analysis: from stored samples to answers. Statistics (ratios with bootstrap intervals, the A/A
noise floor), latency distributions pooled, adaptive repetitions, CPU cost per unit of work,
the suspected limiter and its explanation, layer attribution, and run-to-run comparison.

Reads the store and the plan; may import store, host, telemetry, parsers, plan, protocols and
model. Never imports run, report or cli: the report renders what analysis decided.
"""
