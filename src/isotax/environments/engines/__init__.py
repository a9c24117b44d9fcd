"""Container engines that own their own image store and networking: Docker and Podman.

commands.py, client.py, iptables.py (pure command lines, the engine's client and image, the
rules it leaves) -> engine.py (one container; Engine, the kinds' shared base) -> docker.py,
podman.py (the kinds)."""
