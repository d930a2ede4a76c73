"""The exception tree, the response-code registry and the documented exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from daemon.config import ConfigError
from daemon.remoting.codes import ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.errors import (
    RemotingCommandError,
    RemotingConnectError,
    RemotingProtocolError,
    RemotingTimeoutError,
)
from daemon.remoting.server import RemotingServer
from mqctl import errors
from mqctl.errors import (
    EXIT_CODES,
    AuthError,
    BrokerError,
    ConflictError,
    ConnectError,
    MqctlError,
    NotFoundError,
    ProtocolError,
    RequestTimeoutError,
    RetriableBrokerError,
    StoreError,
    UsageError,
    from_response_code,
    translate,
)
from store.errors import CorruptRecordError, StoreLockedError
from tests.daemons import LoopThread, local_cluster
from tests.support.cli import RunCli

ROOT = Path(__file__).resolve().parents[2]
#: How a RocketMQ 4.9.8 broker's remark carries its ACL's refusal: the exception, then its first frame.
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
VALIDATE_FRAME = (
    "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:664)"
)


def test_every_error_class_has_a_unique_documented_exit_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, MqctlError)]
    documented = {name: code for code, name, _ in EXIT_CODES}
    for cls in classes:
        if cls is RetriableBrokerError:
            assert cls.exit_code == BrokerError.exit_code
            continue
        assert documented[cls.__name__] == cls.exit_code, cls
    codes = [code for code, _, _ in EXIT_CODES]
    assert len(codes) == len(set(codes))


def test_exit_code_table_is_in_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for code, name, _ in EXIT_CODES:
        assert f"| {code} | `{name}` |" in readme, name


@pytest.mark.parametrize(
    ("code", "cls", "retriable"),
    [
        (17, NotFoundError, False),
        (26, NotFoundError, False),
        (18, ConflictError, False),
        (16, AuthError, False),
        (2, RetriableBrokerError, True),
        (14, RetriableBrokerError, True),
        (1, BrokerError, False),
        (13, BrokerError, False),
    ],
)
def test_response_codes_map_to_classes(code: int, cls: type[MqctlError], retriable: bool) -> None:
    error = from_response_code(code, "why", action="create topic")
    assert type(error) is cls
    assert error.retriable is retriable
    assert str(error) == f"create topic: why (response code {code})"


def test_translate_lower_level_errors() -> None:
    assert isinstance(translate(RemotingConnectError("127.0.0.1:1", "refused")), ConnectError)
    assert isinstance(translate(RemotingTimeoutError("127.0.0.1:1", 3, 105)), RequestTimeoutError)
    assert isinstance(translate(RemotingProtocolError("garbage")), ProtocolError)
    topic_missing = translate(RemotingCommandError(17, "No topic route info in name server for the topic: T"))
    assert isinstance(topic_missing, NotFoundError) and "T" in str(topic_missing)
    assert isinstance(translate(StoreLockedError("locked")), ConflictError)
    assert isinstance(translate(CorruptRecordError("/s/commitlog/0", 5, "bad magic")), StoreError)
    assert isinstance(translate(ConfigError("bad")), UsageError)
    assert isinstance(translate(FileNotFoundError(2, "No such file", "/x")), NotFoundError)
    assert isinstance(translate(ConnectionRefusedError(111, "refused")), ConnectError)
    assert translate(KeyboardInterrupt()).exit_code == 130
    own = NotFoundError("x")
    assert translate(own) is own
    assert type(translate(RuntimeError("boom"))) is MqctlError


def test_java_remarks_with_a_faq_line_stay_one_line() -> None:
    remark = "No topic route info in name server for the topic: T\nSee http://rocketmq.apache.org/docs/faq/ for further details."
    error = from_response_code(17, remark, action="route")
    assert str(error) == "route: No topic route info in name server for the topic: T (response code 17)"
    assert "\n" not in str(from_response_code(1, "\n", action="x"))


def test_the_registry_keys_on_response_codes() -> None:
    """One vocabulary for codes: the registry names ``ResponseCode`` members, never bare numbers."""
    from daemon.remoting.codes import ResponseCode

    assert all(type(code) is ResponseCode for code in errors.RESPONSE_CODE_CLASSES)
    assert type(from_response_code(ResponseCode.TOPIC_NOT_EXIST, "gone", action="route")) is NotFoundError


def test_a_local_permission_error_is_not_the_servers_refusal() -> None:
    error = translate(PermissionError(13, "Permission denied", "/data/store/commitlog"))
    assert type(error) is errors.LocalPermissionError and not isinstance(error, AuthError)
    assert error.exit_code == 11 and error.exit_code != AuthError.exit_code
    assert "Permission denied: /data/store/commitlog" in str(error) and "server" not in str(error)


def test_lifecycle_errors_have_their_own_exit_codes() -> None:
    from daemon.lifecycle import AlreadyRunningError, LifecycleError

    stuck = translate(LifecycleError("pid 7 still running 30s after SIGTERM"))
    assert type(stuck) is errors.DaemonError and stuck.exit_code == 12 and "pid 7" in str(stuck)
    running = translate(AlreadyRunningError(Path("/d/broker.pid"), 7))
    assert type(running) is ConflictError and "pid 7" in str(running)


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the CLI in this process: its exit code and stderr."""
    from mqctl.cli.app import main

    code = main(list(args))
    return code, capsys.readouterr().err


