"""Artifact downloads, around PyGithub, in two hops: the API answers with a redirect to a signed
storage URL, which is fetched without our token and streamed to a file. ``client`` retries each
hop on its own budget: faults of one hop never use up the other's tries."""

from __future__ import annotations

from pathlib import Path

from stagebot.bot.github.data import GitHubError

REDIRECTS = (301, 302, 303, 307, 308)


def artifact_location(
    api_url: str, repository: str, token: str, artifact_id: int, timeout: int
) -> str:
    """The first hop: the API's answer for artifact ``artifact_id``, a redirect to a signed
    storage URL (returned). A refusal raises PyGithub's ``GithubException``, which the retry
    classifies like any other answer; an answer that is neither is a ``GitHubError``."""
    import github
    import requests

    url = f"{api_url}/repos/{repository}/actions/artifacts/{artifact_id}/zip"
    headers = {"Authorization": f"token {token}", "User-Agent": "stagebot"}
    answer = requests.get(url, headers=headers, allow_redirects=False, timeout=timeout)
    answer.close()
    if answer.status_code in REDIRECTS and answer.headers.get("Location"):
        return answer.headers["Location"]
    if answer.status_code >= 400:
        raise github.GithubException(
            answer.status_code, {"message": answer.reason}, dict(answer.headers)
        )
    raise GitHubError(
        f"GitHub answered the download of artifact {artifact_id} with HTTP "
        f"{answer.status_code}, not the redirect to its storage that the REST API documents"
    )


def stream_from_storage(
    location: str, artifact_id: int, limit: int, dest: Path, timeout: int
) -> None:
    """The second hop: the artifact's zip from its signed storage URL (fetched without our
    token), streamed to ``dest``; more than ``limit`` bytes is refused. A refusal raises
    PyGithub's ``GithubException``, which the retry classifies like any other answer."""
    import github
    import requests

    answer = requests.get(
        location, headers={"User-Agent": "stagebot"}, stream=True, timeout=timeout
    )
    with answer:
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
