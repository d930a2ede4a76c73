"""The shared config loader: properties file -> MQCTL_* env -> flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from daemon.config import (
    ConfigError,
    camel_case,
    load_config,
    parse_properties,
    snake_case,
    to_properties,
    update_properties,
)


@dataclass
class Sample:
    listen_port: int = 10911
    broker_ip1: str = field(default="", metadata={"key": "brokerIP1"})
    auto_create_topic_enable: bool = True
    namesrv_addr: str | None = None
    delete_when: list[int] = field(default_factory=lambda: [4])
    store_path_root_dir: Path = Path("/tmp/store")


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=10000\nbrokerIP1 = 10.1.2.3\nautoCreateTopicEnable=false\ndeleteWhen=04;05\n")
    loaded = load_config(
        Sample, conf, environ={"MQCTL_LISTEN_PORT": "20000"}, overrides={"namesrv_addr": None}
    )
    assert loaded == Sample(
        listen_port=20000, broker_ip1="10.1.2.3", auto_create_topic_enable=False, delete_when=[4, 5]
    )
    flagged = load_config(
        Sample, conf, environ={"MQCTL_LISTEN_PORT": "20000"}, overrides={"listen_port": 30000}
    )
    assert flagged.listen_port == 30000


def test_unknown_and_old_keys_are_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\n! also comment\nmapedFileSizeCommitLog=1024\nlistenPort: 1\n")
    assert load_config(Sample, conf, environ={}).listen_port == 1
    assert "mapedFileSizeCommitLog" in caplog.text


def test_a_misspelt_key_is_named_with_the_key_meant(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An unknown key is only a warning, as RocketMQ ignores it; one close to a key of ours names that
    key, so that a typo does not leave the setting at its default unnoticed."""
    conf = tmp_path / "broker.conf"
    conf.write_text("autoCreateTopicEnabled=false\nsomethingElse=1\n")
    assert load_config(Sample, conf, environ={}).auto_create_topic_enable is True
    assert "'autoCreateTopicEnabled' (did you mean autoCreateTopicEnable?)" in caplog.text
    assert "'somethingElse'\n" in caplog.text + "\n"


def test_a_bad_number_is_said_in_words(tmp_path: Path) -> None:
    """A value that is no number says so, not Python's int() message."""
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=4h\n")
    with pytest.raises(ConfigError) as caught:
        load_config(Sample, conf, environ={})
    assert str(caught.value).endswith("listenPort: '4h' is not a whole number"), caught.value


