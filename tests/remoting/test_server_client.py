"""RemotingServer and RemotingClient over real loopback TCP."""

from __future__ import annotations

import asyncio
import functools
import os
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from daemon.remoting.client import RemotingClient, parse_addr
from daemon.remoting.codes import ResponseCode, SerializeType
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import (
    MAX_AWAITING_REPLIES,
    MAX_UNREAD_REPLY_BYTES,
    Connection,
    ReplyBatch,
    RequestDispatcher,
    peer_address,
)
from daemon.remoting.errors import (
    RemotingCommandError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from daemon.remoting.frame import MAX_REQUEST_HEADER, decode_frame, encode_command
from daemon.remoting.server import RemotingServer
from daemon.remoting.tls import ServerTls, TlsSettings
from tests.support.transport import UVLOOP_NO_PEER, RecordingTransport, reset_as_they_open
from tests.support.waiting import wait_until

ECHO, SLOW, FAIL, CRASH, RECORD, CALLBACK, NEVER = 1, 2, 3, 4, 5, 6, 7


class Recorder:
    def __init__(self) -> None:
        self.seen: list[RemotingCommand] = []

    def __call__(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        self.seen.append(req)
        return req.make_response()


@pytest.fixture
async def server() -> AsyncIterator[RemotingServer]:
    recorder = Recorder()

    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ext_fields=dict(req.ext_fields), body=req.body)

    async def slow(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(float(req.ext_fields.get("delay", "0.01")))
        return req.make_response(body=req.body)

    def fail(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        raise RemotingCommandError(ResponseCode.TOPIC_NOT_EXIST, "no such topic")

    async def crash(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        raise ZeroDivisionError("boom")

    async def callback(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        # Server → client request over the same connection, as brokers do with consumers.
        answer = await conn.invoke(RemotingCommand.request(40, {"consumerGroup": "G"}), timeout=2)
        return req.make_response(body=answer.body)

    async def never(conn: Connection, req: RemotingCommand) -> None:
        await asyncio.sleep(3600)

    srv = RemotingServer(
        {
            ECHO: echo,
            SLOW: slow,
            FAIL: fail,
            CRASH: crash,
            RECORD: recorder,
            CALLBACK: callback,
            NEVER: never,
        },
        host="127.0.0.1",
        idle_timeout=5,
    )
    srv.recorder = recorder  # type: ignore[attr-defined]
    await srv.start()
    yield srv
    await srv.stop(grace=0.1)


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient() as c:
        yield c


def addr(srv: RemotingServer) -> str:
    return f"127.0.0.1:{srv.port}"


async def test_request_response_and_connection_reuse(server: RemotingServer, client: RemotingClient) -> None:
    r1 = await client.invoke(addr(server), RemotingCommand.request(ECHO, {"k": "v"}, b"body"))
    r2 = await client.invoke(addr(server), RemotingCommand.request(ECHO))
    assert (r1.code, r1.ext_fields, r1.body, r1.is_response) == (0, {"k": "v"}, b"body", True)
    assert r2.opaque != r1.opaque
    assert len(server.connections) == 1


async def test_an_open_connection_is_taken_without_the_connecting_path_and_a_closed_one_replaced(
    server: RemotingServer, client: RemotingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request over the open connection takes no coroutine of `connection` (a cost every send and pull
    paid); one whose connection is closing connects anew."""
    await client.invoke(addr(server), RemotingCommand.request(ECHO))
    connecting: list[str] = []
    original = client.connection

    async def counted(to: str) -> Connection:
        connecting.append(to)
        return await original(to)

    monkeypatch.setattr(client, "connection", counted)
    await client.invoke(addr(server), RemotingCommand.request(ECHO))
    assert connecting == []
    open_conn = client.open_connection(addr(server))
    assert open_conn is not None
    open_conn.close()
    answer = await client.invoke(addr(server), RemotingCommand.request(ECHO, {"k": "v"}))
    assert answer.ext_fields == {"k": "v"} and connecting == [addr(server)]


async def test_server_connection_knows_the_client_address(server: RemotingServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(encode_command(RemotingCommand.request(ECHO)))
        await reader.readexactly(4)
        (conn,) = server.connections
        assert conn.address == writer.get_extra_info("sockname")[:2]
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("peername", "address"),
    [
        (("10.0.0.1", 5555), ("10.0.0.1", 5555)),
        (("::1", 5555, 0, 0), ("::1", 5555)),
        (("::ffff:10.0.0.1", 5555, 0, 0), ("10.0.0.1", 5555)),  # a dual-stack listener's IPv4 client
        (("fe80::1%eth0", 5555, 0, 2), ("fe80::1%eth0", 5555)),
        ("", ("", 0)),  # a Unix socket's peer
        (None, ("", 0)),
    ],
)
def test_peer_address_forms(peername: object, address: tuple[str, int]) -> None:
    assert peer_address(RecordingTransport(peername)) == address  # type: ignore[arg-type]


async def test_pipelined_requests_are_matched_by_opaque(
    server: RemotingServer, client: RemotingClient
) -> None:
    # Later requests finish first: responses arrive out of order and must still be matched.
    reqs = [
        RemotingCommand.request(SLOW, {"delay": str(0.002 * (50 - i))}, str(i).encode()) for i in range(50)
    ]
    responses = await asyncio.gather(*(client.invoke(addr(server), r) for r in reqs))
    assert [r.body for r in responses] == [str(i).encode() for i in range(50)]


async def test_unknown_code_is_not_supported(server: RemotingServer, client: RemotingClient) -> None:
    r = await client.invoke(addr(server), RemotingCommand.request(9999))
    assert (r.code, r.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported")


async def test_processor_errors_become_responses(server: RemotingServer, client: RemotingClient) -> None:
    r = await client.invoke(addr(server), RemotingCommand.request(FAIL))
    assert (r.code, r.remark) == (ResponseCode.TOPIC_NOT_EXIST, "no such topic")
    r = await client.invoke(addr(server), RemotingCommand.request(CRASH))
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "ZeroDivisionError: boom"
    with pytest.raises(RemotingCommandError) as info:
        await client.invoke_checked(addr(server), RemotingCommand.request(FAIL))
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_oneway_requests_get_no_response(server: RemotingServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    oneway = RemotingCommand.request(RECORD, {"n": "1"}, oneway=True)
    oneway.opaque = 11
    unknown_oneway = RemotingCommand.request(9999, oneway=True)
    unknown_oneway.opaque = 12
    normal = RemotingCommand.request(ECHO)
    normal.opaque = 13
    writer.write(encode_command(oneway) + encode_command(unknown_oneway) + encode_command(normal))
    length = struct.unpack(">i", await reader.readexactly(4))[0]
    reply, _ = decode_frame(struct.pack(">i", length) + await reader.readexactly(length)) or pytest.fail()
    assert reply.opaque == 13  # the first frame back answers the normal request
    assert [c.ext_fields for c in server.recorder.seen] == [{"n": "1"}]  # type: ignore[attr-defined]
    writer.close()


async def test_reply_keeps_the_request_serialize_type(server: RemotingServer, client: RemotingClient) -> None:
    req = RemotingCommand.request(ECHO, {"a": "b"}, serialize_type=SerializeType.ROCKETMQ)
    r = await client.invoke(addr(server), req)
    assert (r.serialize_type, r.ext_fields) == (SerializeType.ROCKETMQ, {"a": "b"})


async def test_server_to_client_request(server: RemotingServer) -> None:
    def on_notify(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=req.ext_fields["consumerGroup"].encode())

    async with RemotingClient({40: on_notify}) as c:
        r = await c.invoke(addr(server), RemotingCommand.request(CALLBACK))
    assert (r.code, r.body) == (0, b"G")


async def test_timeout_and_connect_errors(server: RemotingServer, client: RemotingClient) -> None:
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(addr(server), RemotingCommand.request(NEVER), timeout=0.05)
    # the connection survives a timeout
    assert (await client.invoke(addr(server), RemotingCommand.request(ECHO))).code == 0
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    free_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(RemotingConnectError):
        await client.invoke(f"127.0.0.1:{free_port}", RemotingCommand.request(ECHO))
    with pytest.raises(RemotingConnectError):
        await client.invoke("no-port", RemotingCommand.request(ECHO))


async def test_a_connection_that_meets_itself_is_refused(
    client: RemotingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TCP's simultaneous open on a free port: without the check the request came back as a request,
    was answered by this client's own dispatcher, and that answer was returned as the server's."""
    loop = asyncio.get_running_loop()
    connect = loop.create_connection

    async def from_the_same_port(factory: Any, host: str, port: int, **kw: Any) -> Any:
        return await connect(factory, host, port, **{**kw, "local_addr": (host, port)})

    monkeypatch.setattr(loop, "create_connection", from_the_same_port)
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    free_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(RemotingConnectError, match="met itself"):
        await client.invoke(f"127.0.0.1:{free_port}", RemotingCommand.request(ECHO), timeout=1.0)


@pytest.mark.parametrize("no_peer", sorted(UVLOOP_NO_PEER))
async def test_a_connection_reset_as_it_opened_is_a_connect_error(
    server: RemotingServer, client: RemotingClient, monkeypatch: pytest.MonkeyPatch, no_peer: str
) -> None:
    """A peer that accepts and resets at once (a refusing proxy, a master's HA gate), its reset read before
    the connection was reported made: on uvloop asking the connection's names raised AttributeError or
    ValueError out of ``invoke`` (a DLedger leader's push task to a member behind a refusing link died of
    the ValueError, and that member was never pushed to again); it is a failed connection like a refused
    one, and the next request connects again."""
    made = reset_as_they_open(monkeypatch, server.port, times=1, no_peer=no_peer)
    with pytest.raises(RemotingConnectError, match="reset"):
        await client.invoke(addr(server), RemotingCommand.request(ECHO), timeout=1.0)
    assert (await client.invoke(addr(server), RemotingCommand.request(ECHO), timeout=1.0)).code == 0
    assert len(made) == 2


async def test_pending_requests_fail_when_the_server_goes_away(client: RemotingClient) -> None:
    arrived = asyncio.Event()

    async def never(conn: object, req: RemotingCommand) -> None:
        arrived.set()
        await asyncio.sleep(3600)

    srv = RemotingServer({NEVER: never}, host="127.0.0.1")
    await srv.start()
    pending = asyncio.ensure_future(client.invoke(addr(srv), RemotingCommand.request(NEVER), timeout=30))
    try:
        await asyncio.wait_for(arrived.wait(), 10)  # in flight: the server is handling it
        await srv.stop(grace=0.05)
        with pytest.raises(RemotingConnectError):
            await pending
    finally:
        pending.cancel()
        await srv.stop(grace=0)


async def test_idle_connections_are_closed() -> None:
    srv = RemotingServer({}, host="127.0.0.1", idle_timeout=0.1)
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # EOF: the server hung up
        writer.close()
    finally:
        await srv.stop()


async def test_a_frame_sent_a_byte_at_a_time_is_closed_at_the_idle_timeout() -> None:
    """A frame must arrive whole within the idle timeout: a peer sending its header a byte at a time kept
    the connection open for ever (each byte counted as activity). A whole frame counts; so does the
    start of the next, so a client's requests in turn keep their connection.

    The hang-up reaches the peer as the end of the stream, a byte of its arriving unread in the loop's
    turn of the close (likelier on a loaded host) too: it came as a reset before the close shut the
    write side first (test_a_close_that_finds_bytes_of_the_peer_unread_still_ends_its_stream)."""

    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=req.body)

    srv = RemotingServer({ECHO: echo}, host="127.0.0.1", idle_timeout=2)
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        frame = encode_command(RemotingCommand.request(ECHO, body=b"x"))
        for _ in range(3):  # whole frames, 0.5 s apart: each one is activity
            await asyncio.sleep(0.5)
            writer.write(frame)
            length = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 3))[0]
            await reader.readexactly(length)
        [conn] = srv.connections
        for byte in frame[:-1]:  # 0.2 s a byte for 20 s: never whole
            # (the server is on this loop: nothing is written after its close, which a reset would answer)
            if conn.is_closed:
                break
            writer.write(bytes([byte]))
            await asyncio.sleep(0.2)
        assert conn.is_closed  # the server hung up before it was whole
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await srv.stop()


async def test_a_close_that_finds_bytes_of_the_peer_unread_still_ends_its_stream() -> None:
    """The server closes a connection (idle, a bad frame, its stop) when bytes of the peer may have
    arrived that it has not read: the kernel answers such a close with a reset alone (RST, no FIN), and
    the peer's read failed with ECONNRESET. The write side is shut first (FIN), so the peer reads the end
    of the stream."""

    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=req.body)

    srv = RemotingServer({ECHO: echo}, host="127.0.0.1")
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(encode_command(RemotingCommand.request(ECHO, body=b"x")))
        length = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 3))[0]
        await reader.readexactly(length)
        [conn] = srv.connections
        writer.write(b"\x00")  # in the server's socket at once (loopback), read at the loop's next turn
        conn.close()  # before that turn: as the idle sweeper's close when the byte came in its turn
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await srv.stop()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "permissive"])
async def test_an_idle_timeout_of_zero_closes_no_connection(tls: bool) -> None:
    """serverChannelMaxIdleTimeSeconds=0 is Netty's "no idle handler"; read as zero seconds, every
    connection was closed the moment it fell silent (and a TLS listener's before its first byte)."""

    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=req.body)

    srv = RemotingServer(
        {ECHO: echo}, host="127.0.0.1", idle_timeout=0, tls=ServerTls(TlsSettings()) if tls else None
    )
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        for body in (b"x", b"y"):
            await asyncio.sleep(0.3)  # silent, as a client between two requests
            writer.write(encode_command(RemotingCommand.request(ECHO, body=body)))
            length = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 3))[0]
            reply, _ = (
                decode_frame(struct.pack(">i", length) + await reader.readexactly(length)) or pytest.fail()
            )
            assert reply.body == body
        writer.close()
    finally:
        await srv.stop()


