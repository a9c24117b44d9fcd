"""Pure parsers of real tool output (tested on checked-in output in tests/data), and the compact
latency-distribution representation they produce. May import model only.
"""
