"""Whether a profile is a checkpoint rather than the final write, and the one line that says so
(`deepcontext report`, `deepcontext analyze`). The writer sets meta "complete" to "0" at every
checkpoint and to "1" at the final write; "end_time" is when that write happened."""

from __future__ import annotations

from datetime import datetime

COMPLETE = "complete"  # meta key: "1" final profile, "0" partial (a checkpoint)
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def is_partial(meta: dict) -> bool:
    return meta.get(COMPLETE, "1") == "0"


def partial_note(meta: dict) -> str | None:
    """A line saying the profile is partial, when it is; None for a complete one."""
    if not is_partial(meta):
        return None
    if meta.get("merged_count"):
        return (
            f"partial profile: some of the {meta['merged_count']} merged profiles are checkpoints "
            "(their programs did not finish)"
        )
    when = meta.get("end_time")
    if not when:
        return "partial profile: the program did not finish (killed, crashed or still running)"
    covered = ""
    try:
        start = datetime.strptime(meta.get("start_time", ""), _TIME_FORMAT)
        seconds = (datetime.strptime(when, _TIME_FORMAT) - start).total_seconds()
        covered = f", covering its first {seconds:.0f} s"
    except ValueError:
        pass
    return (
        "partial profile: the program did not finish (killed, crashed or still running); "
        f"this is the checkpoint written at {when}{covered}"
    )