async def test_bad_frame_closes_only_its_connection(server: RemotingServer, client: RemotingClient) -> None:
    assert (await client.invoke(addr(server), RemotingCommand.request(ECHO))).code == 0
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        bytes.fromhex("000000230000001f7b22636f6465223a3130362c226f7061717565223a312c626164206a736f6e")
    )
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert (await client.invoke(addr(server), RemotingCommand.request(ECHO, body=b"still"))).body == b"still"


async def test_requests_in_one_read_are_all_answered_even_when_a_bad_frame_follows(
    server: RemotingServer,
) -> None:
    """Replies to a read's requests go out together; those before a bad frame still go out, then the close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    requests = [RemotingCommand.request(ECHO, body=b"%d" % i) for i in range(20)]
    for opaque, request in enumerate(requests, 100):
        request.opaque = opaque
    bad_frame = bytes.fromhex(
        "000000230000001f7b22636f6465223a3130362c226f7061717565223a312c626164206a736f6e"
    )
    writer.write(b"".join(encode_command(r) for r in requests) + bad_frame)
    stream = await asyncio.wait_for(reader.read(), 5)  # everything up to the close
    replies, pos = [], 0
    while (decoded := decode_frame(stream, pos)) is not None:
        replies.append(decoded[0])
        pos += decoded[1]
    assert pos == len(stream)
    assert [(r.opaque, r.body) for r in replies] == [(100 + i, b"%d" % i) for i in range(20)]
    writer.close()


async def test_random_bytes_at_a_live_server(server: RemotingServer, client: RemotingClient) -> None:
    rng = __import__("random").Random(1234)
    for _ in range(40):
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            os.urandom(rng.randint(1, 64)) if rng.random() < 0.5 else rng.randbytes(rng.randint(1, 256))
        )
        await writer.drain()
        writer.close()
    r = await client.invoke(addr(server), RemotingCommand.request(ECHO, body=b"alive"))
    assert (r.code, r.body) == (0, b"alive")


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:9876") == ("127.0.0.1", 9876)
    assert parse_addr("[::1]:10911") == ("::1", 10911)
    with pytest.raises(ValueError):
        parse_addr("localhost")


async def test_oversized_response_becomes_an_error_response() -> None:
    def huge(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(body=b"\0" * (16 * 1024 * 1024))

    srv = RemotingServer({ECHO: huge}, host="127.0.0.1")
    await srv.start()
    try:
        async with RemotingClient() as c:
            r = await c.invoke(addr(srv), RemotingCommand.request(ECHO))
        assert r.code == ResponseCode.SYSTEM_ERROR and "exceeds" in (r.remark or "")
    finally:
        await srv.stop()


def _opaques(writes: list[bytes]) -> list[int]:
    stream, pos, out = b"".join(writes), 0, []
    while (decoded := decode_frame(stream, pos)) is not None:
        out.append(decoded[0].opaque)
        pos += decoded[1]
    assert pos == len(stream)
    return out


def _batched(n: int) -> tuple[list[Connection], list[RecordingTransport]]:
    """`n` server-side connections sharing one ReplyBatch, each on a recording transport, echoing ECHO."""
    dispatcher = RequestDispatcher({ECHO: lambda conn, req: req.make_response(body=req.body)})
    batch = ReplyBatch(asyncio.get_running_loop())
    transports = [RecordingTransport() for _ in range(n)]
    conns = [Connection(dispatcher, batch=batch) for _ in range(n)]
    for conn, transport in zip(conns, transports, strict=True):
        conn.connection_made(transport)  # type: ignore[arg-type]
    return conns, transports


def _request(opaque: int) -> bytes:
    cmd = RemotingCommand.request(ECHO, body=b"%d" % opaque)
    cmd.opaque = opaque
    return encode_command(cmd)


async def test_replies_made_in_one_round_of_reads_go_out_together_after_it() -> None:
    """Requests read from several connections in one loop round are answered after the round, one write
    per connection, in order, and a reply made later on the same connection follows the held ones."""
    conns, transports = _batched(3)

    for i, conn in enumerate(conns):  # one round: every read is handled before the loop runs callbacks
        conn.data_received(_request(10 * i + 1))
    conns[0].data_received(_request(2) + _request(3))
    conns[0].send(RemotingCommand.request(ECHO))  # e.g. a callback request to that client, after its replies
    transports[2].closing = True  # gone before the round ends: its reply is dropped, as send() drops
    assert all(t.writes == [] for t in transports)
    await asyncio.sleep(0)
    assert len(transports[0].writes) == 1 and _opaques(transports[0].writes)[:3] == [1, 2, 3]
    assert len(_opaques(transports[0].writes)) == 4
    assert _opaques(transports[1].writes) == [11] and transports[2].writes == []
    conns[1].data_received(_request(12))  # the next round is held and released again
    await asyncio.sleep(0)
    assert _opaques(transports[1].writes) == [11, 12]


async def test_held_replies_go_out_before_a_close_and_past_a_broken_transport() -> None:
    """A connection closed during the round (over its buffer cap, say) still writes what was held first;
    a transport that fails to take its replies is closed without stranding the others of the round."""
    conns, transports = _batched(3)

    def broken(data: bytes) -> None:
        raise OSError("transport gone")

    transports[0].write = broken  # type: ignore[method-assign]
    for i, conn in enumerate(conns):
        conn.data_received(_request(i + 1))
    conns[2].close()
    assert _opaques(transports[2].writes) == [3] and transports[2].closing
    await asyncio.sleep(0)
    assert transports[0].closing and _opaques(transports[1].writes) == [2]
    conns[1].data_received(_request(4))  # the survivor is held and released again
    await asyncio.sleep(0)
    assert _opaques(transports[1].writes) == [2, 4]


def _response_to(frame: bytes) -> bytes:
    """The server's answer to the request `frame` (its ECHO reply with the same opaque)."""
    decoded = decode_frame(frame, 0)
    assert decoded is not None
    request = decoded[0]
    response = request.make_response(body=request.body)
    response.opaque = request.opaque
    response.flag |= 1  # FLAG_RESPONSE
    return encode_command(response)