def test_a_store_dir_this_user_may_not_read_exits_11(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root reads every directory, so the refusal is the kernel's answer injected where the store is read."""
    from mqctl.services import store_inspect

    def refused(*_args: object, **_kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(tmp_path / "index"))

    monkeypatch.setattr(store_inspect, "index_ls", refused)
    code, err = _main(capsys, "store", "index", "ls", "--store", str(tmp_path))
    assert code == errors.LocalPermissionError.exit_code
    assert (
        err.startswith("mqctl: error: Permission denied: ")
        and "server" not in err
        and len(err.splitlines()) == 1
    )


def test_a_daemon_already_running_on_the_data_dir_is_a_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mqctl up`` on a data dir whose pid file names a live process: exit 4, not 1 ("a bug"); the running
    one's address files stay (the refused start removed them, and 'broker status' then named the default
    port and said the running broker was unreachable)."""
    import os

    from mqctl.cli.broker import ADDR_FILE, PID_FILE
    from mqctl.cli.namesrv import ADDR_FILE as NAMESRV_ADDR

    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "store").mkdir()
    (tmp_path / "namesrv").mkdir()
    (tmp_path / "store" / PID_FILE).write_text(f"{os.getppid()}\n")  # alive, and not this process
    noted = [(tmp_path / "store" / ADDR_FILE), (tmp_path / "namesrv" / NAMESRV_ADDR)]
    for path in noted:
        path.write_text("127.0.0.1:20911\n")
    code, err = _main(
        capsys, "up", "--data", str(tmp_path), "--namesrv-port", "0", "--broker-port", "0", "--no-metrics"
    )
    assert code == ConflictError.exit_code, err
    assert f"already running as pid {os.getppid()}" in err
    assert [path.read_text() for path in noted] == ["127.0.0.1:20911\n"] * 2


def test_an_error_a_background_daemon_reported_keeps_its_class() -> None:
    busy = errors.reported("ConflictError: port 9876 is already in use")
    assert type(busy) is ConflictError and str(busy) == "port 9876 is already in use"
    assert type(errors.reported("BrokerError: code lost")) is errors.DaemonError
    assert type(errors.reported("ValueError: boom")) is errors.DaemonError


def test_a_directory_given_for_a_file_is_a_usage_error(cli: RunCli, tmp_path: Path) -> None:
    """``msg send -f DIR`` and ``acl create --secret-key-file DIR`` exited 1 ("a bug: report it") with
    "Is a directory"; ``-f FILE/x`` likewise with "Not a directory". Both are the operator's path."""
    (tmp_path / "file").write_text("x")
    for path, code in ((tmp_path, UsageError.exit_code), (tmp_path / "file" / "x", NotFoundError.exit_code)):
        result = cli("msg", "send", "-t", "T", "-f", str(path), "-n", "127.0.0.1:1")
        assert result.code == code, result.stderr
        assert str(path) in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("code", "remark", "cls"),
    [
        (
            16,
            "ACL: request code 17 from 127.0.0.1 carries no AccessKey and 127.0.0.1 is not white-listed",
            AuthError,
        ),
        (1, f"{ACL_EXCEPTION}No accessKey is configured, {VALIDATE_FRAME}", AuthError),  # 4.9.8's refusal
    ],
)
def test_an_acl_refusal_of_an_unsigned_request_says_how_to_sign(code: int, remark: str, cls: type) -> None:
    """An unsigned request to a broker with ACL on failed naming the AccessKey it lacked and not the
    flags that give one; signed requests refused keep the broker's words alone (no hint)."""
    from mqctl import auth

    try:
        auth.set_flags(None, None)
        unsigned = from_response_code(code, remark, action="request failed")
        assert type(unsigned) is cls and "--access-key AK --secret-key-file FILE" in str(unsigned)
        assert "\n" not in str(unsigned)
        auth.set_flags("app1", "secret")
        assert "--access-key" not in str(from_response_code(code, remark, action="request failed"))
        assert "--access-key" not in str(from_response_code(16, "topic is read-only", action="send"))
    finally:
        auth.set_flags(None, None)


