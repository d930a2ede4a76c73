"""``mqctl context`` and the precedence of NameServer settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqctl.errors import ConflictError, UsageError
from tests.support.cli import RunCli


def test_add_use_ls_rm_roundtrip(cli: RunCli) -> None:
    assert cli("context", "add", "dev", "--namesrv", "127.0.0.1:9876").code == 0
    assert cli("context", "add", "prod", "-n", "10.0.0.1:9876;10.0.0.2:9876").code == 0
    listed = cli("context", "ls", "-o", "json").json()
    assert listed == [
        {
            "name": "dev",
            "namesrv": "127.0.0.1:9876",
            "spark_remote": None,
            "timeout": None,
            "tls": False,
            "current": True,
        },
        {
            "name": "prod",
            "namesrv": "10.0.0.1:9876;10.0.0.2:9876",
            "spark_remote": None,
            "timeout": None,
            "tls": False,
            "current": False,
        },
    ]
    used = cli("context", "use", "prod", "-o", "json").json()
    assert used == {"current": "prod", "previous": "dev"}
    assert cli("context", "current", "-o", "json").json() == {
        "namesrv": "10.0.0.1:9876;10.0.0.2:9876",
        "source": "context prod",
        "timeout": 5.0,
        "timeout_source": "default",
        "deadline": 30.0,
        "deadline_source": "default: 4 x the timeout, at least 30",
        "tls": False,
        "tls_source": "default",
        "access_key": None,
        "access_key_source": "none",
    }
    assert cli("context", "rm", "prod").code == 0
    assert [c["name"] for c in cli("context", "ls", "-o", "json").json()] == ["dev"]


def test_duplicate_context_is_a_conflict_unless_forced(cli: RunCli) -> None:
    assert cli("context", "add", "dev", "-n", "127.0.0.1:9876").code == 0
    again = cli("context", "add", "dev", "-n", "127.0.0.1:9877")
    assert again.code == ConflictError.exit_code
    assert cli("context", "add", "dev", "-n", "127.0.0.1:9877", "--force").code == 0
    assert cli("context", "ls", "-o", "json").json()[0]["namesrv"] == "127.0.0.1:9877"


def test_up_s_context_line_pasted_again_after_another_up_follows_the_new_port(
    cli: RunCli, capsys: pytest.CaptureFixture[str]
) -> None:
    """`up --namesrv-port 0` binds another port each run: its line, pasted after the second run, failed
    (exit 4, the context `local` already there) and left the context at the first run's port."""
    import shlex

    from mqctl.cli.up import _context_hint

    for port in (40001, 40002):
        _context_hint(Path("/unused"), f"127.0.0.1:{port}")
        line = capsys.readouterr().err.strip()
        assert cli(*shlex.split(line.split("connect with: mqctl ", 1)[1])).code == 0
    assert cli("context", "current", "-o", "json").json()["namesrv"] == "127.0.0.1:40002"


def test_bad_address_is_a_usage_error(cli: RunCli) -> None:
    result = cli("context", "add", "dev", "-n", "localhost")
    assert result.code == UsageError.exit_code
    assert "HOST:PORT" in result.stderr