async def test_a_request_is_written_at_once_and_answered_in_the_read_that_brings_its_response() -> None:
    """`Connection.request`: no task, no loop round between the response's read and the caller's
    callback; a timeout and the connection's loss each end the wait with an error, once."""
    conn = Connection(RequestDispatcher(), requester=True)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    answers: list[RemotingCommand | Exception] = []
    conn.request(RemotingCommand.request(ECHO, body=b"a"), 5, answers.append)
    assert len(transport.writes) == 1  # written before request() returned
    conn.data_received(_response_to(transport.writes[0]))
    assert len(answers) == 1 and isinstance(answers[0], RemotingCommand) and answers[0].body == b"a"
    conn.request(RemotingCommand.request(ECHO), 0.01, answers.append)
    await asyncio.sleep(0.05)
    assert isinstance(answers[1], RemotingTimeoutError)
    conn.data_received(_response_to(transport.writes[1]))  # too late: dropped, nobody called again
    conn.request(RemotingCommand.request(ECHO), 5, answers.append)
    conn.connection_lost(None)
    assert len(answers) == 3 and isinstance(answers[2], RemotingConnectError)
    await asyncio.sleep(0.02)
    assert len(answers) == 3


async def test_requests_waiting_together_expire_each_at_its_own_deadline() -> None:
    """`Connection.request`'s one timer for all: a request with a shorter timeout made after a longer one
    still times out at its own deadline, the longer one only at its own, an answered one never."""
    conn = Connection(RequestDispatcher(), requester=True)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    answers: dict[str, RemotingCommand | Exception] = {}
    conn.request(RemotingCommand.request(ECHO), 0.3, functools.partial(answers.__setitem__, "long"))
    conn.request(RemotingCommand.request(ECHO), 0.3, functools.partial(answers.__setitem__, "answered"))
    conn.request(RemotingCommand.request(ECHO), 0.02, functools.partial(answers.__setitem__, "short"))
    conn.data_received(_response_to(transport.writes[1]))
    await asyncio.sleep(0.1)
    assert isinstance(answers.pop("short"), RemotingTimeoutError)
    assert isinstance(answers.pop("answered"), RemotingCommand) and not answers  # the long one waits on
    await asyncio.sleep(0.4)
    assert isinstance(answers.pop("long"), RemotingTimeoutError) and not answers
    conn.request(RemotingCommand.request(ECHO), 0.02, functools.partial(answers.__setitem__, "again"))
    await asyncio.sleep(0.1)  # (set again after the last sweep found nothing waiting)
    assert isinstance(answers.pop("again"), RemotingTimeoutError)


