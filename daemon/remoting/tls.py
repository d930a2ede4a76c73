"""TLS for the remoting listeners and clients, configured with RocketMQ 4.9.8's own keys.

4.9.8 reads these as Java system properties (`TlsSystemConfig`), and the file `tls.config.file`
names may set all of them but `tls.server.mode` and `tls.enable` (`TlsHelper#extractTlsConfigFromFile`,
whose values win). Here they are daemon settings: `broker.conf` / `namesrv.properties`,
`MQCTL_TLS_SERVER_MODE`-style variables, then that file, in the same order of strength.

What differs from 4.9.8, and why:

* Test mode (`tls.test.mode.enable`, default true as in 4.9.8) supplies a self-signed certificate
  only when `tls.server.certPath`/`keyPath` name none; 4.9.8 ignores the configured files in test mode,
  which silently serves a throwaway certificate to an operator who configured a real one. The
  certificate is made the first time a TLS client arrives, so a daemon nobody reaches over TLS never
  pays for it.
* A client certificate, when asked for (`tls.server.need.client.auth` optional | require), is always
  verified against `tls.server.trustCertPath` (4.9.8 trusts any unless `tls.server.authClient`);
  `require` without a trust file is a configuration error rather than a server nobody can reach.
* Our daemons' clients (`tls.enable`) verify the server's chain whenever `tls.client.trustCertPath`
  names one or `tls.client.authServer` is true (4.9.8 never does in test mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

log = logging.getLogger(__name__)

#: The first byte of a TLS record carrying a handshake (a ClientHello): `HandshakeHandler`'s magic code.
HANDSHAKE_MAGIC = 0x16

MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}

#: The keys the file `tls.config.file` names may set (4.9.8 reads all but the mode and tls.enable there).
FILE_KEYS = (
    "tls.test.mode.enable",
    "tls.server.need.client.auth",
    "tls.server.keyPath",
    "tls.server.keyPassword",
    "tls.server.certPath",
    "tls.server.authClient",
    "tls.server.trustCertPath",
    "tls.client.keyPath",
    "tls.client.keyPassword",
    "tls.client.certPath",
    "tls.client.authServer",
    "tls.client.trustCertPath",
    "tls.member.trustCertPath",
    "tls.member.certPath",
    "tls.member.keyPath",
    "tls.member.keyPassword",
)


def _key(name: str, *, secret: bool = False) -> dict[str, object]:
    return {"key": name, "secret": True} if secret else {"key": name}


@dataclass
class TlsConfig:
    """RocketMQ 4.9.8's TLS keys with its defaults; mixed into both daemons' configs."""

    tls_server_mode: str = field(default="permissive", metadata=_key("tls.server.mode"))
    tls_server_need_client_auth: str = field(default="none", metadata=_key("tls.server.need.client.auth"))
    tls_server_key_path: str = field(default="", metadata=_key("tls.server.keyPath"))
    tls_server_key_password: str = field(default="", metadata=_key("tls.server.keyPassword", secret=True))
    tls_server_cert_path: str = field(default="", metadata=_key("tls.server.certPath"))
    tls_server_auth_client: bool = field(default=False, metadata=_key("tls.server.authClient"))
    tls_server_trust_cert_path: str = field(default="", metadata=_key("tls.server.trustCertPath"))
    tls_client_key_path: str = field(default="", metadata=_key("tls.client.keyPath"))
    tls_client_key_password: str = field(default="", metadata=_key("tls.client.keyPassword", secret=True))
    tls_client_cert_path: str = field(default="", metadata=_key("tls.client.certPath"))
    tls_client_auth_server: bool = field(default=False, metadata=_key("tls.client.authServer"))
    tls_client_trust_cert_path: str = field(default="", metadata=_key("tls.client.trustCertPath"))
    tls_test_mode_enable: bool = field(default=True, metadata=_key("tls.test.mode.enable"))
    tls_config_file: str = field(default="/etc/rocketmq/tls.properties", metadata=_key("tls.config.file"))
    #: Ours (haTls): the CA(s) only members' certificates chain to, and this member's pair on the channels.
    tls_member_trust_cert_path: str = field(default="", metadata=_key("tls.member.trustCertPath"))
    tls_member_cert_path: str = field(default="", metadata=_key("tls.member.certPath"))
    tls_member_key_path: str = field(default="", metadata=_key("tls.member.keyPath"))
    tls_member_key_password: str = field(default="", metadata=_key("tls.member.keyPassword", secret=True))
    #: Our daemons' own clients (broker -> NameServer, slave -> master) connect over TLS.
    tls_enable: bool = field(default=False, metadata=_key("tls.enable"))

    def tls_settings(self) -> TlsSettings:
        """These keys with the file `tls.config.file` names applied over them (checked)."""
        values = {
            "mode": self.tls_server_mode,
            "tls.server.need.client.auth": self.tls_server_need_client_auth,
            "tls.server.keyPath": self.tls_server_key_path,
            "tls.server.keyPassword": self.tls_server_key_password,
            "tls.server.certPath": self.tls_server_cert_path,
            "tls.server.authClient": str(self.tls_server_auth_client).lower(),
            "tls.server.trustCertPath": self.tls_server_trust_cert_path,
            "tls.client.keyPath": self.tls_client_key_path,
            "tls.client.keyPassword": self.tls_client_key_password,
            "tls.client.certPath": self.tls_client_cert_path,
            "tls.client.authServer": str(self.tls_client_auth_server).lower(),
            "tls.client.trustCertPath": self.tls_client_trust_cert_path,
            "tls.test.mode.enable": str(self.tls_test_mode_enable).lower(),
            "tls.member.trustCertPath": self.tls_member_trust_cert_path,
            "tls.member.certPath": self.tls_member_cert_path,
            "tls.member.keyPath": self.tls_member_key_path,
            "tls.member.keyPassword": self.tls_member_key_password,
        }
        values.update(_file_keys(self.tls_config_file))
        return TlsSettings.from_keys(values)


def _file_keys(path: str) -> dict[str, str]:
    """The TLS keys the file `tls.config.file` sets; nothing when it does not exist (4.9.8 skips it too)."""
    if not path or not os.path.isfile(path):
        return {}
    from daemon.config import ConfigError, parse_properties, read_properties_file

    try:
        props = parse_properties(read_properties_file(Path(path)))
    except OSError as exc:
        raise ConfigError(f"cannot read tls.config.file {path}: {exc.strerror}") from None
    return {k: v for k, v in props.items() if k in FILE_KEYS}


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"  # Boolean.parseBoolean


@dataclass(frozen=True)
class TlsSettings:
    """The effective TLS settings of one daemon (see :meth:`TlsConfig.tls_settings`)."""

    mode: str = "permissive"
    need_client_auth: str = "none"
    server_key: str = ""
    server_key_password: str = ""
    server_cert: str = ""
    server_trust: str = ""
    client_key: str = ""
    client_key_password: str = ""
    client_cert: str = ""
    client_auth_server: bool = False
    client_trust: str = ""
    test_mode: bool = True
    #: haTls: the channel's handshakes fail unless the peer's certificate carries the member mark.
    members_only: bool = False
    #: haTls with a CA of the members' own: the channels verify both ends against it alone, with
    #: ``member_cert`` (else the pair haTls takes without it) as this member's certificate.
    member_trust: str = ""
    member_cert: str = ""
    member_key: str = ""
    member_key_password: str = ""

    @classmethod
    def from_keys(cls, keys: Mapping[str, str]) -> TlsSettings:
        from daemon.config import ConfigError

        mode = keys["mode"].strip().lower()
        if mode not in MODES:
            raise ConfigError(f"tls.server.mode {keys['mode']!r}: choose one of {', '.join(MODES)}")
        auth = (keys["tls.server.need.client.auth"].strip() or "none").lower()
        if auth not in CLIENT_AUTH:
            raise ConfigError(f"tls.server.need.client.auth {auth!r}: choose one of none, optional, require")
        settings = cls(
            mode=mode,
            need_client_auth=auth,
            server_key=keys["tls.server.keyPath"],
            server_key_password=keys["tls.server.keyPassword"],
            server_cert=keys["tls.server.certPath"],
            server_trust=keys["tls.server.trustCertPath"],
            client_key=keys["tls.client.keyPath"],
            client_key_password=keys["tls.client.keyPassword"],
            client_cert=keys["tls.client.certPath"],
            client_auth_server=_bool(keys["tls.client.authServer"]),
            client_trust=keys["tls.client.trustCertPath"],
            test_mode=_bool(keys["tls.test.mode.enable"]),
            member_trust=keys.get("tls.member.trustCertPath", ""),
            member_cert=keys.get("tls.member.certPath", ""),
            member_key=keys.get("tls.member.keyPath", ""),
            member_key_password=keys.get("tls.member.keyPassword", ""),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse, before any port opens, settings no client could ever connect under."""
        from daemon.config import ConfigError

        if self.mode == "disabled":
            return
        if bool(self.server_cert) != bool(self.server_key):
            raise ConfigError("tls.server.certPath and tls.server.keyPath go together: set both or neither")
        if not self.server_cert and not self.test_mode:
            raise ConfigError(
                f"tls.server.mode={self.mode} needs tls.server.certPath and tls.server.keyPath "
                "(or tls.test.mode.enable=true for a self-signed certificate, or tls.server.mode=disabled)"
            )
        if self.need_client_auth == "require" and not self.server_trust:
            raise ConfigError("tls.server.need.client.auth=require needs tls.server.trustCertPath")
        if self.need_client_auth == "require" and self.mode == "permissive":
            log.warning(  # 4.9.8 behaves the same; the operator likely meant enforcing
                "tls.server.need.client.auth=require with tls.server.mode=permissive: plaintext clients are "
                "still served without any certificate; set tls.server.mode=enforcing to require one"
            )
        _require_files(
            ("tls.server.certPath", self.server_cert),
            ("tls.server.keyPath", self.server_key),
            ("tls.server.trustCertPath", self.server_trust),
        )
        # the listener's context is made when the first TLS client arrives: load the files once now, so a
        # key that is not the certificate's, a wrong keyPassword or a trust file that is no PEM stops the
        # daemon here rather than failing every handshake later
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            if self.server_cert:
                probe.load_cert_chain(self.server_cert, self.server_key, self.server_key_password or None)
            if self.server_trust:
                probe.load_verify_locations(self.server_trust)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(
                f"tls.server.certPath {self.server_cert or '-'}, tls.server.keyPath {self.server_key or '-'}, "
                f"tls.server.trustCertPath {self.server_trust or '-'}: do not load: {exc}"
            ) from None
        if self.server_cert:
            warn_of_end("tls.server.certPath", Path(self.server_cert))

    def check_mutual(self) -> TlsSettings:
        """haTls: both ends need a CA to verify the other with (else the stream is encrypted, not authenticated).

        Returns the channel's settings: members only when this broker's own certificate carries the member
        mark (a set that marks its members can tell a client's certificate from a member's); else a WARNING
        says that any certificate the trust file verifies, a client's too, is taken for a member's."""
        from daemon.config import ConfigError

        if self.member_trust:
            self._check_member_ca()
            return self
        if not self.server_trust:
            raise ConfigError("haTls=true needs tls.server.trustCertPath (the CA that signs the slaves)")
        own = self.client_cert or self.server_cert
        if not own:
            raise ConfigError("haTls=true needs tls.client.certPath/keyPath or tls.server.certPath/keyPath")
        if not carries_member_mark(own):
            log.warning(
                "haTls: %s carries no member mark (OU=%s): every certificate tls.server.trustCertPath "
                "verifies, mqctl's client certificates too, is taken for a member's and may read the CommitLog "
                "over the HA port or speak on the DLedger channel; issue the brokers certificates with "
                "OU=%s (mqctl tls init does) to admit members only",
                own,
                MEMBER_UNIT,
                MEMBER_UNIT,
            )
            return self
        if self.server_cert and not carries_member_mark(self.server_cert):
            raise ConfigError(
                f"haTls: tls.client.certPath {own} carries the member mark (OU={MEMBER_UNIT}) but "
                f"tls.server.certPath {self.server_cert} does not: the other members would refuse it"
            )
        return replace(self, members_only=True)

    def _check_member_ca(self) -> None:
        """haTls with `tls.member.trustCertPath`: the files load, and this member's channel certificates
        pass a handshake with each other under the member trust alone (as two members' would), so a pair
        the members' CA did not sign stops the broker at start rather than every handshake later."""
        from daemon.config import ConfigError

        if bool(self.member_cert) != bool(self.member_key):
            raise ConfigError("tls.member.certPath and tls.member.keyPath go together: set both or neither")
        if not (self.member_cert or self.client_cert or self.server_cert):
            raise ConfigError("haTls=true needs tls.member.certPath/keyPath or tls.server.certPath/keyPath")
        _require_files(
            ("tls.member.trustCertPath", self.member_trust),
            ("tls.member.certPath", self.member_cert),
            ("tls.member.keyPath", self.member_key),
        )
        try:
            _handshake(self.server_context(require_client=True), self.client_context(verify=True))
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(
                f"haTls: this member's certificate {self._member_pair()[0]} and tls.member.trustCertPath "
                f"{self.member_trust} do not make a handshake (each member verifies the other against the "
                f"trust file alone: it must sign the member certificates): {exc}"
            ) from None

    def _member_pair(self, listener: bool = False) -> tuple[str, str, str]:
        """The certificate, key and key password this member presents on a replication channel."""
        if self.member_trust and self.member_cert:
            return self.member_cert, self.member_key, self.member_key_password
        if self.client_cert and not listener:
            return self.client_cert, self.client_key, self.client_key_password
        return self.server_cert, self.server_key, self.server_key_password

    def server_context(self, *, require_client: bool = False) -> ssl.SSLContext:
        """The listener's context; `require_client` (the HA port under haTls) demands a verified client."""
        if require_client and self.member_trust:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            cert, key, password = self._member_pair(listener=True)
            ctx.load_cert_chain(cert, key, password or None)
            ctx.load_verify_locations(self.member_trust)
            ctx.verify_mode = ssl.CERT_REQUIRED
            return ctx
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if self.server_cert:
            ctx.load_cert_chain(self.server_cert, self.server_key, self.server_key_password or None)
        else:
            with _self_signed_files() as (cert, key):
                ctx.load_cert_chain(cert, key)
            log.info("TLS test mode: serving a self-signed certificate made at start")
        if self.server_trust:
            ctx.load_verify_locations(self.server_trust)
        auth = "require" if require_client else self.need_client_auth
        # a client certificate asked for but unverifiable would fail every handshake: ask only with a trust file
        ctx.verify_mode = CLIENT_AUTH[auth] if self.server_trust else ssl.CERT_NONE
        if require_client and self.members_only:
            ctx.sslobject_class = MemberOnly
        return ctx

    def client_context(self, *, verify: bool = False) -> ssl.SSLContext:
        """Our daemons' client context (registration, HA); `verify` (haTls) demands the server's chain."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ctx.check_hostname = False  # as 4.9.8's client: the chain, not the name (brokers register IPs)
        if verify and self.member_trust:
            ctx.load_verify_locations(self.member_trust)
            cert, key, password = self._member_pair()
            ctx.load_cert_chain(cert, key or None, password or None)
            return ctx
        trust = self.client_trust or (self.server_trust if verify else "")
        if trust:
            ctx.load_verify_locations(trust)
        elif verify:
            from daemon.config import ConfigError

            raise ConfigError("haTls=true needs tls.client.trustCertPath or tls.server.trustCertPath")
        elif not self.client_auth_server:
            ctx.verify_mode = ssl.CERT_NONE
            log.warning(
                "tls.enable: the servers' certificates are not verified; set tls.client.trustCertPath"
            )
        cert, key, password = self.client_cert, self.client_key, self.client_key_password
        if not cert and verify:  # mutual TLS between brokers: the server's own key material will do
            cert, key, password = self.server_cert, self.server_key, self.server_key_password
        if cert:
            ctx.load_cert_chain(cert, key or None, password or None)
        if verify and self.members_only:
            ctx.sslobject_class = MemberOnly
        return ctx


def _require_files(*keys: tuple[str, str]) -> None:
    """Each (key, path) set names a file that exists, else the daemon stops at start naming the key."""
    from daemon.config import ConfigError

    for key, path in keys:
        if path and not os.path.isfile(path):
            raise ConfigError(f"{key} {path}: no such file")


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """A TLS handshake between the two contexts in memory; raises what either end raises."""
    bios = [(ssl.MemoryBIO(), ssl.MemoryBIO()), (ssl.MemoryBIO(), ssl.MemoryBIO())]
    ends = [
        server.wrap_bio(*bios[0], server_side=True),
        client.wrap_bio(*bios[1], server_side=False),
    ]
    done = [False, False]
    for _ in range(16):
        for i, end in enumerate(ends):
            if not done[i]:
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
            pending = bios[i][1].read()
            if pending:
                bios[1 - i][0].write(pending)
        if all(done):
            return
    raise ssl.SSLError(ssl.SSL_ERROR_SSL, "the handshake did not finish")


#: The organizational unit that marks a certificate as a replication member's (a broker's), not a client's.
MEMBER_UNIT = "mqctl-member"


def is_member(cert: Mapping[str, object] | None) -> bool:
    """Whether a verified peer certificate (as `getpeercert()` gives it) carries the member mark."""
    subject = cert.get("subject", ()) if cert else ()
    return any(
        name == "organizationalUnitName" and value == MEMBER_UNIT
        for rdn in subject  # type: ignore[attr-defined]
        for name, value in rdn
    )


def carries_member_mark(path: str) -> bool:
    """Whether the first certificate of the PEM file `path` carries the member mark."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError):
        return False  # the context's own load says what is wrong with it
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return any(unit.value == MEMBER_UNIT for unit in units)


