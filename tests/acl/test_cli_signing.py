"""mqctl signs every request when it has credentials (flags, env, context) and exits 9 when refused."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqctl.errors import AuthError, NotFoundError, UsageError
from tests.daemons import LocalCluster, local_cluster
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, USER_AK, USER_SK, write_acl
from tests.support.broker import start_broker
from tests.support.cli import CliResult, RunCli

ADMIN_ENV = {"MQCTL_ACCESS_KEY": ADMIN_AK, "MQCTL_SECRET_KEY": ADMIN_SK}


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("acl-cli")
    write_acl(root / "home")
    with local_cluster(root, acl_enable=True, rocketmq_home=str(root / "home")) as cluster:
        yield cluster


@pytest.fixture
def mq(cli: RunCli, daemons: LocalCluster) -> RunCli:
    def run(*args: str, **kwargs: object) -> object:
        env = {"NAMESRV_ADDR": daemons.namesrv_addr, **kwargs.pop("env", {})}  # type: ignore[dict-item]
        return cli(*args, env=env, **kwargs)

    return run  # type: ignore[return-value]


def test_env_credentials_create_topics_and_none_exit_9(mq: RunCli, daemons: LocalCluster) -> None:
    denied = mq("topic", "create", "-t", "AclCliTopic")
    assert denied.code == AuthError.exit_code, denied.stderr
    assert "no AccessKey" in denied.stderr and daemons.broker.topics.get("AclCliTopic") is None
    user = mq(
        "topic", "create", "-t", "AclCliTopic", env={"MQCTL_ACCESS_KEY": USER_AK, "MQCTL_SECRET_KEY": USER_SK}
    )
    assert user.code == AuthError.exit_code and "is not admin" in user.stderr, user.stderr
    wrong = mq("topic", "create", "-t", "AclCliTopic", env={**ADMIN_ENV, "MQCTL_SECRET_KEY": "wrong-secret"})
    assert wrong.code == AuthError.exit_code and "signature" in wrong.stderr, wrong.stderr
    created = mq("topic", "create", "-t", "AclCliTopic", env=ADMIN_ENV)
    assert created.code == 0, created.stderr
    assert daemons.broker.topics.get("AclCliTopic") is not None


def test_flags_and_context_sign_too(mq: RunCli, daemons: LocalCluster, cli_env: dict[str, str]) -> None:
    flagged = mq("--access-key", ADMIN_AK, "--secret-key", ADMIN_SK, "topic", "create", "-t", "AclFlagTopic")
    assert flagged.code == 0, flagged.stderr
    half = mq("--access-key", ADMIN_AK, "topic", "create", "-t", "AclFlagTopic2")
    assert half.code == 2, half.stderr

    added = mq(
        "context",
        "add",
        "secure",
        "--namesrv",
        daemons.namesrv_addr,
        "--access-key",
        ADMIN_AK,
        "--secret-key",
        ADMIN_SK,
        "-o",
        "json",
    )
    assert added.code == 0, added.stderr
    secret_file = Path(added.json()["secret_key_file"])
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600 and secret_file.read_text().strip() == ADMIN_SK
    contexts = (Path(cli_env["MQCTL_CONFIG_DIR"]) / "contexts.json").read_text()
    assert ADMIN_SK not in contexts
    via_context = mq("topic", "create", "-t", "AclCtxTopic", "--context", "secure", env={"NAMESRV_ADDR": ""})
    assert via_context.code == 0, via_context.stderr

    loose = secret_file.parent / "loose.key"
    loose.write_text(ADMIN_SK)
    loose.chmod(0o644)
    refused = mq(
        "context",
        "add",
        "loose",
        "--namesrv",
        daemons.namesrv_addr,
        "--access-key",
        ADMIN_AK,
        "--secret-key-file",
        str(loose),
    )
    assert refused.code == 2 and "chmod 600" in refused.stderr


def test_the_secret_key_from_a_file_by_flag_or_env_before_the_context(
    mq: RunCli, daemons: LocalCluster, tmp_path: Path
) -> None:
    """``--secret-key`` shows the secret to ``ps`` and the shell's history: ``--secret-key-file`` and
    ``$MQCTL_SECRET_KEY_FILE`` read it from a file of mode 600, in the flags' and the variables' places of
    the precedence (flags, then env, then context), each source a whole pair."""

    def secret_file(name: str, secret: str, mode: int = 0o600) -> str:
        path = tmp_path / name
        path.write_text(secret + "\n")
        path.chmod(mode)
        return str(path)

    admin, user, wrong = (
        secret_file("admin", ADMIN_SK),
        secret_file("user", USER_SK),
        secret_file("wrong", "x" * 9),
    )

    def create(topic: str, *flags: str, env: dict[str, str] | None = None) -> CliResult:
        return mq(*flags, "topic", "create", "-t", topic, env=env or {})

    flagged = create("AclFileFlag", "--access-key", ADMIN_AK, "--secret-key-file", admin)
    assert flagged.code == 0, flagged.stderr
    assert daemons.broker.topics.get("AclFileFlag") is not None
    signed_wrong = create("AclFileWrong", "--access-key", ADMIN_AK, "--secret-key-file", wrong)
    assert signed_wrong.code == AuthError.exit_code, signed_wrong.stderr
    assert "signature" in signed_wrong.stderr  # the file's secret signed it

    by_env = create("AclFileEnv", env={"MQCTL_ACCESS_KEY": ADMIN_AK, "MQCTL_SECRET_KEY_FILE": admin})
    assert by_env.code == 0, by_env.stderr
    # the flags' pair beats the variables', a user's file there; the variables' beat a context's
    over_env = create(
        "AclFileOver",
        "--access-key",
        ADMIN_AK,
        "--secret-key-file",
        admin,
        env={"MQCTL_ACCESS_KEY": USER_AK, "MQCTL_SECRET_KEY_FILE": user},
    )
    assert over_env.code == 0, over_env.stderr
    added = mq(
        "context",
        "add",
        "adminctx",
        "-n",
        daemons.namesrv_addr,
        "--access-key",
        ADMIN_AK,
        "--secret-key-file",
        admin,
    )
    assert added.code == 0, added.stderr
    under_env = create(
        "AclFileUnder",
        "--context",
        "adminctx",
        env={"NAMESRV_ADDR": "", "MQCTL_ACCESS_KEY": USER_AK, "MQCTL_SECRET_KEY_FILE": user},
    )
    assert under_env.code == AuthError.exit_code and "is not admin" in under_env.stderr

    both = create(
        "AclFileBoth", "--access-key", ADMIN_AK, "--secret-key", ADMIN_SK, "--secret-key-file", admin
    )
    assert both.code == UsageError.exit_code, both.stderr
    assert "give --secret-key or --secret-key-file, not both" in both.stderr
    both_env = create(
        "AclFileBoth",
        env={"MQCTL_ACCESS_KEY": ADMIN_AK, "MQCTL_SECRET_KEY": ADMIN_SK, "MQCTL_SECRET_KEY_FILE": admin},
    )
    assert both_env.code == UsageError.exit_code and "$MQCTL_SECRET_KEY_FILE" in both_env.stderr
    loose = create(
        "AclFileLoose", "--access-key", ADMIN_AK, "--secret-key-file", secret_file("loose", ADMIN_SK, 0o644)
    )
    assert loose.code == UsageError.exit_code and "chmod 600" in loose.stderr
    assert loose.stderr.count("\n") == 1 and ADMIN_SK not in loose.stderr
    missing = create(
        "AclFileMissing", env={"MQCTL_ACCESS_KEY": ADMIN_AK, "MQCTL_SECRET_KEY_FILE": admin + ".gone"}
    )
    assert missing.code == NotFoundError.exit_code and f"{admin}.gone: no such file" in missing.stderr
    for name in ("AclFileWrong", "AclFileBoth", "AclFileLoose", "AclFileMissing"):
        assert daemons.broker.topics.get(name) is None


def test_config_set_needs_force_for_a_wiping_retention(mq: RunCli, daemons: LocalCluster) -> None:
    addr = daemons.broker_addr
    wipe = mq("broker", "config", "set", "fileReservedTime=0", "-b", addr, env=ADMIN_ENV)
    # a safety rule, not a missing permission: exit 2 (it was 9, the broker's NO_PERMISSION), nothing sent
    assert wipe.code == UsageError.exit_code and "--force" in wipe.stderr, wipe.stderr
    moved = mq("broker", "config", "set", "storePathRootDir=/tmp/x", "-b", addr, env=ADMIN_ENV)
    assert moved.code != 0 and daemons.broker.config.store_path_root_dir != "/tmp/x"
    forced = mq("broker", "config", "set", "fileReservedTime=0", "--force", "-b", addr, env=ADMIN_ENV)
    assert forced.code == 0, forced.stderr
    assert daemons.broker.config.file_reserved_time == 0
    restore = mq("broker", "config", "set", "fileReservedTime=72", "-b", addr, env=ADMIN_ENV)
    assert restore.code == 0


def test_acl_commands_round_trip_through_codes_50_to_54(
    mq: RunCli, daemons: LocalCluster, tmp_path: Path
) -> None:
    addr = daemons.broker_addr
    new_env = {"MQCTL_ACCESS_KEY": "newuser1", "MQCTL_SECRET_KEY": "newsecret1"}
    no_secret = mq("acl", "create", "-a", "newuser1", env=ADMIN_ENV)
    assert no_secret.code == 2 and "--secret-key" in no_secret.stderr
    # keys of 6 characters or fewer (README's example read '-a app'): refused here, not by the broker's
    # remark with exit 8
    short = mq("acl", "create", "-a", "app", "-s", "newsecret1", env=ADMIN_ENV)
    assert short.code == 2 and "--access-key 'app' is too short" in short.stderr, short.stderr
    short_secret = mq("acl", "create", "-a", "newuser1", "-s", "secret", env=ADMIN_ENV)
    assert short_secret.code == 2 and "the secret key is too short" in short_secret.stderr
    (tmp_path / "secret").write_text("newsecret1\n")
    created = mq(
        "acl",
        "create",
        "-a",
        "newuser1",
        "--secret-key-file",
        str(tmp_path / "secret"),
        "--topic-perm",
        "AclCliTopic=PUB",
        "--default-group-perm",
        "SUB",
        "-o",
        "json",
        env=ADMIN_ENV,
    )
    assert created.code == 0, created.stderr
    assert created.json() == [{"broker": addr, "access_key": "newuser1", "action": "created"}]
    again = mq("acl", "create", "-a", "newuser1", "-s", "newsecret1", env=ADMIN_ENV)
    assert again.code == 4, again.stderr
    assert mq("acl", "ls", "-o", "json").code == AuthError.exit_code  # 54 answers secrets: admin only

    listed = {r["access_key"]: r for r in mq("acl", "ls", "-o", "json", env=ADMIN_ENV).json()}
    assert set(listed) == {USER_AK, ADMIN_AK, "newuser1"}
    assert listed["newuser1"]["secret_key"] == "******" and listed["newuser1"]["topic_perms"] == [
        "AclCliTopic=PUB"
    ]
    shown = mq("acl", "show", "newuser1", "--show-secret", "-o", "json", env=ADMIN_ENV).json()
    # code 54 never carries a secret: our broker answers the mask even to an admin (reading needs the file)
    assert shown[0]["secret_key"] == "******" and shown[0]["admin"] is False

    not_admin = mq("topic", "create", "-t", "ByNewUser", env=new_env)
    assert not_admin.code == AuthError.exit_code and "newuser1 is not admin" in not_admin.stderr
    promoted = mq("acl", "update", "-a", "newuser1", "--admin", env=ADMIN_ENV)
    assert promoted.code == 0, promoted.stderr
    assert mq("topic", "create", "-t", "ByNewUser", env=new_env).code == 0  # same secret, now admin
    kept = mq("acl", "show", "newuser1", "-o", "json", env=ADMIN_ENV).json()[0]
    assert kept["topic_perms"] == ["AclCliTopic=PUB"] and kept["admin"] is True

    white = mq("acl", "whitelist", "set", "10.9.9.*", "192.168.1.{1,2}", env=ADMIN_ENV)
    assert white.code == 0, white.stderr
    summary = mq("acl", "show", "-o", "json", env=ADMIN_ENV).json()
    assert summary[0]["global_white_addrs"] == ["10.9.9.*", "192.168.1.{1,2}"]
    assert summary[0]["version"]["counter"] >= 3

    unconfirmed = mq("acl", "delete", "-a", "newuser1", env=ADMIN_ENV)
    assert unconfirmed.code == 2 and "--yes" in unconfirmed.stderr
    deleted = mq("acl", "delete", "-a", "newuser1", "--yes", env=ADMIN_ENV)
    assert deleted.code == 0, deleted.stderr
    assert "newuser1" not in {r["access_key"] for r in mq("acl", "ls", "-o", "json", env=ADMIN_ENV).json()}
    gone = mq("topic", "create", "-t", "ByNewUser2", env=new_env)
    assert gone.code == AuthError.exit_code and "no account for accessKey=newuser1" in gone.stderr
    text = (Path(daemons.broker.config.rocketmq_home) / "conf" / "plain_acl.yml").read_text()
    assert "newuser1" not in text and "10.9.9.*" in text and "dataVersion" in text


def test_acl_show_takes_a_as_the_other_acl_commands_and_shows_its_version_as_a_time(mq: RunCli) -> None:
    """``acl show`` took its account only as an argument where create/update/delete take ``-a``, and its
    table showed the ACL version's time as raw epoch ms (``timestamp=1796188493680``)."""
    by_flag = mq("acl", "show", "-a", ADMIN_AK, "-o", "json", env=ADMIN_ENV)
    assert by_flag.code == 0, by_flag.stderr
    assert by_flag.json() == mq("acl", "show", ADMIN_AK, "-o", "json", env=ADMIN_ENV).json()
    both = mq("acl", "show", ADMIN_AK, "-a", USER_AK, env=ADMIN_ENV)
    assert both.code == UsageError.exit_code and both.stderr.count("\n") == 1, both
    assert mq("acl", "create", "-a", "showuser1", "-s", "showsecret1", env=ADMIN_ENV).code == 0  # a version
    assert mq("acl", "delete", "-a", "showuser1", "--yes", env=ADMIN_ENV).code == 0
    raw = mq("acl", "show", "-o", "json", env=ADMIN_ENV).json()[0]["version"]["timestamp"]
    table = mq("--utc", "acl", "show", env=ADMIN_ENV)
    assert table.code == 0, table.stderr
    assert isinstance(raw, int) and raw > 0
    assert str(raw) not in table.stdout and "Z" in table.stdout, table.stdout


