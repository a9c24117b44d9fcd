"""Load generators: where network workloads' clients run and how they reach each environment.
Today a network namespace on this host joined by a veth pair (local).

Workloads use it, and it starts servers inside environments, so it sits between them: may
import environments, telemetry, host, protocols and model; never workloads or above.
"""
