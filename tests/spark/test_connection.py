"""The ``rocketmq`` source's connection options: what the driver resolved, handed to Spark's workers whole
(they know no root flag), the secret by its file only; the TLS options in force while the credential rule
is applied. No Spark, no daemon: options in, a connection out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqctl.auth import Credentials, write_secret
from mqctl.config import ContextFile
from mqctl.spark.connection import Connection, connection_of
from mqctl.tls import TlsOptions
from tests.support.cli import reset_module_state


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """``connection_of`` records the context in force, as a command does: no later test sees it."""
    reset_module_state()
    yield
    reset_module_state()


@pytest.fixture
def contexts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Context prod (plaintext) and secure (TLS with its own CA), both with a key, prod the current one."""
    monkeypatch.setenv("MQCTL_CONFIG_DIR", str(tmp_path))
    for name in (
        "MQCTL_NAMESRV",
        "MQCTL_ACCESS_KEY",
        "MQCTL_SECRET_KEY",
        "MQCTL_SECRET_KEY_FILE",
        "MQCTL_TIMEOUT",
    ):
        monkeypatch.delenv(name, raising=False)
    write_secret(tmp_path / "prod.secret", "prod-secret")
    file = ContextFile.load()
    key = {"access_key": "prod-ak", "secret_key_file": str(tmp_path / "prod.secret")}
    file.add("prod", "10.0.0.1:9876", overwrite=False, timeout=7.0, **key)  # type: ignore[arg-type]
    ca = TlsOptions(ca=str(tmp_path / "ca.pem"))
    file.add("secure", "10.0.0.3:9876", overwrite=False, tls=ca, **key)  # type: ignore[arg-type]
    file.save()
    return tmp_path


def test_the_options_of_a_connection_resolve_to_it_and_carry_no_secret(contexts: Path) -> None:
    for named, resolved in (
        ({"context": "secure"}, connection_of({"context": "secure", "timeout": "2.5"})),
        ({}, connection_of({"namesrv": "10.0.0.1:9876"})),  # the current context's key, its file
        ({}, connection_of({"namesrv": "10.9.9.9:9876"})),  # withheld: unsigned
        ({"context": "secure"}, connection_of({"namesrv": "10.9.9.9:9876", "context": "secure"})),
        ({}, connection_of({"namesrv": "10.9.9.9:9876", "tls": "true", "insecure": "true", "timeout": "1"})),
    ):
        options = {**resolved.options(), **named}
        assert "prod-secret" not in options.values()
        assert _what(connection_of({k.lower(): v for k, v in options.items()})) == _what(resolved), options
    inline = Connection(("10.0.0.1:9876",), Credentials("ak", "inline-secret", "--access-key/--secret-key"))
    with pytest.raises(ValueError, match="secret_file"):
        inline.options()
    write_secret(contexts / "copy", "inline-secret")
    options = inline.options(str(contexts / "copy"))
    assert "inline-secret" not in options.values() and options["secretKeyFile"] == str(contexts / "copy")
    assert connection_of({k.lower(): v for k, v in options.items()}).credentials == Credentials(
        "ak", "inline-secret", "options accessKey/secretKey", str(contexts / "copy")
    )


def _what(c: Connection) -> tuple[object, ...]:
    """A connection less where its key came from (a worker's is the options')."""
    key = c.credentials
    return c.namesrv, c.tls, c.timeout, key and (key.access_key, key.secret_key, key.secret_file)


def test_tls_false_is_plaintext_whatever_the_context_says(contexts: Path) -> None:
    assert connection_of({"context": "secure"}).tls is not None
    assert connection_of({"context": "secure", "tls": "false"}).tls is None


def test_the_tls_options_decide_whether_the_context_s_ca_vouches(contexts: Path) -> None:
    """The context's own CA vouches for a NameServer it does not list; an ``insecure`` or another ``ca``
    option checks nothing of the kind, and its key must then stay home: the rule ran before the options
    were applied, and signed for a host reached over TLS that checked no certificate."""
    stranger = {"namesrv": "10.9.9.9:9876", "context": "secure"}
    assert connection_of(stranger).credentials is not None
    for tls in ({"insecure": "true"}, {"ca": str(contexts / "other-ca.pem")}, {"tls": "false"}):
        assert connection_of({**stranger, **tls}).credentials is None, tls


def test_flags_an_earlier_command_left_in_the_process_are_not_a_read_s(contexts: Path) -> None:
    """A worker or a test process that ran a command with ``--tls --ca`` and a key before: a read naming
    neither resolves as its options and the context say (the leftover flags once made a plaintext
    NameServer's read a TLS handshake, refused)."""
    from mqctl import auth, tls

    tls.set_flags(True, str(contexts / "other-ca.pem"), None, None, False)
    auth.set_flags("left-ak", "left-secret")
    read = connection_of({"namesrv": "10.0.0.1:9876"})
    assert read.tls is None
    assert read.credentials is not None and read.credentials.access_key == "prod-ak"
