"""A Jepsen client: producers that send with retries and record every attempt in the history, and the
final read of every queue of the topic.

A producer resolves the topic's master from the NameServer (GET_ROUTEINFO_BY_TOPIC, brokerId 0), as
4.9.8's DefaultMQProducer does, sends one message at a time with SEND_MESSAGE_V2 and, like its
``retryTimesWhenSendFailed``, tries again (on the next queue, after looking the route up again) when an
attempt failed or its outcome is unknown. Each attempt is its own invoke/complete pair in the history,
with the same message identity: the body's digest.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import shutil

import pytest

from daemon.remoting.bodies import TopicRouteData
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingError
from daemon.remoting.headers import GetRouteInfoRequestHeader
from store.record import decode_records
from tests.jepsen.checker import CheckResult, Read, check, check_places
from tests.jepsen.history import History, Op
from tests.support.ali_ons import INTEROP
from tests.support.bounded import STDERR_SHOWN, deadline_env, end_reporting, kill_group
from tests.support.broker import BrokerClient, send_fields
from tests.support.cpp import INTEROP_PYTHON, require_cpp_client

#: Answers that say the broker refused the message before storing it: a definite failure. Any other
#: error is an unknown outcome: FLUSH_SLAVE_TIMEOUT and the like stored it without the durability asked
#: for, and SYSTEM_ERROR may come after an append (a leader that lost its quorum mid-send) whose entry a
#: new leader can still commit.
REFUSED = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        ResponseCode.MESSAGE_ILLEGAL,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.VERSION_NOT_SUPPORTED,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
    }
)


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def digest(body: bytes) -> str:
    return hashlib.sha1(body).hexdigest()


async def master_of(client: RemotingClient, namesrv: str, topic: str) -> str | None:
    """The master of ``topic``'s broker group as the NameServer lists it now (None: no master listed)."""
    header = GetRouteInfoRequestHeader(topic)
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext_fields())
    try:
        r = await client.invoke(namesrv, request, 2.0)
    except RemotingError:
        return None
    if r.code != ResponseCode.SUCCESS:
        return None
    for broker in TopicRouteData.loads(r.body).broker_datas:
        if (addr := broker.master_addr()) is not None:
            return addr
    return None


class Producer:
    """One client process of the history (``process`` names it), with its own connections."""

    def __init__(
        self,
        history: History,
        process: str,
        namesrv: str,
        topic: str,
        *,
        queues: int = 4,
        retries: int = 2,
        timeout: float = 3.0,
        backoff: float = 0.2,
        via: dict[str, str] | None = None,
    ) -> None:
        self.history = history
        self.process = process
        self.namesrv = namesrv
        self.topic = topic
        self.queues = queues
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.client = RemotingClient()
        self.master: str | None = None
        #: Broker addresses the producer reaches through another (a proxy link), as behind a NAT.
        self.via = via or {}
        self._queue = itertools.count(hash(process) % queues)
        self.sent = 0
        #: Cleared while the nemesis pauses this client: it sends nothing more until it is set again.
        self.resumed = asyncio.Event()
        self.resumed.set()

    async def route(self) -> str | None:
        return await master_of(self.client, self.namesrv, self.topic)

    async def send(self, body: bytes) -> Op:
        """Send ``body`` until one attempt is acknowledged or the retries are spent; the last completion."""
        value = digest(body)
        last: Op | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff)
            last = await self._attempt(value, body)
            if last.type == "ok":
                break
            self.master = None  # look the route up again: the master may have moved
        assert last is not None
        return last

    async def _attempt(self, value: str, body: bytes) -> Op:
        queue = next(self._queue) % self.queues
        inv = self.history.invoke(self.process, "send", value)
        addr = self.master = self.master or await self.route()
        if addr is None:
            return self.history.complete(inv, "fail", error="no master in the route")
        try:
            conn = await self.client.connection(self.via.get(addr, addr))
        except RemotingError as exc:
            return self.history.complete(inv, "fail", error=f"connect: {exc}", addr=addr)
        if conn.is_closed:
            return self.history.complete(inv, "fail", error="connection closed before sending", addr=addr)
        request = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, send_fields(self.topic, queue_id=queue, group="JEPSEN_PG"), body
        )
        try:
            r = await conn.invoke(request, self.timeout)
        except (RemotingError, OSError) as exc:  # it went out: stored or not, nobody can say
            return self.history.complete(inv, "info", error=f"{type(exc).__name__}: {exc}", addr=addr)
        where = {
            "queue": int(r.ext_fields.get("queueId", queue)),
            "msg_id": r.ext_fields.get("msgId"),
            "addr": addr,
        }
        if "queueOffset" in r.ext_fields:
            where["offset"] = int(r.ext_fields["queueOffset"])
        if r.code == ResponseCode.SUCCESS:
            self.sent += 1
            return self.history.complete(inv, "ok", **where)
        error = f"{code_name(r.code)}: {r.remark}"
        return self.history.complete(inv, "fail" if r.code in REFUSED else "info", error=error, **where)

    async def run(self, stop: asyncio.Event, pause: float = 0.0) -> None:
        """Send distinct messages until ``stop`` is set."""
        for seq in itertools.count():
            await self.resumed.wait()
            if stop.is_set():
                return
            await self.send(f"{self.process}:{seq}:".encode() * 8)
            if pause:
                await asyncio.sleep(pause)

    async def close(self) -> None:
        await self.client.close()


