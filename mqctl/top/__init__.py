"""``mqctl top``: a live terminal view of a cluster (Textual, imported only by the ``top`` command)."""
