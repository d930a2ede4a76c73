"""What each member's DLedger files hold, read after the run: every entry of its log and of the tails it
set aside in quarantine, with its term and the member that stored its record.

This checks election safety without a clock. The role observer polls, so it can miss a leadership that
lasted less than a poll, and a member's log line says only that it took the master role. An entry
cannot be missed this way: only the leader of a term appends entries in that term. So every entry of one
term, in any member's log or quarantine, must have been stored by one member. A SEND_OK's copy must also
sit in a term that the broker which answered led.
"""

from __future__ import annotations

import mmap
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from store import dledger as dl
from store.quarantine import QUARANTINE_DIR
from store.record import decode_record
from tests.jepsen.checker import Anomaly, CheckResult
from tests.jepsen.client import digest
from tests.jepsen.history import History, Op


@dataclass(frozen=True)
class Logged:
    """One entry as a member's files hold it."""

    node: str
    index: int
    term: int
    #: The history's identity of the message (its body's digest).
    value: str
    #: The broker that stored the record (its STOREHOST, ``ip:port``): the leader that appended it.
    host: str
    #: In the member's log (True), or in a tail it set aside (False).
    kept: bool


def entries_in(buf: bytes | memoryview, node: str, kept: bool) -> Iterator[Logged]:
    """The entries from the start of ``buf`` (a data file, or a quarantined piece of one) to its first
    blank, zero or torn entry."""
    at = 0
    while at + dl.BODY_OFFSET <= len(buf):
        if dl.decode_header(buf, at)[0] != dl.CURRENT_MAGIC:
            return
        try:
            entry = dl.decode_entry(buf, at)
            record = decode_record(entry.body, 0)
        except Exception:  # a torn last entry of a killed member: what follows it is nothing
            return
        host = f"{record.store_host[0]}:{record.store_host[1]}"
        yield Logged(node, entry.index, entry.term, digest(record.body), host, kept)
        at += entry.size


def _read(path: Path, node: str, kept: bool) -> list[Logged]:
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf, memoryview(buf) as view:
            return list(entries_in(view, node, kept))


def logged(node: str, store: Path) -> list[Logged]:
    """Every entry of the member ``node`` whose ``storePathRootDir`` is ``store`` (stopped: a running
    member may be writing its last entry)."""
    data = sorted(p for p in store.glob(f"dledger-*/{dl.DATA_DIR}/*") if p.name.isdigit())
    pieces = sorted(p for p in (store / QUARANTINE_DIR).glob("*/commitlog/*") if p.name.isdigit())
    return [e for p in data for e in _read(p, node, True)] + [
        e for p in pieces for e in _read(p, node, False)
    ]


def check_terms(entries: Iterable[Logged], history: History | Iterable[Op] = ()) -> CheckResult:
    """At most one member stored entries in any term (``two-stored``), and at most one broker answered
    SEND_OK for copies stored in any term (``two-acked``): a SEND_OK is placed in the term of the copy
    that the broker which answered stored. ``acked-placed`` counts the SEND_OKs so placed (a copy a
    member lost with an emptied store cannot be)."""
    entries = list(entries)
    hosts: dict[int, set[str]] = defaultdict(set)
    terms_of: dict[tuple[str, str], set[int]] = defaultdict(set)
    for e in entries:
        hosts[e.term].add(e.host)
        terms_of[(e.value, e.host)].add(e.term)
    result = CheckResult()
    for term, stored in sorted(hosts.items()):
        if len(stored) > 1:
            result.anomalies.append(
                Anomaly("two-stored", str(term), f"entries of term {term} by {sorted(stored)}")
            )
    ops = history.ops if isinstance(history, History) else list(history)
    acked: dict[int, set[str]] = defaultdict(set)
    placed = 0
    for op in ops:
        if op.f != "send" or op.type != "ok" or op.addr is None:
            continue
        terms = terms_of.get((op.value, op.addr), set())
        placed += bool(terms)
        for term in terms:
            acked[term].add(op.addr)
    for term, answered in sorted(acked.items()):
        if len(answered) > 1:
            result.anomalies.append(
                Anomaly("two-acked", str(term), f"SEND_OK in term {term} from {sorted(answered)}")
            )
    result.counts = {"entries": len(entries), "terms-logged": len(hosts), "acked-placed": placed}
    return result
