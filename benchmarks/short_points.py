"""The short workload points the benchmark plans share: a TCP request/response second and a
second of 4 KiB random reads, each cell a second or two. TOML text for the end of a plan
template that is .format()ted (its braces doubled)."""

from __future__ import annotations

RR_AND_FIO = """\
[[workloads]]
name = "rr"
params = {{ proto = "tcp", seconds = 1, tail = false }}

[[workloads]]
name = "fio"
[workloads.params]
pattern = "randread"
bs = "4k"
iodepth = 16
size_mib = 16
runtime_s = 1
ramp_s = 0
"""