class MemberOnly(ssl.SSLObject):
    """A TLS connection of a replication channel: its handshake fails unless the peer's (verified)
    certificate carries the member mark, so a client's certificate the same CA signed is refused before
    a byte of the stream is read or sent."""

    def do_handshake(self) -> None:
        super().do_handshake()
        if not is_member(self.getpeercert()):
            raise ssl.SSLError(
                ssl.SSL_ERROR_SSL, f"the peer's certificate is no member's (no OU={MEMBER_UNIT}): a client's"
            )


class ServerTls:
    """What a listener needs: the mode, and the context made the first time a TLS client arrives."""

    def __init__(
        self, settings: TlsSettings, *, require_client: bool = False, why: str = "tls.server.mode=enforcing"
    ) -> None:
        self.settings = settings
        self.mode = settings.mode
        self.require_client = require_client
        #: What makes the listener TLS-only, for the line that logs a plaintext client closed.
        self.why_tls_only = why
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = self.settings.server_context(require_client=self.require_client)
        return self._context


#: Bytes one TLS read may fill: several records' worth, allocated once per connection.
READ_BUFFER = 64 * 1024


class TlsReadBuffer(asyncio.BufferedProtocol):
    """Feeds a TLS transport's plaintext to a plain `asyncio.Protocol` through one reusable buffer.

    Both asyncio's and uvloop's TLS transports read a plain protocol's data with `SSLObject.read(256 KiB)`,
    which allocates (and the kernel maps, zeroes and unmaps) a 256 KiB object for every read: most of what
    TLS cost a small request. For a buffered protocol they decrypt into its buffer instead; this one is
    allocated once, and each read hands the protocol a copy of just the bytes that arrived."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        self.protocol = protocol
        self._buffer = bytearray(READ_BUFFER)
        self._view = memoryview(self._buffer)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.protocol.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.protocol.data_received(bytes(self._view[:nbytes]))

    def eof_received(self) -> bool | None:
        return self.protocol.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._view.release()
        self.protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()


# --------------------------------------------------------------------------------- certificates


@contextlib.contextmanager
def _self_signed_files() -> Iterator[tuple[str, str]]:
    """A fresh self-signed certificate and key as two private temporary PEM files (ssl loads files only)."""
    key = new_key()
    cert = make_certificate(key, "mqctl test mode", issuer=None, sans=default_sans(), ca=False)
    with tempfile.TemporaryDirectory(prefix="mqctl-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        write_pem(cert_path, cert_pem(cert))
        write_pem(key_path, key_pem(key))
        yield cert_path, key_path


def default_sans() -> list[str]:
    """The names a local cluster is reached by: 127.0.0.1, localhost, ::1 and this host's name."""
    names = ["127.0.0.1", "localhost", "::1"]
    host = socket.gethostname()
    if host and host not in names:
        names.append(host)
    return names


