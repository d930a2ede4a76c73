"""CLI settings and contexts, resolved once per invocation.

Precedence, lowest first: the current context (user config dir) -> ``NAMESRV_ADDR``
(RocketMQ's own variable) -> ``MQCTL_*`` variables -> flags. A context's settings (its timeout, its
credentials) apply when it chose the NameServers.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from mqctl.errors import ConflictError, NotFoundError, UsageError
from mqctl.tls import TlsOptions

DEFAULT_NAMESRV = "127.0.0.1:9876"


def config_dir() -> Path:
    """Where contexts live: ``$MQCTL_CONFIG_DIR`` or the platform's user config dir."""
    override = os.environ.get("MQCTL_CONFIG_DIR")
    if override:
        return Path(override)
    from platformdirs import user_config_dir

    return Path(user_config_dir("mqctl"))


def data_dir() -> Path:
    """Default root for daemon data (``mqctl up``): ``$MQCTL_DATA_DIR`` or the user data dir."""
    override = os.environ.get("MQCTL_DATA_DIR")
    if override:
        return Path(override)
    from platformdirs import user_data_dir

    return Path(user_data_dir("mqctl"))


def parse_namesrv(value: str) -> list[str]:
    """Split RocketMQ's ``host:port;host:port`` list, checking each address."""
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise UsageError(f"empty NameServer address list {value!r}: expected HOST:PORT[;HOST:PORT]")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        # ASCII digits: str.isdigit also takes '²' (which int refuses) and other scripts' digits
        if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise UsageError(f"bad NameServer address {addr!r}: expected HOST:PORT")
    return addrs


#: What RFC 6761 reserves the name ``localhost`` for, and the hosts file gives it: the loopback addresses.
_LOCALHOST = frozenset({"127.0.0.1", "::1"})


def endpoints(addr: str) -> frozenset[tuple[str, int]]:
    """The endpoints a NameServer address (as :func:`parse_namesrv` checked it) names, for comparing two
    spellings: an IP literal in its one written form (brackets off, an IPv4-mapped IPv6 one as IPv4), a
    name lowercased (a trailing dot kept: ``ns1.`` is not the ``ns1`` a search domain completes),
    ``localhost`` as the loopback addresses, the port as a number. No name is resolved: a DNS answer now
    says nothing of where the next connection goes."""
    import ipaddress

    host, _, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower()
        hosts = _LOCALHOST if name == "localhost" else {f"name:{name}"}
    else:
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        hosts = {str(mapped or ip)}
    return frozenset((h, int(port)) for h in hosts)


@dataclass(frozen=True)
class Context:
    name: str
    namesrv: str
    #: ACL credentials: the secret stays in its own owner-only file, never in contexts.json.
    access_key: str | None = None
    secret_key_file: str | None = None
    #: The Spark Connect server (sc://HOST:PORT) `mqctl spark-export` runs on for this cluster.
    spark_remote: str | None = None
    #: Seconds to wait for each answer from this cluster (``--timeout`` and ``$MQCTL_TIMEOUT`` beat it).
    timeout: float | None = None
    #: TLS to this cluster (`--tls`, `--ca`, `--cert`/`--key`, `--insecure`); None: plaintext.
    tls: TlsOptions | None = None

    def as_json(self) -> dict[str, object]:
        body: dict[str, object] = {"namesrv": self.namesrv}
        if self.access_key:
            body["accessKey"] = self.access_key
        if self.secret_key_file:
            body["secretKeyFile"] = self.secret_key_file
        if self.spark_remote:
            body["sparkRemote"] = self.spark_remote
        if self.timeout is not None:
            body["timeout"] = self.timeout
        if self.tls is not None:
            body["tls"] = self.tls.as_json()
        return body