async def test_a_request_due_within_the_timers_grain_expires_when_its_timer_fires() -> None:
    """uvloop fires a timer up to a millisecond early by its own clock: the sweep counts a deadline within
    that as due, or it would set the timer again for the same deadline and spin until the clock passed it."""
    conn = Connection(RequestDispatcher(), requester=True)
    conn.connection_made(RecordingTransport())  # type: ignore[arg-type]
    answers: dict[str, RemotingCommand | Exception] = {}
    conn.request(RemotingCommand.request(ECHO), 0.0005, functools.partial(answers.__setitem__, "soon"))
    conn._expire_callbacks()  # as the timer would, fired half a millisecond early
    assert isinstance(answers.pop("soon"), RemotingTimeoutError)
    assert conn._sweep is None  # nothing left waiting: no timer set again


async def test_a_server_without_reply_batching_answers_as_the_read_ends() -> None:
    """`batch_replies=False` (a DLedger member's listener): a reply does not wait for the loop's round."""
    srv = RemotingServer(
        {ECHO: lambda conn, req: req.make_response(body=req.body)}, host="127.0.0.1", batch_replies=False
    )
    await srv.start()
    try:
        conn = srv.accept()
        assert isinstance(conn, Connection)
        transport = RecordingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(_request(5))
        assert _opaques(transport.writes) == [5]  # before any loop callback ran
        srv.connections.discard(conn)
    finally:
        await srv.stop(grace=0)


