"""The checks of a recorded 5.x client history (SimpleConsumer receives, acks and changes of invisibility,
Producer sends): what a message queue owes an application across faults, as 5.x states it.

Times are the client's, read before a call (``start``) and after it returned (``end``): a lending made
by a receive began no sooner than the receive's start, so it lasts at least until that start plus its
invisible duration (or a change's start plus the new duration, a change answered OK), unless an ack of
it was tried before. A receipt handle recorded with a delivery tells the broker's own time of the lending
(its popTime, on the same host's clock): the lending runs from the later of the two."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Delivery:
    """One message a receive returned: who received it, the receive's start and end, how long it was lent
    for; the ack and change calls the consumer then made of it (start, answered OK, new duration)."""

    consumer: str
    key: str  # the message (its id)
    body: str
    start: float
    end: float
    invisible_s: float
    #: The receive call that returned it (deliveries of one call are one batch).
    call: int
    acks: list[tuple[float, bool]] = field(default_factory=list)
    changes: list[tuple[float, bool, float]] = field(default_factory=list)
    #: The receipt handle the broker gave (``""``: not recorded), and the front that answered.
    handle: str = ""
    via: str = ""

    @property
    def pop_time(self) -> float | None:
        """When the broker lent it: the handle's popTime (its second field, ms), None without one."""
        fields = self.handle.split(" ")
        try:
            return int(fields[1]) / 1000 if len(fields) >= 8 else None
        except ValueError:
            return None

    @property
    def lent_until(self) -> float:
        """The earliest time the lending can have ended: its duration (a change answered OK starting it
        again) from the later of the call's start and the broker's popTime, or the first ack tried."""
        until = max(self.start, self.pop_time or self.start) + self.invisible_s
        for start, ok, seconds in self.changes:
            if ok:
                until = max(until, start + seconds)
        tried = [start for start, _ in self.acks]
        return min([until, *tried])

    @property
    def acked(self) -> bool:
        return any(ok for _, ok in self.acks)


def lost(
    sent: Iterable[str], deliveries: Iterable[Delivery], faults: Iterable[float] = (), timeout: float = 0.0
) -> list[str]:
    """Bodies sent (answered OK) that no consumer acked (answered OK). With ``faults``, an ack that failed
    while a fault struck during it (within ``timeout`` s of its start, the call's own timeout) counts as
    acked: its answer was lost with the leader, and the group may hold it (the message then comes no more)."""
    faults = list(faults)

    def acked(d: Delivery) -> bool:
        return d.acked or any(not ok and any(at <= f <= at + timeout for f in faults) for at, ok in d.acks)

    return sorted(set(sent) - {d.body for d in deliveries if acked(d)})


#: A leader's term that began this soon after a fault the test induced (a kill, a pause, a cut link or its
#: heal) is the fault's doing: the election (or two) it made.
INDUCED_WITHIN_S = 15.0
#: The terms one induced fault can explain (a split vote elects in a second round).
TERMS_PER_FAULT = 2
#: Terms that no fault explains, excused all the same (a member's loop held past its followers' patience
#: on a loaded host elects another), whichever excuse the most: more are an election storm, excusing nothing.
UNINDUCED_ALLOWANCE = 2


