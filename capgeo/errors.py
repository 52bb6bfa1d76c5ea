"""User-facing errors.

Anything the user can fix (a bad file, a missing column, an option out of
range) is raised as CapgeoError with a one-line message that names the file,
line or field and what was expected. The CLI prints it without a traceback
and exits non-zero; library callers catch it like any exception.
"""


class CapgeoError(Exception):
    """A problem with the user's input or options, described in one line."""

    exit_code = 2


class DataError(CapgeoError):
    """The dataset could not be read or is not what was expected."""


class EncoderError(CapgeoError):
    """The encoder spec could not be resolved or its weights are unavailable."""