def new_key():  # type: ignore[no-untyped-def]
    """A P-256 key: as strong as RSA-3072 and made in a millisecond."""
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def make_certificate(  # type: ignore[no-untyped-def]
    key,
    common_name: str,
    *,
    issuer: tuple[object, object] | None,
    sans: list[str],
    ca: bool,
    days: int = 825,
    unit: str = "",
):
    """An X.509 certificate for `key`, signed by `issuer` (its certificate and key) or by itself.

    Leaf certificates serve both TLS ends (serverAuth and clientAuth): a broker's one key pair then
    also authenticates it to its master under haTls. `unit` (MEMBER_UNIT) marks a member's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    names = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if unit:
        names.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    subject = x509.Name(names)
    issuer_cert, issuer_key = issuer if issuer is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(n) for n in sans]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]


def _san(name: str):  # type: ignore[no-untyped-def]
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def cert_pem(cert) -> bytes:  # type: ignore[no-untyped-def]
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def key_pem(key) -> bytes:  # type: ignore[no-untyped-def]
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def write_pem(path: str | Path, data: bytes, *, private: bool = True) -> None:
    """Write a PEM file; a private key's is never readable by others, not even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with open(fd, "wb") as fh:
        fh.write(data)


#: The files `write_local_ca` makes, by role.
LOCAL_FILES = {
    "ca": "ca.pem",
    "ca_key": "ca.key",
    "server_cert": "server.pem",
    "server_key": "server.key",
    "client_cert": "client.pem",
    "client_key": "client.key",
}