def test_bad_values_name_their_source(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=ten\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_config(Sample, conf, environ={})
    with pytest.raises(ConfigError, match="MQCTL_AUTO_CREATE_TOPIC_ENABLE"):
        load_config(Sample, environ={"MQCTL_AUTO_CREATE_TOPIC_ENABLE": "maybe"})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(Sample, tmp_path / "missing.conf", environ={})


def test_print_config_round_trips(tmp_path: Path) -> None:
    original = Sample(listen_port=1, broker_ip1="1.2.3.4", auto_create_topic_enable=False, namesrv_addr="a:1")
    text = to_properties(original)
    assert "brokerIP1=1.2.3.4\n" in text and "autoCreateTopicEnable=false\n" in text
    conf = tmp_path / "printed.conf"
    conf.write_text(text)
    assert load_config(Sample, conf, environ={}) == original


def test_properties_continuations() -> None:
    assert parse_properties("a = 1 \\\n  2\nb:3\n") == {"a": "1 2", "b": "3"}


@pytest.mark.slow
@given(st.from_regex(r"[a-z]{2,}(_[a-z]{2,}[0-9]?)*", fullmatch=True))
def test_snake_camel_round_trip(name: str) -> None:
    assert snake_case(camel_case(name)) == name


def test_update_properties_keeps_comments_and_order_and_appends_new_keys() -> None:
    text = "# broker\nbrokerName = broker-a\nfileReservedTime=48\nlongKey=a\\\n  b\n! note\nfileReservedTime: 72\n"
    updated = update_properties(text, {"fileReservedTime": "24", "longKey": "c", "newKey": "x"})
    assert updated == "# broker\nbrokerName = broker-a\nfileReservedTime=24\nlongKey=c\n! note\nnewKey=x\n"
    assert parse_properties(updated) == {
        "brokerName": "broker-a",
        "fileReservedTime": "24",
        "longKey": "c",
        "newKey": "x",
    }
    assert update_properties("", {"a": "1"}) == "a=1\n"


def test_properties_unicode_escape_and_escaped_separators_in_keys() -> None:
    text = "brokerName=caf\\u00e9\nweird\\=key=1\nother\\:key : 2\nspaced\\ key 3\n"
    expected = {"brokerName": "café", "weird=key": "1", "other:key": "2", "spaced key": "3"}
    assert parse_properties(text) == expected


def test_properties_continue_only_after_an_odd_number_of_backslashes() -> None:
    odd = "a=x\\\\\\\n  y\nb=1\n"  # a=x\\\ then y: the third backslash continues
    even = "a=x\\\\\n  y\nb=1\n"  # a=x\\ : an escaped backslash, y is a key of its own
    assert parse_properties(odd) == {"a": "x\\y", "b": "1"}
    assert parse_properties(even) == {"a": "x\\", "y": "", "b": "1"}


def test_update_properties_escapes_what_it_writes_and_keeps_other_lines_byte_identical() -> None:
    text = "# caf\\u00e9 comment\r\nodd=a\\\\\\\n   b\nkeep\\=me :  v \\u00e9\n"
    values = {"storePathRootDir": "C:\\store\\é", "brokerName": " lead #1\nx", "odd": "new"}
    updated = update_properties(text, values)
    assert updated.startswith("# caf\\u00e9 comment\r\nodd=new\nkeep\\=me :  v \\u00e9\n")
    assert parse_properties(updated) == {"keep=me": "v é", **values}
    assert updated.isascii()  # Java reads broker.conf as ISO-8859-1: non-ASCII travels as \uXXXX


def test_to_properties_round_trips_values_that_need_escapes(tmp_path: Path) -> None:
    original = Sample(broker_ip1=" é\\", namesrv_addr="127.0.0.1:9876;127.0.0.2:9876")
    text = to_properties(original)
    assert "namesrvAddr=127.0.0.1:9876;127.0.0.2:9876\n" in text  # as RocketMQ prints it
    conf = tmp_path / "printed.conf"
    conf.write_text(text)
    assert load_config(Sample, conf, environ={}) == original


def test_malformed_unicode_escape_is_a_config_error(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("brokerIP1=\\u12\n")
    with pytest.raises(ConfigError, match=r"bad\.conf"):
        load_config(Sample, conf, environ={})


def test_unescaped_trailing_blanks_are_dropped_escaped_ones_kept_and_written_escaped() -> None:
    text = "brokerName=broker-a \t\nmarker=a\\  \nempty=   \n"
    assert parse_properties(text) == {"brokerName": "broker-a", "marker": "a ", "empty": ""}
    assert parse_properties(update_properties("", {"a": "x  ", "b": " "})) == {"a": "x  ", "b": " "}


def test_inner_credentials_are_checked_at_start_and_masked() -> None:
    """A broker signs its own requests with innerClientAuthenticationCredentials (RocketMQ 5.x's JSON):
    a malformed value fails the start rather than every request; over the wire it shows masked."""
    from daemon.broker.config import BrokerConfig
    from daemon.config import ConfigError, to_properties

    for bad in ('{"accessKey": "ak"}', "ak:sk", '{"accessKey": "", "secretKey": "sk"}', "[1]"):
        with pytest.raises(ConfigError, match="innerClientAuthenticationCredentials"):
            BrokerConfig(inner_client_authentication_credentials=bad)
    config = BrokerConfig(
        inner_client_authentication_credentials='{"accessKey": "ak", "secretKey": "s3cret"}'
    )
    assert config.inner_credentials() == ("ak", "s3cret") and BrokerConfig().inner_credentials() is None
    shown = to_properties(config, mask_secrets=True)
    assert "innerClientAuthenticationCredentials=" in shown and "s3cret" not in shown
    assert "s3cret" not in repr(config)


def test_a_misspelt_broker_key_names_each_key_meant_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key both ours and among RocketMQ's known keys was offered twice: '(did you mean brokerName or
    brokerName?)'."""
    from daemon.broker.config import BrokerConfig

    conf = tmp_path / "broker.conf"
    conf.write_text("brokerNam=broker-a\n")
    load_config(BrokerConfig, conf, environ={})
    assert "(did you mean brokerName?)" in caplog.text, caplog.text
