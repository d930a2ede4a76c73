"""Certificates as PEM files describe them: names, issuer, validity, and what is wrong with their dates
(``mqctl tls show`` and ``mqctl check cert``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypedDict

from daemon.remoting.tls import CertificateError, load_certificate
from mqctl.errors import NotFoundError, UsageError
from mqctl.services.checks import Perf, State, Verdict, worst
from mqctl.units import plural, when


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
        rows.append(
            {
                "file": str(file),
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
        )
    return rows


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
