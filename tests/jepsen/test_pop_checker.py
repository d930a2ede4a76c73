"""The checks of a recorded 5.x consumer history (tests/jepsen/pop_checker.py) find what they look for."""

from __future__ import annotations

from tests.jepsen.pop_checker import Delivery, early, lent_twice_at_once, lost, out_of_order


def delivery(consumer: str, body: str, start: float, call: int, *, acked_at: float | None = None) -> Delivery:
    d = Delivery(consumer, f"id-{body}", body, start, start + 0.1, 10, call)
    if acked_at is not None:
        d.acks.append((acked_at, True))
    return d


def test_a_message_sent_and_never_acked_is_lost() -> None:
    history = [delivery("c1", "a", 0, 1, acked_at=1), delivery("c1", "b", 0, 1)]
    assert lost(["a", "b"], history) == ["b"]
    history[1].acks.append((5, False))  # an ack that failed: lost, unless a fault struck during it
    assert lost(["a", "b"], history, faults=[9], timeout=3) == ["b"]
    assert lost(["a", "b"], history, faults=[7], timeout=3) == []


def test_a_lending_while_another_runs_is_twice_at_once_unless_a_fault_struck_between() -> None:
    first = delivery("c1", "a", 0, 1)
    again = delivery("c2", "a", 5, 2, acked_at=6)
    assert len(lent_twice_at_once([first, again])) == 1
    assert lent_twice_at_once([first, again], faults=[3]) == []
    after = delivery("c2", "a", 10.5, 3)  # the 10 s lending ran out
    assert lent_twice_at_once([first, after]) == []
    first.acks.append((2, False))  # an ack tried (its answer lost) may have ended it
    assert lent_twice_at_once([first, again]) == []


def test_a_change_answered_ok_lengthens_the_lending() -> None:
    first = delivery("c1", "a", 0, 1)
    first.changes.append((8, True, 30))
    assert len(lent_twice_at_once([first, delivery("c2", "a", 20, 2)])) == 1


def test_a_fifo_message_before_its_predecessor_was_acked_is_out_of_order() -> None:
    sequence = {"g-0": ("g", 0), "g-1": ("g", 1)}
    together = [delivery("c1", "g-0", 0, 1, acked_at=1), delivery("c1", "g-1", 0, 1, acked_at=1)]
    assert out_of_order(together, sequence) == []
    in_turn = [delivery("c1", "g-0", 0, 1, acked_at=1), delivery("c2", "g-1", 2, 2, acked_at=3)]
    assert out_of_order(in_turn, sequence) == []
    jumped = [delivery("c1", "g-0", 0, 1), delivery("c2", "g-1", 2, 2, acked_at=3)]
    assert len(out_of_order(jumped, sequence)) == 1


def test_a_timer_returned_before_its_time_is_early() -> None:
    assert len(early([delivery("c1", "d", 4, 1)], {"d": 5.0})) == 1
    assert early([delivery("c1", "d", 5, 1)], {"d": 5.0}) == []
