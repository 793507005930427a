// The view state, kept in the URL hash so a view survives a reload and can be shared.

import { IMPORT_SYSTEM } from "./model";

export type ViewName = "flame" | "top" | "bottom" | "flat" | "sandwich" | "source" | "diff" | "findings";
export const VIEWS: ViewName[] = ["flame", "top", "bottom", "flat", "sandwich", "source", "diff", "findings"];

export interface ViewState {
  view: ViewName;
  metric: string;
  /** focused node id in the loaded (unfiltered) profile; 0 = whole tree */
  focus: number;
  search: string;
  hidden: string[];
  /** table sort: column id, e.g. "inc", "exc", "inc:samples" */
  sort: string;
  /** sandwich frame id */
  frame: number;
  file: string;
  line: number;
  /** flame graph orientation */
  flame: "icicle" | "flame";
}

export const DEFAULT_STATE: ViewState = {
  view: "flame",
  metric: "",
  focus: 0,
  search: "",
  hidden: [IMPORT_SYSTEM],
  sort: "inc",
  frame: -1,
  file: "",
  line: 0,
  flame: "icicle",
};

const KEYS: Record<keyof ViewState, string> = {
  view: "v",
  metric: "m",
  focus: "f",
  search: "q",
  hidden: "h",
  sort: "s",
  frame: "fr",
  file: "file",
  line: "l",
  flame: "o",
};

export function parseHash(hash: string): ViewState {
  const p = new URLSearchParams(hash.replace(/^#/, ""));
  const s: ViewState = { ...DEFAULT_STATE, hidden: [...DEFAULT_STATE.hidden] };
  const v = p.get(KEYS.view);
  if (v && (VIEWS as string[]).includes(v)) s.view = v as ViewName;
  s.metric = p.get(KEYS.metric) ?? "";
  const int = (k: string, d: number) => {
    const x = p.get(k);
    if (x === null || !/^-?\d+$/.test(x)) return d;
    return parseInt(x, 10);
  };
  s.focus = Math.max(0, int(KEYS.focus, 0));
  s.search = p.get(KEYS.search) ?? "";
  // No key: the default list; an empty value: nothing hidden.
  const h = p.get(KEYS.hidden);
  if (h !== null) s.hidden = h.split(",").filter(Boolean);
  s.sort = p.get(KEYS.sort) || DEFAULT_STATE.sort;
  s.frame = int(KEYS.frame, -1);
  s.file = p.get(KEYS.file) ?? "";
  s.line = Math.max(0, int(KEYS.line, 0));
  s.flame = p.get(KEYS.flame) === "flame" ? "flame" : "icicle";
  return s;
}

export function formatHash(s: ViewState): string {
  const p = new URLSearchParams();
  p.set(KEYS.view, s.view);
  if (s.metric) p.set(KEYS.metric, s.metric);
  if (s.focus) p.set(KEYS.focus, String(s.focus));
  if (s.search) p.set(KEYS.search, s.search);
  const sorted = (h: string[]) => [...h].sort().join(",");
  if (sorted(s.hidden) !== sorted(DEFAULT_STATE.hidden)) p.set(KEYS.hidden, s.hidden.join(","));
  if (s.sort !== DEFAULT_STATE.sort) p.set(KEYS.sort, s.sort);
  if (s.frame >= 0) p.set(KEYS.frame, String(s.frame));
  if (s.file) p.set(KEYS.file, s.file);
  if (s.line) p.set(KEYS.line, String(s.line));
  if (s.flame !== "icicle") p.set(KEYS.flame, s.flame);
  return "#" + p.toString();
}
