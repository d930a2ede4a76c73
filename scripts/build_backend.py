"""The build backend (pyproject.toml's ``build-backend``): setuptools' own, except that a wheel which will be
compiled asks for mypy (pyproject's ``native`` extra) to build. mypy is a build requirement of that wheel
only: an editable install (``make``) compiles nothing (``make native`` builds ``build/native`` beside the
sources), and a machine without a C compiler builds the pure package, so neither downloads mypy."""

from __future__ import annotations

from typing import Any

import build_native
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook as setuptools defines it)


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    needed: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    return needed if build_native.why_pure() else [*needed, *build_native.build_requirements()]
