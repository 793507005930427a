"""Errors that the CLI prints as one line (no traceback) before exiting non-zero."""


class ProfileError(Exception):
    """A file that is not a readable .dctx profile (missing, corrupt, foreign, newer version)."""


class UserError(Exception):
    """Bad input from the user: unknown option, metric, file; printed as one line."""


__all__ = ["ProfileError", "UserError"]
