"""Compile the broker's hot modules with mypyc (see store/native.py for why and how they are used).

    python scripts/build_native.py [--force] [--background] [--install-deps]

``make`` runs it into ``build/native`` (a no-op while that build matches the sources); ``setup.py`` runs
:func:`build` into a wheel. Without mypyc or a C compiler that builds Python extensions it says so on one
line and exits 0: everything then runs as pure Python. A build is written to a temporary directory and
renamed into place with its manifest, so an interrupted or failed build never leaves a half-built set.

``--background`` returns at once and compiles in a detached process at a low priority (``make run``
starts the daemons on pure Python meanwhile; the next start uses the build). Builds of one tree take
turns on ``build/native.lock``: ``make test`` waits for a background build rather than racing it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent


def _load_store_native() -> ModuleType:
    """store/native.py by its path: a wheel is built in pip's isolated environment, where the ``store``
    package's own imports (lazy_loader, ...) are not installed; native.py needs only the stdlib."""
    spec = importlib.util.spec_from_file_location("_mqctl_store_native", ROOT / "store" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


native = _load_store_native()

#: The send and store-put path: frame codec → send processor (topic rules and configs, the clock) → record
#: encode, CommitLog append, ConsumeQueue unit, index entries → arrivals (long polling) → reply; and the
#: ACL guard every request of an ACL broker passes. Typed, pure, and never monkeypatched by production
#: code. An interpreted call on this path is a cost every send pays: find them with sys.setprofile
#: (compiled functions raise no "call" events), their cost with callgrind.
MODULES = (
    "daemon.acl.plain",
    "daemon.acl.signature",
    "daemon.remoting.command",
    "daemon.remoting.connection",
    "daemon.remoting.fields",
    "daemon.remoting.frame",
    "daemon.broker.long_poll",
    "daemon.broker.managers.groups",
    "daemon.broker.managers.topics",
    "daemon.broker.processors.send",
    "daemon.broker.stats",
    "daemon.dledger.machines",
    "daemon.dledger.protocol",
    "daemon.dledger.server",
    "store.clock",
    "store.commitlog",
    "store.consumequeue",
    "store.dledger",
    "store.dledger_commitlog",  # subclasses store.commitlog's CommitLog: compiled with it
    "store.dledger_log",
    "store.engine",
    "store.indexfile",
    "store.javahash",
    "store.mapped_file",
    "store.message",
    "store.reads",
    "store.record",
    "store.results",
)

#: C extensions built with them (module → source), each used where it imports and its module's fallback
#: otherwise: the ACL signature's HMAC-SHA1 over libcrypto (daemon/acl/_hmacsha1.c, needs OpenSSL's headers),
#: and the store's parses of a record for dispatch and of a pushed run of DLedger entries (store/_cparse.c,
#: zlib's CRC-32: needs its headers).
EXTENSIONS = {
    "daemon.acl._hmacsha1": "daemon/acl/_hmacsha1.c",
    "store._cparse": "store/_cparse.c",
    "store._warm": "store/_warm.c",
}

#: Modules not compiled whose ``Final`` constants compiled modules import: mypyc writes those values into
#: the compiled code, so the manifest hashes these sources too (tests/test_native.py finds them all).
INLINED = ("daemon.protect", "store.config", "store.names")

#: The shared library every compiled module lives in (``store/compiled__mypyc``); the modules are shims.
GROUP = "store.compiled"

#: Where ``make`` builds, and the lock its builds take turns on.
WORK = ROOT / "build" / "native-work"
LOG = ROOT / "build" / "native.log"

_PYTHON_PROBE = "#include <Python.h>\nint main(void) { return 0; }\n"
_OPENSSL_PROBE = "#include <openssl/sha.h>\nint main(void) { SHA_CTX c; return SHA1_Init(&c) != 1; }\n"
_ZLIB_PROBE = "#include <zlib.h>\nint main(void) { return crc32(0L, Z_NULL, 0) != 0; }\n"
#: What each C extension needs of the machine: a program that compiles and links only where its library's
#: headers are (Debian's libssl-dev, zlib1g-dev), and the libraries it links.
_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "daemon.acl._hmacsha1": (_OPENSSL_PROBE, ("crypto",)),
    "store._cparse": (_ZLIB_PROBE, ("z",)),
    "store._warm": (_PYTHON_PROBE, ()),
}


def compiler() -> list[str]:
    """The C compiler setuptools will run: ``$CC`` when set, else the one Python was built with."""
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def compiles(source: str, libraries: tuple[str, ...] = ()) -> bool:
    """Whether :func:`compiler` builds and links ``source`` against Python's headers and ``libraries``."""
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                [*compiler(), f"-I{include}", "-x", "c", "-", "-o", os.path.join(tmp, "probe")]
                + [f"-l{lib}" for lib in libraries],
                input=source,
                text=True,
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


