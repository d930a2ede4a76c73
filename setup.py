"""The build's one hook (the metadata is pyproject.toml's): a wheel (``pip install .``, ``pip wheel .``)
carries the broker's hot modules compiled with mypyc where a C compiler builds Python extensions, as
``store/_native/`` beside the pure package (store/native.py loads it while it matches the installed
sources), and is the pure package, tagged ``py3-none-any``, where none does or with ``MQCTL_NATIVE=0``.
An editable install compiles nothing: ``make native`` builds ``build/native`` beside the sources."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))
import build_native


def _why_pure() -> str | None:
    if importlib.util.find_spec("mypyc") is None:  # the backend asks for it where it compiles
        return "mypyc is not installed in the build environment"  # (an editable install: no probe)
    return build_native.why_pure()


class MaybeCompiled(Distribution):
    def has_ext_modules(self) -> bool:
        """A platform wheel exactly when it will hold compiled modules (bdist_wheel tags by this)."""
        return _why_pure() is None


class BuildNative(build_ext):
    """Compiles with scripts/build_native.py into the wheel's ``store/_native`` in place of build_ext."""

    def run(self) -> None:
        if self.editable_mode:
            return
        if _why_pure() is not None:
            print(f"mqctl: {_why_pure()}; the wheel is pure Python", file=sys.stderr)
            return
        relative = build_native.native.INSTALLED_DIR.relative_to(build_native.native.ROOT)
        dest = Path(self.build_lib) / relative
        try:
            build_native.build(
                dest, Path(self.build_temp) / "native", build_native.extensions_to_build(), installed=True
            )
        except RuntimeError as exc:  # a compiler that fails on our code: still a working (pure) package
            print(f"mqctl: compiling failed; the wheel is pure Python: {exc}", file=sys.stderr)

    def get_outputs(self) -> list[str]:
        return []

    def get_output_mapping(self) -> dict[str, str]:
        return {}


setup(distclass=MaybeCompiled, cmdclass={"build_ext": BuildNative})
