"""The GitHub adapter: the only package that imports PyGithub (``github``), and only lazily.

Everything else talks to GitHub through ``GitHubApi``, a narrow interface of just the calls the
bot makes, returning plain dataclasses; tests give it an in-memory fake or run the real
``PyGithubApi`` against a local fake REST server. One module per job:

- ``data``: the plain data (PullRequest, Comment, …), GitHub's accepted values, the errors;
- ``api``: the ``GitHubApi`` interface;
- ``retry``: ``RetryPolicy``, failure classification and the retry loops;
- ``actions_env``: the Actions variables (``ActionsEnv``);
- ``client``: ``PyGithubApi`` and ``connect``;
- ``download``: artifact streaming;
- ``app_token``: the bot's GitHub App installation tokens.

Inside this package ``import github`` is PyGithub (absolute imports); none of these modules
imports it at module level, so importing ``stagebot.bot.github`` stays cheap.
"""

from stagebot.bot.github.actions_env import ActionsEnv
from stagebot.bot.github.api import GitHubApi
from stagebot.bot.github.app_token import AppIdentity, mint_installation_token
from stagebot.bot.github.client import PyGithubApi, connect
from stagebot.bot.github.data import (
    Artifact,
    Comment,
    GitHubError,
    Permission,
    PullRequest,
    RunInfo,
    SetupError,
    Status,
    TimelineEvent,
)
from stagebot.bot.github.retry import RetryPolicy

__all__ = [
    "ActionsEnv",
    "AppIdentity",
    "Artifact",
    "Comment",
    "GitHubApi",
    "GitHubError",
    "Permission",
    "PullRequest",
    "PyGithubApi",
    "RetryPolicy",
    "RunInfo",
    "SetupError",
    "Status",
    "TimelineEvent",
    "connect",
    "mint_installation_token",
]
