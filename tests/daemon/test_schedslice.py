"""A broker's EEVDF slice (``schedSliceMicros``): set on the event loop's thread alone where the kernel has
per-task slices, and a clean fallback where the kernel, the machine or a sandbox refuses it."""

from __future__ import annotations

import ctypes
import errno
import logging
import sys
import threading
from pathlib import Path

import pytest

from daemon import schedslice
from daemon.broker.config import BrokerConfig
from daemon.config import ConfigError
from daemon.schedslice import SliceRefused, get_slice_ns, set_loop_slice, set_slice, set_thread_slice
from tests.listeners import listening
from tests.support.bounded import Daemon
from tests.support.broker import start_broker
from tests.support.cli import clean_env
from tests.support.ports import free_port
from tests.support.waiting import wait_for


class FakeKernel:
    """Stands in for libc's ``syscall``: refuses sched_setattr with ``refuse``, or accepts it and then
    reports no slice (a kernel before 6.12); records the slices asked for."""

    def __init__(self, refuse: int = 0) -> None:
        self.refuse = refuse
        self.asked: list[int] = []

    def syscall(self, nr: int, tid: int, buf: ctypes.Array[ctypes.c_char], *rest: int) -> int:
        if nr == SETATTR:
            if self.refuse:
                ctypes.set_errno(self.refuse)
                return -1
            self.asked.append(schedslice._ATTR.unpack(buf.raw)[5])
            return 0
        ctypes.memmove(buf, schedslice._ATTR.pack(56, 0, 0, 0, 0, 0, 0, 0, 0, 0), 56)
        return 0


SETATTR, GETATTR = 1314, 1315


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    fake = FakeKernel()
    monkeypatch.setattr(schedslice, "_syscalls", lambda: (fake, SETATTR, GETATTR))
    return fake


def test_a_refused_call_raises_and_changes_nothing(kernel: FakeKernel) -> None:
    kernel.refuse = errno.EPERM  # a seccomp profile that denies sched_setattr
    with pytest.raises(SliceRefused, match="not permitted"):
        set_slice(200)
    assert kernel.asked == []


def test_a_kernel_that_ignores_the_slice_is_told_apart(kernel: FakeKernel) -> None:
    with pytest.raises(SliceRefused, match="no per-task slice"):
        set_slice(200)
    assert kernel.asked == [200_000]  # the calling thread only: the others were never touched


def test_a_slice_out_of_the_kernels_bounds_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="schedSliceMicros"):
        BrokerConfig(sched_slice_micros=50)
    with pytest.raises(ValueError):
        set_slice(200_000)


async def test_a_broker_serves_where_the_slice_is_refused(
    tmp_path: Path, kernel: FakeKernel, caplog: pytest.LogCaptureFixture
) -> None:
    kernel.refuse = errno.ENOSYS
    with caplog.at_level(logging.WARNING):
        broker = await start_broker(tmp_path, sched_slice_micros=300)
    try:
        assert broker.state == "serving"
        assert any("schedSliceMicros=300 not applied" in r.getMessage() for r in caplog.records)
    finally:
        await broker.stop()


def kernel_has_slices() -> bool:
    try:
        return get_slice_ns() > 0
    except SliceRefused:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not kernel_has_slices(), reason="no per-task EEVDF slice here (Linux 6.12+)")
def test_the_loop_thread_of_a_broker_alone_gets_the_slice(tmp_path: Path) -> None:
    """A real ``mqctl broker start`` in its own process: the event loop's thread (the main one) runs with
    the slice asked for, and every other thread (store, flushes, listeners, workers the loop started
    after the setting) with the kernel's default, which a helper holding the GIL keeps."""
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir = {tmp_path / 'store'}\nlistenPort = {port}\nschedSliceMicros = 250\n"
        f"metricsPort = {free_port()}\ngrpcListenPort = 0\nmappedFileSizeCommitLog = 4194304\n"
    )
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    broker = Daemon(argv, clean_env(tmp_path), tmp_path / "broker.log")
    broker.start()
    pid = broker.pid

    def up() -> bool:
        # a broker that exited (a port another test took meanwhile) fails here, with what it said
        assert broker.proc is not None and broker.proc.poll() is None, (
            f"the broker exited: {broker.log_tail()}"
        )
        return ("127.0.0.1", port) in listening(pid)

    try:
        wait_for(up, "the broker listening", timeout=30)
        tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        assert len(tids) > 3
        assert get_slice_ns(pid) == 250_000
        assert {get_slice_ns(tid) for tid in tids if tid != pid} == {get_slice_ns()}
    finally:
        broker.stop()


@pytest.mark.skipif(not kernel_has_slices(), reason="no per-task EEVDF slice here (Linux 6.12+)")
def test_threads_the_loop_starts_later_keep_the_default() -> None:
    """The slice stays with the thread that asked: one it starts afterwards begins with the default."""
    default = get_slice_ns()
    seen: list[int] = []

    def loop_thread() -> None:
        set_loop_slice(300)
        seen.append(get_slice_ns())
        helper = threading.Thread(target=lambda: seen.append(get_slice_ns()))
        helper.start()
        helper.join()

    thread = threading.Thread(target=loop_thread)  # not pytest's own thread: it keeps its slice
    thread.start()
    thread.join()
    assert seen == [300_000, default]


@pytest.mark.skipif(not kernel_has_slices(), reason="no per-task EEVDF slice here (Linux 6.12+)")
def test_a_loop_s_slice_changes_again_and_comes_off() -> None:
    """A thread set with reset-on-fork reports that flag in its policy: a second call still changes its
    slice, 0 puts the kernel's default back, and another thread's (a running daemon's loop, set from
    outside) is set and taken off the same way."""
    seen: list[int] = []

    def loop_thread() -> None:
        default = get_slice_ns()
        set_loop_slice(300)
        set_loop_slice(500)
        seen.append(get_slice_ns())
        set_loop_slice(0)
        seen.append(get_slice_ns() - default)
        tid = threading.get_native_id()
        outside = threading.Thread(
            target=lambda: (set_thread_slice(tid, 250), seen.append(get_slice_ns(tid)))
        )
        outside.start()
        outside.join()
        set_thread_slice(tid, 0)
        seen.append(get_slice_ns() - default)

    thread = threading.Thread(target=loop_thread)
    thread.start()
    thread.join()
    assert seen == [500_000, 0, 250_000, 0]
