"""The results store: SQLite behind one protocol, schema-versioned; bundles to move runs between
machines. May import model and the typed telemetry summary (isotax.telemetry.summary, which it
keeps as JSON) only.
"""
