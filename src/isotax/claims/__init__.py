"""The built-in claims files (TOML, read with importlib.resources): the reference studies'
findings and the runtimes' own published figures, each written from its source before it was
judged on any host (docs/studies.md gives every figure and where it comes from)."""
