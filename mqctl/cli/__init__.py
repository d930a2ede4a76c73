"""The ``mqctl`` command line: one Typer sub-app per noun, registered in :mod:`mqctl.cli.app`."""
