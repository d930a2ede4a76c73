"""``benchmarks/tools/dledger_members.py``'s counts per send: a process's context switches read from ``/proc``
(its loop thread's apart from all its threads'), and ``perf stat``'s system-call counts read from its CSV
(canned output: the parse, not perf, is under test)."""

from __future__ import annotations

import os
import threading
import time
from types import ModuleType

from tests.support.paths import script_module


def _module() -> ModuleType:
    return script_module("benchmarks/tools/dledger_members.py")


def test_a_sleep_is_a_voluntary_switch_of_the_thread_that_sleeps() -> None:
    switches = _module().switches
    assert threading.current_thread() is threading.main_thread()
    before = switches(os.getpid())
    for _ in range(5):
        time.sleep(0.002)
    main_vol, _, all_vol, _ = switches(os.getpid())
    assert main_vol >= before[0] + 5 and all_vol >= before[2] + 5
    # another thread's sleeps count in all threads' switches, not in the main thread's
    main0, _, all0, _ = switches(os.getpid())
    seen: list[tuple[int, int, int, int]] = []

    def sleeper() -> None:
        for _ in range(5):
            time.sleep(0.002)
        seen.append(switches(os.getpid()))  # (counted while this thread is still alive)

    worker = threading.Thread(target=sleeper)
    worker.start()
    worker.join()
    assert seen[0][2] >= all0 + 5 and seen[0][0] - main0 < 5


def test_perf_stats_csv_is_read_by_system_call() -> None:
    text = (
        "\n"
        "2541,,syscalls:sys_enter_epoll_pwait,5012345678,100.00,,\n"
        "13302,,syscalls:sys_enter_read,5012345678,100.00,,\n"
        "<not counted>,,syscalls:sys_enter_writev,0,0.00,,\n"
        "0,,syscalls:sys_enter_sendmsg,5012345678,100.00,,\n"
    )
    assert _module().stat_counts(text) == {"epoll_pwait": 2541, "read": 13302, "sendmsg": 0}


def test_an_event_beside_the_system_calls_is_read_by_its_own_name() -> None:
    """``--event``: a uprobe on a compiled function, counted with the system calls or alone."""
    text = "2784,,probe_compiled__mypyc:disp,5012345678,100.00,,\n41,,syscalls:sys_enter_read,5012345678,100.00,,\n"
    assert _module().stat_counts(text) == {"probe_compiled__mypyc:disp": 2784, "read": 41}


def test_schedstat_counts_a_thread_on_its_core_and_not_asleep() -> None:
    """``--machine``'s split of a loop thread's window: on a core (CPU the thread burned), not its sleeps."""
    threads_cpu = _module().threads_cpu
    me = threading.get_native_id()
    ran0, _waited0 = threads_cpu(os.getpid())[me]
    spun = time.thread_time()
    while time.thread_time() - spun < 0.05:  # (CPU time: the same on a busy host)
        pass
    ran1, _ = threads_cpu(os.getpid())[me]
    assert ran1 - ran0 >= 0.04
    time.sleep(0.1)
    ran2, _ = threads_cpu(os.getpid())[me]
    assert ran2 - ran1 < 0.05


def test_the_machine_ticks_count_busy_and_idle() -> None:
    busy0, idle0 = _module().machine_ticks()
    spun = time.thread_time()
    while time.thread_time() - spun < 0.05:
        pass
    busy1, idle1 = _module().machine_ticks()
    assert busy1 >= busy0 + 1 and idle1 >= idle0