def write_local_ca(directory: Path, *, sans: list[str] | None = None) -> dict[str, Path]:
    """A CA, a server certificate (for `sans`, else :func:`default_sans`; marked a replication member's)
    and a client certificate, all signed by that CA, as PEM files in `directory` (keys 0600); returns the paths by role."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = new_key()
    ca_cert = make_certificate(ca_key, "mqctl local CA", issuer=None, sans=[], ca=True, days=3650)
    server_key, client_key = new_key(), new_key()
    server = make_certificate(  # the daemons': marked, so haTls admits it and not the client's
        server_key,
        "mqctl server",
        issuer=(ca_cert, ca_key),
        sans=sans or default_sans(),
        ca=False,
        unit=MEMBER_UNIT,
    )
    client = make_certificate(client_key, "mqctl client", issuer=(ca_cert, ca_key), sans=[], ca=False)
    paths = {role: directory / name for role, name in LOCAL_FILES.items()}
    write_pem(paths["ca"], cert_pem(ca_cert), private=False)
    write_pem(paths["ca_key"], key_pem(ca_key))
    write_pem(paths["server_cert"], cert_pem(server), private=False)
    write_pem(paths["server_key"], key_pem(server_key))
    write_pem(paths["client_cert"], cert_pem(client), private=False)
    write_pem(paths["client_key"], key_pem(client_key))
    return paths


#: The files `write_member_ca` makes, by role.
MEMBER_FILES = {
    "member_ca": "member-ca.pem",
    "member_ca_key": "member-ca.key",
    "member_cert": "member.pem",
    "member_key": "member.key",
}


def write_member_ca(directory: Path, *, sans: list[str] | None = None) -> dict[str, Path]:
    """A CA of the replication members' own and a member certificate it signs (no mark needed: that CA
    signs nothing else), for `tls.member.trustCertPath` and `tls.member.certPath`/`keyPath`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, key = new_key(), new_key()
    ca_cert = make_certificate(ca_key, "mqctl member CA", issuer=None, sans=[], ca=True, days=3650)
    member = make_certificate(
        key, "mqctl member", issuer=(ca_cert, ca_key), sans=sans or default_sans(), ca=False
    )
    paths = {role: directory / name for role, name in MEMBER_FILES.items()}
    write_pem(paths["member_ca"], cert_pem(ca_cert), private=False)
    write_pem(paths["member_ca_key"], key_pem(ca_key))
    write_pem(paths["member_cert"], cert_pem(member), private=False)
    write_pem(paths["member_key"], key_pem(key))
    return paths


