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


def lent(consumer: str, body: str, start: float, pop_time: float, call: int) -> Delivery:
    """A delivery with the handle the broker gave (popTime in ms, as 5.x's handle has it)."""
    d = delivery(consumer, body, start, call)
    d.end = pop_time + 0.01
    d.handle = f"0 {round(pop_time * 1000)} 10000 0 0 broker-a 0 7 4096"
    return d


def test_a_lending_runs_from_the_brokers_pop_time_when_its_handle_tells_it() -> None:
    first = lent("c1", "a", 0, 1.5, 1)  # a long poll: lent 1.5 s into its receive
    assert first.pop_time == 1.5 and first.lent_until == 11.5
    assert len(lent_twice_at_once([first, lent("c2", "a", 11, 11.2, 2)])) == 1
    assert lent_twice_at_once([first, lent("c2", "a", 11, 11.5, 2)]) == []


def test_a_leader_start_excuses_a_second_lending_only_between_the_two() -> None:
    """The next leader lends again what its predecessor lent before it began; a lending made after a
    leader began, then made again while it ran, is two leaders lending at once, or one lending twice."""
    first = lent("c1", "a", 0, 1.5, 1)
    again = lent("c2", "a", 4, 4.1, 2)
    assert lent_twice_at_once([first, again], faults=[3]) == []
    found = lent_twice_at_once([first, again], faults=[1])  # began after the receive, before the lending
    assert len(found) == 1 and "handle '0 1500 10000" in found[0] and "handle '0 4100 10000" in found[0]


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


def test_a_term_start_a_fault_explains_excuses_a_second_lending() -> None:
    """The fault came before the first lending (it excuses nothing itself); the election it made came
    between the two, and more terms than the allowance after a fault are its own rounds."""
    first = lent("c1", "a", 0, 1.5, 1)
    again = lent("c2", "a", 4, 4.1, 2)
    assert lent_twice_at_once([first, again], [0.5], [3], allowance=0) == []
    assert lent_twice_at_once([first, again], [], [3], induced=[0.5], allowance=0) == []  # (a restart)
    found = lent_twice_at_once([first, again], [], [3], allowance=0)
    assert len(found) == 1 and "term began at 3.0" in found[0]  # the lending, naming the term


def test_terms_nothing_explains_excuse_only_up_to_the_allowance() -> None:
    """One term nobody induced is a loaded host's election; a storm's terms beyond the allowance excuse no
    lending twice at once (the lending is reported naming them), and without such a lending are no finding."""
    first = lent("c1", "a", 0, 1.5, 1)
    again = lent("c2", "a", 4, 4.1, 2)
    assert lent_twice_at_once([first, again], [], [3]) == []
    # three lendings again, each after its own unexplained term: two are allowed, the third is reported
    others = [lent("c1", m, 10 * n, 10 * n + 1.5, 10 + n) for n, m in enumerate("bc", 1)]
    agains = [lent("c2", m, 10 * n + 4, 10 * n + 4.1, 20 + n) for n, m in enumerate("bc", 1)]
    found = lent_twice_at_once([first, again, *others, *agains], [], [3, 13, 23])
    assert len(found) == 1 and "handle '" in found[0] and "term began at" in found[0], found
    assert lent_twice_at_once([first, delivery("c2", "a", 20, 2)], [], [0.2, 0.4, 3]) == []


def test_the_allowance_goes_where_it_excuses_whenever_the_terms_fell() -> None:
    """Spent in time order, two quiet unexplained terms early used it up, and a correct take-over later
    (the broker lends a message again at once) failed the run; the same three terms after it passed."""
    early = delivery("c0", "z", 0, 9, acked_at=0.5)
    first = lent("c1", "a", 20, 20.5, 1)
    again = lent("c2", "a", 24, 24.1, 2)
    assert lent_twice_at_once([early, first, again], [], [5, 7, 23]) == []
    late = delivery("c0", "y", 40, 8, acked_at=40.5)
    assert lent_twice_at_once([early, first, again, late], [], [23, 30, 35]) == []
    assert lent_twice_at_once([early, first, again], [], [5, 7, 23], allowance=0) != []


def test_one_term_excusing_several_lendings_is_spent_once() -> None:
    """An unexplained term between two lendings' pairs excuses both: the allowance counts terms, not
    lendings, and the one that excuses the most is chosen first."""
    pairs = [(lent("c1", m, 0, 1.5, 1 + n), lent("c2", m, 4, 4.1, 10 + n)) for n, m in enumerate("abc")]
    history = [d for pair in pairs for d in pair]
    assert lent_twice_at_once(history, [], [3, 3.5, 0.1], allowance=1) == []
    found = lent_twice_at_once(
        [*history, lent("c1", "d", 10, 11.5, 20), lent("c2", "d", 14, 14.1, 21)], [], [3, 13], allowance=1
    )
    assert len(found) == 1 and found[0].startswith("id-d") and "term began at 13.0" in found[0], found


def test_a_fault_explains_its_own_rounds_only() -> None:
    """A fault explains a couple of elections within its window: a third term after it, or one long
    after it, is nobody's; terms before the history (the group's first election) are not counted."""
    first = lent("c1", "a", 0, 1.5, 1)
    again = lent("c2", "a", 4, 4.1, 2)
    found = lent_twice_at_once([first, again], [0.5], [1, 2, 3], allowance=0)
    assert found == []  # (the lending excused by the term at 2; the third term alone is no finding)
    late = lent("c2", "a", 40, 40.1, 2)
    late.invisible_s = first.invisible_s = 60
    found = lent_twice_at_once([first, late], [0.5], [30], allowance=0)
    assert len(found) == 1 and "term began at 30.0" in found[0]
    assert lent_twice_at_once([first, again], [], [-100, -99, -98], allowance=0) != []  # (the lending)
    assert all("term began" not in f for f in lent_twice_at_once([first, again], [], [-100], allowance=0))