def test_precedence_mqctl_env_then_context_then_namesrv_addr(cli: RunCli) -> None:
    assert cli("context", "current", "-o", "json").json()["source"] == "default"
    via_rocketmq_var = cli("context", "current", "-o", "json", env={"NAMESRV_ADDR": "127.0.0.1:2222"}).json()
    assert via_rocketmq_var["namesrv"] == "127.0.0.1:2222" and via_rocketmq_var["source"] == "$NAMESRV_ADDR"
    cli("context", "add", "dev", "-n", "127.0.0.1:1111")
    assert cli("context", "current", "-o", "json").json()["namesrv"] == "127.0.0.1:1111"
    chosen = cli("context", "current", "-o", "json", env={"NAMESRV_ADDR": "127.0.0.1:2222"})
    assert chosen.json()["namesrv"] == "127.0.0.1:1111"  # the context chosen in mqctl wins
    assert chosen.json()["source"] == "context dev"
    assert chosen.stderr.count("outranks $NAMESRV_ADDR") == 1  # never silently
    both = cli(
        "context",
        "current",
        "-o",
        "json",
        env={"NAMESRV_ADDR": "127.0.0.1:2222", "MQCTL_NAMESRV": "127.0.0.1:3333"},
    ).json()
    assert both["namesrv"] == "127.0.0.1:3333"
    # -n beside --context: -n replaces the NameServers only; the context's TLS, credentials and timeout stay
    cli("context", "set", "dev", "--timeout", "0.5")
    flagged = cli("-v", "topic", "list", "-n", "127.0.0.1:1", "--context", "dev")
    assert flagged.code == 5, flagged.stderr
    assert (
        "NameServer 127.0.0.1:1 (from --namesrv; TLS, credentials and timeout of context dev)"
        in flagged.stderr
    )
    timed = cli("--print-config", "-n", "127.0.0.1:1", "-o", "json").json()
    assert (timed["source"], timed["timeout"], timed["timeout_source"]) == ("--namesrv", 0.5, "context dev")


def test_an_empty_namesrv_or_context_flag_never_falls_back_to_the_current_context(cli: RunCli) -> None:
    """``topic delete -n "$NS"`` with NS unset went to the current context's cluster: given empty, -n and
    --context are usage errors, before any connection."""
    cli("context", "add", "prod", "-n", "127.0.0.1:1", "--use")
    for args in (
        ["-v", "topic", "list", "-n", ""],
        ["-v", "topic", "list", "--context", ""],
        ["-v", "--context", " ", "topic", "list"],
    ):
        result = cli(*args)
        assert result.code == UsageError.exit_code, (args, result.stderr)
        assert "empty" in result.stderr and "127.0.0.1:1" not in result.stderr, result.stderr


def test_verbose_says_where_an_online_command_connects(cli: RunCli) -> None:
    result = cli("-v", "topic", "list", "-n", "127.0.0.1:1")
    assert result.code == 5
    assert "NameServer 127.0.0.1:1 (from --namesrv)" in result.stderr
    assert "NameServer" not in cli("topic", "list", "-n", "127.0.0.1:1").stderr.split("error:")[0]


def test_output_env_default(cli: RunCli) -> None:
    cli("context", "add", "dev", "-n", "127.0.0.1:1111")
    listed = cli("context", "ls", env={"MQCTL_OUTPUT": "csv"}).stdout
    assert listed == "name,namesrv,spark_remote,timeout,tls,current\ndev,127.0.0.1:1111,,,no,yes\n"


def test_rm_if_exists(cli: RunCli) -> None:
    assert cli("context", "rm", "nope").code == 3
    soft = cli("context", "rm", "nope", "--if-exists", "-o", "json")
    assert soft.code == 0 and soft.json() == {"removed": None, "namesrv": None}


def test_a_context_names_its_spark_connect_server(cli: RunCli) -> None:
    added = cli(
        "context",
        "add",
        "lake",
        "-n",
        "127.0.0.1:9876",
        "--spark-remote",
        "sc://127.0.0.1:15002",
        "-o",
        "json",
    )
    assert added.code == 0, added.stderr
    assert added.json()["spark_remote"] == "sc://127.0.0.1:15002"
    [row] = cli("context", "ls", "-o", "json").json()
    assert row["spark_remote"] == "sc://127.0.0.1:15002"
    bad = cli("context", "add", "odd", "-n", "127.0.0.1:9876", "--spark-remote", "127.0.0.1:15002")
    assert bad.code == UsageError.exit_code and "sc://HOST:PORT" in bad.stderr


