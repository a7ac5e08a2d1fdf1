"""Errors that are the user's to fix: the CLI prints them as one line and exits with 2."""


def error_line(err: BaseException) -> str:
    """`Type: first line of the message` (the type alone for an empty message): why something failed, as one line."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


class SsdbenchError(Exception):
    """A known problem with input or environment; `str(err)` is the whole message."""

    exit_code = 2


class UsageError(SsdbenchError):
    """An option or argument that cannot be used as given."""


class ModelNotFoundError(SsdbenchError):
    """A model spec that resolved to nothing; the message lists where it looked."""


class SuiteError(SsdbenchError):
    """An unknown suite name or a prompt file that cannot be read."""


class RunDirectoryError(SsdbenchError):
    """A run directory that cannot be written, or read back."""


class RunFailed(SsdbenchError):
    """The run started but could not finish (e.g. the draft process died); exit code 1."""

    exit_code = 1


class DraftServerError(RunFailed):
    """The SSD draft process failed to start, crashed, or stopped answering."""


class RankFailed(RunFailed):
    """A tensor-parallel rank died or failed: which rank, and why."""
