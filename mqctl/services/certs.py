"""Certificates as PEM files describe them: names, issuer, validity, and what is wrong with their dates
(``mqctl tls show`` and ``mqctl check cert``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from daemon.remoting.tls import CertificateError, load_certificate
from mqctl.errors import ConnectError, NotFoundError, TlsError, UsageError
from mqctl.services.checks import Perf, State, Verdict, worst
from mqctl.units import plural, when

if TYPE_CHECKING:
    import ssl

    from mqctl.tls import TlsOptions


class CertRow(TypedDict):
    """One certificate file, as ``tls show`` lists it."""

    file: str
    subject: str
    issuer: str
    sans: list[str]
    #: Whether it carries the replication members' mark (OU=mqctl-member), and whether it is a CA's.
    member: bool
    ca: bool
    not_before: str | None
    not_before_ms: int
    not_after: str | None
    not_after_ms: int
    days_left: int
    #: valid, expires soon, expired, not yet valid
    state: str


#: What a table shows by default (``-o wide``: all).
NARROW = ["file", "subject", "sans", "not_after", "not_after_ms", "days_left", "state"]

_DAY_MS = 86_400_000


def epoch_ms(moment: Any) -> int:
    return int(moment.timestamp() * 1000)


def files_of(paths: list[Path]) -> list[Path]:
    """The files ``paths`` name, a directory's ``*.pem`` in name order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.glob("*.pem") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise NotFoundError(f"{path}: no such file or directory")
    return files


def describe(paths: list[Path], warn_days: int) -> list[CertRow]:
    """One row per certificate file of ``paths``: its names, issuer, validity, days left and ``state``
    (valid, expires soon: under ``warn_days`` left, expired, not yet valid)."""
    now = int(time.time() * 1000)
    rows: list[CertRow] = []
    for file in files_of(paths):
        try:
            cert = load_certificate(file)
        except CertificateError as exc:
            raise UsageError(str(exc)) from None
        rows.append(_row(cert, str(file), now, warn_days))
    return rows


def _row(cert: Any, name: str, now: int, warn_days: int) -> CertRow:
    """A certificate as a :class:`CertRow` named ``name`` (its file, or where a server presented it)."""
    begins, ends = epoch_ms(cert.not_valid_before_utc), epoch_ms(cert.not_valid_after_utc)
    days_left = (ends - now) // _DAY_MS
    if ends <= now:
        state = "expired"
    elif begins > now:
        state = "not yet valid"
    elif days_left < warn_days:
        state = "expires soon"
    else:
        state = "valid"
    return {
        "file": name,
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "sans": _sans(cert),
        "member": _is_member(cert),
        "ca": _is_ca(cert),
        "not_before": when(begins),
        "not_before_ms": begins,
        "not_after": when(ends),
        "not_after_ms": ends,
        "days_left": days_left,
        "state": state,
    }


def trouble(row: CertRow) -> str | None:
    """What is wrong with a :func:`describe` row's dates, and the way out; None when it is valid."""
    day = time.strftime("%Y-%m-%d", time.gmtime(row["not_after_ms"] / 1000))
    why = {
        "expired": f"ended on {day}",
        "not yet valid": f"not valid before {time.strftime('%Y-%m-%d', time.gmtime(row['not_before_ms'] / 1000))}",
        "expires soon": f"ends in {plural(row['days_left'], 'day')}, on {day}",
    }.get(row["state"])
    if why is None:
        return None
    return f"{row['file']}: {why} ({'a new CA: mqctl tls init' if row['ca'] else 'mqctl tls renew issues it again'})"


def check(paths: list[Path], *, warn: int, crit: int) -> Verdict:
    """``check cert``: CRITICAL when a certificate has ended, is not valid yet or ends within ``crit``
    days, WARNING within ``warn``; perfdata the days each has left."""
    rows = describe(paths, warn)
    if not rows:
        return Verdict("cert", State.UNKNOWN, f"no certificate in {', '.join(map(str, paths))}")
    return _verdict(rows, warn=warn, crit=crit)


def _verdict(rows: list[CertRow], *, warn: int, crit: int) -> Verdict:
    """The dates of ``rows`` against ``warn``/``crit`` days left."""
    states, problems = [], []
    for row in rows:
        left = row["days_left"]
        if row["state"] in ("expired", "not yet valid") or left < crit:
            states.append(State.CRITICAL)
        elif left < warn:
            states.append(State.WARNING)
        else:
            states.append(State.OK)
        if states[-1] is not State.OK:
            problems.append(trouble(row) or f"{row['file']}: ends in {plural(left, 'day')}")
    first = min(rows, key=lambda r: r["not_after_ms"])
    summary = f"{plural(len(rows), 'certificate')}, the first to end {Path(first['file']).name} in " + plural(
        first["days_left"], "day"
    )
    if problems:
        summary += ": " + "; ".join(problems)
    # no thresholds in the perfdata: a plugin range alerts above its bound, and these alert below theirs
    perf = [Perf(f"{Path(r['file']).name} days_left", r["days_left"]) for r in rows]
    return Verdict("cert", worst(states), summary, perf, problems)


