"""The bot's GitHub App: mint an installation token for one repository (``cmd_app_token``)."""

from __future__ import annotations

from dataclasses import dataclass

from stagebot.bot.github.data import SetupError
from stagebot.bot.github.retry import RetryPolicy, http_timeout, read, read_retry


@dataclass(frozen=True)
class AppIdentity:
    """An installation token of the bot's GitHub App and the login the App writes as."""

    token: str
    login: str  # "<app slug>[bot]"


def mint_installation_token(
    api_url: str,
    repository: str,
    app_id: str,
    private_key: str,
    permissions: dict[str, str],
    policy: RetryPolicy,
) -> AppIdentity:
    """Sign a JWT with the App's private key, find the App's installation on ``repository``
    and mint a token limited to ``permissions`` (GitHub caps it at what the App was granted)."""
    import github
    import jwt  # PyGithub's own dependency, for the App's JWT

    try:
        auth = github.Auth.AppAuth(app_id, private_key)
        auth.create_jwt()  # a malformed key fails here, with no request made
    except (ValueError, TypeError, jwt.PyJWTError) as error:
        raise SetupError(
            f"the GitHub App's private key cannot sign a token ({_one_line(error)}); give the "
            "App's PEM private key (BEGIN RSA PRIVATE KEY) in STAGEBOT_APP_PRIVATE_KEY"
        ) from None
    integration = github.GithubIntegration(
        auth=auth,
        base_url=api_url,
        retry=read_retry(policy),
        timeout=http_timeout(policy),
        user_agent="stagebot",
        seconds_between_requests=policy.seconds_between_requests,
        seconds_between_writes=policy.seconds_between_writes,
    )
    owner, name = repository.split("/")

    def call() -> AppIdentity:
        installation = integration.get_repo_installation(owner, name)
        token = integration.get_access_token(installation.id, permissions).token
        return AppIdentity(token, f"{integration.get_app().slug}[bot]")

    granted = ", ".join(f"{k}: {v}" for k, v in sorted(permissions.items()))
    return read(
        f"mint the GitHub App's installation token for {repository}",
        call,
        hint=f" (is the App installed on the repository, with these permissions: {granted}?)",
    )


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:200]