@dataclass
class ContextFile:
    """The contexts file: ``{"current": NAME, "contexts": {NAME: {"namesrv": ...}}}``."""

    current: str | None
    contexts: dict[str, Context]

    @staticmethod
    def path() -> Path:
        return config_dir() / "contexts.json"

    @classmethod
    def load(cls) -> ContextFile:
        path = cls.path()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            contexts = {
                name: Context(
                    name,
                    str(c["namesrv"]),
                    c.get("accessKey"),
                    c.get("secretKeyFile"),
                    c.get("sparkRemote"),
                    None if c.get("timeout") is None else float(c["timeout"]),
                    TlsOptions.from_json(c.get("tls")),
                )
                for name, c in raw.get("contexts", {}).items()
            }
        except FileNotFoundError:
            return cls(current=None, contexts={})
        except PermissionError:
            raise  # a local permission problem, reported as such at the boundary (mqctl.errors.translate)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
        except (KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{path} is not a contexts file: {type(exc).__name__} {exc}") from None
        return cls(current=raw.get("current"), contexts=contexts)

    def save(self) -> None:
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"current": self.current, "contexts": {n: c.as_json() for n, c in self.contexts.items()}}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    def add(
        self,
        name: str,
        namesrv: str,
        *,
        overwrite: bool,
        access_key: str | None = None,
        secret_key_file: str | None = None,
        spark_remote: str | None = None,
        timeout: float | None = None,
        tls: TlsOptions | None = None,
    ) -> Context:
        parse_namesrv(namesrv)
        if not name.strip():
            raise UsageError("the context name is blank")
        if spark_remote is not None and not spark_remote.startswith("sc://"):
            raise UsageError(f"--spark-remote {spark_remote!r}: expected sc://HOST:PORT")
        if name in self.contexts and not overwrite:
            raise ConflictError(f"context {name!r} already exists", hint="use --force to replace it")
        self.contexts[name] = Context(name, namesrv, access_key, secret_key_file, spark_remote, timeout, tls)
        if self.current is None:
            self.current = name
        return self.contexts[name]

    def set(
        self,
        name: str,
        *,
        namesrv: str | None,
        timeout: float | None,
        spark_remote: str | None,
        tls: TlsOptions | Literal[False] | None = None,
    ) -> Context:
        """Change some settings of a saved context; the others (credentials too) stay. ``tls``: new TLS
        options, False for plaintext, None to keep them."""
        old = self.get(name)
        return self.add(
            name,
            namesrv or old.namesrv,
            overwrite=True,
            access_key=old.access_key,
            secret_key_file=old.secret_key_file,
            spark_remote=spark_remote or old.spark_remote,
            timeout=old.timeout if timeout is None else timeout,
            tls=old.tls if tls is None else tls or None,
        )

    def current_context(self) -> Context | None:
        return self.contexts.get(self.current) if self.current else None

    def get(self, name: str) -> Context:
        try:
            return self.contexts[name]
        except KeyError:
            raise NotFoundError(f"no context named {name!r}", hint="see 'mqctl context ls'") from None

    def remove(self, name: str) -> Context:
        context = self.get(name)
        del self.contexts[name]
        if self.current == name:
            self.current = None
        return context


def context_spark_remote() -> str | None:
    """The current context's Spark Connect server: where spark-export runs when neither ``--master`` nor
    ``--remote`` (``$MQCTL_SPARK_REMOTE``) says otherwise."""
    current = ContextFile.load().current_context()
    return current.spark_remote if current is not None else None


@dataclass(frozen=True)
class Target:
    """Where online commands connect, and where that choice came from."""

    namesrv: list[str]
    source: str
    #: The timeout of the context in force, if it has one.
    timeout: float | None = None
    #: The context whose TLS, credentials and timeout apply: the one that chose the NameServers, or the
    #: one whose NameServers ``-n``/``$MQCTL_NAMESRV`` replaced.
    context: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Timeout:
    """Seconds to wait for each answer, and where that figure came from."""

    seconds: float
    source: str


def resolve_timeout(default: float, *, flag: float | None, target: Target | None) -> Timeout:
    """``--timeout``, then ``$MQCTL_TIMEOUT``, then the context that chose the NameServers, then the
    command's ``default``."""
    if flag is not None:
        return Timeout(flag, "--timeout")
    env = os.environ.get("MQCTL_TIMEOUT")
    if env:
        return Timeout(_seconds(env, "$MQCTL_TIMEOUT"), "$MQCTL_TIMEOUT")
    if target is not None and target.timeout is not None:
        return Timeout(target.timeout, f"context {target.context}" if target.context else target.source)
    return Timeout(default, "default")