def test_a_broker_name_given_for_a_broker_address_is_a_usage_error(cli: RunCli) -> None:
    """``broker clean -b broker-a`` exited 5, "cannot talk to broker-a ... is the broker running?": a
    name where HOST:PORT is wanted is the operator's slip, said before anything connects."""
    for args in (
        ("broker", "clean", "-b", "broker-a"),
        ("topic", "create", "-t", "T", "--broker", "broker-a"),
    ):
        result = cli(*args, "-n", "127.0.0.1:1")
        assert result.code == UsageError.exit_code, result.stderr
        assert "'broker-a' is not HOST:PORT" in result.stderr and result.stderr.count("\n") == 1
    assert cli("broker", "clean", "-b", "127.0.0.1:1", "-n", "127.0.0.1:1").code == ConnectError.exit_code


@contextmanager
def refusing_broker(remark: str) -> Iterator[str]:
    """A RocketMQ 4.9.8 broker with ACL on, as a request its validator refuses meets it: SYSTEM_ERROR
    with the ``AclException`` (NettyRemotingAbstract#processRequestCommand). Yields its address."""

    def refuse(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SYSTEM_ERROR, remark)

    loop = LoopThread()
    server = RemotingServer(host="127.0.0.1", default_processor=refuse)
    try:
        loop.run(server.start())
        yield f"127.0.0.1:{server.port}"
    finally:
        loop.run(server.stop())
        loop.close()


@pytest.mark.parametrize(
    "words",
    [
        "No accessKey is configured",
        "No acl config for rocketmq2",
        "Check signature failed for accessKey=rocketmq2",
        "[10015:signature-failed] unable to calculate a request signature. error=bad key",
        "Need admin permission for request code=26, but accessKey=rocketmq2 is not",
    ],
)
def test_a_rocketmq_broker_acl_refusal_is_an_acl_error(cli: RunCli, words: str) -> None:
    """A 4.9.8 broker refuses with SYSTEM_ERROR and its AclException's text: that exited 8 (any broker
    error) with a Java class name and stack frame in the line, where ours (NO_PERMISSION) exits 9."""
    with refusing_broker(f"{ACL_EXCEPTION}{words}, {VALIDATE_FRAME}") as addr:
        result = cli("broker", "config", "get", "-b", addr, "-n", "127.0.0.1:1")
    assert result.code == AuthError.exit_code, result.stderr
    assert words in result.stderr and result.stderr.count("\n") == 1
    assert "org.apache" not in result.stderr and f"broker {addr} refused it" in result.stderr
    # (mqctl signed nothing here: a refusal that names the AccessKey says how to give one)
    assert ("--access-key AK" in result.stderr) is ("accessKey" in words)


