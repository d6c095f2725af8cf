"""`.github/stagebot.yml`: optional, defaulted, validated at load with file:line messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagebot.bot.config import BotConfig, ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stagebot.yml"
    path.write_text(text)
    return path


def test_missing_default_file_gives_the_defaults(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config()
    assert config == BotConfig()
    assert (config.approval_label, config.status_context, config.workflow) == (
        "ci-approved",
        "stagebot",
        "bot.yml",
    )
    assert config.bot_login == "github-actions[bot]" and config.allowlist == ()


def test_the_shipped_file_loads() -> None:
    config = load_config(REPO / ".github" / "stagebot.yml")
    assert config.status_context and config.approval_label


def test_values_and_allowlist_by_user_id(tmp_path) -> None:
    text = (
        "allowlist: [{login: Alice, id: 11}, 22]\napprovers: [{id: 33}]\n"
        "approval_label: ok\nstatus_context: ci/x\nrate_limit: 3\n"
    )
    config = load_config(write(tmp_path, text))
    assert config.allowlisted(11) and config.allowlisted(22)
    assert not config.allowlisted(33) and not config.allowlisted(None)
    assert config.approvers == (33,) and config.rate_limit == 3
    assert (config.approval_label, config.status_context) == ("ok", "ci/x")


def test_empty_file_gives_the_defaults(tmp_path) -> None:
    assert load_config(write(tmp_path, "# nothing\n")).status_context == "stagebot"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("allowlist: [1]\napprovl_label: x\n", ":2: unknown key 'approvl_label' (valid: "),
        ("allowlist: alice\n", ":1: allowlist must be a list such as [{login: alice, id: "),
        ("allowlist:\n  - 5\n  - alice\n", ":3: allowlist item 'alice' is not a user id; write"),
        ("approvers: [{login: a, id: x}]\n", ":1: approvers item 'this item' is not a user id"),
        ("rate_limit: 0\n", ":1: rate_limit must be a positive whole number"),
        ("status_context: ''\n", ":1: status_context must be a non-empty string"),
        ("approval_label: [x]\n", ":1: approval_label must be a non-empty string"),
        ("approval_label: 12\n", ":1: approval_label must be a non-empty string"),
        ("workflow: ../evil.yml\n", ":1: workflow must be a file name in .github/workflows"),
        ("bot_login: 'two words'\n", ":1: bot_login 'two words' is not a GitHub login"),
        ("status_context: a\nstatus_context: b\n", ":2: 'status_context' is given twice"),
        ("- a\n- b\n", ":1: expected a mapping"),
        ("allowlist: [a\n", "not valid YAML"),
    ],
)
def test_invalid_settings_name_file_and_line(tmp_path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_an_explicit_missing_file_is_an_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yml")


def test_a_settings_file_that_cannot_be_read_is_a_config_error(tmp_path) -> None:
    latin1 = tmp_path / "stagebot.yml"
    latin1.write_bytes("approval_label: gepr\xfcft\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=rf"{latin1}: not UTF-8 text"):
        load_config(latin1)
    folder = tmp_path / "folder.yml"
    folder.mkdir()
    with pytest.raises(ConfigError, match=rf"{folder}: cannot be read"):
        load_config(folder)
