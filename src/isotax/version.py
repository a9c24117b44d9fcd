"""isotax's version, in a module of its own: the modules that record it (the fingerprint, a
bundle's manifest, `isotax --version`) import this, not the root package, whose isotax.load()
reaches the data layer (no import cycle through the root)."""

__version__ = "0.1.0"