def test_a_context_name_never_places_its_secret_outside_the_secrets_dir(
    cli: RunCli, cli_env: dict[str, str]
) -> None:
    """The name is the user's text, not a path: '../../x' must not write x.key two levels up."""
    from pathlib import Path

    config = Path(cli_env["MQCTL_CONFIG_DIR"])
    added = cli(
        "context", "add", "../../evil", "-n", "127.0.0.1:9876", "--access-key", "AK", "--secret-key", "SK"
    )
    assert added.code == 0, added.stderr
    [stored] = [p for p in config.parent.rglob("*.key")]
    assert stored.parent == config / "secrets", stored
    assert stored.read_text().strip() == "SK"
    assert cli("context", "ls", "-o", "json").json()[0]["name"] == "../../evil"


def test_a_blank_context_name_is_refused(cli: RunCli) -> None:
    for name in ("", "  "):
        result = cli("context", "add", name, "-n", "127.0.0.1:9876")
        assert result.code == UsageError.exit_code and "blank" in result.stderr, result


def test_print_config_names_the_account_that_signs_and_never_its_secret(cli: RunCli) -> None:
    """Refused by ACL, an operator could not ask mqctl which access key it had signed with (flags, env
    or the context): --print-config and context current said where it connects and not as whom."""
    assert (
        cli(
            "context", "add", "acl", "-n", "127.0.0.1:9876", "--access-key", "ctx-ak", "--secret-key", "SK1"
        ).code
        == 0
    )
    by_context = cli("--print-config", "-o", "json").json()
    assert (by_context["access_key"], by_context["access_key_source"]) == ("ctx-ak", "context acl")
    flagged = cli("--access-key", "flag-ak", "--secret-key", "SK2", "context", "current", "-o", "json")
    assert (flagged.json()["access_key"], flagged.json()["access_key_source"]) == (
        "flag-ak",
        "--access-key/--secret-key",
    )
    assert "SK1" not in by_context.values() and "SK2" not in flagged.stdout


def test_set_turns_tls_on_and_off_and_keeps_what_it_does_not_name(cli: RunCli, tmp_path: Path) -> None:
    """A cluster that turned TLS on took 'context add --force' again, with every setting retyped: the
    credentials, the timeout; 'context set' changes the TLS alone now."""
    assert cli("tls", "init", str(tmp_path / "pki")).code == 0
    secret = tmp_path / "s.key"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    cli("context", "add", "prod", "-n", "127.0.0.1:1", "--access-key", "ak", "--secret-key-file", str(secret))
    cli("context", "set", "prod", "--timeout", "7")
    on = cli("context", "set", "prod", "--ca", str(tmp_path / "pki" / "ca.pem"), "-o", "json")
    assert on.code == 0 and on.json()["tls"] == {"ca": str(tmp_path / "pki" / "ca.pem")}, on.stderr
    mutual = cli(
        "context",
        "set",
        "prod",
        "--cert",
        str(tmp_path / "pki" / "client.pem"),
        "--key",
        str(tmp_path / "pki" / "client.key"),
    )
    assert mutual.code == 0, mutual.stderr
    shown = cli("--print-config", "--context", "prod", "-o", "json").json()
    assert shown["tls"]["ca"].endswith("ca.pem") and shown["tls"]["cert"].endswith("client.pem"), shown
    assert (shown["access_key"], shown["timeout"]) == ("ak", 7.0)
    off = cli("context", "set", "prod", "--no-tls", "-o", "json")
    assert off.code == 0 and off.json()["tls"] is False
    assert cli("--print-config", "--context", "prod", "-o", "json").json()["tls"] is False
    both = cli("context", "set", "prod", "--no-tls", "--ca", str(tmp_path / "pki" / "ca.pem"))
    assert both.code == UsageError.exit_code