@cache
def why_pure() -> str | None:
    """Why this machine gets the pure-Python package (None: it can compile): ``MQCTL_NATIVE=0``, or no C
    compiler that builds against Python's headers (Debian's python3-dev)."""
    if os.environ.get("MQCTL_NATIVE", "1") == "0":
        return "MQCTL_NATIVE=0"
    if not compiles(_PYTHON_PROBE):
        return f"no C compiler that builds Python extensions ({shlex.join(compiler())})"
    return None


def have_openssl() -> bool:
    """Whether this machine's C compiler finds OpenSSL's SHA-1 header and libcrypto (Debian's libssl-dev)."""
    return compiles(_OPENSSL_PROBE, ("crypto",))


def extensions_to_build() -> dict[str, str]:
    """The C extensions this machine's compiler can build (each needs its library's headers)."""
    return {name: src for name, src in EXTENSIONS.items() if compiles(*_NEEDS[name])}


def build_requirements() -> list[str]:
    """What compiling needs beyond setuptools: the ``native`` extra of pyproject.toml (mypy, for mypyc)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["native"])


def is_current(c_extensions: dict[str, str]) -> bool:
    """Whether build/native holds a build of exactly these sources, modules and C extensions, made by
    this script as it is (a manifest without ``warnings`` predates the check that there are none)."""
    built = native.fresh()
    return (
        built is not None
        and set(built) == set(MODULES)
        and native.inlined() == set(INLINED)
        and native.c_sources() == set(c_extensions.values())
        and "warnings" in json.loads((native.NATIVE_DIR / native.MANIFEST).read_text())
    )


def _parallel_build_ext() -> type:
    """setuptools' build_ext compiling an extension's C files in parallel: mypyc's multi-file output is
    one file per module plus its runtime, which one compiler process after another would take in turn."""
    from setuptools.command.build_ext import build_ext

    jobs = os.cpu_count() or 1

    class ParallelBuildExt(build_ext):  # type: ignore[misc,valid-type]
        def build_extension(self, ext: Any) -> None:
            cc = self.compiler

            def compile_all(
                sources: list[str],
                output_dir: str | None = None,
                macros: Any = None,
                include_dirs: Any = None,
                debug: bool = False,
                extra_preargs: Any = None,
                extra_postargs: Any = None,
                depends: Any = None,
            ) -> list[str]:
                # distutils' CCompiler.compile with its loop over the objects run on a pool
                macros, objects, extra_postargs, pp_opts, todo = cc._setup_compile(
                    output_dir, macros, include_dirs, sources, depends, extra_postargs
                )
                cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)
                largest_first = sorted(todo, key=lambda obj: -os.path.getsize(todo[obj][0]))
                with ThreadPoolExecutor(jobs) as pool:
                    for done in [
                        pool.submit(cc._compile, obj, *todo[obj], cc_args, extra_postargs, pp_opts)  # type: ignore[call-arg]
                        for obj in largest_first
                    ]:
                        done.result()
                return objects  # type: ignore[no-any-return]

            cc.compile = compile_all
            super().build_extension(ext)

    return ParallelBuildExt


#: A diagnostic as mypyc and C compilers print one (``file:line[:col]: warning: ...``), or a Python warning
#: (``file:line: SomethingWarning: ...``); not a command line that merely names a ``-W...warning`` flag.
_WARNING = re.compile(r"^\S+:\d+(?::\d+)?: (?:warning|\w*Warning):")


def warnings_in(output: str) -> list[str]:
    """The warnings among a build's output lines."""
    return [line.strip() for line in output.splitlines() if _WARNING.match(line.strip())]


@contextlib.contextmanager
def _captured() -> Iterator[IO[str]]:
    """The build's own output (mypyc's messages, the compiler's diagnostics, setuptools' notices), read
    back afterwards: it is echoed only when it says something, and its warnings go into the manifest."""
    with tempfile.TemporaryFile("w+") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield log
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            log.seek(0)


