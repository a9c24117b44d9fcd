"""Virtual machines on QEMU: the full VM, -M microvm, a container in a VM (vm9p), and their
helpers (accelerator probe, guest agent, initrd, shared directories, host tuning)."""
