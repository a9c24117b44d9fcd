"""The built-in plans (TOML files read with importlib.resources): quick, full, layers,
contrasts, kubernetes, kubernetes-2node, pod-startup, studies (written by
isotax.analysis.claims_plan from the built-in claims: a unit test keeps it so)."""
