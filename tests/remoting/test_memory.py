"""The in-memory transport behaves like a TCP connection for both directions."""

from __future__ import annotations

import pytest

from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, RequestDispatcher
from daemon.remoting.errors import RemotingConnectError
from daemon.remoting.memory import connect_pair


async def test_requests_both_ways_and_close() -> None:
    async def ask_back(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        answer = await conn.invoke(RemotingCommand.request(40), timeout=1)
        return req.make_response(body=b"server saw " + answer.body)

    def answer(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=b"client")

    client, server = connect_pair(RequestDispatcher({1: ask_back}), RequestDispatcher({40: answer}))
    response = await client.invoke(RemotingCommand.request(1), timeout=1)
    assert response.body == b"server saw client"
    assert client.peer.startswith("memory-server") and server.peer.startswith("memory-client")
    server.close()
    await client.wait_closed()
    with pytest.raises(RemotingConnectError):
        await client.invoke(RemotingCommand.request(1), timeout=1)
