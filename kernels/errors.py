"""The kernels layer's one error type for arguments a caller can get wrong."""

from stagebot.bot.errors import StagebotError


class KernelArgumentError(StagebotError, ValueError):
    """A tensor argument, option or backend choice that an op cannot take.

    The message names the argument, what it was, and the rule it broke.
    """


class BackendUnavailableError(KernelArgumentError):
    """The named backend (or, under ``auto``, every backend) cannot implement this call."""