def lent_twice_at_once(
    deliveries: Iterable[Delivery],
    faults: Iterable[float] = (),
    starts: Iterable[float] = (),
    *,
    induced: Iterable[float] = (),
    allowance: int = UNINDUCED_ALLOWANCE,
) -> list[str]:
    """A message returned by another receive while an earlier lending of it still ran: the receive ended
    before that lending's earliest end. With ``faults`` (the times the test killed, paused or cut off a
    member, or healed it), a second lending after a fault that came between the two is allowed (a
    non-FIFO lending is not logged: the next leader lends it again at once, as 5.x's slave acting master
    does). Between means after the first lending was made (its popTime when known, else its receive's
    start) and before the second was (the same): a leader whose term began before the first lending was
    made does not excuse it, as when a deposed leader lent on beside its successor.

    ``starts`` are the times leaders' terms began (their term records). One that a fault explains (up to
    ``TERMS_PER_FAULT`` within ``INDUCED_WITHIN_S`` after it; ``induced`` names events that can start a
    term and are no fault for the other checks, a member's restart) excuses as a fault does. Of those
    nothing explains, at most ``allowance`` distinct ones excuse lendings in all, chosen to excuse the most
    (greedy), whenever in the history they fell: spent in time order, quiet ones early made a correct
    run's later take-over fail. More are an election storm (it would hide any lending twice at once): a
    lending left unexcused is reported naming the unexplained terms between its lendings. A storm with no
    such lending is no finding: it costs availability, not safety."""
    deliveries = list(deliveries)
    faults = list(faults)
    excusing = list(faults)
    during: list[float] = []
    if deliveries:
        began, ended = min(d.start for d in deliveries), max(d.end for d in deliveries)
        explained, unexplained = _explained(starts, [*faults, *induced])
        during = [t for t in unexplained if began <= t <= ended]
        excusing += explained
    by_key: dict[str, list[Delivery]] = {}
    for d in deliveries:
        by_key.setdefault(d.key, []).append(d)
    twice: list[tuple[Delivery, Delivery, float, float]] = []  # (first, later, made, again)
    for ds in by_key.values():
        ds.sort(key=lambda d: d.start)
        for i, first in enumerate(ds):
            for later in ds[i + 1 :]:
                if later.call == first.call or later.end >= first.lent_until:
                    continue
                made, again = first.pop_time or first.start, later.pop_time or later.end
                if not any(made <= t <= again for t in excusing):
                    twice.append((first, later, made, again))
    for _ in range(allowance):  # each unexplained term allowed: the one that excuses the most left
        excuses = {t: sum(made <= t <= again for _, _, made, again in twice) for t in during}
        best = max(excuses, key=lambda t: (excuses[t], -t), default=None)
        if best is None or not excuses[best]:
            break
        twice = [w for w in twice if not w[2] <= best <= w[3]]
    return [
        f"{first.key} ({first.body}): lent to {first.consumer} at {first.start:.1f} until at least "
        f"{first.lent_until:.1f}, and to {later.consumer} by {later.end:.1f}{_told(first, later)}"
        + "".join(
            f"; a leader's term began at {t:.1f} that no fault explains, beyond the "
            f"{allowance} allowed (an election storm excuses nothing)"
            for t in during
            if made <= t <= again
        )
        for first, later, made, again in twice
    ]


def _explained(starts: Iterable[float], causes: Iterable[float]) -> tuple[list[float], list[float]]:
    """``starts`` split in time order: those a cause explains (each at most ``TERMS_PER_FAULT``, within
    ``INDUCED_WITHIN_S`` after it, the earliest cause that has room first), and the others."""
    room = [[at, TERMS_PER_FAULT] for at in sorted(causes)]
    explained, unexplained = [], []
    for t in sorted(starts):
        cause = next((c for c in room if c[1] and c[0] <= t <= c[0] + INDUCED_WITHIN_S), None)
        if cause is None:
            unexplained.append(t)
        else:
            cause[1] -= 1
            explained.append(t)
    return explained, unexplained


def _told(*lendings: Delivery) -> str:
    """What the broker told of each lending (its handle, the front that answered), when recorded."""
    told = [f"handle {d.handle!r} via {d.via or '?'}" for d in lendings if d.handle]
    return f" ({'; '.join(told)})" if told else ""


def out_of_order(deliveries: Iterable[Delivery], sequence: dict[str, tuple[str, int]]) -> list[str]:
    """FIFO: a message of a message group returned while an earlier message of its group (``sequence``:
    body -> (group, number), sent OK one after another) was neither in the same receive before it nor
    tried to be acked before that receive ended."""
    ds = sorted(deliveries, key=lambda d: d.start)
    ack_tried: dict[str, float] = {}
    for d in ds:
        for start, _ in d.acks:
            ack_tried[d.body] = min(ack_tried.get(d.body, start), start)
    by_group: dict[str, dict[int, str]] = {}
    for body, (group, number) in sequence.items():
        by_group.setdefault(group, {})[number] = body
    calls: dict[int, list[Delivery]] = {}
    for d in ds:
        calls.setdefault(d.call, []).append(d)
    found = []
    for d in ds:
        if d.body not in sequence:
            continue
        group, number = sequence[d.body]
        same_call = {x.body for x in calls[d.call][: calls[d.call].index(d)]}
        for earlier in range(number):
            body = by_group[group].get(earlier)
            if body is None or body in same_call:
                continue
            if ack_tried.get(body, float("inf")) > d.end:
                found.append(f"{d.body} returned to {d.consumer} by {d.end:.1f} before {body} was acked")
                break
    return found


def early(deliveries: Iterable[Delivery], due: dict[str, float], slack: float = 0.0) -> list[str]:
    """Timer messages (``due``: body -> its delivery time) returned before their time."""
    return sorted(
        f"{d.body}: returned by {d.end:.3f}, due at {due[d.body]:.3f}"
        for d in deliveries
        if d.body in due and d.end < due[d.body] - slack
    )
