"""Reads that ask every broker: answer with what could be read, and name each broker that could not be.

One broker that refuses (another cluster's ACL), times out or is down must not take everyone's
``group list`` with it. :func:`each_broker` asks every address (:func:`fanout_width` at a time) and
keeps the answers; each failure becomes a :class:`BrokerFailure` recorded for the running command (the
CLI warns about each, and records carry them as ``errors``). Only when no broker answered does it raise
:class:`~mqctl.errors.NothingReadError`, naming the first of them and counting the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict, TypeVar, overload

from daemon.remoting.errors import (
    RemotingCommandError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from mqctl.errors import (
    AuthError,
    ConnectError,
    MqctlError,
    NothingReadError,
    RequestTimeoutError,
    is_acl_refusal,
    remark_line,
)

if TYPE_CHECKING:
    from mqctl.admin.client import Admin

T = TypeVar("T")

#: Brokers the error line of a read that reached none names; the rest are counted (a line naming thousands
#: of a route's brokers, a hostile NameServer's word, said nothing).
NAMED_FAILURES = 20


class Runner(Protocol):
    """How a read runs each request it makes of a broker (``addr``): at once (:func:`direct`), or, in
    ``top``, through its concurrency limit, its failures logged."""

    def __call__(self, addr: str, work: Awaitable[T], /) -> Awaitable[T]: ...


async def direct(addr: str, work: Awaitable[T]) -> T:
    """The :class:`Runner` of a command: the request as it is."""
    return await work


def fanout_width() -> int:
    """Brokers asked at once: a quarter of the open-file limit, 16 to 1024. A route may name thousands of
    brokers (a large cluster, or a hostile NameServer's word), each ask holds a socket, and all at once
    ran out of descriptors under the common limit of 1024: the rest reported down, "Too many open files"."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # (no such limit here)
        return 256
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 4))


@overload
async def gather_limited(
    work: Iterable[Awaitable[T]], limit: int, *, return_exceptions: Literal[False] = False
) -> list[T]: ...
@overload
async def gather_limited(
    work: Iterable[Awaitable[T]], limit: int, *, return_exceptions: Literal[True]
) -> list[T | BaseException]: ...
async def gather_limited(
    work: Iterable[Awaitable[T]], limit: int, *, return_exceptions: bool = False
) -> list[T] | list[T | BaseException]:
    """``asyncio.gather`` with at most ``limit`` awaitables in flight (thousands of requests at once, each
    holding a socket): the answers in the order given. ``return_exceptions`` as gather's: each failure in
    its place instead of the first one raised."""
    slots = asyncio.Semaphore(limit)

    async def one(aw: Awaitable[T]) -> T:
        async with slots:
            return await aw

    return await asyncio.gather(*(one(aw) for aw in work), return_exceptions=return_exceptions)


class FailureRow(TypedDict):
    """An entry of a record's ``errors`` list: the fields of :class:`BrokerFailure`."""

    broker: str
    broker_name: str | None
    reason: str
    detail: str


@dataclass(frozen=True)
class BrokerFailure:
    """A broker a read could not read: its address, name, why (``ACL denied``, ``timed out``, ``down``,
    or the error's kind) and what it said."""

    broker: str
    broker_name: str | None
    reason: str
    detail: str

    def row(self) -> FailureRow:
        """The failure as an entry of a record's ``errors`` list."""
        return {
            "broker": self.broker,
            "broker_name": self.broker_name,
            "reason": self.reason,
            "detail": self.detail,
        }

    def describe(self) -> str:
        name = f"{self.broker_name} ({self.broker})" if self.broker_name else self.broker
        return f"{name}: {self.reason}: {self.detail}"


def failure_reason(exc: Exception) -> tuple[str, str]:
    """Why a broker could not be read: (``ACL denied`` | ``timed out`` | ``down`` | ``error ...``, detail)."""
    if isinstance(exc, RemotingCommandError):
        detail = remark_line(exc.remark) if (exc.remark or "").strip() else str(exc)
        if is_acl_refusal(exc.code, exc.remark):
            return "ACL denied", detail
        return f"error {exc.code}", detail
    if isinstance(exc, RemotingConnectError | ConnectError):
        return "down", str(exc)
    if isinstance(exc, RemotingTimeoutError | RequestTimeoutError):
        return "timed out", str(exc)
    if isinstance(exc, AuthError):
        return "ACL denied", str(exc)
    return "error", str(exc)