def build(dest: Path, work: Path, c_extensions: dict[str, str], *, installed: bool = False) -> list[str]:
    """Compile MODULES and ``c_extensions`` into ``dest`` with its manifest; return the build's warnings.

    ``installed``: ``dest`` goes into a wheel, where the sources' mtimes change on install, so the
    manifest keeps only their hashes. Raises (with the build's output) when compiling fails."""
    import warnings

    from mypyc.build import mypycify
    from setuptools import Distribution, Extension

    # the sources as they are before compiling: one edited during the build then no longer matches, so
    # the build is not used (hashed afterwards, it would claim the edited source and run the old code)
    manifest: dict[str, Any] = {
        "cache_tag": sys.implementation.cache_tag,
        "modules": {m: native.digest(native.source_path(m)) for m in MODULES},
        "inlined": {m: native.digest(native.source_path(m)) for m in INLINED},
        "sources": {src: native.digest(ROOT / src) for src in c_extensions.values()},
    }
    if not installed:
        manifest["stamps"] = {
            **{m: native.stamp(native.source_path(m)) for m in (*MODULES, *INLINED)},
            **{src: native.stamp(ROOT / src) for src in c_extensions.values()},
        }
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    cwd = os.getcwd()
    with _captured() as log, warnings.catch_warnings():
        warnings.simplefilter("always")
        try:
            os.chdir(ROOT)  # mypy reads pyproject.toml's [tool.mypy] from here
            extensions = mypycify(
                [str(native.source_path(m).relative_to(ROOT)) for m in MODULES],
                group_name=GROUP,
                target_dir=str(work / "c"),
                multi_file=True,  # one C file per module: compiled in parallel
            )
            for ext in extensions:  # the modules' files include the group's header, written under its package
                ext.include_dirs.append(str(work.joinpath("c", *GROUP.split(".")[:-1])))
            extensions += [
                Extension(name, [src], libraries=list(_NEEDS[name][1])) for name, src in c_extensions.items()
            ]
            # a bare Distribution: setup() would also read pyproject.toml, which is not this build's
            command = _parallel_build_ext()(Distribution({"name": "mqctl-native", "ext_modules": extensions}))
            command.build_lib, command.build_temp = str(staging), str(work / "obj")
            command.ensure_finalized()
            command.run()
        except (Exception, SystemExit) as exc:  # setuptools reports a compile error as SystemExit
            sys.stdout.flush()
            log.seek(0)
            raise RuntimeError(f"{exc}\n{log.read()}".strip()) from exc
        finally:
            os.chdir(cwd)
        sys.stdout.flush()
        log.seek(0)
        found = warnings_in(log.read())
    manifest["warnings"] = found
    (staging / native.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return found


@contextlib.contextmanager
def _turn() -> Iterator[None]:
    """Hold build/native.lock (waiting, and saying so, while another build of this tree holds it)."""
    import fcntl

    native.LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(native.LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("build_native: waiting for the build in progress (build/native.log)", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _in_background(args: argparse.Namespace) -> int:
    """Start this script detached (its own session: Ctrl-C on ``make run`` leaves it compiling)."""
    if native.building():  # one started by the last `make run` is still at it: its log stays whole
        print("build_native: still compiling in the background (build/native.log)", file=sys.stderr)
        return 0
    LOG.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, __file__, "--nice", *(["--force"] if args.force else [])]
    argv += ["--install-deps"] if args.install_deps else []
    with open(LOG, "w") as log:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    print(
        f"build_native: compiling {len(MODULES)} modules in the background (build/native.log): this start "
        "runs pure Python, the next the compiled build",
        file=sys.stderr,
    )
    return 0


def _have_mypyc(install: bool) -> bool:
    if importlib.util.find_spec("mypyc") is None and install:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", *build_requirements()], check=False
        )
        importlib.invalidate_caches()
    return importlib.util.find_spec("mypyc") is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the build is fresh")
    parser.add_argument("--background", action="store_true", help="compile in a detached process")
    parser.add_argument("--install-deps", action="store_true", help="pip install mypy when it is missing")
    parser.add_argument("--nice", action="store_true", help=argparse.SUPPRESS)  # the background process
    args = parser.parse_args()
    if why_pure() is not None:
        print(f"build_native: {why_pure()}; everything runs as pure Python", file=sys.stderr)
        return 0
    c_extensions = extensions_to_build()
    if is_current(c_extensions) and not args.force:
        return 0
    if args.background:
        return _in_background(args)
    if args.nice:
        os.nice(10)  # the daemons started meanwhile come first
    with _turn():
        if is_current(c_extensions) and not args.force:  # the build waited for was this one
            return 0
        if not _have_mypyc(args.install_deps):
            print("build_native: mypyc is not installed; everything runs as pure Python", file=sys.stderr)
            return 0
        started = time.monotonic()
        try:
            found = build(native.NATIVE_DIR, WORK, c_extensions)
        except RuntimeError as exc:
            shutil.rmtree(native.NATIVE_DIR, ignore_errors=True)
            print(f"build_native: compiling failed; everything runs as pure Python: {exc}", file=sys.stderr)
            return 0
    for line in found:
        print(line, file=sys.stderr)
    missing = "" if c_extensions else " (no OpenSSL headers: ACL signatures use hashlib)"
    print(
        f"build_native: {len(MODULES)} modules and {len(c_extensions)} C extension(s) compiled in "
        f"{time.monotonic() - started:.0f} s, {len(found)} warning(s){missing}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