async def test_pipelined_requests_wait_while_their_replies_are_not_read() -> None:
    """A peer that pipelined hundreds of requests whose replies are large (VIEW_MESSAGE_BY_ID of a 4 MiB
    message) in one write, and read nothing, had every reply made and held at once: 6.5 KiB of requests
    held 650 MB. Past MAX_REPLY_BYTES_PER_READ of replies a read's remaining requests wait, and while the
    peer reads nothing none more is served; once it reads, every one is answered, in order."""
    made: list[int] = []
    big = b"r" * (1 << 20)

    def reply_big(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        made.append(req.opaque)
        return req.make_response(body=big)

    srv = RemotingServer({ECHO: reply_big}, host="127.0.0.1")
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, limit=1 << 16)
        transport = writer.transport
        transport.pause_reading()  # read nothing: the replies pile up in the server's socket buffer
        requests = [RemotingCommand.request(ECHO) for _ in range(120)]
        for opaque, request in enumerate(requests, 1):
            request.opaque = opaque
        writer.write(b"".join(encode_command(r) for r in requests))
        await writer.drain()
        await asyncio.sleep(1.0)
        held = len(made)
        assert 0 < held < 60, held  # socket buffers and a read's cap (before: all 120 MiB made at once)
        await asyncio.sleep(0.5)
        assert len(made) == held  # none more while the peer reads nothing
        transport.resume_reading()
        answered = []
        for _ in range(120):
            length = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))[0]
            frame = await reader.readexactly(length)
            answered.append(decode_frame(struct.pack(">i", length) + frame, 0)[0].opaque)  # type: ignore[index]
        assert answered == list(range(1, 121)) and len(made) == 120
        writer.close()
    finally:
        await srv.stop()