async def test_a_rocketmq_acl_refusal_is_no_empty_answer() -> None:
    """VIEW_MESSAGE_BY_ID takes SYSTEM_ERROR as "no message there": a 4.9.8 ACL refusal, the same code,
    read as a missing message rather than as the refusal it is."""
    from mqctl.admin import messaging
    from mqctl.admin.client import Admin, Refused

    server = RemotingServer(
        host="127.0.0.1",
        default_processor=lambda conn, request: request.make_response(
            ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}No acl config for rocketmq2, {VALIDATE_FRAME}"
        ),
    )
    await server.start()
    try:
        async with Admin(["127.0.0.1:1"], timeout=10.0) as admin:
            with pytest.raises(Refused):
                await messaging.view_raw(admin, f"127.0.0.1:{server.port}", 0)
    finally:
        await server.stop()


def test_a_namesrv_host_that_does_not_resolve_is_said_so(cli: RunCli) -> None:
    """A typo in -n's host name ('Name or service not known') asked whether the NameServer was
    running: the name is at fault, and the line says so (still exit 5: nothing was reached)."""
    result = cli("topic", "list", "-n", "no-such-namesrv.invalid:9876")
    assert result.code == ConnectError.exit_code, result
    [line] = result.stderr.splitlines()
    assert "host 'no-such-namesrv.invalid' does not resolve" in line, line
    assert "a typo in the host name?" in line and "running" not in line, line


def test_an_unreachable_broker_is_hinted_as_a_broker(cli: RunCli, tmp_path: Path) -> None:
    """A broker that does not answer (-b of a stopped one) asked whether 'the NameServer/broker' ran and
    pointed at the context, which names NameServers only; a NameServer's hint is as it was."""
    with local_cluster(tmp_path) as cluster:
        result = cli("broker", "config", "get", "-b", "127.0.0.1:1", "-n", cluster.namesrv_addr)
    assert result.code == ConnectError.exit_code, result
    [line] = result.stderr.splitlines()
    assert "cannot talk to 127.0.0.1:1" in line and "is the broker running? 'mqctl cluster list'" in line, (
        line
    )
    result = cli("topic", "list", "-n", "127.0.0.1:1")
    assert result.code == ConnectError.exit_code and "see 'mqctl context current'" in result.stderr, result


def test_an_http_port_given_as_the_namesrv_is_named_as_one(cli: RunCli) -> None:
    """The metrics port (an easy slip: it is printed beside the broker's) answers HTTP to a remoting frame;
    the line said 'frame length 1213486160' and what it sent, and now what that is."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def answer_http() -> None:
        with suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer_http, daemon=True).start()
    try:
        result = cli("topic", "list", "-n", f"127.0.0.1:{listener.getsockname()[1]}")
    finally:
        listener.close()
    assert result.code == ProtocolError.exit_code, result
    [line] = result.stderr.splitlines()
    assert "is not a NameServer" in line and "an HTTP server: a broker's /metrics port?" in line, line


def test_a_bounded_number_that_is_no_number_is_said_to_be_no_number(cli: RunCli) -> None:
    """``-r eight`` said "'eight' is not a valid integer range", and the help wrote "--timeout FLOAT
    RANGE", as if a range were asked for: such a flag takes one number, its bounds said beside it."""
    typo = cli("topic", "create", "-t", "Typed", "-r", "eight")
    assert typo.code == UsageError.exit_code and typo.stderr.count("\n") == 1, typo.stderr
    assert "'eight' is not a valid integer." in typo.stderr and "range" not in typo.stderr
    below = cli("msg", "send", "-t", "Typed", "--delay-level", "19", "x")
    assert below.code == UsageError.exit_code and "not in the range 0<=x<=18" in below.stderr, below.stderr
    helped = cli("top", "--help")
    assert helped.code == 0 and "--interval FLOAT " in helped.stdout and "RANGE" not in helped.stdout
