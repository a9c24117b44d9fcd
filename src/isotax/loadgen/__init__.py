"""Load generators: where network workloads' clients run and how they reach each environment.
A network namespace on this host joined by a veth pair (local), or a second machine reached
over SSH (ssh), as the plan's [loadgen] says (choose).

Workloads use it, and it starts servers inside environments, so it sits between them: may
import environments, telemetry, host, plan, protocols, parsers and model; never workloads or
above.
"""
