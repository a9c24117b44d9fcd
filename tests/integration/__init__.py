"""The integration room: real environments (containers, sandboxes, VMs), root, runtimes,
network namespaces and real tools; each test skips, saying what is missing, where this
machine lacks what it needs. Run as root after scripts/setup.sh (`pytest tests/integration`).
A package so that a module may share its name with one in tests/unit."""
