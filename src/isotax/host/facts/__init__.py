"""What isotax knows of the host and of what runs on it: its fingerprint and the versions a run
ran with (fingerprint, versions), its NUMA nodes, filesystems, cgroup tree and free space
(numa, filesystems, cgroups, diskspace), and what each environment was given and found to be
(parity, description)."""
