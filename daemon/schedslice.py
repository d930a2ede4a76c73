"""A short EEVDF slice for a latency-sensitive process: wake-ups that do not wait out a busy neighbour.

Since Linux 6.6 ordinary (SCHED_OTHER) tasks are scheduled by EEVDF: a task that wakes gets a virtual
deadline of its eligible time plus its *slice* (the kernel's base slice, larger with more CPUs),
and the CPU goes to the eligible task with the earliest deadline. A broker sleeps in epoll between
requests that take tens of microseconds each; with a CPU-bound process on its core, each wake-up may wait
until that process's slice runs out. Since Linux 6.12 a task may ask for its own slice (``sched_runtime``
of ``sched_setattr`` with SCHED_OTHER, no privilege needed): a shorter one makes its deadline earlier, so
a wake-up preempts a neighbour with a longer slice at once. That is within the task's scheduling group
(a cgroup, or with autogroup its session): a group that has spent its share of the CPUs waits all the
same.

What it trades: the share of CPU is unchanged (that is the nice value's weight), but the task is itself
preempted after a shorter run when others wait, so a long piece of work is cut into more pieces, and the
neighbour it preempts switches more often. Threads inherit the slice from the thread that starts them
(and children from their parent), so setting it on every thread of the process once covers the rest
(`set_slice`). `set_loop_slice` gives it to the calling thread alone (a daemon's event loop) with
``SCHED_FLAG_RESET_ON_FORK``: threads it starts later begin with the kernel's default, so helpers whose
work no client waits for keep it in whole pieces (none preempted sooner while it holds the GIL).

``set_slice`` is best effort: elsewhere than Linux on x86-64 or arm64, on a kernel without custom slices
(before 6.12 ``sched_runtime`` is accepted and ignored for SCHED_OTHER: the value read back tells), or
where a sandbox refuses the call, it leaves the scheduling as it was and says why.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
import threading
from typing import Final

#: Linux's bounds of a custom slice (``sched_setattr`` clamps to them), in microseconds.
MIN_SLICE_US: Final = 100
MAX_SLICE_US: Final = 100_000

#: ``struct sched_attr`` up to ``sched_period`` plus the utilization clamps (SCHED_ATTR_SIZE_VER1).
_ATTR = struct.Struct("=IIQiIQQQII")
_SCHED_OTHER: Final = 0
#: ``sched_flags``: a thread or process the task starts gets the default policy and slice, and a nice
#: value under 0 back to 0 (``sched_fork``).
_RESET_ON_FORK: Final = 0x01
#: The same flag as ``sched_getscheduler`` reports it, ORed into the policy.
_RESET_ON_FORK_POLICY: Final = 0x40000000
#: (sched_setattr, sched_getattr) by machine: the syscall numbers glibc does not wrap.
_SYSCALLS: Final = {"x86_64": (314, 315), "aarch64": (274, 275), "arm64": (274, 275)}


class SliceRefused(Exception):
    """The kernel, the machine or a sandbox would not give the slice; the message says which."""


def _syscalls() -> tuple[ctypes.CDLL, int, int]:
    numbers = _SYSCALLS.get(platform.machine()) if sys.platform == "linux" else None
    if numbers is None:
        raise SliceRefused(f"no sched_setattr on {sys.platform}/{platform.machine()}")
    return ctypes.CDLL(None, use_errno=True), *numbers


def get_slice_ns(tid: int = 0) -> int:
    """The slice of thread ``tid`` (0: the calling one) in ns: the kernel's base slice where none was
    asked for; 0 before Linux 6.12, which reports none for SCHED_OTHER."""
    libc, _, getattr_nr = _syscalls()
    buf = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(getattr_nr, tid, buf, _ATTR.size, 0) != 0:
        code = ctypes.get_errno()
        raise SliceRefused(f"sched_getattr: {os.strerror(code)}")
    return int(_ATTR.unpack(buf.raw)[5])


def _policy(tid: int) -> int:
    """The thread's policy, without the reset-on-fork flag the kernel reports ORed into it."""
    return os.sched_getscheduler(tid) & ~_RESET_ON_FORK_POLICY


