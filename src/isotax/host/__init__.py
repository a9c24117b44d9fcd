"""The host: its fingerprint, tuning and reset, NUMA topology, resource parity between
environments, network plumbing (namespaces, bridges, iptables), locks, and the one way to run
a host command with a time limit (command: its whole process group is killed on timeout).

Facts about and changes to the machine itself; may import protocols, parsers, facts and
model only.
"""
