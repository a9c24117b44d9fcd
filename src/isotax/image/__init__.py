"""The workload image: one Debian rootfs, built once, exported as a directory, ext4 and tar.

Below the plugins' contracts: the packages it holds are declared by the workloads, and its
callers (cli, run, the VM's accelerator probe) hand them to the recipe. May import parsers and
model only.
"""