#: How long a client script has to exit once told to stop (it finishes the send in hand: the client's own
#: retries are bounded by its send timeout), before it is ended.
STOP_GRACE = 30.0
#: A client script's own deadline (``tests/support/bounded.py``'s): past it, it reports what it was waiting
#: for and exits, before pytest's timeout would end the test with nothing said. A run drives its clients
#: for less.
SCRIPT_DEADLINE = 240.0


class ScriptProducer:
    """A real client as a process of the history: a script (``tests/interop/ons_history.js``,
    ``cpp_history.py``) that sends until its stdin closes and prints one JSON line per event; the events
    become history entries as they arrive. Each operation may have been sent as often as the client's
    own retries allow (the ``tries`` its ``ready`` line announces). The script knows its deadline
    (:data:`SCRIPT_DEADLINE`); one that outstays the run is ended in its process group, and told to say
    first what it was waiting for (``end_reporting``)."""

    def __init__(self, history: History, process: str, argv: list[str]) -> None:
        self.history = history
        self.process = process
        self.argv = argv
        self.sent = 0
        self.stderr = b""
        #: The running client process (the nemesis may freeze it with SIGSTOP).
        self.proc: asyncio.subprocess.Process | None = None

    @classmethod
    def ali_ons(
        cls, history: History, process: str, namesrv: str, topic: str, route_refresh: float = 30.0
    ) -> ScriptProducer:
        """ali-ons, looking the route up every ``route_refresh`` seconds (its ``pollNameServerInteval``,
        30 s by default as in 4.9.8's clients): a send meets a moved master only at the next look-up."""
        exe = shutil.which("node")
        if exe is None:
            pytest.skip("node not installed: the ali-ons client needs it")
        if not (INTEROP / "node_modules" / "ali-ons").is_dir():
            pytest.fail("ali-ons not installed: run scripts/install-interop-clients.sh (make test does)")
        poll = str(round(route_refresh * 1000))
        return cls(history, process, [exe, str(INTEROP / "ons_history.js"), namesrv, topic, process, poll])

    @classmethod
    def cpp(cls, history: History, process: str, namesrv: str, topic: str) -> ScriptProducer:
        require_cpp_client()
        script = str(INTEROP / "cpp_history.py")
        return cls(history, process, [str(INTEROP_PYTHON), script, namesrv, topic, process])

    async def run(self, stop: asyncio.Event) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=INTEROP,
            env={**os.environ, **deadline_env(SCRIPT_DEADLINE)},
            start_new_session=True,  # its own group: ending it reaches whatever it started
        )
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        errors = asyncio.create_task(proc.stderr.read())
        stopper = asyncio.create_task(stop.wait())
        ended: list[str] = []

        async def end_when_late() -> None:
            """Once stopped, the client has STOP_GRACE s to finish the send in hand and exit."""
            await stop.wait()
            await asyncio.sleep(STOP_GRACE)
            if proc.returncode is None:
                ended.append(f"ended: still running {STOP_GRACE:g} s after it was told to stop")
                await end_reporting(proc)

        ender = asyncio.create_task(end_when_late())
        tries = 1
        inv: Op | None = None
        try:
            while line := await proc.stdout.readline():
                event = json.loads(line)
                if event["type"] == "ready":
                    tries = int(event["tries"])
                elif event["type"] == "done":
                    pass
                elif event["type"] == "invoke":
                    inv = self.history.invoke(self.process, "send", event["value"], tries=tries)
                else:
                    assert inv is not None and inv.value == event["value"], event
                    fields = {
                        "error": event.get("error"),
                        "msg_id": event.get("msgId"),
                        "addr": event.get("broker"),
                    }
                    fields.update({k: int(event[k]) for k in ("queue", "offset") if k in event})
                    self.history.complete(inv, "ok" if event["type"] == "ok" else "info", **fields)
                    self.sent += event["type"] == "ok"
                    inv = None
                if stopper.done() and not proc.stdin.is_closing():
                    proc.stdin.close()  # it finishes the send in hand, then exits
        finally:
            stopper.cancel()
            if proc.returncode is None and not proc.stdin.is_closing():
                proc.stdin.close()
            try:
                async with asyncio.timeout(STOP_GRACE):
                    await proc.wait()
            except TimeoutError:  # (an error of its own ended the reading: the stop never came)
                ended.append(f"ended: still running {STOP_GRACE:g} s after its output was done with")
            finally:
                ender.cancel()
                if proc.returncode is None:
                    await end_reporting(proc)
                kill_group(proc)  # anything it started and left behind
            self.stderr = await errors
            assert proc.returncode == 0 and not ended, (
                f"{self.process} exited {proc.returncode}. "
                + " ".join(ended)
                + "\n"
                + self.stderr.decode(errors="replace")[-STDERR_SHOWN:]
            )

    async def close(self) -> None:
        pass