#: Days before its end from which a daemon's start warns of its certificate (`mqctl tls show` too).
WARN_DAYS = 30


def warn_of_end(key: str, path: Path) -> None:
    """Log the end of the certificate a daemon serves when it has come (ERROR: every verifying client
    refuses it) or is under :data:`WARN_DAYS` away (WARNING), with the way to renew it from its CA."""
    try:
        cert = load_certificate(path)
    except (CertificateError, OSError):
        return  # the context's own load says what is wrong with it
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    how = "issue it again from its CA: mqctl tls renew DIR --force, then restart"
    if left.total_seconds() <= 0:
        log.error(
            "%s %s ended on %s: verifying clients refuse it; %s",
            key,
            path,
            f"{cert.not_valid_after_utc:%Y-%m-%d}",
            how,
        )
    elif left.days < WARN_DAYS:
        log.warning(
            "%s %s ends in %d days, on %s; %s",
            key,
            path,
            left.days,
            f"{cert.not_valid_after_utc:%Y-%m-%d}",
            how,
        )


#: The leaf certificates `write_local_ca` and `write_member_ca` make, by role: the certificate and key
#: files, then those of the CA that signs it (what `mqctl tls renew` re-issues).
RENEWABLE = {
    "server": ("server.pem", "server.key", "ca.pem", "ca.key"),
    "client": ("client.pem", "client.key", "ca.pem", "ca.key"),
    "member": ("member.pem", "member.key", "member-ca.pem", "member-ca.key"),
}


