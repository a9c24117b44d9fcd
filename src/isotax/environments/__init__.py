"""Environments: one module per kind of place a workload runs, grouped by family. The host
itself (native) and systemd-nspawn here; OCI runtimes and gVisor in oci/; engines in engines/;
virtual machines in vm/. Each module registers its kind; nothing else lists them. The plugins
never import each other (an import-linter independence contract): what several share lives in
base.py, container_fs.py and runtime_cli.py here, or in host.

May import telemetry (accounting, footprint), host, image, protocols, parsers and model; never
loadgen, workloads or anything above.
"""