#: Seconds between a real client's route look-ups, where it can be set: ali-ons' ``pollNameServerInteval``.
#: The C++ client's is fixed at 30 s (``MQClientFactory::updateTopicRouteInfo``).
ROUTE_REFRESH = {"ali-ons": 1.0, "cpp": 30.0}


def real_clients(
    history: History, clients: str, namesrv: str, topic: str, count: int = 2
) -> list[ScriptProducer]:
    """``count`` processes of the real client ``clients`` names ("ali-ons" or "cpp"), named ons0.. or
    cpp0.., each looking its route up as often as :data:`ROUTE_REFRESH` says it can."""
    if clients == "ali-ons":
        refresh = ROUTE_REFRESH[clients]
        return [ScriptProducer.ali_ons(history, f"ons{i}", namesrv, topic, refresh) for i in range(count)]
    if clients == "cpp":
        return [ScriptProducer.cpp(history, f"cpp{i}", namesrv, topic) for i in range(count)]
    raise ValueError(f"no real client called {clients!r}")


async def read_topic(client: RemotingClient, addr: str, topic: str, queues: int) -> list[Read]:
    """Everything ``addr`` serves of ``topic``: every queue pulled from offset 0 to its end."""
    broker = BrokerClient(addr, client)
    reads: list[Read] = []
    for queue in range(queues):
        offset = 0
        while True:
            r = await broker.pull("JEPSEN_READER", topic, queue, offset, max_nums=32)
            if r.code != ResponseCode.SUCCESS:
                break
            reads += [Read(queue, m.queue_offset, digest(m.body)) for m in decode_records(r.body)]
            offset = int(r.ext_fields["nextBeginOffset"])
    return reads


async def settled(
    history: History, client: RemotingClient, addr: str, topic: str, queues: int, timeout: float = 60.0
) -> CheckResult:
    """The history so far against everything ``addr`` serves of ``topic``, once it serves every
    acknowledged message (replication and dispatch run in their own time), or the last check after
    ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        reads = await read_topic(client, addr, topic, queues)
        result = check(list(history.ops), reads).merge(check_places(reads))
        if result.valid or loop.time() > deadline:
            return result
        await asyncio.sleep(0.3)
