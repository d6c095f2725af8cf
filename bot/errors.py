"""The project's error base: errors a user can cause, caught once at the CLI edge.

Each layer raises its own subclass (a bad comment, a bad catalog, a bad tensor argument) with a
message that says what was wrong and what would be right. The CLI prints the message without a
traceback and exits with ``exit_code``.
"""


class StagebotError(Exception):
    """An error the user can fix; its message is the whole explanation."""

    exit_code = 2


class CommandError(StagebotError):
    """A `/bot` comment that cannot be parsed."""
