"""RocketMQ 4.x remoting protocol: codec, typed headers, JSON bodies, asyncio server and client.

Public API (import from the submodules named here):

* `codes` — `RequestCode`, `ResponseCode`, `LanguageCode`, `SerializeType`, `Version`,
  `CURRENT_VERSION`, `FLAG_RESPONSE`, `FLAG_ONEWAY`.
* `command.RemotingCommand` — one request/response; `RemotingCommand.request(code, ext_fields, body,
  oneway=...)` builds a request, `request.make_response(code, remark, ext_fields, body)` answers it.
* `frame` — pure codec: `encode_command(cmd) -> bytes`, `decode_frame(buf, offset=0) ->
  (cmd, consumed) | None` (None = incomplete; `RemotingProtocolError` = drop the connection),
  `MAX_FRAME_LENGTH`, `java_string` / `coerce_ext_fields` (Java-style extFields strings).
* `headers.CommandHeader` — typed extFields: subclass as a slotted dataclass, then
  `Header.from_ext_fields(cmd.ext_fields)` (raises `HeaderFieldError` → SYSTEM_ERROR with a clear
  remark) and `header.to_ext_fields()`. NameServer headers are defined there.
* `store.fastjson` (the one codec, shared with the store's config files) — `loads` (standard JSON plus
  bare integer keys and object keys → `ObjectKey`) and `dumps(obj, bare_int_keys=False)` (standard
  JSON, or the legacy form for old clients).
* `bodies` — the shared bodies over `store.models` (`Bean`, `DataVersion`, `TopicConfig`, `PermName`):
  `QueueData`, `BrokerData`, `TopicRouteData`, `ClusterInfo`, `TopicList`, `KVTable`,
  `TopicConfigSerializeWrapper`, `RegisterBrokerBody`.
* `connection` — `Connection` (one asyncio.Protocol for both ends: `invoke(cmd, timeout)`,
  `invoke_oneway(cmd)`, `reply`, `peer`, `attributes`), `Processor` (sync or async callable
  `(conn, request) -> response | None`; raise `RemotingCommandError(code, remark)` to fail),
  `RequestDispatcher`.
* `server.RemotingServer(processors, host=, port=0, idle_timeout=, limits=)` — `start()`, `stop()`,
  `port`, `register(code, processor)`, `on_connection_closed(listener)`, `connections`, `budget`
  (bytes of incomplete frames held), `refused_connections`. A processor gets the `Connection` and
  may call back into the client with `conn.invoke(...)`/`conn.invoke_oneway(...)`.
* `limits` — `RemotingLimits` (the `remotingMax*` config keys both daemons' configs inherit),
  `BufferBudget`, `WarningGate` (rate-limited warnings).
* `client.Transport` — the seam callers depend on (`invoke`, `invoke_checked`, `invoke_oneway`,
  `close`, `dispatcher`, `signer`); `client.RemotingClient(processors=None)` implements it over TCP,
  one pooled connection per `host:port`.
* `errors` — `RemotingError` → `RemotingConnectError`, `RemotingTimeoutError`,
  `RemotingProtocolError`, `RemotingCommandError(code, remark)` → `HeaderFieldError`.
* `memory.connect_pair(server_dispatcher, client_dispatcher=None, on_server_close=None)` — two
  connected `Connection`s without sockets (real codec and dispatch), for processor unit tests;
  `memory.MemoryClient(servers)` — the in-process `Transport`: connections to the `RemotingServer`s
  of in-process daemons, by address (`server.accept()` gives the server end, as its listener does).
* `loop.run(coro)` — run a coroutine on uvloop when it is installed.
"""

from __future__ import annotations

from store.native import extend

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)