@pytest.mark.parametrize(
    ("namesrv", "connects"),
    [
        ("localhost:9876", "127.0.0.1:9876"),  # the loopback name: connected as the context writes it
        ("LOCALHOST:9876", "127.0.0.1:9876"),
        ("[::1]:9876", "::1:9876"),
        ("[0:0::1]:9876;localhost:9876", "::1:9876;127.0.0.1:9876"),
        ("[::ffff:127.0.0.1]:09876", "127.0.0.1:9876"),
        ("NS1.Example.com:9876", "ns1.example.com:9876"),
        ("ns1.example.com:9876, 127.0.0.1:9876 ;", "ns1.example.com:9876;127.0.0.1:9876"),
        ("127.0.0.1:9876;ns1.example.com:9876", "127.0.0.1:9876;ns1.example.com:9876"),
    ],
)
def test_the_context_s_own_namesrv_however_written_keeps_its_key(
    cli: RunCli, tmp_path: Path, namesrv: str, connects: str
) -> None:
    """``-n`` was compared as written: ``localhost`` for ``127.0.0.1``, ``[::1]`` for ``::1``, ``09876``,
    a host in capitals each withheld the context's key from its own NameServers."""
    _keyed_context(cli, tmp_path, "127.0.0.1:9876;ns1.example.com:9876;::1:9876")
    shown = cli("--print-config", "-n", namesrv, "-o", "json")
    assert shown.code == 0 and "warning" not in shown.stderr, shown.stderr
    assert (shown.json()["access_key"], shown.json()["namesrv"]) == ("ctx-ak", connects)


@pytest.mark.parametrize(
    "namesrv",
    [
        "127.0.0.1:9877",  # another port
        "127.0.0.1:9876;10.0.0.9:9876",  # one stranger in the list withholds it from all
        "127.1:9876",  # loopback to the resolver, a name here: names are not resolved to compare them
        "ns1.example.com.:9876",  # absolute: not the ns1.example.com a search domain may complete
        "ns1.example.co:9876",
        "[::2]:9876",
        "127.0.0.2:9876",  # loopback, but not what localhost names
    ],
)
def test_a_namesrv_the_context_does_not_name_gets_no_key(cli: RunCli, tmp_path: Path, namesrv: str) -> None:
    _keyed_context(cli, tmp_path, "localhost:9876;ns1.example.com:9876")
    shown = cli("--print-config", "-n", namesrv, "-o", "json")
    assert shown.code == 0 and "not signing with context acl's access key" in shown.stderr, shown.stderr
    assert shown.json()["access_key"] is None and shown.json()["namesrv"] == namesrv


def test_a_port_not_in_ascii_digits_is_a_usage_error(cli: RunCli) -> None:
    for port in ("²", "٩٨٧٦"):  # str.isdigit takes both; int refused the first (exit 1, a ValueError)
        refused = cli("--print-config", "-n", f"127.0.0.1:{port}")
        assert refused.code == UsageError.exit_code and "bad NameServer address" in refused.stderr


def _keyed_context(cli: RunCli, tmp_path: Path, namesrv: str) -> None:
    secret = tmp_path / "ctx.secret"
    secret.write_text("ctx-secret\n")
    secret.chmod(0o600)
    added = cli(
        "context", "add", "acl", "-n", namesrv, "--access-key", "ctx-ak", "--secret-key-file", str(secret)
    )
    assert added.code == 0, added.stderr


def test_print_config_says_no_deadline_as_none(cli: RunCli) -> None:
    """``--deadline 0`` (no deadline) showed an empty deadline in --print-config's table; JSON keeps null."""
    table = cli("--deadline", "0", "--print-config", "-n", "127.0.0.1:1")
    assert table.code == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith("deadline ")]
    assert row.split("│")[1].strip() == "none", table.stdout
    shown = cli("--deadline", "0", "--print-config", "-n", "127.0.0.1:1", "-o", "json").json()
    assert (shown["deadline"], shown["deadline_source"]) == (None, "--deadline")


def test_context_add_help_says_the_first_context_becomes_current(cli: RunCli) -> None:
    """The first context added becomes current without --use, which the help said "Make it the current
    context" alone."""
    shown = cli("context", "add", "--help", env={"COLUMNS": "200"})
    assert "the first context added becomes current without it" in " ".join(shown.stdout.split()), shown
    assert cli("context", "add", "first", "-n", "127.0.0.1:1").code == 0
    assert cli("context", "current", "-o", "json").json()["source"] == "context first"