def test_deleting_a_missing_account_is_not_found_unless_if_exists(mq: RunCli) -> None:
    """As every other delete: a missing account exits 3, and --if-exists makes that a success."""
    missing = mq("acl", "delete", "-a", "nobody9", "--yes", env=ADMIN_ENV)
    assert missing.code == NotFoundError.exit_code, missing.stderr
    assert "nobody9" in missing.stderr and "--if-exists" in missing.stderr
    soft = mq("acl", "delete", "-a", "nobody9", "--yes", "--if-exists", "-o", "json", env=ADMIN_ENV)
    assert soft.code == 0, soft.stderr
    assert [row["action"] for row in soft.json()] == ["missing"]


def test_bench_signs_each_send_with_its_own_client_id(mq: RunCli) -> None:
    """A signed bench send's signature covers its UNIQ_KEY: each send is signed with its own key, so every
    one is accepted and each message has a key of its own."""
    assert mq("topic", "create", "-t", "AclBench", env=ADMIN_ENV).code == 0
    sent = mq(
        "bench", "produce", "-t", "AclBench", "--threads", "2", "--count", "4", "-o", "json", env=ADMIN_ENV
    )
    assert sent.code == 0, sent.stderr
    assert (sent.json()["messages"], sent.json()["failures"]) == (4, 0)
    tail = mq("msg", "tail", "-t", "AclBench", "--from", "earliest", "--exit", "-o", "json", env=ADMIN_ENV)
    assert tail.code == 0, tail.stderr
    assert len({json.loads(line)["unique_key"] for line in tail.stdout.splitlines()}) == 4


