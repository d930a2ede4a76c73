"""Wall-clock seam: the store stamps records and names index files from a :class:`Clock`; ``mqctl top``
stamps its snapshots from one, so tests can freeze time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...


class SystemClock:
    """The real wall clock (RocketMQ uses ``System.currentTimeMillis``)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def now(self) -> float:
        return time.time()


class ShiftedClock:
    """The real wall clock off by a fixed ``offset_ms``: a store whose host's clock is wrong, for tests of
    what notices a skewed broker (``mqctl check cluster``)."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def now(self) -> float:
        return time.time() + self.offset_ms / 1000


class FakeClock:
    """A settable clock for tests: time moves only when the test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def now(self) -> float:
        return self._now / 1000

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = now_ms

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms


#: Where Linux says which boot this is (a new random id at every boot).
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """This boot's id, None where the system gives none (not Linux): a deadline kept on :func:`boot_ms`
    counts only within the boot that wrote it."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, ValueError):
        return None
    return text or None


def boot_ms() -> int:
    """Milliseconds on CLOCK_BOOTTIME: monotonic, counting suspended time, never reset by a process restart
    and never moved by the wall clock; it starts again at a reboot (:func:`boot_id` tells them apart)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1_000_000
