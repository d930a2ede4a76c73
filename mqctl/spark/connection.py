"""Where the ``rocketmq`` source connects and how, from its options, resolved as mqctl resolves a command's
root flags (stdlib only: ``spark-export`` resolves it before Spark is imported).

Its options say what mqctl's global flags say: ``namesrv`` is ``-n``, ``context`` ``--context``, ``tls``
``--tls``/``--no-tls`` (``ca``, ``cert``/``key``, ``insecure`` beside it), ``accessKey`` with ``secretKey``
or ``secretKeyFile`` the key pair, ``sign`` ``--sign``, ``timeout`` ``--timeout``. What they leave out comes
from ``$MQCTL_*``, then the context in force, under the rule of where a context's key goes (mqctl.auth);
the process's own root flags count only for ``spark-export``'s driver, whose flags they are (in a worker or
a reused process they are an earlier command's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mqctl.errors import UsageError

if TYPE_CHECKING:
    from mqctl.auth import Credentials
    from mqctl.tls import TlsOptions


@dataclass(frozen=True)
class Connection:
    """Where the tasks connect and how: resolved once on the driver, then shipped with the reader."""

    namesrv: tuple[str, ...]
    credentials: Credentials | None = None
    """None: requests go unsigned."""
    tls: TlsOptions | None = None
    """None: plaintext."""
    timeout: float = 5.0

    def admin(self) -> Any:
        """A new admin session on its own connections (one per event loop)."""
        from daemon.remoting.client import RemotingClient
        from mqctl.admin.client import Admin

        client = RemotingClient(
            signer=self.credentials.signer() if self.credentials is not None else None,
            ssl=self.tls.context() if self.tls is not None else None,
        )
        return Admin(list(self.namesrv), timeout=self.timeout, client=client)

    def options(self, secret_file: str | None = None) -> dict[str, str]:
        """This connection as the source's options, every setting explicit, so that the readers Spark
        starts elsewhere (its planning worker, which knows no root flag) connect exactly so; where no key
        signs, they apply the rule of where a context's key goes as the driver did (the same ``namesrv``
        and TLS; a ``context`` option, where the command named one, beside them). The secret
        goes by its file, never as a value: options travel in plans, which Spark sends, keeps and may log.
        ``secret_file``: where a secret given inline was written for them."""
        opts = {"namesrv": ";".join(self.namesrv), "timeout": repr(self.timeout)}
        opts["tls"] = "true" if self.tls is not None else "false"
        if self.tls is not None:
            opts.update(
                {k: "true" if v is True else _absolute(str(v)) for k, v in self.tls.as_json().items()}
            )
        if self.credentials is not None:
            file = self.credentials.secret_file or secret_file
            if file is None:
                raise ValueError("an inline secret needs secret_file: options never carry a secret")
            opts.update(accessKey=self.credentials.access_key, secretKeyFile=_absolute(file))
        return opts


def _absolute(path: str) -> str:
    """A file option as the readers find it whatever their working directory."""
    return os.path.abspath(path)


def flag(value: str | None, name: str, default: bool) -> bool:
    """A boolean option: true/false, 1/0, yes/no."""
    if value is None:
        return default
    text = value.strip().lower()
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise UsageError(f"option {name}: expected true or false, not {value!r}")
    return text in ("true", "1", "yes")


def connection_of(opts: Mapping[str, str], *, root_flags: bool = False) -> Connection:
    """The connection the options (names lowercased) say, resolved as mqctl resolves its root flags (see
    the module docstring): the TLS options are in force while the NameServers are resolved, since whether
    the context's key may go to a ``namesrv`` it does not list depends on them (its own CA vouches, an
    ``insecure`` one does not)."""
    from mqctl import auth, tls
    from mqctl.config import resolve_target, resolve_timeout

    insecure = flag(opts.get("insecure"), "insecure", False)
    on = None if opts.get("tls") is None else flag(opts.get("tls"), "tls", False)
    ca, cert, key = (opts.get(k) or None for k in ("ca", "cert", "key"))
    pair = auth.given_pair(
        opts.get("accesskey"), opts.get("secretkey"), opts.get("secretkeyfile"),
        "options accessKey/secretKey", ("option secretKey", "option secretKeyFile"),
    )  # fmt: skip
    anywhere = auth.signs_anywhere()
    auth.sign_anywhere(flag(opts.get("sign"), "sign", anywhere))
    # the pair signs as a flag's would: no warning that the context's key stays home. Not given: none in
    # force (flags an earlier command or read left in this process are not this read's), unless
    # ``root_flags``: the command's own root flags (spark-export's driver) apply
    given = on is not None or insecure or bool(ca or cert or key)
    try:
        with (
            tls.flags_in_force(on, ca, cert, key, insecure) if given or not root_flags else nullcontext(),
            auth.signing_as(pair) if pair is not None or not root_flags else nullcontext(),
        ):
            target = resolve_target(
                namesrv_flag=opts.get("namesrv") or None, context_flag=opts.get("context")
            )
            credentials = auth.current()
            in_force = tls.current()
    finally:
        auth.sign_anywhere(anywhere)  # one read's option is not the next one's in a reused worker
    try:
        timeout = float(opts["timeout"]) if opts.get("timeout") else None
    except ValueError:
        timeout = -1.0
    if timeout is not None and not timeout >= 0.1:
        raise UsageError(f"option timeout {opts['timeout']!r}: expected seconds, at least 0.1")
    return Connection(
        tuple(target.namesrv),
        credentials,
        in_force[0] if in_force is not None else None,
        resolve_timeout(5.0, flag=timeout, target=target).seconds,
    )
