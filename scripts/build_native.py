"""Compile the broker's hot modules with mypyc into build/native (see store/native.py for why and how
they are used). Run by ``make``; safe to run again (it rebuilds only when a source changed).

    python scripts/build_native.py [--force]

Without mypyc or a C compiler it says so on one line and exits 0: the broker then runs the same modules
as pure Python. A build is written to a temporary directory and renamed into place with its manifest,
so an interrupted or failed build never leaves a half-built set that would be used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from store.native import (  # noqa: E402
    MANIFEST,
    NATIVE_DIR,
    c_sources,
    digest,
    fresh,
    inlined,
    source_path,
    stamp,
)

#: The send and store-put path: frame codec → send processor (topic rules and configs, the clock) → record
#: encode, CommitLog append, ConsumeQueue unit, index entries → arrivals (long polling) → reply; and the
#: ACL guard every request of an ACL broker passes (~4 us per signed send in the broker). Typed, pure, and
#: never monkeypatched by production code. An interpreted call on this path costs a send ~0.3 us: find
#: them with sys.setprofile (compiled functions raise no "call" events), their cost with callgrind.
MODULES = (
    "daemon.acl.plain",
    "daemon.acl.signature",
    "daemon.remoting.command",
    "daemon.remoting.connection",
    "daemon.remoting.fields",
    "daemon.remoting.frame",
    "daemon.broker.long_poll",
    "daemon.broker.managers.topics",
    "daemon.broker.processors.send",
    "daemon.broker.stats",
    "store.clock",
    "store.commitlog",
    "store.consumequeue",
    "store.engine",
    "store.indexfile",
    "store.javahash",
    "store.mapped_file",
    "store.message",
    "store.record",
    "store.results",
)

#: C extensions built with them (module → source), each used where it imports and its module's fallback
#: otherwise: the ACL signature's HMAC-SHA1 over libcrypto (daemon/acl/_hmacsha1.c, needs OpenSSL's headers).
EXTENSIONS = {"daemon.acl._hmacsha1": "daemon/acl/_hmacsha1.c"}

#: Modules not compiled whose ``Final`` constants compiled modules import: mypyc writes those values into
#: the compiled code, so the manifest hashes these sources too (tests/test_native.py finds them all).
INLINED = ("store.config", "store.names")


def have_openssl() -> bool:
    """Whether this machine's C compiler finds OpenSSL's SHA-1 header and libcrypto (Debian's libssl-dev)."""
    probe = "#include <openssl/sha.h>\nint main(void) { SHA_CTX c; return SHA1_Init(&c) != 1; }\n"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                [cc, "-x", "c", "-", "-o", os.path.join(tmp, "probe"), "-lcrypto"],
                input=probe,
                text=True,
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):  # no compiler: main() says so
            return False
    return done.returncode == 0


def extensions_to_build() -> dict[str, str]:
    return EXTENSIONS if have_openssl() else {}


def build(c_extensions: dict[str, str]) -> None:
    from mypyc.build import mypycify
    from setuptools import Extension, setup

    work = ROOT / "build" / "native-work"
    staging = ROOT / "build" / "native.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    os.chdir(ROOT)  # mypy reads pyproject.toml's [tool.mypy] from here
    extensions = mypycify(
        [str(source_path(m).relative_to(ROOT)) for m in MODULES],
        group_name="store.compiled",
        target_dir=str(work / "c"),
    )
    setup(
        name="mqctl-native",
        ext_modules=[
            *extensions,
            *(Extension(name, [src], libraries=["crypto"]) for name, src in c_extensions.items()),
        ],
        script_args=[
            "--quiet",
            "build_ext",
            "--build-lib",
            str(staging),
            "--build-temp",
            str(work / "obj"),
            "--parallel",
            str(os.cpu_count() or 1),
        ],
    )
    manifest = {
        "cache_tag": sys.implementation.cache_tag,
        "modules": {m: digest(source_path(m)) for m in MODULES},
        "inlined": {m: digest(source_path(m)) for m in INLINED},
        "sources": {src: digest(ROOT / src) for src in c_extensions.values()},
        "stamps": {
            **{m: stamp(source_path(m)) for m in (*MODULES, *INLINED)},
            **{src: stamp(ROOT / src) for src in c_extensions.values()},
        },
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(NATIVE_DIR, ignore_errors=True)
    staging.rename(NATIVE_DIR)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the build is fresh")
    args = parser.parse_args()
    built = fresh()
    c_extensions = extensions_to_build()
    if (
        built is not None
        and set(built) == set(MODULES)
        and inlined() == set(INLINED)
        and c_sources() == set(c_extensions.values())
        and not args.force
    ):
        return 0
    try:
        import mypyc  # noqa: F401
    except ImportError:
        print("build_native: mypyc is not installed; the broker runs as pure Python", file=sys.stderr)
        return 0
    if not shutil.which(
        sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc"
    ):
        print("build_native: no C compiler; the broker runs as pure Python", file=sys.stderr)
        return 0
    started = time.monotonic()
    try:
        build(c_extensions)
    except (Exception, SystemExit) as exc:  # setuptools reports a compile error as SystemExit
        shutil.rmtree(NATIVE_DIR, ignore_errors=True)
        print(f"build_native: compiling failed ({exc}); the broker runs as pure Python", file=sys.stderr)
        return 0
    missing = "" if c_extensions else " (no OpenSSL headers: ACL signatures use hashlib)"
    print(
        f"build_native: {len(MODULES)} modules and {len(c_extensions)} C extension(s) compiled in "
        f"{time.monotonic() - started:.0f} s{missing}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
