"""The test suite caches bytecode even where the environment says PYTHONDONTWRITEBYTECODE: without it every
pytest-xdist worker compiles and assertion-rewrites every module on every run (seconds of each run), and
every ``python -m mqctl`` a test starts compiles mqctl again. This package is imported before any conftest
or test module; the caches land in the git-ignored ``__pycache__`` directories."""

import sys

sys.dont_write_bytecode = False