# The failures of the command running now: a list shared by every task of its session.
_failures: ContextVar[list[BrokerFailure] | None] = ContextVar("mqctl_broker_failures", default=None)


@contextmanager
def collecting() -> Iterator[list[BrokerFailure]]:
    """Collect the failures of the reads run inside (one command, or one ``--watch`` refresh)."""
    bucket: list[BrokerFailure] = []
    token = _failures.set(bucket)
    try:
        yield bucket
    finally:
        _failures.reset(token)


def failures() -> list[FailureRow]:
    """The failures recorded so far in this command, as the ``errors`` list of a record."""
    return [f.row() for f in _failures.get() or []]


def _record(found: list[BrokerFailure]) -> None:
    bucket = _failures.get()
    if bucket is None:  # no command collects them (top, completion): the answers are what counts
        return
    seen = {f.broker for f in bucket}
    bucket.extend(f for f in found if f.broker not in seen)  # one line per broker, its first refusal


async def broker_names(admin: Admin) -> dict[str, str]:
    """Broker address → broker name, for every broker the NameServer knows ({} when it does not answer)."""
    try:
        info = await admin.cluster_info()
    except RemotingError:
        return {}
    return {
        addr: data.broker_name
        for data in info.broker_addr_table.values()
        for addr in data.broker_addrs.values()
    }


async def record_failures(admin: Admin, failed: Iterable[tuple[str, Exception]]) -> None:
    """Record each broker a read could not read (address, what it raised; the first per broker) for the
    running command: the CLI warns about each once (see :func:`collecting`)."""
    first: dict[str, Exception] = {}
    for addr, exc in failed:
        first.setdefault(addr, exc)
    if not first:
        return
    names = await broker_names(admin)
    _record([BrokerFailure(addr, names.get(addr), *failure_reason(exc)) for addr, exc in first.items()])


async def each_broker(
    admin: Admin, addrs: Iterable[str], call: Callable[[str], Awaitable[T]], *, required: bool = True
) -> dict[str, T]:
    """``call(addr)`` for every address at once: the answers by address (in the order given), with each
    failure recorded (see :func:`collecting`). No answer at all (and at least one address) raises
    NothingReadError, unless not ``required`` (a second read whose failure only leaves some figures
    unknown); an error that is not about reaching or being refused by a broker is raised as is."""
    targets = list(dict.fromkeys(addrs))
    # gather_limited's slots would be outside the count: waiting its turn counts as asked, so a command's
    # deadline names it
    gate = asyncio.Semaphore(fanout_width())

    async def asked(addr: str) -> T:
        with admin.waiting_for(addr):
            async with gate:
                try:
                    return await call(addr)
                except (RemotingError, MqctlError):
                    # its descriptor freed for the next: a silent broker's connection stayed open, pooled
                    conn = admin.client.open_connection(addr)
                    if conn is not None:
                        conn.close()
                    raise

    results = await asyncio.gather(*(asked(addr) for addr in targets), return_exceptions=True)
    answers: dict[str, T] = {}
    failed: list[tuple[str, Exception]] = []
    for addr, result in zip(targets, results, strict=True):
        if isinstance(result, RemotingError | MqctlError):
            failed.append((addr, result))
        elif isinstance(result, BaseException):
            raise result
        else:
            answers[addr] = result
    if not failed:
        return answers
    names = await broker_names(admin)
    found = [BrokerFailure(addr, names.get(addr), *failure_reason(exc)) for addr, exc in failed]
    _record(found)
    if not answers and required:
        named = "; ".join(f.describe() for f in found[:NAMED_FAILURES])
        if len(found) > NAMED_FAILURES:
            named += f"; and {len(found) - NAMED_FAILURES} more"
        denied = any(f.reason == "ACL denied" for f in found)  # (else credentials are not the cause)
        raise NothingReadError(
            "no broker could be read: " + named,
            hint=("check credentials (--access-key) for an ACL-enabled cluster, or " if denied else "")
            + "narrow it with --cluster",
        )
    return answers
