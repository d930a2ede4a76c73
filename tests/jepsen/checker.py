"""The history checker: what was acknowledged against what the group serves afterwards.

Modelled on Jepsen's checkers (Knossos' and Elle's structured results, not a pass/fail bit): ``check``
pairs every send's invocation with its completion, groups the attempts of each message (retries send the
same body again), and compares them with a full read of the topic. Anomalies:

- ``lost``: acknowledged (SEND_OK) but not read back;
- ``duplicated``: read more often than its attempts that could have stored it (``ok`` + ``info``, each
  counted as often as the client may have sent it) explain;
- ``failed-visible``: every attempt failed for certain, yet it is read back;
- ``foreign``: read back but never sent;
- ``moved``: acknowledged at a queue and offset where it is not found (it is read elsewhere); a client
  that reports the offset but not the queue (the C++ client: its retries pick the next queue) is held
  to the offset in whatever queue;
- ``reordered``: two acknowledged messages of one producer in one queue read in the other order;
- ``malformed``: a process with two operations in flight (the history itself is wrong).

``check_places`` adds what the read alone shows: each queue serves one message at each offset, with no
offset skipped between the first and the last it serves.

Copies that retries of an unknown outcome explain are at-least-once, allowed, and listed apart
(``retried_duplicates``). ``check_leaders`` and ``check_resumed`` add the distributed rules: at most one
leader per term among the role observations, and an acknowledged write after a given time.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.jepsen.history import NEMESIS, History, Op


@dataclass(frozen=True)
class Read:
    """One message as the final read found it."""

    queue: int
    offset: int
    value: str


@dataclass(frozen=True)
class Anomaly:
    kind: str
    value: str
    detail: str


@dataclass
class CheckResult:
    anomalies: list[Anomaly] = field(default_factory=list)
    #: Messages read more than once where retries of an unknown outcome explain every copy.
    retried_duplicates: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def kinds(self) -> set[str]:
        return {a.kind for a in self.anomalies}

    def of(self, kind: str) -> list[Anomaly]:
        return [a for a in self.anomalies if a.kind == kind]

    def merge(self, other: CheckResult) -> CheckResult:
        counts = {**self.counts, **other.counts}
        dups = self.retried_duplicates + other.retried_duplicates
        return CheckResult(self.anomalies + other.anomalies, dups, counts)

    def summary(self) -> str:
        """One paragraph for an assertion message: the counts, then the first anomalies of each kind."""
        lines = [", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))]
        for kind in sorted(self.kinds()):
            found = self.of(kind)
            lines.append(f"{kind} ({len(found)}): " + "; ".join(f"{a.value}: {a.detail}" for a in found[:5]))
        return "\n".join(lines)


@dataclass(frozen=True)
class Attempt:
    invocation: Op
    completion: Op | None  # None: never completed (the run ended first), as unknown as ``info``

    @property
    def type(self) -> str:
        return "info" if self.completion is None else self.completion.type


def attempts(history: History | Iterable[Op], f: str = "send") -> tuple[list[Attempt], list[Anomaly]]:
    """Pair each process's invocations of ``f`` with their completions, in history order."""
    ops = history.ops if isinstance(history, History) else list(history)
    open_: dict[str, Op] = {}
    paired: list[Attempt] = []
    malformed: list[Anomaly] = []
    for op in ops:
        if op.f != f or op.process == NEMESIS:
            continue
        if op.type == "invoke":
            if op.process in open_:
                malformed.append(Anomaly("malformed", op.value, f"{op.process} invoked with one in flight"))
                paired.append(Attempt(open_[op.process], None))
            open_[op.process] = op
        else:
            inv = open_.pop(op.process, None)
            if inv is None:
                malformed.append(Anomaly("malformed", op.value, f"{op.process} completed nothing in flight"))
                continue
            paired.append(Attempt(inv, op))
    paired += [Attempt(inv, None) for inv in open_.values()]
    paired.sort(key=lambda a: a.invocation.index)
    return paired, malformed


def check(history: History | Iterable[Op], reads: Iterable[Read]) -> CheckResult:
    """Compare the sends of ``history`` with ``reads``, everything the topic holds afterwards."""
    tries, anomalies = attempts(history)
    reads = list(reads)
    by_value: dict[str, list[Attempt]] = defaultdict(list)
    for a in tries:
        by_value[a.invocation.value].append(a)
    copies: dict[str, list[Read]] = defaultdict(list)
    for r in reads:
        copies[r.value].append(r)
    result = CheckResult(anomalies)
    for value in copies.keys() - by_value.keys():
        where = ", ".join(f"q{r.queue}@{r.offset}" for r in copies[value])
        result.anomalies.append(Anomaly("foreign", value, f"read at {where}, never sent"))
    for value, tried in by_value.items():
        _check_message(value, tried, copies.get(value, []), result)
    result.anomalies += _reorderings(tries, copies)
    types = [a.type for a in tries]
    result.counts = {
        "messages": len(by_value),
        "attempts": len(tries),
        "ok": types.count("ok"),
        "info": types.count("info"),
        "fail": types.count("fail"),
        "read": len(reads),
    }
    return result


def check_places(reads: Iterable[Read]) -> CheckResult:
    """Each queue's offsets, as a read from its start found them: one message at each (``place-twice``:
    a consumer at that offset gets either), none skipped (``place-skipped``: a consumer's next offset
    passes over what the group acknowledged there, or it never held anything there)."""
    at: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in reads:
        at[r.queue][r.offset].add(r.value)
    result = CheckResult(counts={"queues-read": len(at)})
    for queue, held in sorted(at.items()):
        offsets = sorted(held)
        for offset in offsets:
            if len(held[offset]) > 1:
                values = sorted(held[offset])
                result.anomalies.append(
                    Anomaly("place-twice", values[0], f"q{queue}@{offset} holds {values}")
                )
        for before, after in itertools.pairwise(offsets):
            if after != before + 1:
                result.anomalies.append(
                    Anomaly("place-skipped", f"q{queue}", f"offsets {before + 1}..{after - 1} not served")
                )
    return result


