"""The one set of value coercions: group values, loose numbers and versions, config text, YAML."""

from __future__ import annotations

from ruamel.yaml import YAML

from rltriage.base.values import (
    CONFIG_WORDS,
    RENDERED_WORDS,
    coerce_config,
    coerce_scalar,
    convert,
    human_size,
    number,
    parse_duration,
    parse_size,
    plain,
    version_key,
)
from rltriage.base.vocabulary import ValueType


def test_sizes_and_durations() -> None:
    assert parse_size("2.32 GiB") == int(2.32 * 1024**3)
    assert parse_size("1,024 MB") == 1024 * 1000**2
    assert parse_size("lots") is None
    assert parse_duration("600000ms") == 600.0
    assert parse_duration("1 days, 2:03:04.5") == 86400 + 2 * 3600 + 3 * 60 + 4.5
    assert parse_duration("2 hours") == 7200
    assert human_size(3 * 1024**3) == "3.00 GiB" and human_size(12) == "12 B"


def test_convert_keeps_text_that_does_not_parse() -> None:
    assert convert("1,234", ValueType.int) == 1234
    assert convert("12 parsecs", ValueType.size) == "12 parsecs"
    assert convert(" 2.4.1 ", ValueType.version) == "2.4.1"
    assert convert(None, ValueType.int) is None


def test_loose_numbers_and_versions() -> None:
    assert number("1,000") == 1000.0 and number(True) is None and number("x") is None
    assert version_key("5.4.0-150-generic") == (5, 4, 0, 0)
    assert version_key("v1.2.3.4.5") == (1, 2, 3, 4, 5)
    assert version_key("2.1") == (2, 1, 0, 0) and version_key("none") == ()


def test_rendered_text_uses_python_words() -> None:
    assert coerce_scalar("None") is None and coerce_scalar("") is None
    assert coerce_scalar("True") is True and coerce_scalar("false") is False
    assert coerce_scalar("null") == "null" and coerce_scalar("TRUE") == "TRUE"
    assert coerce_scalar("7") == 7 and coerce_scalar("0.5") == 0.5
    assert set(RENDERED_WORDS) != set(CONFIG_WORDS)


def test_config_text_uses_yaml_and_shell_words() -> None:
    assert coerce_config(" 'null' ") is None and coerce_config("~") is None and coerce_config("None") is None
    assert coerce_config("TRUE") is True and coerce_config("False") is False
    assert coerce_config("[a, 'b']") == "a, b"
    assert coerce_config('"8"') == 8 and coerce_config("") == ""
    assert coerce_config(3) == 3


def test_plain_turns_parsed_yaml_into_python() -> None:
    tree = YAML(typ="rt").load("a: 1\nb: [x, 2.5]\nc: {d: true}\nwhen: 2024-01-02\n")
    value = plain(tree)
    assert value["a"] == 1 and type(value["a"]) is int
    assert value["b"] == ["x", 2.5] and type(value["b"]) is list
    assert value["c"] == {"d": True}
    assert not isinstance(value["when"], str)
    assert plain(tree, text_fallback=True)["when"] == "2024-01-02"
