"""What the C extensions' differential properties share (tests/store/test_cparse.py, tests/acl/test_c_hmac.py,
scripts/sanitize_native.py): their Hypothesis settings, exact-size buffers, and a call's outcome.

The properties are derandomized and keep no database, so a run is the same everywhere;
``MQCTL_FUZZ_EXAMPLES=N`` draws N random examples each instead (scripts/sanitize_native.py runs them so,
under AddressSanitizer, where :func:`exact`'s buffers make a read one byte past the end show)."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable

from hypothesis import HealthCheck, settings

_EXAMPLES = int(os.environ.get("MQCTL_FUZZ_EXAMPLES", "0"))

FUZZ = settings(
    max_examples=_EXAMPLES or 300,
    derandomize=not _EXAMPLES,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def exact(data: bytes) -> memoryview:
    """``data`` in an allocation of exactly its size (ctypes': malloc under PYTHONMALLOC=malloc), as bytes
    ('B'): a bytes object has a NUL after its data and pymalloc's pools around it, which hide an overread."""
    if not data:
        return memoryview(b"")
    return memoryview((ctypes.c_char * len(data)).from_buffer_copy(data)).cast("B")


def outcome(fn: Callable[..., object], *args: object) -> tuple[object, ...]:
    """What a call gives: its value, or its exception's type and text."""
    try:
        return ("value", fn(*args))
    except Exception as exc:  # (whatever the reference raises: compared as it is)
        return ("raised", type(exc), str(exc))


def leaked(calls: list[Callable[[], object]], times: int = 2000) -> int:
    """Bytes that Python's allocators hold more after ``times`` rounds of ``calls`` (each allowed to raise)
    than before: a C path that keeps a reference, or a buffer, shows as growth in proportion to ``times``."""
    import gc
    import tracemalloc

    def rounds(n: int) -> None:
        for call in calls:
            for _ in range(n):
                with contextlib.suppress(Exception):  # (the error paths are measured too)
                    call()

    rounds(10)  # caches filled first (the parse's property names)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        rounds(times)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
