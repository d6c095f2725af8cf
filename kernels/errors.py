"""The kernels layer's one error type for arguments a caller can get wrong.

The kernels are a leaf library (docs/architecture.md: Layout): they import nothing of stagebot, so
their errors are plain ``ValueError`` subclasses, not ``StagebotError`` (no CLI command calls an
op).
"""


class KernelArgumentError(ValueError):
    """A tensor argument, option or backend choice that an op cannot take.

    The message names the argument, what it was, and the rule it broke.
    """


class BackendUnavailableError(KernelArgumentError):
    """The named backend (or, under ``auto``, every backend) cannot implement this call."""
