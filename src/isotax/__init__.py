"""isotax: measure the isolation tax of containers, sandboxes and VMs against native."""

__version__ = "0.1.0"
