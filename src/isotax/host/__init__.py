"""The host: its fingerprint, tuning and reset, NUMA topology, resource parity between
environments, network plumbing (namespaces, bridges, iptables) and locks.

Facts about and changes to the machine itself; may import protocols, parsers and model only.
"""
