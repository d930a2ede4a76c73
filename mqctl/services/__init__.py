"""Services behind the CLI: they take an ``Admin`` (or a store) and return results; they never print."""
