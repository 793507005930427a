import { describe, expect, it } from "vitest";
import { formatTime, partialNotice } from "../src/meta";

describe("partial profiles", () => {
  it("flags a checkpoint profile with the time its data stops", () => {
    const meta = { complete: "0", start_time: "2026-12-07T15:00:00Z", end_time: "2026-12-07T15:02:05Z" };
    expect(partialNotice(meta)).toBe("Partial profile: the program did not finish; data up to 2026-12-07 15:02:05 UTC (about 2 min 5 s after the start).");
    expect(partialNotice({ ...meta, end_time: "2026-12-07T17:30:00Z" })).toContain("(about 2 h 30 min after the start)");
    expect(partialNotice({ ...meta, end_time: meta.start_time })).toContain("(less than 1 s after the start)");
    expect(partialNotice({ ...meta, start_time: "?" })).toBe("Partial profile: the program did not finish; data up to 2026-12-07 15:02:05 UTC.");
    expect(partialNotice(meta, "baseline")).toMatch(/^Partial baseline: /);
  });
  it("accepts 'false' and shows no time when none is recorded", () => {
    expect(partialNotice({ complete: "false" })).toBe("Partial profile: the program did not finish.");
    expect(partialNotice({ complete: " False " })).not.toBeNull();
  });
  it("says nothing for a finished profile or one without the key", () => {
    expect(partialNotice({ complete: "1", end_time: "2026-12-07T15:02:05Z" })).toBeNull();
    expect(partialNotice({ complete: "true" })).toBeNull();
    expect(partialNotice({})).toBeNull();
  });
  it("formats the core's timestamps", () => {
    expect(formatTime("2026-12-07T15:02:05Z")).toBe("2026-12-07 15:02:05 UTC");
    expect(formatTime("yesterday")).toBe("yesterday");
  });
});