def _set(libc: ctypes.CDLL, setattr_nr: int, tid: int, slice_ns: int, reset_on_fork: bool = False) -> None:
    try:
        if _policy(tid) != _SCHED_OTHER:  # a real-time or batch policy is kept as it is
            return
        # sched_setattr sets the nice value too: pass the thread's own, so that only the slice changes
        nice = os.getpriority(os.PRIO_PROCESS, tid)
    except ProcessLookupError:  # the thread ended meanwhile
        return
    # a negative nice value would not pass to the threads started later: they inherit the slice then
    flags = _RESET_ON_FORK if reset_on_fork and nice >= 0 else 0
    attr = _ATTR.pack(_ATTR.size, _SCHED_OTHER, flags, nice, 0, slice_ns, 0, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, _ATTR.size)
    if libc.syscall(setattr_nr, tid, buf, 0) != 0:
        code = ctypes.get_errno()
        if code == errno.ESRCH:  # the thread ended meanwhile
            return
        raise SliceRefused(f"sched_setattr: {os.strerror(code)}")


def set_slice(slice_us: int) -> str:
    """Give every thread of this process an EEVDF slice of ``slice_us`` µs (0: the kernel's default again).

    Only SCHED_OTHER threads are touched (a thread under another policy keeps it). Returns a line for the
    log; raises `SliceRefused` when the calling thread's slice could not be set, the others untouched.
    """
    # the calling thread first: if the kernel refuses or ignores it, no other thread has been touched
    libc, setattr_nr, tid = _set_calling(slice_us)
    for name in os.listdir(f"/proc/{os.getpid()}/task"):
        if int(name) != tid:
            _set(libc, setattr_nr, int(name), slice_us * 1000)
    if not slice_us:
        return "EEVDF slice: the kernel's default"
    return f"EEVDF slice {slice_us} µs on every thread (sched_setattr, SCHED_OTHER)"


def set_loop_slice(slice_us: int) -> str:
    """Give the calling thread alone (the event loop's) an EEVDF slice of ``slice_us`` µs; threads and
    processes it starts later begin with the kernel's default, the process's other threads keep theirs.

    The loop is what a wake-up must reach soon; helper threads (flushes, ``asyncio.to_thread`` work) with
    a short slice are preempted sooner while they may hold the GIL the loop then waits for. Returns a
    line for the log; raises `SliceRefused` as `set_slice` does."""
    _set_calling(slice_us, reset_on_fork=True)
    if not slice_us:
        return "EEVDF slice: the kernel's default"
    return f"EEVDF slice {slice_us} µs on the event loop's thread (sched_setattr, SCHED_OTHER)"


def set_thread_slice(tid: int, slice_us: int) -> None:
    """Give thread ``tid`` (of this process, or of another of the same user's) the slice `set_loop_slice`
    gives the calling one, threads it starts later keeping the kernel's default: how a benchmark or an
    operator's tool puts a running daemon's event loop on a slice and takes it off again. Raises
    `SliceRefused` where it was refused or ignored."""
    _set_checked(tid, slice_us, reset_on_fork=True)


def _set_calling(slice_us: int, reset_on_fork: bool = False) -> tuple[ctypes.CDLL, int, int]:
    """The slice on the calling thread, checked: raises `SliceRefused` where it was refused or ignored."""
    tid = threading.get_native_id()
    return (*_set_checked(tid, slice_us, reset_on_fork), tid)


def _set_checked(tid: int, slice_us: int, reset_on_fork: bool) -> tuple[ctypes.CDLL, int]:
    if slice_us and not MIN_SLICE_US <= slice_us <= MAX_SLICE_US:
        raise ValueError(f"a slice is 0 or {MIN_SLICE_US}-{MAX_SLICE_US} µs, not {slice_us}")
    libc, setattr_nr, _ = _syscalls()
    slice_ns = slice_us * 1000
    _set(libc, setattr_nr, tid, slice_ns, reset_on_fork)
    if slice_ns and _policy(tid) == _SCHED_OTHER and get_slice_ns(tid) != slice_ns:
        raise SliceRefused(f"Linux {platform.release()} has no per-task slice (6.12 or later has)")
    return libc, setattr_nr