@dataclass(frozen=True)
class Deadline:
    """A read command's deadline in all (seconds; None: none), and where that figure came from."""

    seconds: float | None
    source: str


def resolve_deadline(timeout: float, *, flag: float | None) -> Deadline:
    """``--deadline``, then ``$MQCTL_DEADLINE``, then the default for ``timeout`` seconds a answer
    (:func:`mqctl.admin.client.read_deadline`); 0 from either is no deadline."""
    if flag is not None:
        return Deadline(flag or None, "--deadline")
    env = os.environ.get("MQCTL_DEADLINE")
    if env:
        return Deadline(_seconds(env, "$MQCTL_DEADLINE", least=0.0) or None, "$MQCTL_DEADLINE")
    from mqctl.admin.client import READ_DEADLINE_ANSWERS, READ_DEADLINE_FLOOR, read_deadline

    return Deadline(
        read_deadline(timeout),
        f"default: {READ_DEADLINE_ANSWERS} x the timeout, at least {READ_DEADLINE_FLOOR:g}",
    )


def _seconds(text: str, where: str, *, least: float = 0.1) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= least or value == float("inf"):  # also refuses nan
        raise UsageError(f"{where} {text!r}: expected seconds, at least {least:g}")
    return value


def resolve_target(*, namesrv_flag: str | None, context_flag: str | None) -> Target:
    """Resolve the NameServer list once, by the documented precedence; ``-v`` says which on stderr."""
    from mqctl import auth
    from mqctl.output import note

    target = _resolve(namesrv_flag, context_flag)
    kept = f"; TLS, credentials and timeout of context {target.context}" if target.context else ""
    if target.context and auth.withheld():
        kept = f"; TLS and timeout of context {target.context}, its credentials withheld"
    note(f"NameServer {';'.join(target.namesrv)} (from {target.source}{kept})")
    return target


def effective_settings(
    default_timeout: float = 5.0,
    *,
    namesrv_flag: str | None = None,
    context_flag: str | None = None,
    timeout_flag: float | None = None,
    deadline_flag: float | None = None,
) -> dict[str, object]:
    """Where an online command connects and how long it waits, and why (``mqctl context current``;
    ``mqctl [-n NS] [--context C] [--timeout S] [--deadline S] --print-config`` with the root's flags);
    a read's ``deadline`` None is none."""
    target = resolve_target(namesrv_flag=namesrv_flag, context_flag=context_flag)
    timeout = resolve_timeout(default_timeout, flag=timeout_flag, target=target)
    deadline = resolve_deadline(timeout.seconds, flag=deadline_flag)
    from mqctl import auth, tls

    chosen = tls.current()
    decided = tls.chosen()
    # which account signs (never its secret): an ACL refusal is otherwise a guess at which key was used
    signer = auth.current()
    withheld = auth.withheld()
    return {
        "namesrv": ";".join(target.namesrv),
        "source": target.source,
        "timeout": timeout.seconds,
        "timeout_source": timeout.source,
        "deadline": deadline.seconds,
        "deadline_source": deadline.source,
        "tls": chosen[0].as_json() or True if chosen else False,
        "tls_source": decided[1] if decided else "default",
        "access_key": signer.access_key if signer else None,
        "access_key_source": signer.source if signer else f"none: {withheld}" if withheld else "none",
    }