def _check_message(value: str, tried: list[Attempt], found: list[Read], result: CheckResult) -> None:
    oks = [a.completion for a in tried if a.type == "ok" and a.completion is not None]
    possible = sum(a.invocation.tries for a in tried if a.type in ("ok", "info"))
    where = ", ".join(f"q{r.queue}@{r.offset}" for r in found)
    if oks and not found:
        c = oks[0]
        result.anomalies.append(Anomaly("lost", value, f"SEND_OK at q{c.queue}@{c.offset} by {c.process}"))
        return
    if found and possible == 0:
        result.anomalies.append(Anomaly("failed-visible", value, f"every attempt failed, read at {where}"))
        return
    if len(found) > possible:
        result.anomalies.append(
            Anomaly("duplicated", value, f"{len(found)} copies ({where}) for {possible} ok/info attempts")
        )
    elif len(found) > 1:
        result.retried_duplicates.append(value)
    for c in oks:
        if c.offset is not None and found and not _placed(c, found):
            at = f"q{c.queue}@{c.offset}" if c.queue is not None else f"offset {c.offset}"
            result.anomalies.append(Anomaly("moved", value, f"SEND_OK at {at}, read at {where}"))


def _placed(c: Op, found: list[Read]) -> list[Read]:
    """The copies at the place ``c`` acknowledged: its queue and offset, or only its offset where the
    client did not say the queue."""
    return [r for r in found if r.offset == c.offset and c.queue in (None, r.queue)]


def _reorderings(tries: list[Attempt], copies: dict[str, list[Read]]) -> list[Anomaly]:
    """One producer's acknowledged messages in one queue must be read in the order they were acknowledged
    (a process sends one at a time, so acknowledgement order is send order)."""
    lanes: dict[tuple[str, int], list[tuple[int, Op]]] = defaultdict(list)
    for a in tries:
        c = a.completion
        if c is None or c.type != "ok":
            continue
        if c.queue is None:  # its queue is where the copy at its offset is, if one is
            placed = _placed(c, copies.get(c.value, [])) if c.offset is not None else []
            if len(placed) == 1:
                lanes[(c.process, placed[0].queue)].append((placed[0].offset, c))
            continue
        found = [r for r in copies.get(c.value, []) if r.queue == c.queue]
        if not found:
            continue  # lost or moved: reported as such
        at = next((r.offset for r in found if r.offset == c.offset), found[0].offset)
        lanes[(c.process, c.queue)].append((at, c))
    out = []
    for (process, queue), acked in lanes.items():
        acked.sort(key=lambda pair: pair[1].index)
        for (before_at, before), (after_at, after) in itertools.pairwise(acked):
            if after_at <= before_at:
                out.append(
                    Anomaly(
                        "reordered",
                        after.value,
                        f"{process} q{queue}: acknowledged after {before.value} but read at {after_at}, "
                        f"it at {before_at}",
                    )
                )
    return out


def check_leaders(history: History | Iterable[Op], leader: str = "LEADER") -> CheckResult:
    """At most one node claims to lead in any term (Raft's election safety), from role observations."""
    ops = history.ops if isinstance(history, History) else list(history)
    claims: dict[int, set[str]] = defaultdict(set)
    for op in ops:
        if op.f == "role" and op.role == leader and op.term is not None:
            claims[op.term].add(op.value)
    result = CheckResult(counts={"terms-with-leader": len(claims)})
    for term, nodes in sorted(claims.items()):
        if len(nodes) > 1:
            result.anomalies.append(Anomaly("two-leaders", str(term), f"{sorted(nodes)} all led term {term}"))
    return result


def check_resumed(history: History | Iterable[Op], after: float) -> CheckResult:
    """Writes resumed: a send invoked after ``after`` (a history time: a fault, a heal) was acknowledged.
    One invoked before it shows nothing: its answer may have raced the fault (a leader frozen or killed
    just after it replied), and counting it let a wait for the real clients' recovery end at once."""
    ops = history.ops if isinstance(history, History) else list(history)
    invoked: dict[str, float] = {}  # each process's latest invocation (a process sends one at a time)
    later = []
    for op in ops:
        if op.f != "send":
            continue
        if op.type == "invoke":
            invoked[op.process] = op.time
        elif op.type == "ok" and invoked.get(op.process, after) > after:
            later.append(op)
    result = CheckResult(counts={"ok-after": len(later)})
    if not later:
        result.anomalies.append(Anomaly("not-resumed", f"{after:.2f}", "no send acknowledged after it"))
    return result


def check_served(served: Iterable[Read], final: Iterable[Read]) -> CheckResult:
    """What consumers were served during the run against the final read: a message once served at a
    queue and offset stays there (a committed entry never changes), so each served place must hold the
    same message at the end. ``served-changed``: the place holds another message now; ``served-gone``:
    the place is no longer there (what was served has been cut)."""
    final_at = {(r.queue, r.offset): r.value for r in final}
    result = CheckResult()
    places = 0
    for r in {(r.queue, r.offset, r.value) for r in served}:
        places += 1
        queue, offset, value = r
        now = final_at.get((queue, offset))
        if now is None:
            result.anomalies.append(Anomaly("served-gone", value, f"served at q{queue}@{offset}, gone since"))
        elif now != value:
            result.anomalies.append(
                Anomaly("served-changed", value, f"served at q{queue}@{offset}, now {now}")
            )
    result.counts = {"served-places": places}
    return result
