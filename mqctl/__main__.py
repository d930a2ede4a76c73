"""Console entry point: ``mqctl`` and ``python -m mqctl``."""

from __future__ import annotations


def main() -> None:
    from mqctl.cli.app import run

    run()


if __name__ == "__main__":
    main()