async def test_a_header_past_the_limit_is_refused_at_its_length() -> None:
    """A JSON header is parsed whole (and one orjson reads inexactly, a field of nested lists, twice and
    written back as a string): a 16 MiB header held the loop for seconds before any guard saw the
    request. A server refuses a header longer than MAX_REQUEST_HEADER as its length arrives, before the
    rest of the frame is waited for, and closes the connection; a header at the limit is read."""
    srv = RemotingServer({ECHO: lambda conn, req: req.make_response(remark=str(len(req.ext_fields["f"])))})
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        too_long = MAX_REQUEST_HEADER + 1
        writer.write(struct.pack(">ii", 4 + too_long, too_long))  # the prefix alone: nothing else follows
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed without waiting for the header
        writer.close()
        request = RemotingCommand.request(ECHO, {"f": ""})
        room = MAX_REQUEST_HEADER - (len(encode_command(request)) - 8) - 10  # (the opaque's digits to come)
        request.ext_fields["f"] = "x" * room
        async with RemotingClient() as client:
            answer = await client.invoke(f"127.0.0.1:{srv.port}", request, 10)
        assert answer.remark == str(room)
    finally:
        await srv.stop()


async def test_a_body_past_its_codes_limit_is_refused_before_the_guard_and_the_processor() -> None:
    """`limit_bodies`: a request of a limited code whose body is longer than its limit is answered
    SYSTEM_ERROR naming the limit, and neither the guard (the ACL parses a heartbeat's body) nor the
    processor sees it; at the limit, and other codes, as before."""
    seen: list[tuple[str, int]] = []

    def record(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        seen.append(("processor", len(req.body)))
        return req.make_response()

    srv = RemotingServer({ECHO: record, RECORD: record})
    srv.dispatcher.limit_bodies({ECHO: 1000})
    srv.dispatcher.guard = lambda conn, req: seen.append(("guard", len(req.body)))  # type: ignore[func-returns-value]
    await srv.start()
    try:
        async with RemotingClient() as client:
            addr = f"127.0.0.1:{srv.port}"
            over = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * 1001), 10)
            assert over.code == ResponseCode.SYSTEM_ERROR
            assert "body of 1001 bytes is longer than the 1000 bytes" in (over.remark or "")
            assert seen == []
            at = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * 1000), 10)
            other = await client.invoke(addr, RemotingCommand.request(RECORD, body=b"x" * 5000), 10)
            assert at.code == other.code == ResponseCode.SUCCESS
            assert seen == [("guard", 1000), ("processor", 1000), ("guard", 5000), ("processor", 5000)]
    finally:
        await srv.stop()


