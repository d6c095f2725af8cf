"""Errors of the stages layer: a bad catalog, or a command that names what the catalog lacks."""

from stagebot.bot.errors import StagebotError


class CatalogError(StagebotError):
    """A malformed catalog file; the message names the file, line, item and valid choices."""


class PlanError(StagebotError):
    """A command that cannot be planned (unknown stage, GPU type, …); says what would be valid."""
