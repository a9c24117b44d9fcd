"""Pure parsers of real tool output and of the kernel's /proc, /sys and cgroup files (procfs:
one reader per format), tested on checked-in output in tests/data, and the compact
latency-distribution representation they produce. May import model only.
"""
