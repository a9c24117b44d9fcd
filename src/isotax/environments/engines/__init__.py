"""Container engines that own their own image store and networking: Docker and Podman."""
