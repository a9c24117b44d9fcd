"""The results store: SQLite behind one protocol, schema-versioned; bundles to move runs between
machines. May import model only.
"""
