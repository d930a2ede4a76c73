"""The test suite caches bytecode even where the environment says PYTHONDONTWRITEBYTECODE: without it every
pytest-xdist worker compiles and assertion-rewrites every module on every run (seconds of each run). This
package is imported before any conftest or test module; the caches land in the git-ignored ``__pycache__``
directories. Child processes (``python -m mqctl``) keep the environment's setting: they write no caches but
read the ones the test process wrote."""

import sys

sys.dont_write_bytecode = False