class CertificateError(Exception):
    """A certificate or key file that does not load, or a certificate its CA did not sign."""


def load_certificate(path: Path):  # type: ignore[no-untyped-def]
    """The first certificate of a PEM file (CertificateError when there is none)."""
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as exc:
        raise CertificateError(f"{path}: no PEM certificate in it ({exc})") from None


def load_key(path: Path):  # type: ignore[no-untyped-def]
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:  # TypeError: the key is encrypted
        raise CertificateError(f"{path}: no unencrypted PEM private key in it ({exc})") from None


def reissue(cert, key, issuer: tuple[object, object], days: int):  # type: ignore[no-untyped-def]
    """`cert` issued again by `issuer` (its CA's certificate and key) for `key`: the same subject and
    extensions (names, usages, the member mark), a new serial, valid from now for `days` days.
    CertificateError when that CA did not sign `cert`."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes

    ca_cert, ca_key = issuer
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise CertificateError(f"not signed by that CA ({exc or type(exc).__name__})") from None
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(cert.subject)
        .issuer_name(ca_cert.subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    # the key identifiers name the old keys: left out, as make_certificate does
    for extension in cert.extensions:
        if not isinstance(extension.value, x509.SubjectKeyIdentifier | x509.AuthorityKeyIdentifier):
            builder = builder.add_extension(extension.value, critical=extension.critical)
    return builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