Held = list[tuple[asyncio.Future[RemotingCommand | None], RemotingCommand]]


def _holder() -> tuple[Held, Callable[[Connection, RemotingCommand], asyncio.Future[RemotingCommand | None]]]:
    """A processor answering later: each request's future and the request, kept for the test to answer."""
    held: Held = []

    def hold(conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand | None]:
        fut: asyncio.Future[RemotingCommand | None] = asyncio.get_running_loop().create_future()
        held.append((fut, req))
        return fut

    return held, hold


async def test_requests_answered_later_are_bounded_per_connection() -> None:
    """The reply budget counts the replies a read makes; requests answered later (a long-polling pull, an
    async send) made none then, so a peer that pipelined them had every one dispatched and held, without
    bound. Past MAX_AWAITING_REPLIES the rest wait in the connection's buffer; as answers go out, they
    are read on, in order, every one answered."""
    held, hold = _holder()
    srv = RemotingServer({ECHO: hold}, host="127.0.0.1")
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        count = MAX_AWAITING_REPLIES + 50
        requests = [RemotingCommand.request(ECHO) for _ in range(count)]
        for opaque, request in enumerate(requests, 1):
            request.opaque = opaque
        writer.write(b"".join(encode_command(r) for r in requests))
        await writer.drain()
        await wait_until(lambda: len(held) >= MAX_AWAITING_REPLIES, timeout=60)
        await asyncio.sleep(0.3)
        assert len(held) == MAX_AWAITING_REPLIES  # (before: all of them)
        (conn,) = srv.connections
        assert conn.awaiting == MAX_AWAITING_REPLIES
        for fut, req in held[:10]:
            fut.set_result(req.make_response())
        await wait_until(lambda: len(held) == MAX_AWAITING_REPLIES + 10, timeout=30)
        done = 10
        while done < len(held) or len(held) < count:
            for fut, req in held[done:]:
                fut.set_result(req.make_response())
            done = len(held)
            await asyncio.sleep(0.05)
        answered = []
        for _ in range(count):
            length = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))[0]
            frame = await reader.readexactly(length)
            answered.append(decode_frame(struct.pack(">i", length) + frame, 0)[0].opaque)  # type: ignore[index]
        assert answered == list(range(1, count + 1))
        await wait_until(lambda: conn.awaiting == 0, timeout=10)
        writer.close()
    finally:
        await srv.stop(grace=0)


