"""Artifact downloads: GitHub answers with a redirect to a signed storage URL, which is fetched
without our token and streamed to a file, around PyGithub (``client`` retries the call)."""

from __future__ import annotations

from pathlib import Path

from stagebot.bot.github.data import GitHubError

REDIRECTS = (301, 302, 303, 307, 308)


def stream_artifact(
    api_url: str,
    repository: str,
    token: str,
    artifact_id: int,
    limit: int,
    dest: Path,
    timeout: int,
) -> None:
    """Write artifact ``artifact_id``'s zip to ``dest``; more than ``limit`` bytes is refused. A
    refusal by GitHub or the storage raises PyGithub's ``GithubException``, which the retry
    classifies like any other answer."""
    import github
    import requests

    url = f"{api_url}/repos/{repository}/actions/artifacts/{artifact_id}/zip"
    headers = {"Authorization": f"token {token}", "User-Agent": "stagebot"}
    first = requests.get(url, headers=headers, allow_redirects=False, timeout=timeout)
    if first.status_code in REDIRECTS:
        answer = requests.get(
            first.headers["Location"],
            headers={"User-Agent": "stagebot"},
            stream=True,
            timeout=timeout,
        )
    else:
        answer = first
    if answer.status_code != 200:
        raise github.GithubException(
            answer.status_code, {"message": answer.reason}, dict(answer.headers)
        )
    size = 0
    with open(dest, "wb") as sink:
        for chunk in answer.iter_content(1 << 16):
            size += len(chunk)
            if size > limit:
                raise GitHubError(
                    f"artifact {artifact_id} is larger than the {limit} bytes the bot reads"
                )
            sink.write(chunk)
