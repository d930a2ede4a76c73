"""Run the C extensions' differential tests under AddressSanitizer and UBSan (by hand, not ``make test``).

    python scripts/sanitize_native.py [--out DIR] [--examples N] [--fuzz TARGET --seconds S] [-- PYTEST ARGS]

Builds build_native's EXTENSIONS with ``-fsanitize=address,undefined`` into DIR (a scratch directory, never
build/), then runs their tests in a Python that loads those builds instead: CPython under ASan's runtime
(``LD_PRELOAD``; leaks not checked, the interpreter keeps its own), ``PYTHONMALLOC=malloc`` so each buffer is
an allocation ASan guards, the compiled mypyc modules off (the Python references run beside the C).
``--examples N`` draws N random Hypothesis examples per property instead of the fixed set.

``--fuzz v4_info|scan_run|hmac`` runs atheris (``pip install atheris`` where it installs; libFuzzer's
options after ``--``) on one entry point for ``--seconds``, each input checked against the Python
reference as the tests check it; the build then also traces comparisons (``-fsanitize-coverage``) and runs
under atheris's own ASan+libFuzzer runtime. Loaded as a pytest plugin (``-p sanitize_native``), this module
puts DIR's builds first on their packages' paths.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
from build_native import _NEEDS, EXTENSIONS, compiler  # noqa: E402

TESTS = ["tests/store/test_cparse.py", "tests/store/test_cparse_crc.py", "tests/acl/test_c_hmac.py"]
SANITIZE = [
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
]
#: GCC's tracing that libFuzzer reads: the operands of every comparison (its branch tracing, trace-pc, is one
#: libFuzzer no longer takes: the Python references' branches, instrumented by atheris, stand for the C's).
TRACE = ["-fsanitize-coverage=trace-cmp"]
DIR_VAR = "MQCTL_SANITIZED_DIR"


def build(out: Path, trace: bool) -> None:
    """Each extension to ``out/<package path>/<name><EXT_SUFFIX>``, as the import system finds it."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    for name, src in EXTENSIONS.items():
        target = out.joinpath(*name.split(".")).with_name(name.split(".")[-1] + suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        libs = [f"-l{lib}" for lib in _NEEDS[name][1]]
        if not trace:
            flags = [*SANITIZE, "-fPIC", "-shared", f"-I{include}"]
            subprocess.run([*compiler(), *flags, str(ROOT / src), "-o", str(target), *libs], check=True)
            continue
        # linked without GCC's runtimes: the sanitizers' and tracing's calls are left to atheris's, preloaded
        # (a module that also needs GCC's libasan stops it: two ASan runtimes)
        obj = target.with_suffix(".o")
        flags = [*SANITIZE, *TRACE, "-fPIC", "-c", f"-I{include}"]
        subprocess.run([*compiler(), *flags, str(ROOT / src), "-o", str(obj)], check=True)
        subprocess.run([*compiler(), "-shared", str(obj), "-o", str(target), *libs], check=True)


def runtime(fuzz: bool) -> str:
    """The sanitizer runtime to preload: GCC's ASan (its UBSan comes as the modules' dependency), or for
    atheris its ASan+UBSan+libFuzzer, which the module's trace calls then reach."""
    if fuzz:
        import atheris  # type: ignore[import-not-found]

        return str(Path(atheris.path()) / "asan_with_fuzzer.so")
    found = subprocess.run([*compiler(), "-print-file-name=libasan.so"], capture_output=True, text=True)
    return found.stdout.strip()


def environment(out: Path, fuzz: bool, examples: int) -> dict[str, str]:
    path = [str(ROOT), str(ROOT / "scripts"), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), DIR_VAR: str(out)}
    env |= {"LD_PRELOAD": runtime(fuzz), "PYTHONMALLOC": "malloc", "MQCTL_NATIVE": "0"}
    env |= {
        "ASAN_OPTIONS": "detect_leaks=0:quarantine_size_mb=64",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    if examples:
        env["MQCTL_FUZZ_EXAMPLES"] = str(examples)
    return env


def use_sanitized_builds(out: Path) -> None:
    """Put ``out``'s builds first on their packages' paths (before anything imports them)."""
    import importlib

    for name in EXTENSIONS:
        package = importlib.import_module(name.rsplit(".", 1)[0])
        package.__path__.insert(0, str(out.joinpath(*name.split(".")[:-1])))
        module = importlib.import_module(name)
        assert Path(module.__file__ or "").is_relative_to(out), module.__file__


if __name__ != "__main__" and os.environ.get(DIR_VAR):  # loaded by pytest -p, or by a fuzz target
    use_sanitized_builds(Path(os.environ[DIR_VAR]))


def fuzz_target(name: str, corpus: Path) -> None:
    """One libFuzzer input at a time through an entry point and its Python reference, from a corpus seeded
    with good records and runs. An input's first bytes are the call's other arguments (see each target)."""
    import atheris

    with atheris.instrument_imports(include=["store.record", "store.dledger"]):  # their branches guide it
        from store import _cparse, dledger, record  # noqa: F401
    from tests.acl.test_c_hmac import same_as_hmac
    from tests.store.test_cparse import (
        BORN_V6,
        PROPS,
        _entry,
        as_v2,
        encode,
        exact,
        python_scan,
        same_either_way,
    )

    def v4_info(data: bytes) -> None:  # pos (the bytes before it pad), limit less the buffer's length
        pos, cut, buf = data[0] % 16 if data else 0, (data[1] % 9 - 4) if len(data) > 1 else 0, data[2:]
        same_either_way(exact(buf), pos, len(buf) + cut)

    def scan_run(data: bytes) -> None:  # off, start (off or before), at, at - base, room, index, term
        if len(data) < 7:
            return
        off, start, at = data[0], data[0] if data[1] < 128 else -1, data[2] * 16
        base, file_size, prev_index, prev_term = at - data[3], data[3] + data[4] * 16, data[5] - 2, data[6]
        view = exact(data[7:])
        got = _cparse.scan_run(view, off, start, at, base, file_size, prev_index, prev_term)
        assert got == python_scan(view, off, start, at, base, file_size, prev_index, prev_term)

    def hmac(data: bytes) -> None:  # key length, key, each value's length and bytes (surrogates kept), body
        fdp = atheris.FuzzedDataProvider(data)
        key = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 100))
        count = fdp.ConsumeIntInRange(0, 4)
        values = tuple(fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 1500)) for _ in range(count))
        same_as_hmac(key, values, fdp.ConsumeBytes(fdp.remaining_bytes()))

    corpus.mkdir(parents=True, exist_ok=True)
    seeds = [b"\0\4" + encode("T", b"body", PROPS[1]), b"\3\4\0\0\0" + as_v2(encode("T", b"", b""))]
    seeds += [b"\0\4" + encode("Topic", b"b" * 40, PROPS[5], born=BORN_V6)]
    run = _entry(5, 1, 32, b"a") + _entry(6, 1, 81, b"") + _entry(7, 2, 129, b"body" * 5)
    seeds += [bytes([0, 200, 2, 0, 255, 6, 1]) + run, bytes([0, 0, 2, 8, 10, 6, 1]) + run]
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i}").write_bytes(seed)
    atheris.Setup([*sys.argv, str(corpus)], {"v4_info": v4_info, "scan_run": scan_run, "hmac": hmac}[name])
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where to build (default: a temporary directory)")
    parser.add_argument("--examples", type=int, default=0, help="random Hypothesis examples per property")
    parser.add_argument("--fuzz", choices=["v4_info", "scan_run", "hmac"], help="run atheris on one target")
    parser.add_argument("--seconds", type=int, default=300, help="how long --fuzz runs")
    parser.add_argument("rest", nargs="*", help="pytest's arguments (libFuzzer's with --fuzz)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mqctl-sanitized-") as tmp:
        out = (args.out or Path(tmp)).resolve()
        build(out, trace=bool(args.fuzz))
        env = environment(out, bool(args.fuzz), args.examples)
        if args.fuzz:
            argv = [sys.executable, __file__, "--fuzz-child", args.fuzz, f"-max_total_time={args.seconds}"]
            return subprocess.run([*argv, *args.rest], env=env, cwd=ROOT).returncode
        argv = [sys.executable, "-m", "pytest", "-p", "sanitize_native", "-p", "no:cacheprovider", "-q"]
        return subprocess.run([*argv, *(args.rest or TESTS)], env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fuzz-child"]:
        use_sanitized_builds(Path(os.environ[DIR_VAR]))
        target = sys.argv.pop(2)
        del sys.argv[1]
        fuzz_target(target, Path(os.environ[DIR_VAR]) / f"corpus-{target}")
    else:
        sys.exit(main())
