"""Errors that the CLI prints as one line (no traceback) before exiting non-zero."""


class ProfileError(Exception):
    """A file that is not a readable .dctx profile (missing, corrupt, foreign, newer version).
    Its message is one line: what SQLite or the C++ loader report may span several (an
    integrity check lists each bad cell)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).splitlines()))


class UserError(Exception):
    """Bad input from the user: unknown option, metric, file; printed as one line. The exit
    status is 2 unless given (`deepcontext run` mirrors python's 1 for a missing module)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


__all__ = ["ProfileError", "UserError"]