def test_broker_status_over_the_wire_is_signed(mq: RunCli, daemons: LocalCluster) -> None:
    """``broker status -b`` asks as the other commands do: unsigned it is refused (exit 9), signed it
    answers."""
    addr = daemons.broker_addr
    unsigned = mq("broker", "status", "-b", addr)
    assert unsigned.code == AuthError.exit_code, unsigned.stderr
    signed = mq("broker", "status", "-b", addr, "-o", "json", env=ADMIN_ENV)
    assert signed.code == 0, signed.stderr
    assert signed.json()["broker_name"] == daemons.broker.config.broker_name


@pytest.mark.slow
def test_a_read_refused_on_the_tools_group_names_the_ways_round_it(
    cli: RunCli, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """An application's account has SUB on its own groups, not on TOOLS_CONSUMER, which mqctl reads as:
    the refusal named the group only, and tailing as the account's own group (-g) works."""
    home = tmp_path / "home"
    write_acl(
        home,
        PLAIN_ACL.replace("defaultGroupPerm: SUB", "defaultGroupPerm: DENY\n    groupPerms: [AppGroup=SUB]"),
    )
    with local_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home)) as daemons:
        admin = {"NAMESRV_ADDR": daemons.namesrv_addr, **ADMIN_ENV}
        user = {
            "NAMESRV_ADDR": daemons.namesrv_addr,
            "MQCTL_ACCESS_KEY": USER_AK,
            "MQCTL_SECRET_KEY": USER_SK,
        }
        assert cli("topic", "create", "-t", "TopicA", env=admin).code == 0
        assert cli("msg", "send", "-t", "TopicA", "hello", env=user).code == 0
        refused = cli("msg", "tail", "-t", "TopicA", "--from", "earliest", "--exit", env=user)
        assert refused.code == AuthError.exit_code, refused.stderr
        assert "-g GROUP" in refused.stderr and "TOOLS_CONSUMER=SUB" in refused.stderr, refused.stderr
        assert next(line for line in refused.stderr.splitlines() if "error" in line).startswith(
            "mqctl: error: "
        )
        as_group = cli("msg", "tail", "-t", "TopicA", "-g", "AppGroup", "--exit", "-o", "json", env=user)
        assert as_group.code == 0 and "hello" in as_group.stdout, as_group.stderr


@pytest.mark.slow
def test_acl_create_on_brokers_that_share_one_acl_file(cli: RunCli, tmp_path: Path) -> None:
    """Two brokers of one host read one plain_acl.yml (one $ROCKETMQ_HOME): the account created through
    the first was found on the second, and create exited 4 ("exists", use update) having written it."""
    home = tmp_path / "home"
    write_acl(home)
    with local_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home)) as daemons:
        second = daemons.loop.run(
            start_broker(
                tmp_path / "second",
                acl_enable=True,
                rocketmq_home=str(home),
                namesrv_addr=daemons.namesrv_addr,
                broker_name="broker-b",
            )
        )
        try:
            env = {"NAMESRV_ADDR": daemons.namesrv_addr, **ADMIN_ENV}
            created = cli("acl", "create", "-a", "shared3", "-s", "shared-secret-3", "-o", "json", env=env)
            assert created.code == 0, created.stderr
            assert sorted(row["action"] for row in created.json()) == ["created", "created"]
            again = cli("acl", "create", "-a", "shared3", "-s", "shared-secret-3", env=env)
            assert again.code == 4 and "exists" in again.stderr, again.stderr
        finally:
            daemons.loop.run(second.stop())
