"""The compiled (mypyc) build of the broker's hot modules, used only when it was built from these sources.

Why: the send path is Python bytecode (most of a send's CPU is the interpreter, perf says), and mypyc
turns the typed codec, record, store-put, send-processor and ACL-guard modules into C extensions, which
cut the broker's CPU per send (docs/performance.md has the figures). The sources
stay the one definition: ``scripts/build_native.py`` compiles the modules it lists into one directory
beside their packages and writes a manifest with each source's SHA-256 (and, in a source tree, size and
mtime, which spare the hashing while they match). That directory is ``build/native/`` in a source tree
(``make`` builds it) and ``store/_native/`` in an installed wheel (``pip install .`` builds it where a C
compiler is). Each package that holds a compiled module calls :func:`extend` on import, which puts its
compiled directory first on the package's ``__path__`` -- but only when every listed source still hashes
to what was compiled (a compiled module must never shadow an edited source, and the compiled modules call
each other natively, so it is all of them or none). An installed wheel keeps its sources beside the build,
so "fresh" means the same there: edit an installed ``.py`` and that process runs pure Python.

Dataclasses built on every send or pull (RemotingCommand, Message, RecordInfo, PutResult, ...) write their
``__init__`` out under ``@dataclass(init=False)``: mypyc compiles that one, while the ``__init__`` a dataclass
generates runs interpreted, several times per send. tests/test_native.py checks that each
takes exactly its fields.

Enum members read on every request are read once into ``Final`` module names: Python 3.11's EnumType
has a ``__getattr__``, so each ``RequestCode.X`` read in compiled code goes through that hook, several
times slower than a ``Final`` int.

Without a build (no C compiler, no mypyc, an edited source) or with ``MQCTL_NATIVE=0``, every module
runs as the pure Python it is compiled from; behaviour is the same. :func:`describe_build` says which runs.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from pathlib import Path

#: The source tree's root (the directory holding ``store/``), and where the compiled build lives: inside
#: the package when a wheel installed it, else where ``make`` builds it (its builds take turns on LOCK).
ROOT = Path(__file__).resolve().parent.parent
INSTALLED_DIR = Path(__file__).resolve().with_name("_native")
NATIVE_DIR = INSTALLED_DIR if INSTALLED_DIR.is_dir() else ROOT / "build" / "native"
LOCK = ROOT / "build" / "native.lock"
MANIFEST = "manifest.json"
#: The ACL signature's C HMAC (what ``mqctl --version`` names beside the modules).
HMAC_SOURCE = "daemon/acl/_hmacsha1.c"


def source_path(module: str, root: Path = ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    import hashlib  # only when a source's size or mtime moved: hashlib is slow to import

    return hashlib.sha256(path.read_bytes()).hexdigest()


def stamp(path: Path) -> list[int]:
    """Size and mtime: when both are as compiled, the source is taken as unchanged without hashing it."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def fresh(native_dir: Path = NATIVE_DIR, root: Path = ROOT) -> dict[str, str] | None:
    """The compiled modules (name → source SHA-256) when ``native_dir`` holds a build of exactly the
    sources under ``root`` for this interpreter, else None. The sources count too whose ``Final``
    constants the compiled code holds as literals (the manifest's ``inlined``): an edited one would
    otherwise leave its old values in compiled code while pure Python read the new."""
    try:
        manifest = json.loads((native_dir / MANIFEST).read_text())
        modules: dict[str, str] = manifest["modules"]
        inlined: dict[str, str] = manifest.get("inlined", {})
        sources: dict[str, str] = manifest.get("sources", {})  # C extensions' files, relative to root
        stamps: dict[str, list[int]] = manifest.get("stamps", {})
        if manifest.get("cache_tag") != sys.implementation.cache_tag:
            return None
        checks = [(name, source_path(name, root), sha) for name, sha in {**modules, **inlined}.items()]
        checks += [(src, root / src, sha) for src, sha in sources.items()]
        for name, path, sha in checks:
            if stamp(path) != stamps.get(name) and digest(path) != sha:
                return None
        return modules
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _manifest_keys(section: str, native_dir: Path) -> set[str]:
    try:
        return set(json.loads((native_dir / MANIFEST).read_text()).get(section, {}))
    except (OSError, ValueError, AttributeError):
        return set()


def inlined(native_dir: Path = NATIVE_DIR) -> set[str]:
    """The modules the build's manifest checks without having compiled them (see :func:`fresh`)."""
    return _manifest_keys("inlined", native_dir)


def c_sources(native_dir: Path = NATIVE_DIR) -> set[str]:
    """The C extensions' source files the build compiled (their modules fall back where they are absent)."""
    return _manifest_keys("sources", native_dir)


@cache
def active() -> dict[str, str] | None:
    """The compiled modules this process uses (None: pure Python); decided once, before the first loads."""
    if os.environ.get("MQCTL_NATIVE", "1") == "0":
        return None
    return fresh()


def building() -> bool:
    """Whether a build of this tree is being made now (``make run`` compiles in the background)."""
    try:
        import fcntl

        with open(LOCK) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except (OSError, ImportError):
        pass
    return False


def describe_build() -> str:
    """Which build this process runs, and why not the compiled one: ``mqctl --version`` and the broker's
    start-up line print it. Reads the manifest only; importing the modules is left to their first use."""
    modules = active()
    if modules:
        return f"compiled: {len(modules)} modules" + (", C HMAC" if HMAC_SOURCE in c_sources() else "")
    if os.environ.get("MQCTL_NATIVE", "1") == "0":
        return "pure Python: MQCTL_NATIVE=0"
    if building():
        return "pure Python: compiling in the background, for the next start"
    if (NATIVE_DIR / MANIFEST).exists():
        return "pure Python: a source changed since the build was compiled"
    return "pure Python"


def extend(package: str, path: list[str]) -> None:
    """Put ``package``'s compiled directory first on its ``__path__`` when the build is fresh."""
    modules = active()
    if modules and any(name.rpartition(".")[0] == package for name in modules):
        path.insert(0, str(NATIVE_DIR.joinpath(*package.split("."))))
