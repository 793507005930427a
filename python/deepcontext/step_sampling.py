"""Step-sampled tracing, the default for PyTorch: full context only in traced steps.

On a launch-bound step (an eager model at small batch) the mere presence of a global RecordFunction
observer or of CUPTI's launch callbacks costs more than a 5 % budget, so the default traces some
steps and weights what it saw (docs/design.md, "Step-sampled tracing"):

- steps end at each `optimizer.step()` of the first optimizer that steps, or at
  `deepcontext.step()` / `profile.step()`, which then turn that detection off (deepcontext.steps);
- everything before the first step end and the first `warmup` steps are traced at weight 1 (start-up,
  compilation, autotuning: unlike the steps that follow, and kept out of the estimate);
- after that, one step in about `period` is traced (the gap drawn at random around it, so that a
  loop's own period cannot alias with ours); the operator callback, memory recording and CUPTI's
  callbacks and records are off in the others, CPU sampling goes on;
- values of traced steps of this sampled phase are scaled at every write by the steps of the
  phase over those traced (`dctx_set_sample_weight`);
- the period adapts to hold an overhead budget: the host time of traced steps against untraced
  ones, `period = overhead / budget` within [min_period, max_period];
- a step that runs far longer than the usual step (an evaluation after the loop, the end of the
  program) is traced from then on at weight 1;
- a program whose steps are never seen is traced in time windows instead (`window_s` of every
  `window_period_s` after `no_steps_s`), weighted by time.

`--trace all` traces every operator; `--trace-steps A:B` traces steps A..B-1 at weight 1 and no
other. The profile's metadata (`trace_*`) says what was traced and the weight; report, GUI and
analyzer say "estimated from N of M steps".
"""

from __future__ import annotations

import json
import math
import random
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass

from . import steps
from .errors import UserError

OFF, FULL, SAMPLED = 0, 1, 2  # as dctx_torch_set_tracing and dctx_cupti_set_tracing


@dataclass(frozen=True)
class Settings:
    trace: str = "steps"  # "steps" (sampled) or "all" (every operator of every step)
    trace_steps: tuple[int, int] | None = None  # [A, B): traced at weight 1, no other step
    warmup: int = 3
    budget: float = 0.03  # host overhead the traced steps may add, as a fraction of the run
    first_period: int = 10
    min_period: int = 2
    max_period: int = 100
    long_step_factor: float = 8.0  # a step this many times the usual one is traced from then on
    long_step_min_s: float = 0.5
    # No step end seen for this long: time windows. A minute, so that a short step-less program
    # (a script, a test, a benchmark, a compile that takes its first half-minute) is traced whole.
    no_steps_s: float = 60.0
    window_s: float = 0.1
    window_period_s: float = 2.0
    seed: int = 0

    @classmethod
    def from_options(cls, options: dict) -> Settings:
        trace = options.get("trace") or ("all" if options.get("timeline") else "steps")
        if trace not in ("steps", "all"):
            raise UserError(f"trace must be 'steps' or 'all', not {trace!r}")
        budget = float(options.get("trace_budget") or cls.budget)
        if not 0.0 < budget < 1.0:
            raise UserError(f"trace_budget must be between 0 and 1, not {budget}")
        return cls(trace=trace, trace_steps=parse_range(options.get("trace_steps")), budget=budget)


def parse_range(value) -> tuple[int, int] | None:
    """'A:B' (or a (A, B) pair, or a range) -> (A, B) with 0 <= A < B."""
    if value is None or value == "":
        return None
    if isinstance(value, range):
        value = (value.start, value.stop)
    if isinstance(value, str):
        parts = value.split(":")
        try:
            value = tuple(int(p) for p in parts)
        except ValueError:
            value = ()
    if len(value) != 2 or not 0 <= value[0] < value[1]:
        raise UserError(f"trace steps must be A:B with 0 <= A < B, not {value!r}")
    return int(value[0]), int(value[1])


