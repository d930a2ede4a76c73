"""``benchmarks/sched_trace.py``: a slow message's flight split between who held each core, and each loop's
wait for one, from ``perf script`` lines (a canned recording: the arithmetic, not perf, is under test)."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.paths import script_module

LOOP, CLIENT, COMPETITOR, KWORKER = 100, 200, 300, 9


def _module() -> ModuleType:
    return script_module("benchmarks/sched_trace.py")


def _switch(cpu: int, t: float, prev: tuple[str, int], state: str, nxt: tuple[str, int]) -> str:
    return (
        f"[{cpu:03d}] {t:.6f}:       sched:sched_switch: prev_comm={prev[0]} prev_pid={prev[1]} prev_prio=120 "
        f"prev_state={state} ==> next_comm={nxt[0]} next_pid={nxt[1]} next_prio=120"
    )


def _waking(cpu: int, t: float, tid: int) -> str:
    return (
        f"[{cpu:03d}] {t:.6f}:       sched:sched_waking: comm=python pid={tid} prio=120 target_cpu={cpu:03d}"
    )


IDLE, LOOP_T, CLIENT_T = ("swapper/0", 0), ("python", LOOP), ("python", CLIENT)
KWORKER_T, COMPETITOR_T = ("kworker/0:1H", KWORKER), ("python", COMPETITOR)

# cpu1 runs the competitor throughout. On cpu0 the loop served an earlier message long before the flight;
# in the flight the client writes, waking the loop onto its core, is preempted by a kernel thread for 4 ms,
# then the loop runs, then the client.
SCRIPT = "\n".join(
    [
        _switch(1, 9.0, ("swapper/1", 0), "R", COMPETITOR_T),
        _waking(0, 9.9900, LOOP),
        _switch(0, 9.9901, IDLE, "R", LOOP_T),
        _switch(0, 9.9905, LOOP_T, "S", IDLE),
        _switch(0, 10.0000, IDLE, "R", CLIENT_T),
        _waking(0, 10.0010, LOOP),
        _switch(0, 10.0015, CLIENT_T, "R", KWORKER_T),
        _switch(0, 10.0055, KWORKER_T, "S", LOOP_T),
        _switch(0, 10.0060, LOOP_T, "S", CLIENT_T),
        _switch(0, 10.0070, CLIENT_T, "S", IDLE),
        _switch(1, 10.0100, COMPETITOR_T, "R", IDLE),
    ]
)
ROLES = {LOOP: "broker loop", CLIENT: "client loop", COMPETITOR: "competitor"}
START, END = 10.0005, 10.0065


def test_each_core_is_split_between_its_holders_over_the_flight() -> None:
    st = _module()
    cores = st.occupancy(st.parse(SCRIPT), START, END, ROLES)
    assert cores[0] == pytest.approx({"client loop": 1.5, "other:kworkerH": 4.0, "broker loop": 0.5})
    assert cores[1] == pytest.approx({"competitor": 6.0})


def test_a_loops_wait_runs_from_its_wake_up_or_preemption_to_its_next_run() -> None:
    st = _module()
    trace = st.parse(SCRIPT)
    # woken at 10.0010, ran at 10.0055; its earlier wake-up (9.9900) ended in a run before the flight
    total, behind = st.waits(trace, LOOP, START, END, ROLES)
    assert total == pytest.approx(4.5)
    assert behind == pytest.approx({"client loop": 0.5, "other:kworkerH": 4.0})
    # preempted at 10.0015, ran again at 10.0060
    total, behind = st.waits(trace, CLIENT, START, END, ROLES)
    assert total == pytest.approx(4.5)
    assert behind == pytest.approx({"other:kworkerH": 4.0, "broker loop": 0.5})


def test_the_report_names_one_stall_once() -> None:
    st = _module()
    messages = [("1busy", START, 6.0), ("1busy", START + 0.001, 5.0)]
    lines = st.report(st.parse(SCRIPT), messages, ROLES, {"broker loop": LOOP})
    assert len(lines) == 2
    assert lines[0].startswith("  1busy t=10.001 6.00 ms: cpu0: other:kworkerH 4.0")
    assert "broker loop waited 4.5 ms for a core, behind other:kworkerH 4.0, client loop 0.5" in lines[1]


def test_a_kind_of_rounds_tail_is_summed_and_each_loops_waits_told_apart() -> None:
    st = _module()
    # of two flights only the slowest (0.1 % of two, rounded up to one) is summed
    messages = [("1busy", START, 6.0), ("1busy", START + 0.001, 5.0)]
    lines = st.summaries(
        st.parse(SCRIPT), messages, st.Who(ROLES, {"broker loop": LOOP, "client loop": CLIENT})
    )
    assert lines == [
        "where the slowest messages' flights went, summed (ms):",
        "  busy: the slowest 0.1% of 1 round(s), 1 flights over 6.0 ms: "
        "broker loop ran 0.5, waited 4.5 behind other:kworkerH 4.0, client loop 0.5; "
        "client loop ran 1.5, waited 4.5 behind other:kworkerH 4.0, broker loop 0.5",
        "each loop's waits for a core by how they began (count; those of 1 ms or more, ms):",
        # the loop was woken onto the client's core and waited; the client was preempted by the kernel
        # thread; the loop's wake-up before the round is not counted
        "  busy broker loop: woken onto client loop 1 (1, 4.5, longest 4.5)",
        "  busy client loop: preempted by other:kworkerH 1 (1, 4.5, longest 4.5)",
    ]


def test_a_switch_that_went_unrecorded_is_taken_from_the_wake_up() -> None:
    st = _module()
    # cpu1 goes idle; the loop is woken onto it; the switch out of the idle task is missing (as on the
    # project's KVM guest); the loop's switch out is recorded
    script = "\n".join(
        [
            _switch(1, 1.000, COMPETITOR_T, "S", ("swapper/1", 0)),
            _waking(1, 1.010, LOOP),
            _switch(1, 1.012, LOOP_T, "S", ("swapper/1", 0)),
        ]
    )
    trace = st.parse(script)
    assert trace.runs[1] == [(1.000, 1.010, 0, "swapper/1"), (1.010, 1.012, LOOP, "python")]
    total, _ = st.waits(trace, LOOP, 1.0, 1.02, ROLES)
    assert total == pytest.approx(0.0)
