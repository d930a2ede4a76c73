"""A Jepsen-style history: every operation a client or the nemesis performs, as an invocation and its
completion, in the order the test saw them.

A completion is ``ok`` (the system acknowledged it: SEND_OK), ``fail`` (it certainly did not happen: the
request never left, or the server refused it without storing), or ``info`` (unknown: a timeout, a
connection lost after the request went out, or a stored-but-not-replicated answer such as
FLUSH_SLAVE_TIMEOUT). Each client process has at most one operation in flight, as in Jepsen, so a
completion pairs with its process's last invocation. A real client that retries inside one call (ali-ons'
``retryTimesWhenSendFailed``) records how often it may have sent the message as the operation's ``tries``. Role observations (who claims to lead, in which
term) are recorded too, for the checker's one-leader-per-term rule.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

OpType = Literal["invoke", "ok", "fail", "info"]

#: The process name of the fault injector's operations.
NEMESIS = "nemesis"


@dataclass(frozen=True)
class Op:
    """One history entry. For a send, ``value`` is the message's identity (its body digest) and the
    completion carries the client's view of where it went; for the nemesis, ``value`` names the target."""

    index: int
    time: float
    process: str
    type: OpType
    f: str
    value: str
    queue: int | None = None
    offset: int | None = None
    msg_id: str | None = None
    error: str | None = None
    #: The broker that answered (or was asked), for "who accepted writes when".
    addr: str | None = None
    role: str | None = None
    term: int | None = None
    #: How many times the client may have sent it under this one operation (a real client's own retries).
    tries: int = 1


class History:
    """An append-only, thread-safe list of :class:`Op` with monotonic times relative to its start."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._start

    def _add(self, op: Op) -> Op:
        with self._lock:
            op = replace(op, index=len(self.ops), time=self.now())
            self.ops.append(op)
            return op

    def invoke(self, process: str, f: str, value: str, tries: int = 1) -> Op:
        return self._add(Op(0, 0.0, process, "invoke", f, value, tries=tries))

    def complete(self, invocation: Op, type: OpType, **fields: object) -> Op:
        """The completion of ``invocation``; ``fields`` are the client's view (queue, offset, msg_id, error)."""
        return self._add(replace(invocation, type=type, **fields))  # type: ignore[arg-type]

    def nemesis(self, f: str, target: str) -> Op:
        """A fault (or its healing) as the nemesis performed it: one ``info`` entry, as Jepsen logs them."""
        return self._add(Op(0, 0.0, NEMESIS, "info", f, target))

    def observe(self, node: str, role: str, term: int) -> Op:
        """What ``node`` said about itself (e.g. LEADER in term 3), for the one-leader-per-term check."""
        return self._add(Op(0, 0.0, f"observer:{node}", "info", "role", node, role=role, term=term))

    def last(self, f: str) -> Op:
        """The latest entry of function ``f`` (a nemesis step, say): where "after the fault" starts."""
        return next(op for op in reversed(self.ops) if op.f == f)

    def invoked_after(self, completion: Op, mark: Op) -> bool:
        """Whether ``completion``'s invocation (its process's last before it) came after ``mark`` (the
        nemesis step that began a fault): only such an operation surely met the fault."""
        for op in reversed(self.ops[: completion.index]):
            if op.process == completion.process and op.type == "invoke":
                return op.index > mark.index
        return False

    def outcomes(self) -> str:
        """Completions by type and error, with the nemesis steps: the gist of a run that went wrong."""
        counts = Counter(
            # (numbers left out: ali-ons' "Send [4] times, still failed, cost [3002]ms" is one kind)
            f"{op.type} {re.sub(r'[0-9]+', 'N', (op.error or '').split(':')[0])}".strip()
            for op in self.ops
            if op.type != "invoke" and op.process != NEMESIS and op.f == "send"
        )
        faults = [f"{op.time:.1f}s {op.f} {op.value}" for op in self.ops if op.process == NEMESIS]
        sends = ", ".join(f"{what}: {n}" for what, n in counts.most_common())
        return f"sends at {self.now():.1f}s: {sends or 'none completed'}; nemesis: {faults or 'nothing yet'}"

    def dump(self, path: Path) -> None:
        """Write the history as JSON lines, for reading a failed run afterwards."""
        path.write_text("".join(json.dumps(asdict(op)) + "\n" for op in self.ops))
