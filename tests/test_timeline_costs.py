"""``benchmarks/timeline.py``'s per-message costs: the counts `bench_broker_tail` prints for each round,
read from /proc for a live process (this one)."""

from __future__ import annotations

import mmap
import os
import sys
from types import ModuleType

import pytest

from tests.support.paths import script_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _module() -> ModuleType:
    return script_module("benchmarks/timeline.py")


def _touch_new_pages(pages: int) -> None:
    with mmap.mmap(-1, pages * mmap.PAGESIZE) as fresh:
        for page in range(pages):
            fresh[page * mmap.PAGESIZE] = 1


def test_the_loop_thread_and_the_process_count_their_page_faults() -> None:
    timeline = _module()
    me = os.getpid()
    loop, process = timeline.loop_costs(me), timeline.process_costs(me)
    _touch_new_pages(64)
    loop_after, process_after = timeline.loop_costs(me), timeline.process_costs(me)
    assert len(loop) == len(process) == 7
    # the main thread (this test's) took a minor fault per new page; the process counts them too
    assert loop_after[5] - loop[5] >= 64
    assert process_after[5] - process[5] >= 64
    assert loop_after[6] >= loop[6] and process_after[6] >= process[6]


def test_per_message_reports_the_faults_of_the_round_in_all() -> None:
    timeline = _module()
    before = (0, 0, 0, 0, 0, 100, 7)
    after = (2_000_000, 10, 5, 20, 30, 2_600, 1_207)
    line = timeline.per_message(before, after, 10)
    assert line == (
        "200 µs CPU, 1.00 wake-ups, 0.50 preemptions, 2.00 reads, 3.00 writes; 2,500 minor and 1,200 major faults"
    )


def test_a_process_that_is_gone_costs_zeros() -> None:
    timeline = _module()
    gone = 2**22 + 1  # above pid_max's default: no such process
    assert timeline.loop_costs(gone) == (0,) * 7
    assert timeline.process_costs(gone) == (0,) * 7
