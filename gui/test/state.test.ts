import { describe, expect, it } from "vitest";
import { DEFAULT_STATE, formatHash, parseHash } from "../src/state";

describe("URL state", () => {
  it("round-trips every field", () => {
    const s = { ...DEFAULT_STATE, view: "source" as const, metric: "gpu_time/launches", focus: 42, search: "aten::(add|mm)", hidden: ["native", "gpu_api"], sort: "exc", frame: 7, file: "/a b/c.py", line: 12, flame: "flame" as const };
    expect(parseHash(formatHash(s))).toEqual(s);
  });
  it("falls back to defaults for junk", () => {
    expect(parseHash("#v=nope&f=abc&l=-3")).toEqual(DEFAULT_STATE);
    expect(formatHash(DEFAULT_STATE)).toBe("#v=flame");
  });
  it("hides the import system by default and keeps an empty hide list apart from no list", () => {
    expect(parseHash("#v=flame").hidden).toEqual(["import"]);
    const none = { ...DEFAULT_STATE, hidden: [] };
    expect(formatHash(none)).toBe("#v=flame&h=");
    expect(parseHash(formatHash(none))).toEqual(none);
    const more = { ...DEFAULT_STATE, hidden: ["thread", "import"] };
    expect(parseHash(formatHash(more))).toEqual(more);
  });
});
