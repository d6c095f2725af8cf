"""The GitHub reads `bot doctor` makes: repository settings the bot's own adapter never needs
(rulesets, runners, Actions permissions, branch protection, the App's granted permissions).

Reads only, over PyGithub's requester, so GitHub Enterprise's API URL and the retry policy work
as for the bot. Each read returns ``(status, data)``: a 404 or 403 is an answer a check explains
(a setting that is absent, or a token that may not read it), not an error.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any

from stagebot.bot.github import GitHubError, RetryPolicy, SetupError


class Unreachable(GitHubError):
    """GitHub did not answer at all (no network, a wrong API URL): nothing a check can judge."""


@dataclass(frozen=True)
class Answer:
    status: int
    data: Any
    headers: dict[str, str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class DoctorClient:
    def __init__(self, api_url: str, repository: str, token: str) -> None:
        import github

        policy = RetryPolicy.from_environ()  # STAGEBOT_GITHUB_*, as for the other commands
        self.repository = repository
        self.api_url = api_url.rstrip("/")
        self._requester = github.Github(
            base_url=self.api_url,
            auth=github.Auth.Token(token),
            timeout=max(1, math.ceil(policy.timeout)),
            user_agent="stagebot-doctor",
            seconds_between_requests=policy.seconds_between_requests,
            seconds_between_writes=policy.seconds_between_writes,
        ).requester

    def get(self, path: str, **query: str) -> Answer:
        """GET ``/repos/<repository><path>``."""
        url = f"{self.api_url}/repos/{self.repository}{path}"
        try:
            status, headers, body = self._requester.requestJson("GET", url, parameters=query)
        except Exception as error:  # a connection failure: nothing a check can explain
            raise Unreachable(
                f"GitHub at {self.api_url} did not answer ({type(error).__name__} on GET {path})"
            ) from None
        try:
            data = json.loads(body) if body else None
        except json.JSONDecodeError:
            data = None
        return Answer(status, data, {k.lower(): v for k, v in headers.items()})

    def file(self, path: str, ref: str) -> str | None:
        """A file's text on ``ref``; None when it is not there."""
        answer = self.get(f"/contents/{path}", ref=ref)
        if not answer.ok or not isinstance(answer.data, dict) or "content" not in answer.data:
            return None
        return base64.b64decode(answer.data["content"]).decode("utf-8", errors="replace")


def app_permissions(api_url: str, repository: str, app_id: str, private_key: str) -> dict:
    """The permissions the App's installation on ``repository`` was granted."""
    import github

    try:
        auth = github.Auth.AppAuth(app_id, private_key)
        integration = github.GithubIntegration(auth=auth, base_url=api_url.rstrip("/"))
        owner, name = repository.split("/")
        installation = integration.get_repo_installation(owner, name)
    except github.GithubException as error:
        raise GitHubError(
            f"the App {app_id} is not installed on {repository} (GitHub said {error.status}); "
            "install it on the repository"
        ) from None
    except (ValueError, TypeError) as error:
        raise SetupError(f"the App's private key cannot sign a token ({error})") from None
    except OSError as error:  # requests' connection errors are OSErrors
        raise Unreachable(f"GitHub at {api_url} did not answer ({type(error).__name__})") from None
    return dict(installation.raw_data.get("permissions") or {})
