"""``benchmarks/tools/loop_instructions.py``: a callgrind dump's instructions and the per-message arithmetic
(canned dumps in callgrind's format: the reading, not valgrind, is under test)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import script_module

# Two functions; main() calls helper() (the call's inclusive cost, 700, is helper's own 300 + 400 lines
# below, and must not be counted twice); positions absolute, relative (+N, -N) and repeated (*).
DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4242
part: 2
thread: 1

positions: line
events: Ir
summary: 18446744073572414346

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) main
10 1000
+2 500
cfn=(2) helper
calls=3 +5
* 700
-1 25
fn=(2) helper
20 300
* 400
"""


def _module() -> ModuleType:
    return script_module("benchmarks/tools/loop_instructions.py")


def test_self_cost_sums_each_function_once_and_ignores_the_summary_line() -> None:
    assert _module().self_cost(DUMP) == 1000 + 500 + 25 + 300 + 400


def test_self_cost_of_a_dump_with_no_cost_lines_is_zero() -> None:
    assert _module().self_cost("# callgrind format\nevents: Ir\nsummary: 0\n") == 0


def test_thread_costs_reads_each_thread_of_one_part(tmp_path: Path) -> None:
    (tmp_path / "cg.4242.2-01").write_text(DUMP)
    (tmp_path / "cg.4242.2-03").write_text(DUMP.replace("20 300", "20 1300"))
    (tmp_path / "cg.4242.3-01").write_text(DUMP.replace("10 1000", "10 9000"))  # another part
    (tmp_path / "cg.4343.2-01").write_text(DUMP.replace("10 1000", "10 7000"))  # another process
    assert _module().thread_costs(tmp_path, 4242, 2) == {1: 2225, 3: 3225}


def test_per_message_leaves_the_rounds_common_set_up_out() -> None:
    # set-up 50,000 instructions in each round, 80 a message
    assert _module().per_message((100, 50_000 + 100 * 80), (300, 50_000 + 300 * 80)) == 80


def test_per_message_needs_the_long_round_to_carry_more_messages() -> None:
    with pytest.raises(ValueError, match="more messages"):
        _module().per_message((300, 1), (300, 2))


def test_per_message_leaves_the_loops_idle_instructions_of_the_longer_round_out() -> None:
    # the long round lasts 20 s longer: 20 s of the loop's timers at 1,000 a second are not messages'
    short = (100, 50_000 + 100 * 80 + 8 * 1_000)
    long = (300, 50_000 + 300 * 80 + 28 * 1_000)
    assert _module().per_message(short, long, idle=1_000, seconds=20) == 80
    assert _module().per_message(short, long) == 180
