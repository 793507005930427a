import { describe, expect, it } from "vitest";
import { NAME_COLUMN, clampNameWidth, defaultNameWidth, nameWidth } from "../src/table";

describe("the tree tables' name column", () => {
  it("is wide by default: a share of the window, never below the minimum", () => {
    expect(defaultNameWidth(1400)).toBe(700);
    expect(defaultNameWidth(1400)).toBeGreaterThan(280 + 14 * 20); // the old width plus room for 20 levels
    expect(defaultNameWidth(300)).toBe(NAME_COLUMN.min);
  });
  it("keeps the width the user dragged to, within bounds", () => {
    expect(nameWidth("512", 1400)).toBe(512);
    expect(nameWidth("12", 1400)).toBe(NAME_COLUMN.min);
    expect(nameWidth("1e9", 1400)).toBe(NAME_COLUMN.max);
    expect(clampNameWidth(333.4)).toBe(333);
  });
  it("falls back to the default for nothing or junk stored", () => {
    expect(nameWidth(null, 1000)).toBe(500);
    expect(nameWidth("wide", 1000)).toBe(500);
    expect(nameWidth("", 1000)).toBe(500);
    expect(nameWidth("-5", 1000)).toBe(500);
  });
});