async def test_a_peer_that_reads_none_of_the_replies_answered_later_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Replies made while requests are read stop at the transport's high-water mark, but answers that
    come later (held pulls woken by a burst of messages) were appended to a peer that reads nothing
    without bound. Past MAX_UNREAD_REPLY_BYTES the connection is dropped, its replies with it."""
    held, hold = _holder()
    big = b"r" * (1 << 20)
    srv = RemotingServer({ECHO: hold}, host="127.0.0.1")
    await srv.start()
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, limit=1 << 16)
        writer.transport.pause_reading()  # reads nothing
        count = MAX_UNREAD_REPLY_BYTES // len(big) + 40
        writer.write(b"".join(encode_command(RemotingCommand.request(ECHO)) for _ in range(count)))
        await writer.drain()
        await wait_until(lambda: len(held) == count, timeout=30)
        (conn,) = srv.connections
        for fut, req in held:
            if not conn.is_closed:
                fut.set_result(req.make_response(body=big))
        await wait_until(lambda: not srv.connections, timeout=30)
        assert "replies unread" in caplog.text
        assert srv.dispatcher.unread_dropped == 1  # counted for /metrics
        writer.close()
    finally:
        await srv.stop(grace=0)


async def test_a_frame_sent_in_two_buffers_is_one_write_and_its_body_is_not_copied() -> None:
    """`Connection.send_frames`: the head and the body go to the transport as they are, in one write of two
    buffers (a DLedger leader's push body is not copied into its frame), and the peer reads the one frame;
    while a read's replies are held (corked), it is written after them, in order."""
    conn = Connection(RequestDispatcher(), requester=True)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    request = RemotingCommand.request(ECHO, {"k": "v"}, b"entries" * 100)
    request.opaque = conn.expect(ECHO, 5, lambda answer: None)
    frame = encode_command(request)
    head, body = frame[: len(frame) - len(request.body)], request.body
    conn.send_frames(head, body)
    assert len(transport.lines) == 1 and transport.lines[0][1] is body and transport.writes == [frame]
    read = decode_frame(transport.writes[0])
    assert read is not None and read[0].body == body and read[0].ext_fields == {"k": "v"}
    conn._corked = [b"held reply"]
    conn.send_frames(head, body)
    assert conn._corked == [b"held reply", head, body] and len(transport.writes) == 1
