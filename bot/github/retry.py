"""How the adapter retries, and how it tells a transient GitHub failure from a permanent one.

- reads go through PyGithub's own ``GithubRetry`` (urllib3, ``read_retry``): 5xx, 429, 403
  secondary rate limits (``Retry-After`` honoured), connection errors and read timeouts, with
  bounded exponential backoff; a failure that gets through is final (``read``);
- artifact downloads (a redirect to storage, around PyGithub) go through ``retried`` with the same
  policy;
- writes are never retried blindly by urllib3 (a POST that timed out may have happened):
  ``retried`` repeats them and, after an ambiguous failure (5xx, timeout, dropped connection),
  first asks a ``recover`` callback whether the write landed (for a reply: our marker is on the
  PR) before writing again. Idempotent writes (PATCH, statuses, reactions, cancels) just repeat;
- a wait longer than ``max_wait`` (a long Retry-After or rate-limit reset) is not waited for.
Permanent failures (4xx other than rate limits, retries exhausted) raise ``GitHubError`` with
what was being done and GitHub's answer; nothing is swallowed.

PyGithub (``github``), requests and urllib3 are imported inside the functions that need them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from stagebot.bot.github.data import GitHubError, SetupError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries. The n-th retry waits ``backoff_base * 2**(n-1)`` seconds (at most
    ``backoff_max``) or what GitHub asks (Retry-After, rate-limit reset) when that is longer;
    a wait over ``max_wait`` fails at once instead."""

    attempts: int = 4  # tries per call, the first included
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    max_wait: float = 120.0
    secondary_rate_wait: float = 60.0  # GitHub's advice when a 403 carries no Retry-After
    timeout: float = 15.0  # seconds per HTTP request (rounded up to a whole second)
    seconds_between_requests: float = 0.25  # PyGithub's throttle, kept for real GitHub
    seconds_between_writes: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    ENV = {
        "STAGEBOT_GITHUB_ATTEMPTS": "attempts",
        "STAGEBOT_GITHUB_BACKOFF_S": "backoff_base",
        "STAGEBOT_GITHUB_MAX_WAIT_S": "max_wait",
        "STAGEBOT_GITHUB_TIMEOUT_S": "timeout",
        "STAGEBOT_GITHUB_THROTTLE_S": "seconds_between_requests",
    }

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RetryPolicy:
        """Defaults, overridden by STAGEBOT_GITHUB_* variables (tests make the waits tiny;
        STAGEBOT_GITHUB_THROTTLE_S sets both of PyGithub's throttles)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for variable, name in cls.ENV.items():
            if environ.get(variable):
                try:
                    number = float(environ[variable])
                except ValueError:
                    raise SetupError(f"{variable}={environ[variable]!r} is not a number") from None
                values[name] = int(number) if name == "attempts" else number
        if "seconds_between_requests" in values:
            values["seconds_between_writes"] = values["seconds_between_requests"]
        if values.get("attempts", 1) < 1:
            raise SetupError("STAGEBOT_GITHUB_ATTEMPTS must be at least 1")
        values.setdefault("secondary_rate_wait", min(60.0, values.get("max_wait", 120.0)))
        if "backoff_base" in values and values["backoff_base"] < 1:
            values["secondary_rate_wait"] = values["backoff_base"]
        return cls(**values)

    def backoff(self, retry: int) -> float:
        return min(self.backoff_max, self.backoff_base * 2 ** (retry - 1))


@dataclass(frozen=True)
class Failure:
    """One failed call to GitHub, classified."""

    transient: bool
    ambiguous: bool  # the request may have been performed (a write may have landed)
    wait: float | None  # what GitHub asked us to wait, if it said
    text: str


def read(what: str, call: Callable[[], T], hint: str = "") -> T:
    """A read (PyGithub retried it already): a GitHub failure becomes ``GitHubError``, saying
    what could not be done, GitHub's answer, and ``hint``."""
    try:
        return call()
    except Exception as error:  # classified: GitHubError or re-raised as-is
        failure = classify(error)
        if failure is None:
            raise
        raise GitHubError(f"could not {what}: {failure.text}{hint}") from None