class Schedule:
    """Which steps are traced, and what a traced step of the sampled phase stands for. Pure
    bookkeeping: `step_end(now)` at each step end returns the mode of the step that starts;
    `tick(now)` between step ends may switch a long step or a step-less run; the caller applies
    the modes. Step k is the (k+1)-th step; step 0 runs from the start to the first step end."""

    def __init__(self, settings: Settings, start: float):
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.steps = 0  # step ends seen
        self.mode = FULL
        self.step_start = start
        self.start = start
        # the sampled phase: steps that ran in it (untraced or traced), and those traced
        self.sampled_steps = 0
        self.sampled_traced = 0
        self.full_steps = 0  # steps traced at weight 1 (warm-up, long steps, a chosen range)
        self.traced_ids: list[int] = []  # sampled traced steps (first 1000)
        self.period = settings.first_period
        self.next_traced = settings.warmup
        self.untraced_s: deque[float] = deque(maxlen=64)
        self.traced_s: deque[float] = deque(maxlen=16)
        self.all_s: deque[float] = deque(maxlen=64)
        self.windows = 0  # time windows mode: windows traced, time traced and in all
        self.window_traced_s = 0.0
        self.window_total_s = 0.0
        self.window_open_at = 0.0
        self.in_windows = False
        if settings.trace_steps is not None and settings.trace_steps[0] > 0:
            self.mode = OFF

    # -- step ends ---------------------------------------------------------------------------

    def step_end(self, now: float) -> int:
        duration = now - self.step_start
        self._account(self.mode, duration)
        self.steps += 1
        self.step_start = now
        self.mode = self._next_mode()
        return self.mode

    def _account(self, mode: int, duration: float) -> None:
        if self.in_windows:  # the first step end after time windows: steps from here on
            self.in_windows = False
            self.next_traced = self.steps + 1
        self.all_s.append(duration)
        if mode == FULL:
            self.full_steps += 1
            return
        if self.s.trace_steps is not None:
            return
        if self.steps < self.s.warmup:  # an untraced step before the sampled phase: none
            return
        self.sampled_steps += 1
        if mode == SAMPLED:
            self.sampled_traced += 1
            if len(self.traced_ids) < 1000:
                self.traced_ids.append(self.steps)
            self.traced_s.append(duration)
        else:
            self.untraced_s.append(duration)

    def _next_mode(self) -> int:
        k = self.steps  # the step that starts now
        if self.s.trace_steps is not None:
            a, b = self.s.trace_steps
            return FULL if a <= k < b else OFF
        if k < self.s.warmup:
            return FULL
        if k < self.next_traced:
            return OFF
        self.period = self._period()
        half = max(1, self.period // 2)
        self.next_traced = k + self.rng.randint(self.period - half, self.period + half)
        self.next_traced = max(self.next_traced, k + 1)
        return SAMPLED

    def _period(self) -> int:
        """One traced step in `period`: the traced steps' extra host time spread over the period
        stays within the budget."""
        if len(self.traced_s) < 1 or len(self.untraced_s) < 2:
            return self.period
        overhead = statistics.median(self.traced_s) / statistics.median(self.untraced_s) - 1.0
        period = math.ceil(max(overhead, 0.0) / self.s.budget)
        return max(self.s.min_period, min(self.s.max_period, period))

    # -- between step ends -------------------------------------------------------------------

    def tick(self, now: float) -> int | None:
        """A new mode for the running step, or None. A step far longer than usual is traced
        from now on at weight 1; a run without step ends goes to time windows."""
        if self.s.trace_steps is not None:
            return None
        if self.steps == 0:
            return self._windows(now)
        if self.mode == OFF and self.all_s:
            usual = statistics.median(self.all_s)
            if now - self.step_start > max(self.s.long_step_min_s, self.s.long_step_factor * usual):
                self.mode = FULL
                self.next_traced = self.steps + 1  # the step after it is traced again
                return FULL
        return None

    def _windows(self, now: float) -> int | None:
        if not self.in_windows:
            if now - self.start < self.s.no_steps_s:
                return None
            self.in_windows = True
            self.window_open_at = now
            self.mode = SAMPLED
            self.windows = 1
            return SAMPLED
        elapsed = now - self.window_open_at
        if self.mode == SAMPLED and elapsed >= self.s.window_s:
            self.window_traced_s += elapsed
            self.window_total_s += elapsed
            self.window_open_at = now
            self.mode = OFF
            return OFF
        if self.mode == OFF and elapsed >= self.s.window_period_s - self.s.window_s:
            self.window_total_s += elapsed
            self.window_open_at = now
            self.mode = SAMPLED
            self.windows += 1
            return SAMPLED
        return None

    # -- what the traced steps stand for -----------------------------------------------------

    def weight(self, now: float | None = None) -> float:
        """Steps of the sampled phase over those traced; in time windows, the time over the time
        traced (up to `now`). What runs after the last step end (the tail after the loop, exit)
        is not a step: traced with the chance of any step and then weighted like one, it is
        counted right on average; counted as a step, a traced tail would weigh every traced step
        down."""
        if self.in_windows:
            traced = self.window_traced_s
            total = self.window_total_s
            if now is not None:
                total += now - self.window_open_at
                if self.mode == SAMPLED:
                    traced += now - self.window_open_at
            return total / traced if traced > 0 else 1.0
        return self.sampled_steps / self.sampled_traced if self.sampled_traced else 1.0

    def note(self, now: float) -> str | None:
        """The profile's note on what its operator, memory and GPU values stand for."""
        meta = self.meta(now)
        if meta["trace_mode"] == "time windows":
            return (
                f"estimated from {meta['trace_windows']} time windows of "
                f"{meta['trace_windows_ms'].replace(':', ' ms every ')} ms (no training steps "
                f"seen): operator, memory and GPU values weighted x{meta['trace_weight']} "
                "(step-sampled tracing; --trace all traces everything)"
            )
        if meta["trace_mode"] == "step range":
            return (
                f"operators, memory and GPU traced in steps {meta['trace_steps'].replace(':', '..')}"
                f" only (--trace-steps; {meta['steps_total']} steps ran)"
            )
        if self.sampled_steps == 0:
            return None  # every step that ran was traced
        return (
            f"estimated from {meta['steps_traced']} of {meta['steps_total']} steps: operator, "
            f"memory and GPU values of {meta['trace_sampled_traced']} traced steps weighted "
            f"x{meta['trace_weight']} for the {meta['trace_sampled_steps']} steps after the first "
            f"{meta['trace_warmup_steps']} (step-sampled tracing; --trace all traces every step)"
        )

    def meta(self, now: float) -> dict[str, str]:
        if self.in_windows or (self.steps == 0 and self.windows):
            return {
                "trace_mode": "time windows",
                "trace_windows": str(self.windows),
                "trace_windows_ms": f"{self.s.window_s * 1e3:.0f}:{self.s.window_period_s * 1e3:.0f}",
                "trace_weight": f"{self.weight(now):.6g}",
            }
        meta = {
            "trace_mode": "steps" if self.s.trace_steps is None else "step range",
            "steps_total": str(self.steps),
            "steps_traced": str(self.full_steps + self.sampled_traced),
            "trace_warmup_steps": str(min(self.steps, self.s.warmup)),
            "trace_full_steps": str(self.full_steps),
            "trace_sampled_steps": str(self.sampled_steps),
            "trace_sampled_traced": str(self.sampled_traced),
            "trace_weight": f"{self.weight(now):.6g}",
            "trace_period": str(self.period),
            "trace_budget": f"{self.s.budget:g}",
            "trace_traced_step_ids": json.dumps(self.traced_ids[:200]),
        }
        if self.s.trace_steps is not None:
            meta["trace_steps"] = f"{self.s.trace_steps[0]}:{self.s.trace_steps[1]}"
        if len(self.all_s) >= 2:
            times = sorted(self.all_s)
            meta["step_time_median_ms"] = f"{statistics.median(times) * 1e3:.4g}"
            meta["step_time_p10_ms"] = f"{times[len(times) // 10] * 1e3:.4g}"
            meta["step_time_p90_ms"] = f"{times[(len(times) * 9) // 10] * 1e3:.4g}"
        if self.untraced_s and self.traced_s:
            overhead = statistics.median(self.traced_s) / statistics.median(self.untraced_s)
            meta["trace_step_cost"] = f"{overhead:.4g}"
        return meta


# ------------------------------------------------------------------------------------------------
# The running controller: applies the schedule to the torch adapter and the CUPTI tracer
# ------------------------------------------------------------------------------------------------

_lock = threading.RLock()
_schedule: Schedule | None = None
_watchdog: threading.Thread | None = None
_stop_watchdog = threading.Event()


def add_arguments(parser) -> None:
    g = parser.add_argument_group("Step-sampled tracing (PyTorch)")
    g.add_argument(
        "--trace",
        choices=("steps", "all"),
        default=None,
        help="steps (default): operators, memory and GPU kernels traced in a sample of the "
        "training steps (each optimizer.step() or deepcontext.step() ends one) and weighted, the "
        "first steps and CPU sampling in full; all: every operator of every step (costs more on "
        "launch-bound steps; the default with --timeline)",
    )
    g.add_argument(
        "--trace-steps",
        metavar="A:B",
        default=None,
        help="trace steps A..B-1 in full and no other step",
    )
    g.add_argument(
        "--trace-budget",
        type=float,
        default=None,
        metavar="FRACTION",
        help=f"overhead the traced steps may add (default {Settings.budget})",
    )


def activate(options: dict) -> None:
    """Starts the schedule unless every step is traced. Never imports torch."""
    global _schedule
    settings = Settings.from_options(options)
    if not options.get("torch", True) or settings.trace == "all":
        _core_meta({"trace_mode": "all"})
        return
    with _lock:
        _schedule = Schedule(settings, time.perf_counter())
    _apply(_schedule.mode)
    steps.listen(_on_step)
    _start_watchdog()


def deactivate() -> None:
    global _schedule
    steps.unlisten(_on_step)
    _stop_watchdog.set()
    with _lock:
        schedule, _schedule = _schedule, None
        if schedule is not None:
            _publish(schedule, time.perf_counter())
            if schedule.mode == OFF:  # the layers stop from a traced state, as they started
                _apply(FULL)


def _on_step(explicit: bool) -> None:
    with _lock:
        schedule = _schedule
        if schedule is None:
            return
        before = schedule.mode
        now = time.perf_counter()
        if schedule.in_windows:  # the windows' values get their weight now; steps from here on
            _commit(schedule.weight(now))
        mode = schedule.step_end(now)
        if mode != before or mode != OFF:
            _apply(mode)
        _set_weight(schedule.weight())


def _apply(mode: int) -> None:
    """Switches the torch adapter and the CUPTI tracer (each ignores it when not running)."""
    from . import gpu, torch_support

    torch_support.set_tracing(mode)
    gpu.set_tracing(mode)


def _set_weight(weight: float) -> None:
    try:
        from . import capi

        capi.library().dctx_set_sample_weight(weight)
    except Exception:
        pass


def _commit(weight: float) -> None:
    try:
        from . import capi

        lib = capi.library()
        lib.dctx_commit_sampled(weight)
        lib.dctx_set_sample_weight(1.0)
    except Exception:
        pass


def _publish(schedule: Schedule, now: float) -> None:
    _set_weight(schedule.weight(now))
    _core_meta(schedule.meta(now))
    note = schedule.note(now)
    if note:
        try:
            from . import _core

            _core.note(note)
        except Exception:
            pass


def _core_meta(meta: dict[str, str]) -> None:
    try:
        from . import _core

        for k, v in meta.items():
            _core.set_meta(k, v)
    except Exception:
        pass


def _start_watchdog() -> None:
    """Long steps and step-less runs are noticed between step ends: a thread that looks every
    50 ms (it holds the GIL for a few microseconds each time)."""
    global _watchdog
    _stop_watchdog.clear()
    if _watchdog is not None and _watchdog.is_alive():
        return

    def loop():
        from . import _core

        _core.hide_current_thread()  # the profiler's own thread: not in the profile
        while not _stop_watchdog.wait(0.05):
            with _lock:
                schedule = _schedule
                if schedule is None:
                    return
                now = time.perf_counter()
                mode = schedule.tick(now)
                if mode is not None:
                    _apply(mode)
                if schedule.in_windows:
                    _set_weight(schedule.weight(now))

    _watchdog = threading.Thread(target=loop, name="deepcontext-steps", daemon=True)
    _watchdog.start()


def mode() -> int:
    """The mode of the running step (FULL when no schedule runs)."""
    return _schedule.mode if _schedule is not None else FULL
