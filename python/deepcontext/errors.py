"""Errors that the CLI prints as one line (no traceback) before exiting non-zero."""

from .profile import ProfileError


class UserError(Exception):
    """Bad input from the user: unknown option, metric, file; printed as one line."""


__all__ = ["ProfileError", "UserError"]
