"""A hostile NameServer and broker in one: an asyncio server on 127.0.0.1 (port 0), in a thread of its own,
that speaks the remoting frame format and answers each request as a test says, truthfully or not: strings
that would drive a terminal, malformed or enormous bodies, wrong opaques, answers that never come or
trickle in. Its cluster lists itself as the one broker, so every command that asks a broker asks it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.frame import decode_frame, encode_command


@dataclass
class Trickle:
    """Bytes written one at a time, `every` seconds apart."""

    data: bytes
    every: float = 1.0


#: What an answer function returns for a request: a command (answered with the request's opaque), raw bytes
#: written as they are, a Trickle, or None (never answered).
Answer = RemotingCommand | bytes | Trickle | None


def frame(cmd: RemotingCommand) -> bytes:
    return encode_command(cmd)


def raw_frame(header: bytes, body: bytes = b"") -> bytes:
    """A JSON-header frame of exactly these bytes (no check of what they say)."""
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


def json_header_frame(fields: dict[str, Any], body: bytes = b"") -> bytes:
    return raw_frame(json.dumps(fields).encode(), body)


def cluster_body(addr: str, name: str = "broker-a", cluster: str = "DefaultCluster") -> bytes:
    """GET_BROKER_CLUSTER_INFO's body listing one broker `name` of `cluster` at `addr`."""
    return json.dumps(
        {
            "brokerAddrTable": {name: {"cluster": cluster, "brokerName": name, "brokerAddrs": {"0": addr}}},
            "clusterAddrTable": {cluster: [name]},
        }
    ).encode()


def route_body(
    addr: str, topic_queues: int = 4, name: str = "broker-a", cluster: str = "DefaultCluster"
) -> bytes:
    return json.dumps(
        {
            "brokerDatas": [{"cluster": cluster, "brokerName": name, "brokerAddrs": {"0": addr}}],
            "queueDatas": [
                {
                    "brokerName": name,
                    "readQueueNums": topic_queues,
                    "writeQueueNums": topic_queues,
                    "perm": 6,
                    "topicSysFlag": 0,
                }
            ],
            "filterServerTable": {},
        }
    ).encode()


class Hostile:
    """The server; `answer(request, addr)` says what each request gets (see :data:`Answer`)."""

    def __init__(self, answer: Callable[[RemotingCommand, str], Answer]) -> None:
        self.answer = answer
        self.port = 0
        self.requests: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = future.result(10)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        buffered = b""
        try:
            while chunk := await reader.read(65536):
                buffered += chunk
                while (decoded := decode_frame(buffered)) is not None:
                    request, used = decoded
                    buffered = buffered[used:]
                    self.requests.append(request.code)
                    await self._reply(request, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _reply(self, request: RemotingCommand, writer: asyncio.StreamWriter) -> None:
        answer = self.answer(request, self.addr)
        if answer is None:
            return
        if isinstance(answer, RemotingCommand):
            answer.opaque = request.opaque
            answer.flag |= 1  # a response
            writer.write(encode_command(answer))
        elif isinstance(answer, Trickle):
            for i in range(len(answer.data)):
                writer.write(answer.data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(answer.every)
        else:
            writer.write(answer)
        await writer.drain()


@contextlib.contextmanager
def hostile(answer: Callable[[RemotingCommand, str], Answer]) -> Iterator[Hostile]:
    server = Hostile(answer)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def honest_with(overrides: dict[int, Callable[[RemotingCommand, str], Answer]]) -> Callable[..., Answer]:
    """Answers the cluster and route look-ups truthfully (itself the one broker), `overrides` by code, and
    anything else an empty success."""

    def answer(request: RemotingCommand, addr: str) -> Answer:
        if request.code in overrides:
            return overrides[request.code](request, addr)
        if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return RemotingCommand(0, body=cluster_body(addr))
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return RemotingCommand(0, body=route_body(addr))
        return RemotingCommand(0)

    return answer
