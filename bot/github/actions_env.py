"""The GitHub Actions variables the bot reads (``ActionsEnv``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from stagebot.bot.github.data import SetupError


@dataclass(frozen=True)
class ActionsEnv:
    """The standard GitHub Actions variables the bot reads (GitHub Enterprise works too).

    Defaults when absent: GITHUB_API_URL https://api.github.com, GITHUB_SERVER_URL
    https://github.com, GITHUB_RUN_NUMBER / GITHUB_RUN_ID none (the pipeline number then comes
    from the bot's earlier replies, the run link is left out), GITHUB_OUTPUT none (outputs are
    printed). GITHUB_REPOSITORY, GITHUB_EVENT_NAME and GITHUB_EVENT_PATH are required;
    GITHUB_TOKEN only once a call to GitHub is needed."""

    repository: str
    event_name: str
    event_path: str
    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    token: str | None = None
    output: str | None = None
    run_id: int | None = None
    run_number: int | None = None
    run_attempt: int = 1  # GITHUB_RUN_ATTEMPT: above 1 when a job of the run is re-run

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ActionsEnv:
        environ = os.environ if environ is None else environ
        missing = [
            name
            for name in ("GITHUB_REPOSITORY", "GITHUB_EVENT_NAME", "GITHUB_EVENT_PATH")
            if not environ.get(name)
        ]
        if missing:
            raise SetupError(
                f"{', '.join(missing)} not set: run inside GitHub Actions or set them "
                "(GITHUB_EVENT_PATH names the webhook payload JSON file)"
            )
        repository = environ["GITHUB_REPOSITORY"]
        if repository.count("/") != 1 or not all(repository.split("/")):
            raise SetupError(f"GITHUB_REPOSITORY={repository!r} is not owner/name")
        return cls(
            repository=repository,
            event_name=environ["GITHUB_EVENT_NAME"],
            event_path=environ["GITHUB_EVENT_PATH"],
            api_url=(environ.get("GITHUB_API_URL") or cls.api_url).rstrip("/"),
            server_url=(environ.get("GITHUB_SERVER_URL") or cls.server_url).rstrip("/"),
            token=environ.get("GITHUB_TOKEN") or None,
            output=environ.get("GITHUB_OUTPUT") or None,
            run_id=_positive_int(environ, "GITHUB_RUN_ID"),
            run_number=_positive_int(environ, "GITHUB_RUN_NUMBER"),
            run_attempt=_positive_int(environ, "GITHUB_RUN_ATTEMPT") or 1,
        )

    @property
    def run_url(self) -> str | None:
        if self.run_id is None:
            return None
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"


def _positive_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise SetupError(f"{name}={raw!r} is not a positive integer")
    return int(raw)
