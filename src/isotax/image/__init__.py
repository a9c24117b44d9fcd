"""The workload image: one Debian rootfs, built once, exported as a directory, ext4 and tar."""
