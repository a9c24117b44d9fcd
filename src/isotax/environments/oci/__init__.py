"""OCI runtimes over one bundle built from the workload image: runc, crun, and gVisor (runsc).

bundle.py (the bundle: config.json, root filesystem) -> runtime.py (the runtime's command line,
probe, leftovers) -> instance.py (one container; OciEnvironment, the kinds' shared base) ->
runc.py, crun.py, gvisor.py (the kinds)."""
