"""Repository settings for the bot on GitHub: ``.github/stagebot.yml``, validated at load.

The file is optional; every key has a stated default. Errors name the file and line, the key and
what would be right, like the catalog's.

```yaml
allowlist:                     # users treated like write permission (default: none),
  - {login: alice, id: 583231} #   matched by user id (a login can be renamed and re-registered
  - 1234567                    #   by someone else); the login is a note for people
approvers: [{login: carol, id: 99}] # besides maintain/admin: whose approval label counts
approval_label: ci-approved    # the label that approves gated plans (default: ci-approved)
status_context: stagebot       # the gating commit status's context (default: stagebot)
workflow: bot.yml              # the bot's plan workflow file (default: bot.yml)
stage_workflow: stage.yml      # the workflow that runs PR code on the GPU runners, which the
                               # plan job dispatches and kill cancels (default: stage.yml)
stage_branch: stagebot-stage   # the branch the stage workflow is dispatched on: not the default
                               # branch, so its runs have a cache scope of their own
report_workflow: report.yml    # the workflow_run workflow that reports (default: report.yml)
bot_login: github-actions[bot] # who the bot posts as; only its replies' markers count
                               # (default: $STAGEBOT_BOT_LOGIN, which `bot app-token` sets to the
                               # GitHub App's login, else github-actions[bot])
rate_limit: 10                 # /bot comments of one person answered per PR and hour (default 10)
reuse_audit_rate: 0.05         # the share of tests reused by key that `bot audit-reuse`, and
                               # main's post-merge stage jobs by themselves, run for real (0 to
                               # 1; default 0.05, at least one when any was reused)
```

Migration from login allowlists: a bare login is refused with the fix in the message; write
``{login: NAME, id: NUMBER}``, the id being ``id`` in ``https://api.github.com/users/NAME``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from stagebot.stages.errors import StagebotError

DEFAULT_PATH = Path(".github/stagebot.yml")
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")
WORKFLOW_FILE = re.compile(r"^[A-Za-z0-9._-]+\.ya?ml$")
BRANCH = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
KEYS = (
    "allowlist",
    "approvers",
    "approval_label",
    "status_context",
    "workflow",
    "stage_workflow",
    "stage_branch",
    "report_workflow",
    "bot_login",
    "rate_limit",
    "reuse_audit_rate",
)
USER_LISTS = ("allowlist", "approvers")


class ConfigError(StagebotError):
    """A `.github/stagebot.yml` that is not valid."""


@dataclass(frozen=True)
class BotConfig:
    allowlist: tuple[int, ...] = ()  # user ids
    approvers: tuple[int, ...] = ()  # user ids
    approval_label: str = "ci-approved"
    status_context: str = "stagebot"
    workflow: str = "bot.yml"
    stage_workflow: str = "stage.yml"
    stage_branch: str = "stagebot-stage"
    report_workflow: str = "report.yml"
    bot_login: str = "github-actions[bot]"
    rate_limit: int = 10  # /bot comments one person may have answered per PR and hour
    reuse_audit_rate: float = 0.05  # the share of reused-by-key tests an audit runs for real
    source: str = "(defaults)"
    given: tuple[str, ...] = ()  # the keys the file set

    def allowlisted(self, user_id: int | None) -> bool:
        """By user id, never by login (a login can be given up and taken by someone else)."""
        return user_id is not None and user_id in self.allowlist


def load_config(path: str | Path | None = None) -> BotConfig:
    """Load the settings; a missing file at the default path gives the defaults. Without
    ``bot_login`` in the file, STAGEBOT_BOT_LOGIN (the GitHub App's login) sets it."""
    config = _load_file(path)
    login = os.environ.get("STAGEBOT_BOT_LOGIN", "").strip()
    if login and config.bot_login == BotConfig.bot_login and "bot_login" not in config.given:
        if not LOGIN.match(login):
            raise ConfigError(
                f"STAGEBOT_BOT_LOGIN={login!r} is not a GitHub login such as app[bot]"
            )
        config = replace(config, bot_login=login)
    return config


def _load_file(path: str | Path | None) -> BotConfig:
    explicit = path is not None
    file = Path(path) if explicit else DEFAULT_PATH
    if not file.exists():
        if explicit:
            raise ConfigError(f"{file}: no such file; give an existing .github/stagebot.yml")
        return BotConfig()
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{file}: not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from None
    except OSError as error:
        raise ConfigError(f"{file}: cannot be read ({error.strerror or error})") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{file}{line}: not valid YAML: {error}") from None
    if root is None:
        return BotConfig(source=str(file))
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{file}:{root.start_mark.line + 1}: expected a mapping of {KEYS}")
    values: dict[str, object] = {}
    for key_node, value_node in root.value:
        where = f"{file}:{key_node.start_mark.line + 1}"
        key = key_node.value
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (valid: {', '.join(KEYS)})")
        if key in values:
            raise ConfigError(f"{where}: {key!r} is given twice; give it once")
        if key in USER_LISTS:
            values[key] = _user_ids(key, value_node, where)
        elif key == "rate_limit":
            values[key] = _positive(key, value_node, where)
        elif key == "reuse_audit_rate":
            values[key] = _share(key, value_node, where)
        else:
            values[key] = _string(key, value_node, where)
    return BotConfig(**values, source=str(file), given=tuple(values))


def _string(key: str, node: yaml.Node, where: str) -> str:
    value = node.value if isinstance(node, yaml.ScalarNode) else None
    if not isinstance(value, str) or not value.strip() or node.tag != "tag:yaml.org,2002:str":
        raise ConfigError(f"{where}: {key} must be a non-empty string")
    if key.endswith("workflow") and not WORKFLOW_FILE.match(value):
        raise ConfigError(
            f"{where}: {key} must be a file name in .github/workflows such as bot.yml, "
            f"not {value!r}"
        )
    if key == "stage_branch" and not BRANCH.match(value):
        raise ConfigError(f"{where}: stage_branch {value!r} is not a branch name such as a-b/c")
    if key == "bot_login" and not LOGIN.match(value):
        raise ConfigError(f"{where}: bot_login {value!r} is not a GitHub login such as app[bot]")
    if key == "status_context" and len(value) > 255:
        raise ConfigError(f"{where}: status_context is longer than GitHub's 255 characters")
    return value.strip()


def _positive(key: str, node: yaml.Node, where: str) -> int:
    value = node.value if isinstance(node, yaml.ScalarNode) else None
    if node.tag != "tag:yaml.org,2002:int" or not str(value).isdigit() or int(value) < 1:
        raise ConfigError(f"{where}: {key} must be a positive whole number, e.g. {key}: 10")
    return int(value)


def _share(key: str, node: yaml.Node, where: str) -> float:
    value = node.value if isinstance(node, yaml.ScalarNode) else None
    try:
        share = float(value) if node.tag in _NUMBERS else None
    except (TypeError, ValueError):
        share = None
    if share is None or not 0 <= share <= 1:
        raise ConfigError(f"{where}: {key} must be a number from 0 to 1, e.g. {key}: 0.05")
    return share


_NUMBERS = ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")


def _user_ids(key: str, node: yaml.Node, where: str) -> tuple[int, ...]:
    """A list of users by id: ``{login: alice, id: 583231}`` (the login is a note for people)
    or a bare id. A bare login is refused: logins can be renamed and re-registered."""
    if not isinstance(node, yaml.SequenceNode):
        raise ConfigError(f"{where}: {key} must be a list such as [{{login: alice, id: 583231}}]")
    ids = []
    for item in node.value:
        line = f"{where.rsplit(':', 1)[0]}:{item.start_mark.line + 1}"
        if isinstance(item, yaml.ScalarNode) and item.tag == "tag:yaml.org,2002:int":
            ids.append(int(item.value))
            continue
        if isinstance(item, yaml.MappingNode):
            fields = {k.value: v for k, v in item.value}
            raw = fields.get("id")
            if (
                set(fields) <= {"login", "id"}
                and isinstance(raw, yaml.ScalarNode)
                and raw.tag == "tag:yaml.org,2002:int"
            ):
                ids.append(int(raw.value))
                continue
        shown = item.value if isinstance(item, yaml.ScalarNode) else "this item"
        raise ConfigError(
            f"{line}: {key} item {shown!r} is not a user id; write {{login: NAME, id: NUMBER}} "
            "(the id is at https://api.github.com/users/NAME): users are matched by id, since "
            "a login can be renamed and re-registered by someone else"
        )
    return tuple(ids)
