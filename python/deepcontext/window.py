"""`deepcontext.profile(path, ...)`: profile a region of a program, as a context manager or a
decorator, optionally only a window of its steps.

    with deepcontext.profile("train.dctx", steps=range(10, 20)) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Without `steps`, profiling runs from entry to exit. With `steps`, it starts when the step counter
(the number of `prof.step()` calls so far) enters the window and the profile is written when it
leaves it, so warm-up and the rest of the run cost nothing. Inside `deepcontext run` (a session
already active) the region neither starts nor stops the session; `step()` still marks steps.
"""

from __future__ import annotations

import functools

from . import session
from .errors import UserError


def _window(steps) -> tuple[int, int] | None:
    if steps is None:
        return None
    if isinstance(steps, range):
        if steps.step != 1 or len(steps) == 0:
            raise UserError(f"steps must be a non-empty contiguous range, not {steps!r}")
        return steps.start, steps.stop
    values = sorted(int(s) for s in steps)
    if not values or values != list(range(values[0], values[-1] + 1)):
        raise UserError(f"steps must be a non-empty contiguous set of step numbers, not {steps!r}")
    return values[0], values[-1] + 1


class profile:
    """Profile the `with` block (or each call of the decorated function) into `output`.

    Options are those of `deepcontext.start()` (interval_ms, native, wall, checkpoint_s, and the
    integrations' options such as shapes or timeline)."""

    def __init__(self, output: str | None = None, *, steps=None, **options):
        self.output = output
        self.options = options
        self.window = _window(steps)
        self.step_count = 0
        self.path: str | None = None  # the written profile, once there is one
        self._owns = False

    def __enter__(self) -> profile:
        self.step_count = 0
        self._owns = False
        if self.window is None or self.window[0] <= 0 < self.window[1]:
            self._begin()
        return self

    def __exit__(self, *exc) -> None:
        self._end()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with profile(self.output, steps=self._steps(), **self.options):
                return fn(*args, **kwargs)

        return wrapper

    def step(self) -> None:
        """Mark the end of a training step (the window counts these)."""
        self.step_count += 1
        marker = getattr(session, "mark_step", None)
        if marker is not None and session.is_active():
            marker()
        if self.window is None:
            return
        start, stop = self.window
        if self.step_count == start:
            self._begin()
        elif self.step_count == stop:
            self._end()

    @property
    def active(self) -> bool:
        return self._owns and session.is_active()

    def _steps(self):
        return None if self.window is None else range(*self.window)

    def _begin(self) -> None:
        if session.is_active():  # an outer session (deepcontext run) owns the profile
            return
        self.path = session.start(self.output, **self.options)
        self._owns = True
        if self.window is not None:
            session._core().set_meta("step_window", f"{self.window[0]}-{self.window[1]}")

    def _end(self) -> None:
        if self._owns:
            self._owns = False
            self.path = session.stop() or self.path