def _sans(cert: Any) -> list[str]:
    from cryptography import x509

    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(name.value) for name in names]


def _is_member(cert: Any) -> bool:
    from cryptography.x509.oid import NameOID

    from daemon.remoting.tls import MEMBER_UNIT

    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return any(unit.value == MEMBER_UNIT for unit in units)


def _is_ca(cert: Any) -> bool:
    from cryptography import x509

    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def check_connect(
    addr: str,
    *,
    ca: str | None,
    ca_source: str,
    client: TlsOptions | None,
    warn: int,
    crit: int,
    timeout: float,
) -> Verdict:
    """``check cert --connect HOST:PORT``: the chain the server presents (read without trusting it, so an
    ended or unknown certificate is still read), its dates as :func:`check` judges files, and a second
    handshake that verifies it against ``ca`` (None: the system's CAs; ``ca_source`` says whose) with
    the host name checked: one that fails is CRITICAL, as every client of that CA would fail there."""
    import ssl

    now = int(time.time() * 1000)
    reading = ssl.create_default_context()
    reading.check_hostname = False
    reading.verify_mode = ssl.CERT_NONE
    chain = _handshake(addr, _with_client(reading, client), timeout, read_chain=True)
    if not chain:
        return Verdict("cert", State.UNKNOWN, f"{addr} presented no certificate")
    from cryptography import x509

    # named by place: the leaf, then each certificate sent after it (intermediates, a root)
    rows = [
        _row(x509.load_der_x509_certificate(der), f"{addr} {f'chain {i}' if i else 'leaf'}", now, warn)
        for i, der in enumerate(chain)
    ]
    verdict = _verdict(rows, warn=warn, crit=crit)
    try:
        checking = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"--ca {ca}: not a PEM CA certificate ({exc})") from None
    try:
        _handshake(addr, _with_client(checking, client), timeout, read_chain=False)
    except TlsError as exc:
        why = f"{addr} does not verify against {ca_source} (host name checked): {exc}"
        verdict.state = State.CRITICAL
        verdict.problems.append(why)
        verdict.summary = f"{why}; {verdict.summary}"
    else:
        verdict.summary = f"{addr} verifies against {ca_source} (host name checked); {verdict.summary}"
    return verdict


def _with_client(ctx: ssl.SSLContext, client: TlsOptions | None) -> ssl.SSLContext:
    """``ctx`` presenting the client certificate in force, if any (a server that requires one)."""
    if client is not None and client.cert:
        ctx.load_cert_chain(client.cert, client.key)
    return ctx


def _handshake(addr: str, ctx: ssl.SSLContext, timeout: float, *, read_chain: bool) -> list[bytes]:
    """A TLS handshake with ``addr``; with ``read_chain`` the DER certificates the server presented,
    leaf first (as sent, unverified)."""
    import socket
    import ssl

    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise UsageError(f"--connect {addr!r}: expected HOST:PORT")
    try:
        with (
            socket.create_connection((host, int(port)), timeout=timeout) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as tls,
        ):
            if not read_chain:
                return []
            return _peer_chain(tls)
    except ssl.SSLCertVerificationError as exc:
        raise TlsError(exc.verify_message or str(exc)) from None
    except ssl.SSLError as exc:
        raise TlsError(f"TLS handshake with {addr} failed: {exc.reason or exc}") from None
    except OSError as exc:
        raise ConnectError(f"cannot connect to {addr}: {exc.strerror or exc}") from None


def _peer_chain(tls: ssl.SSLSocket) -> list[bytes]:
    """The chain as the server sent it: ``get_unverified_chain`` (public from Python 3.13, on the
    socket's SSL object before), else the leaf alone."""
    import _ssl

    reader = getattr(tls, "get_unverified_chain", None) or getattr(
        getattr(tls, "_sslobj", None), "get_unverified_chain", None
    )
    if reader is None:
        leaf = tls.getpeercert(binary_form=True)
        return [leaf] if leaf else []
    return [c if isinstance(c, bytes) else c.public_bytes(_ssl.ENCODING_DER) for c in reader() or []]