def _resolve(namesrv_flag: str | None, context_flag: str | None) -> Target:
    """--namesrv, --context, $MQCTL_NAMESRV, the current context, $NAMESRV_ADDR, then the default.

    ``-n`` and ``$MQCTL_NAMESRV`` replace the NameServers only: the context in force (``--context``, else
    the current one) still gives its TLS, timeout and, where it vouches for them, credentials, which their
    own flags replace (``--no-tls``, ``--access-key``, ``--timeout``). A context with TLS, reached by
    ``-n``, was talked to in plaintext.

    RocketMQ's $NAMESRV_ADDR is often set for other tools: a context chosen in mqctl outranks it,
    with a notice so that the choice is never silent.
    """
    # given empty ('-n "$NS"' with NS unset) is an error, never "not given": that would reach whatever
    # cluster the current context names
    if context_flag is not None and not context_flag.strip():
        raise UsageError("empty --context: name a saved context (see 'mqctl context ls')")
    _use(None)  # a process that resolves again (a Spark worker's next read) keeps no earlier context's
    if namesrv_flag is not None:
        return _namesrv_only(parse_namesrv(namesrv_flag), "--namesrv", context_flag)
    contexts = ContextFile.load()
    if context_flag is not None:
        return _from_context(contexts.get(context_flag))
    if os.environ.get("MQCTL_NAMESRV"):
        return _namesrv_only(parse_namesrv(os.environ["MQCTL_NAMESRV"]), "$MQCTL_NAMESRV", None)
    if contexts.current and contexts.current in contexts.contexts:
        if os.environ.get("NAMESRV_ADDR"):
            from mqctl.output import stderr_console

            stderr_console().print(
                f"note: context {contexts.current!r} outranks $NAMESRV_ADDR; -n or --context choose otherwise",
                style="dim",
            )
        return _from_context(contexts.contexts[contexts.current])
    if os.environ.get("NAMESRV_ADDR"):
        return Target(parse_namesrv(os.environ["NAMESRV_ADDR"]), "$NAMESRV_ADDR")
    return Target([DEFAULT_NAMESRV], "default")


def _from_context(context: Context) -> Target:
    """A context's NameServers, with its TLS, credentials and timeout."""
    _use(context)
    return Target(parse_namesrv(context.namesrv), f"context {context.name}", context.timeout, context.name)


def _namesrv_only(namesrv: list[str], source: str, context_flag: str | None) -> Target:
    """NameServers ``source`` named, with the rest of the context in force (``--context``, else the
    current one), if any; its credentials only where :func:`_unvouched` finds nothing (mqctl.auth)."""
    context = context_in_force(context_flag)
    if context is None:
        return Target(namesrv, source)
    _use(context)
    namesrv = _as_the_context_writes(namesrv, context) or namesrv
    strangers = _unvouched(namesrv, context)
    if strangers and context.access_key:
        from mqctl import auth

        hosts = ";".join(strangers)
        auth.withhold_context(
            f"context {context.name}'s access key was withheld from {hosts}",
            f"not signing with context {context.name}'s access key {context.access_key}: {hosts} ({source}) "
            f"is not one of its NameServers and not reached over its TLS with its own --ca; --sign signs "
            "anyway, --access-key signs with the key it names",
        )
    return Target(namesrv, source, context.timeout, context.name)


def context_in_force(context_flag: str | None) -> Context | None:
    """``--context``'s, else the current one; None: neither."""
    contexts = ContextFile.load()
    return contexts.get(context_flag) if context_flag is not None else contexts.current_context()


def _unvouched(namesrv: list[str], context: Context) -> list[str]:
    """The NameServers of ``namesrv`` the context does not vouch for: none when the TLS in force checks
    servers against the context's own CA file (chain and host name), else those not in its list.

    The system's CAs vouch for nothing here: any host holds a public certificate for its own name."""
    from mqctl import tls

    in_force = tls.current()
    own_ca = context.tls.ca if context.tls is not None else None
    if in_force is not None and own_ca and in_force[0].ca == own_ca and not in_force[0].insecure:
        return []
    own = [endpoints(a) for a in parse_namesrv(context.namesrv)]
    return [addr for addr in namesrv if not any(endpoints(addr) & ends for ends in own)]


def _as_the_context_writes(namesrv: list[str], context: Context) -> list[str] | None:
    """``namesrv`` as the context writes it when every address names one of its NameServers
    (:func:`endpoints`), else None: its key then goes to them only as the context itself reaches them
    (``localhost`` may reach ``::1`` first where the context names ``127.0.0.1``)."""
    own = [(endpoints(a), a) for a in parse_namesrv(context.namesrv)]
    out: list[str] = []
    for addr in namesrv:
        written = next((a for ends, a in own if endpoints(addr) & ends), None)
        if written is None:
            return None
        if written not in out:
            out.append(written)
    return out


def _use(context: Context | None) -> None:
    """The context's credentials and TLS in force (None: none's)."""
    from mqctl import auth, tls

    if context is None:
        auth.use_context("", None, None)
        tls.use_context("", None)
        return
    auth.use_context(context.name, context.access_key, context.secret_key_file)
    tls.use_context(context.name, context.tls)