def retried(
    policy: RetryPolicy,
    what: str,
    call: Callable[[], T],
    recover: Callable[[], T | None] | None = None,
) -> T:
    """Writes, and reads that go around PyGithub (artifact downloads): transient failures are
    retried with bounded waits (Retry-After honoured); after an ambiguous one, ``recover`` is
    asked whether the write landed."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except Exception as error:  # classified below; anything unknown is re-raised
            failure = classify(error)
            if failure is None:
                raise
            if not failure.transient:
                raise GitHubError(f"could not {what}: {failure.text}") from None
            if attempt == policy.attempts:
                raise GitHubError(
                    f"could not {what}: still failing after {attempt} attempts ({failure.text})"
                ) from None
            wait = max(policy.backoff(attempt), failure.wait or 0.0)
            if wait > policy.max_wait:
                raise GitHubError(
                    f"could not {what}: GitHub asks to wait {wait:.0f}s, longer than the "
                    f"{policy.max_wait:.0f}s this bot waits ({failure.text})"
                ) from None
            policy.sleep(wait)
            if failure.ambiguous and recover is not None:
                found = recover()
                if found is not None:
                    return found
    raise AssertionError("unreachable")


def classify(error: Exception) -> Failure | None:
    """Transient or permanent, and whether a write may have landed; None: not a GitHub error."""
    import github
    import requests
    import urllib3

    if isinstance(error, github.RateLimitExceededExceedsMaxWait):
        return Failure(False, False, None, f"rate limited for {error.wait:.0f}s: {error.data}")
    if isinstance(error, github.GithubException):
        status = error.status
        message = error.data.get("message") if isinstance(error.data, dict) else error.data
        text = f"HTTP {status}: {message}"
        headers = {k.lower(): v for k, v in (error.headers or {}).items()}
        if status >= 500:
            return Failure(True, True, _retry_after(headers), text)
        rate_limited = isinstance(error, github.RateLimitExceededException) or (
            "rate limit" in str(message).lower()
        )
        if status in (403, 429) and (rate_limited or "retry-after" in headers):
            wait = _retry_after(headers)
            if wait is None and headers.get("x-ratelimit-remaining") == "0":
                reset = headers.get("x-ratelimit-reset", "")
                wait = max(0.0, float(reset) - time.time()) + 1 if reset.isdigit() else None
            if wait is None:
                wait = 60.0 if status == 403 else None  # GitHub: wait a minute for secondary
            return Failure(True, False, wait, text)
        return Failure(False, False, None, text)
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return Failure(True, False, None, f"connection timed out: {error}")
    if isinstance(error, requests.exceptions.ReadTimeout | urllib3.exceptions.ReadTimeoutError):
        return Failure(True, True, None, f"no answer in time: {error}")
    if isinstance(error, requests.exceptions.RetryError):
        return Failure(True, True, None, f"retries exhausted: {error}")
    if isinstance(error, requests.exceptions.ConnectionError):
        return Failure(True, True, None, f"connection failed: {error}")
    return None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def read_retry(policy: RetryPolicy):
    """PyGithub's GithubRetry for reads only, with our bounds and our sleep function."""
    from github import GithubRetry
    from github.GithubException import RateLimitExceededExceedsMaxWait

    class BoundedRetry(GithubRetry):
        def get_backoff_time(self) -> float:
            return policy.backoff(len(self.history)) if self.history else 0.0

        def sleep_for_retry(self, response) -> bool:  # type: ignore[override]
            retry_after = self.get_retry_after(response)
            if retry_after is None:
                return False
            if retry_after > policy.max_wait:
                raise RateLimitExceededExceedsMaxWait(
                    response.status, {"message": "Retry-After too long"}, {}, wait=retry_after
                )
            policy.sleep(max(retry_after, policy.backoff(max(1, len(self.history)))))
            return True

        def _sleep_backoff(self) -> None:
            # GithubRetry replaces get_backoff_time on the instance for secondary rate limits
            policy.sleep(self.get_backoff_time())

    return BoundedRetry(
        total=policy.attempts - 1,
        backoff_factor=policy.backoff_base,
        backoff_max=policy.backoff_max,
        status_forcelist=[*range(500, 600), 429],
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
        secondary_rate_wait=policy.secondary_rate_wait,
        max_rate_limit_wait=policy.max_wait,
    )


def http_timeout(policy: RetryPolicy) -> int:
    """The per-request timeout in whole seconds, as PyGithub insists."""
    return max(1, math.ceil(policy.timeout))
