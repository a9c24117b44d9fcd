"""The built-in plans (TOML files read with importlib.resources): quick, full, layers,
contrasts, kubernetes, kubernetes-2node."""
