"""Kubernetes environments: a pod of a RuntimeClass on a cluster (pod.py)."""
