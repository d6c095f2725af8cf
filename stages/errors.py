"""The project's error base, and the errors of commands, catalogs and plans.

Every layer raises a subclass of ``StagebotError`` (a bad comment, a bad catalog, a bad suite
input) with a message that says what was wrong and what would be right; the CLI edge
(bot/cli/main.py) prints the message without a traceback and exits with ``exit_code``. The base
lives here, in the lowest layer that raises it, so that no lower layer imports the edge
(docs/architecture.md: Layout).
"""


class StagebotError(Exception):
    """An error the user can fix; its message is the whole explanation."""

    exit_code = 2


class CommandError(StagebotError):
    """A `/bot` comment (or a Command's JSON) that cannot be parsed."""


class CatalogError(StagebotError):
    """A malformed catalog file; the message names the file, line, item and valid choices."""


class PlanError(StagebotError):
    """A command that cannot be planned (unknown stage, GPU type, …); says what would be valid."""
