"""OCI runtimes over one bundle built from the workload image: runc, crun, and gVisor (runsc)."""
