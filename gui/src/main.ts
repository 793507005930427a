// The app: loads the profile(s) from the local server, keeps the view state in the URL hash, and
// draws the chosen view (flame graph, top-down, bottom-up, flat, sandwich, source, diff, findings).

import "./style.css";
import { DiffList, Findings, Info, loadInfo, loadSource, loadTree, getJSON } from "./api";
import { diffColor, frameColor, kindColor } from "./colors";
import { FlameGraph } from "./flame";
import {
  IMPORT_SYSTEM,
  MetricSpec,
  Tree,
  baseIncOf,
  combineNote,
  excOf,
  findSpec,
  formatPercent,
  formatValue,
  frameLabel,
  incOf,
  isImportSystem,
  kindLabel,
  metricSpecs,
  notCombinableWhy,
  ruleOf,
  shareTotal,
  widthMetric,
  widthOf,
} from "./model";
import { partialNotice } from "./meta";
import { PathContext, displayPath, fullPath, pathContext } from "./paths";
import { SourceView } from "./source";
import { DEFAULT_STATE, VIEWS, ViewName, ViewState, formatHash, parseHash } from "./state";
import { Column, TableTree, TreeTable, tableTree } from "./table";
import {
  Filtered,
  LazyBottomUp,
  SearchResult,
  compileSearch,
  diff,
  fileTotals,
  flat,
  hideKinds,
  hotPath,
  lineMetrics,
  pathTo,
  sandwich,
  search,
} from "./transforms";

const VIEW_LABELS: Record<ViewName, string> = {
  flame: "Flame graph",
  top: "Top-down",
  bottom: "Bottom-up",
  flat: "Flat",
  sandwich: "Sandwich",
  source: "Source",
  diff: "Diff",
  findings: "Findings",
};

const $ = (id: string) => document.getElementById(id)!;
const el = <K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

interface Timings {
  ready: boolean;
  loadMs: number;
  firstViewMs: number;
  lastApplyMs: number;
  /** ms since navigation start when the first view was drawn */
  readyAt?: number;
  error?: string;
}

declare global {
  interface Window {
    __dctx: Timings & { app?: App };
  }
}

/** What the details panel and table columns read: a Tree or a lazily built one. */
interface DetailTree {
  frames: Tree["frames"];
  frame: ArrayLike<number>;
  metrics: Tree["metrics"];
  inc: Record<string, ArrayLike<number>>;
  exc: Record<string, ArrayLike<number>>;
  base?: Tree["base"];
  perThread: boolean;
}

/** A metric value of one node (a ratio metric divides the two stored values). */
function val(t: DetailTree | NonNullable<Tree["base"]>, spec: MetricSpec, which: "inc" | "exc", n: number): number {
  const a = t[which][spec.num]?.[n] ?? 0;
  if (!spec.den) return a;
  const b = t[which][spec.den]?.[n] ?? 0;
  return b > 0 ? a / b : 0;
}

const tableCache = new WeakMap<Tree, TableTree>();
function asTable(t: Tree | LazyBottomUp): TableTree {
  if (t instanceof LazyBottomUp) return t;
  let x = tableCache.get(t);
  if (!x) tableCache.set(t, (x = tableTree(t)));
  return x;
}

/** A tree shown in a view, with a way back to the loaded profile's node ids. */
interface Shown {
  tree: DetailTree;
  /** view node -> a node id of the loaded profile (for focus in the URL), -1 where none */
  toOrig: (n: number) => number;
}

class App {
  info!: Info;
  trees: Tree[] = [];
  specs: MetricSpec[] = [];
  state: ViewState = { ...DEFAULT_STATE };
  private panes = new Map<ViewName, HTMLElement>();
  flame: FlameGraph | null = null;
  diffFlame: FlameGraph | null = null;
  private tables = new Map<string, TreeTable>();
  private expanded = new Map<string, { key: string; set: Set<number> }>();
  private cache = new Map<string, unknown>();
  private selected: { tree: DetailTree; node: number; toOrig: (n: number) => number } | null = null;
  private hover: { tree: DetailTree; node: number } | null = null;
  private source: SourceView | null = null;
  private findings: Findings | null = null;
  private diffList = new Map<string, DiffList>();
  private sourceText = new Map<string, { text: string } | { error: string }>();
  private tooltip = el("div");
  /** where the profiled program lives, for displayPath */
  private paths: PathContext = { cwd: "", roots: [] };

  async start(): Promise<void> {
    const t0 = performance.now();
    this.info = await loadInfo();
    const loads = [loadTree(0, this.info.profiles[0])];
    if (this.info.baseline) loads.push(loadTree(1, this.info.profiles[1]));
    this.trees = await Promise.all(loads);
    window.__dctx.loadMs = performance.now() - t0;
    this.specs = metricSpecs(this.trees[0].metrics);
    this.paths = pathContext(this.info.profiles[0].meta);
    this.tooltip.id = "tooltip";
    document.body.appendChild(this.tooltip);
    this.buildChrome();
    this.showPartial();
    window.addEventListener("popstate", () => this.fromHash());
    window.addEventListener("hashchange", () => this.fromHash());
    window.addEventListener("resize", () => this.render());
    this.state = parseHash(location.hash);
    this.apply();
    window.__dctx.firstViewMs = performance.now() - t0;
    window.__dctx.readyAt = performance.now();
    window.__dctx.ready = true;
    document.body.dataset.ready = "1";
  }

  private fromHash(): void {
    if (location.hash === formatHash(this.state)) return;
    this.state = parseHash(location.hash);
    this.apply();
  }

  /** Changes the state, records it in the URL (a history entry), and redraws. */
  set(patch: Partial<ViewState>, replace = false): void {
    this.state = { ...this.state, ...patch };
    const h = formatHash(this.state);
    if (h !== location.hash) {
      if (replace) history.replaceState(null, "", h);
      else history.pushState(null, "", h);
    }
    this.apply();
  }

  get spec(): MetricSpec {
    const s = findSpec(this.specs, this.state.metric);
    if (s) return s;
    const d = this.info.profiles[0].default_metric;
    return findSpec(this.specs, d) ?? this.specs[0] ?? { id: "none", label: "none", unit: "count", num: "none" };
  }

  // ---- derived trees (cached) --------------------------------------------------------------
  private memo<T>(key: string, make: () => T): T {
    if (!this.cache.has(key)) {
      if (this.cache.size > 24) this.cache.clear();
      this.cache.set(key, make());
    }
    return this.cache.get(key) as T;
  }

  private hiddenKey(): string {
    return [...this.state.hidden].sort().join(",");
  }

  filtered(p = 0): Filtered {
    return this.memo(`filtered:${p}:${this.hiddenKey()}`, () => hideKinds(this.trees[p], new Set(this.state.hidden)));
  }

  private reverseMap(p = 0): Int32Array {
    return this.memo(`rev:${p}:${this.hiddenKey()}`, () => {
      const f = this.filtered(p);
      const rev = new Int32Array(f.tree.n).fill(-1);
      for (let i = f.map.length - 1; i >= 0; i--) rev[f.map[i]] = i;
      return rev;
    });
  }

  private topShown(): { tree: Tree; toOrig: (n: number) => number } {
    const f = this.filtered();
    const rev = this.reverseMap();
    return { tree: f.tree, toOrig: (n) => rev[n] };
  }

  private focusNode(): number {
    const f = this.filtered();
    const id = this.state.focus;
    return id > 0 && id < f.map.length ? f.map[id] : 0;
  }

  private diffTree(): { tree: Tree; cur: Int32Array; toOrig: (n: number) => number } {
    return this.memo(`diff:${this.hiddenKey()}`, () => {
      const a = this.filtered(0);
      const b = this.filtered(1);
      const tree = diff(a.tree, b.tree);
      const cur = tree.diffMaps!.cur;
      const rev = new Int32Array(tree.n).fill(-1);
      for (let i = cur.length - 1; i > 0; i--) rev[cur[i]] = i;
      const frev = this.reverseMap(0);
      return {
        tree,
        cur,
        toOrig: (n: number) => {
          for (let j = n; j > 0; j = tree.parent[j]) if (rev[j] >= 0) return frev[rev[j]];
          return 0;
        },
      };
    });
  }

  // ---- chrome ------------------------------------------------------------------------------
  private buildChrome(): void {
    const tabs = $("tabs");
    for (const v of VIEWS) {
      const b = el("button", "", VIEW_LABELS[v]);
      b.dataset.view = v;
      if (v === "diff" && !this.info.baseline) {
        b.disabled = true;
        b.title = "start with: deepcontext view FILE BASELINE";
      }
      b.addEventListener("click", () => this.set({ view: v }));
      tabs.appendChild(b);
    }
    const sel = $("metric") as HTMLSelectElement;
    for (const s of this.specs) {
      const o = el("option", "", s.label);
      o.value = s.id;
      sel.appendChild(o);
    }
    sel.addEventListener("change", () => this.set({ metric: sel.value }));
    const q = $("search") as HTMLInputElement;
    let timer = 0;
    q.addEventListener("input", () => {
      clearTimeout(timer);
      timer = window.setTimeout(() => this.set({ search: q.value }, true), 150);
    });
    q.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") {
        clearTimeout(timer);
        this.set({ search: q.value }, true);
      }
    });
    const kinds = $("kinds");
    const present = new Set(this.trees.flatMap((t) => t.frames.kind));
    const shown = this.info.kinds.filter((k) => k !== "root" && present.has(k));
    if (this.trees.some((t) => t.frames.kind.some((_, i) => isImportSystem(t.frames, i)))) shown.push(IMPORT_SYSTEM);
    for (const k of shown) {
      const lab = el("label");
      const cb = el("input");
      cb.type = "checkbox";
      cb.value = k;
      cb.dataset.kind = k;
      cb.addEventListener("change", () => {
        const h = new Set(this.state.hidden);
        if (cb.checked) h.add(k);
        else h.delete(k);
        this.set({ hidden: [...h] });
      });
      const chip = el("span", "chip");
      chip.style.background = kindColor(k === IMPORT_SYSTEM ? "python" : k);
      lab.append(cb, chip, document.createTextNode(kindLabel(k)));
      kinds.appendChild(lab);
    }
    const main = $("main");
    for (const v of VIEWS) {
      const p = el("div", "pane");
      p.dataset.pane = v;
      if (v === "source") p.classList.add("split");
      if (v === "sandwich") p.classList.add("rows");
      if (v === "diff") p.classList.add("diff");
      main.appendChild(p);
      this.panes.set(v, p);
    }
  }

  /** A banner above every view when the profile (or the baseline) was cut short. */
  private showPartial(): void {
    const [p, base] = this.info.profiles;
    const lines = [partialNotice(p.meta), this.info.baseline && base ? partialNotice(base.meta, "baseline") : null].filter((x) => x !== null);
    const b = $("banner");
    b.replaceChildren(...lines.map((l) => el("div", "", l)));
    b.hidden = !lines.length;
  }

  private syncChrome(): void {
    const s = this.state;
    document.querySelectorAll<HTMLButtonElement>("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === s.view));
    ($("metric") as HTMLSelectElement).value = this.spec.id;
    const q = $("search") as HTMLInputElement;
    if (document.activeElement !== q) q.value = s.search;
    q.classList.toggle("bad", !!s.search && !compileSearch(s.search));
    document.querySelectorAll<HTMLInputElement>("#kinds input").forEach((cb) => (cb.checked = s.hidden.includes(cb.value)));
    for (const [v, p] of this.panes) p.classList.toggle("shown", v === s.view);
  }

  // ---- rendering ---------------------------------------------------------------------------
  apply(): void {
    const t0 = performance.now();
    try {
      this.syncChrome();
      this.render();
    } catch (e) {
      console.error(e);
      this.status(`error: ${(e as Error).message}`);
    }
    window.__dctx.lastApplyMs = performance.now() - t0;
    document.body.dataset.view = this.state.view;
  }

  render(): void {
    const v = this.state.view;
    const sub = $("subbar");
    sub.replaceChildren();
    if (v === "flame") this.renderFlame(sub);
    else if (v === "top") this.renderTop(sub);
    else if (v === "bottom") this.renderBottom(sub);
    else if (v === "flat") this.renderFlat(sub);
    else if (v === "sandwich") this.renderSandwich(sub);
    else if (v === "source") this.renderSource(sub);
    else if (v === "diff") this.renderDiff(sub);
    else if (v === "findings") this.renderFindings(sub);
    this.combineNote(sub);
    this.renderDetails();
    this.statusLine();
  }

  /** One line on how the chosen metric combines in this view's rows (merge statistics, wall
   * time across threads), as `deepcontext report` notes it. */
  private combineNote(sub: HTMLElement): void {
    const v = this.state.view;
    if (v === "findings" || v === "diff") return;
    const rows = v === "bottom" || v === "flat" || v === "sandwich" || v === "source" ? { perThread: false } : this.filtered().tree;
    const note = combineNote(this.filtered().tree, this.spec.num, rows);
    if (note) sub.appendChild(el("span", "legend note", note));
  }

  private statusLine(): void {
    const p = this.info.profiles[0];
    const t = this.trees[0];
    const spec = this.spec;
    const total = t.inc[spec.num]?.[0] ?? 0; // wall_time: the elapsed time, where recorded
    const cmd = (() => {
      try {
        return (JSON.parse(p.meta.command ?? "[]") as string[]).join(" ");
      } catch {
        return p.meta.command ?? "";
      }
    })();
    const parts = [`${p.path}`, `${p.nodes.toLocaleString("en-US")} nodes`, `total ${spec.num} ${formatValue(total, this.unitOf(spec.num))}`];
    if (cmd) parts.push(cmd);
    if (this.info.baseline) parts.push(`baseline ${this.info.profiles[1].path}`);
    if (p.notes.length) parts.push(`notes: ${p.notes.join("; ")}`);
    this.status(parts.join("  ·  "));
  }

  private status(s: string): void {
    $("status").textContent = s;
  }

  private unitOf(metric: string): string {
    return this.trees[0].metrics.find((m) => m.name === metric)?.unit ?? this.trees[1]?.metrics.find((m) => m.name === metric)?.unit ?? "";
  }

  private searchOn(tree: Tree, values: Float64Array): SearchResult | null {
    const re = compileSearch(this.state.search);
    if (!re) return null;
    return search(tree, re, values);
  }

  /** The search's matches, with the total of `metric` (the values that size boxes) in them. Wall
   * time: matches may lie in several threads, so no share of the elapsed time. */
  private searchSummary(sub: HTMLElement, r: SearchResult | null, total: number, tree: Tree): void {
    if (!r) return;
    const m = widthMetric(tree, this.spec);
    const share = shareTotal(tree, { ...this.spec, num: m }, { perThread: false }) === null ? "" : ` (${formatPercent(r.total, total) || "0%"} of the view)`;
    sub.appendChild(el("span", "legend", `search: ${r.count.toLocaleString("en-US")} matching nodes, ${m} ${formatValue(r.total, this.unitOf(m))}${share}`));
  }

  private crumbs(sub: HTMLElement, tree: Tree, focus: number, toOrig: (n: number) => number): void {
    const c = el("span", "crumbs");
    const add = (n: number, label: string) => {
      const a = el("a", "", label);
      a.addEventListener("click", () => this.set({ focus: n === 0 ? 0 : toOrig(n) }));
      c.appendChild(a);
    };
    add(0, "all");
    const path = pathTo(tree, focus);
    const shownPath = path.length > 8 ? [...path.slice(0, 2), -1, ...path.slice(-5)] : path;
    for (const n of shownPath) {
      c.appendChild(el("span", "sep", "›"));
      if (n < 0) c.appendChild(el("span", "", "…"));
      else add(n, frameLabel(tree.frames, tree.frame[n]));
    }
    sub.appendChild(c);
    if (focus) {
      const b = el("button", "", "Reset zoom");
      b.addEventListener("click", () => this.set({ focus: 0 }));
      sub.appendChild(b);
    }
  }

  private renderFlame(sub: HTMLElement): void {
    const pane = this.panes.get("flame")!;
    const { tree, toOrig } = this.topShown();
    const spec = this.spec;
    const values = widthOf(tree, spec);
    const focus = this.focusNode();
    if (!this.flame) {
      const host = el("div", "flamehost");
      host.style.height = "100%";
      pane.appendChild(host);
      this.flame = new FlameGraph(
        host,
        (n, ev) => this.onHover(this.flame!, n, ev),
        (n) => {
          const { toOrig: m } = this.topShown();
          this.selected = { tree: this.topShown().tree, node: n, toOrig: m };
          this.set({ focus: n === 0 ? 0 : m(n) });
        },
      );
    }
    this.crumbs(sub, tree, focus, toOrig);
    const o = el("button", "", this.state.flame === "icicle" ? "Flame (root at bottom)" : "Icicle (root at top)");
    o.addEventListener("click", () => this.set({ flame: this.state.flame === "icicle" ? "flame" : "icicle" }));
    sub.appendChild(o);
    const r = this.searchOn(tree, values);
    this.searchSummary(sub, r, values[focus], tree);
    const wm = widthMetric(tree, spec);
    if (wm !== spec.num) sub.appendChild(el("span", "legend note", `${spec.num} does not add up, so it cannot size boxes: they are sized by ${wm}.`));
    const f = tree.frames;
    const colors = this.memo(`colors:${this.hiddenKey()}`, () => new Array<string>(f.kind.length));
    this.flame.set({
      tree,
      values,
      focus,
      orientation: this.state.flame,
      color: (n) => colors[tree.frame[n]] ?? (colors[tree.frame[n]] = frameColor(f.kind[tree.frame[n]], f.name[tree.frame[n]])),
      dim: r ? r.match : null,
    });
    if (!this.selected || this.selected.tree !== tree) this.selected = { tree, node: focus, toOrig };
  }

  private onHover(_g: FlameGraph, n: number, ev: MouseEvent | null): void {
    const tt = this.tooltip;
    if (n < 0 || !ev) {
      tt.style.display = "none";
      this.hover = null;
      this.renderDetails();
      return;
    }
    const tree = this.state.view === "diff" ? this.diffTree().tree : this.topShown().tree;
    this.hover = { tree, node: n };
    const spec = this.spec;
    const inc = incOf(tree, spec)[n];
    const total = shareTotal(tree, spec);
    const f = tree.frames;
    const fr = tree.frame[n];
    const share = total === null || Number.isNaN(inc) ? "" : `  (${formatPercent(tree.inc[spec.num]?.[n] ?? 0, total)})`;
    let text = `${frameLabel(f, fr)}\n${kindLabel(f.kind[fr])}  ${spec.label}: ${formatValue(inc, spec.unit)}${share}`;
    if (tree.base) {
      const b = baseIncOf(tree, spec)[n];
      text += `\nbaseline: ${formatValue(b, spec.unit)}  change: ${inc - b >= 0 ? "+" : ""}${formatValue(inc - b, spec.unit)}`;
    }
    tt.textContent = text;
    tt.style.display = "block";
    const x = Math.min(ev.clientX + 14, window.innerWidth - tt.offsetWidth - 8);
    tt.style.left = `${x}px`;
    tt.style.top = `${ev.clientY + 16}px`;
    this.renderDetails();
  }

  /** The table columns of `tree`'s rows: `spec` inclusive and exclusive, their % of
   * `totalTree`'s whole where a share means something (shareTotal), then the other metrics. */
  private columns(tree: DetailTree, spec: MetricSpec, totalTree: Tree): Column[] {
    const unit = spec.unit;
    const whole = shareTotal(totalTree, spec, tree);
    const of = ruleOf(totalTree, spec.num) === "per_thread" ? "the elapsed time" : "the profile's total";
    const num = tree.inc[spec.num];
    const numx = tree.exc[spec.num];
    const cols: Column[] = [{ id: "inc", label: "inclusive", value: (n) => val(tree, spec, "inc", n), unit, title: `${spec.label}, inclusive`, naTitle: notCombinableWhy(spec.num) }];
    if (whole !== null) cols.push({ id: "incp", label: "incl %", value: (n) => num?.[n] ?? 0, unit, total: whole, title: `inclusive, % of ${of}` });
    cols.push({ id: "exc", label: "exclusive", value: (n) => val(tree, spec, "exc", n), unit, title: `${spec.label}, exclusive`, naTitle: notCombinableWhy(spec.num) });
    if (whole !== null) cols.push({ id: "excp", label: "excl %", value: (n) => numx?.[n] ?? 0, unit, total: whole, title: `exclusive, % of ${of}` });
    for (const m of tree.metrics) {
      const arr = tree.inc[m.name];
      if (m.name === spec.num || !arr || !(arr[0] > 0)) continue; // no empty columns
      cols.push({ id: `inc:${m.name}`, label: m.name, value: (n) => arr[n], unit: m.unit, title: `${m.name} (${m.unit}), inclusive: ${m.description}`, naTitle: notCombinableWhy(m.name) });
    }
    return cols;
  }

  private table(name: string, host: HTMLElement, shown: () => Shown): TreeTable {
    let t = this.tables.get(name);
    if (!t) {
      t = new TreeTable(
        host,
        (col) => this.set({ sort: col }),
        (n) => {
          const s = shown();
          this.selected = { tree: s.tree, node: n, toOrig: s.toOrig };
          this.renderDetails();
        },
        (n) => {
          const s = shown();
          if (name === "flat" || name === "bottom") this.set({ view: "sandwich", frame: s.tree.frame[n] });
          else if (s.toOrig(n) >= 0) this.set({ view: "flame", focus: s.toOrig(n) });
        },
        (n, open) => {
          const e = this.expanded.get(name);
          if (!e) return;
          if (open) e.set.add(n);
          else e.set.delete(n);
          this.render();
        },
        name,
        (file) => fullPath(file, this.paths),
      );
      this.tables.set(name, t);
    }
    return t;
  }

  /** The expanded set of a table, reset to the hot path when its tree changes. */
  private expandedFor(name: string, key: string, tree: Tree, root: number, values: Float64Array, hot = true): Set<number> {
    const e = this.expanded.get(name);
    if (e && e.key === key) return e.set;
    const set = new Set<number>([root]);
    if (hot) for (const n of hotPath(tree, values, root, 0.02, 40)) set.add(n);
    this.expanded.set(name, { key, set });
    return set;
  }

  private selectedIn(tree: DetailTree): number | undefined {
    return this.selected && this.selected.tree === tree ? this.selected.node : undefined;
  }

  private renderTop(sub: HTMLElement): void {
    const pane = this.panes.get("top")!;
    const shown = this.topShown();
    const { tree, toOrig } = shown;
    const spec = this.spec;
    const focus = this.focusNode();
    this.crumbs(sub, tree, focus, toOrig);
    const values = widthOf(tree, spec);
    const r = this.searchOn(tree, values);
    this.searchSummary(sub, r, values[focus], tree);
    const t = this.table("top", pane, () => this.topShown());
    const expanded = this.expandedFor("top", `${this.hiddenKey()}:${focus}:${spec.num}`, tree, focus, values);
    const mk = r?.match;
    t.set({ tree: asTable(tree), columns: this.columns(tree, spec, tree), sort: this.state.sort, root: focus, expanded, mark: mk ? (n) => mk[n] === 1 : null, selected: this.selectedIn(tree) });
  }

  private renderBottom(sub: HTMLElement): void {
    const pane = this.panes.get("bottom")!;
    const key = `bottom:${this.hiddenKey()}`;
    const base = this.filtered().tree;
    const tree = this.memo(key, () => new LazyBottomUp(base));
    const shown: Shown = { tree, toOrig: () => -1 };
    const spec = this.spec;
    sub.appendChild(el("span", "legend", "Bottom-up: each function with its own (exclusive) time at the first level; expand to see its callers. Double-click a row for its sandwich."));
    const r = this.searchOn(base, widthOf(base, spec));
    this.searchSummary(sub, r, widthOf(base, spec)[0], base);
    const re = compileSearch(this.state.search);
    const fm = re ? this.memo(`fm:${this.state.search}`, () => Uint8Array.from(base.frames.kind, (_, f) => (f > 0 && (re.test(frameLabel(base.frames, f)) || re.test(base.frames.file[f])) ? 1 : 0))) : null;
    const t = this.table("bottom", pane, () => shown);
    const e = this.expanded.get("bottom");
    const expanded = e && e.key === key ? e.set : new Set<number>([0]);
    this.expanded.set("bottom", { key, set: expanded });
    t.set({ tree, columns: this.columns(tree, spec, base), sort: this.state.sort, root: 0, expanded, mark: fm ? (n) => fm[tree.frame[n]] === 1 : null, selected: this.selectedIn(tree) });
  }

  private renderFlat(sub: HTMLElement): void {
    const pane = this.panes.get("flat")!;
    const key = `flat:${this.hiddenKey()}`;
    const tree = this.memo(key, () => flat(this.filtered().tree));
    const shown: Shown = { tree, toOrig: () => -1 };
    const spec = this.spec;
    sub.appendChild(el("span", "legend", "Flat: one row per frame (recursion counted once in inclusive). Double-click a row for its callers and callees."));
    const values = widthOf(tree, spec);
    const r = this.searchOn(tree, values);
    this.searchSummary(sub, r, values[0], tree);
    const t = this.table("flat", pane, () => shown);
    const expanded = this.expandedFor("flat", key, tree, 0, values, false);
    const mk = r?.match;
    t.set({ tree: asTable(tree), columns: this.columns(tree, spec, this.filtered().tree), sort: this.state.sort, root: 0, expanded, filter: mk ? (n) => mk[n] === 1 : null, selected: this.selectedIn(tree) });
  }

  private renderSandwich(sub: HTMLElement): void {
    const pane = this.panes.get("sandwich")!;
    const base = this.filtered().tree;
    const spec = this.spec;
    let f = this.state.frame;
    if (f < 0 || f >= base.frames.kind.length) {
      // default: the frame with the most exclusive value
      const fl = this.memo(`flat:${this.hiddenKey()}`, () => flat(base));
      const ex = fl.exc[spec.num] ?? new Float64Array(fl.n);
      let best = 0;
      for (let i = 1; i < fl.n; i++) if (ex[i] > ex[best] || best === 0) best = i;
      f = fl.frame[best];
    }
    const key = `sandwich:${this.hiddenKey()}:${f}`;
    const s = this.memo(key, () => sandwich(base, f));
    sub.appendChild(el("span", "legend", `Sandwich of ${frameLabel(base.frames, f)}: its callers (inverted, upper table) and callees (lower table). Pick another frame from a table row's details or the flat view.`));
    if (!pane.childElementCount) {
      pane.append(el("div", "boxcol"), el("div", "boxcol"));
      (pane.children[0] as HTMLElement).appendChild(el("div", "section-title", "Callers"));
      (pane.children[1] as HTMLElement).appendChild(el("div", "section-title", "Callees"));
    }
    const callersT = this.table("callers", pane.children[0] as HTMLElement, () => ({ tree: s.callers, toOrig: () => -1 }));
    const calleesT = this.table("callees", pane.children[1] as HTMLElement, () => ({ tree: s.callees, toOrig: () => -1 }));
    const wc = widthOf(s.callers, spec);
    const we = widthOf(s.callees, spec);
    callersT.set({ tree: asTable(s.callers), columns: this.columns(s.callers, spec, base), sort: this.state.sort, root: 1 < s.callers.n ? 1 : 0, expanded: this.expandedFor("callers", key, s.callers, 1, wc), selected: this.selectedIn(s.callers) });
    calleesT.set({ tree: asTable(s.callees), columns: this.columns(s.callees, spec, base), sort: this.state.sort, root: 1 < s.callees.n ? 1 : 0, expanded: this.expandedFor("callees", key, s.callees, 1, we), selected: this.selectedIn(s.callees) });
  }

  private renderSource(sub: HTMLElement): void {
    const pane = this.panes.get("source")!;
    const tree = this.trees[0];
    const spec = this.spec;
    const inc = incOf(tree, spec);
    // "<frozen runpy>", "<string>" ... name no file on disk
    const files = this.memo(`files:${spec.id}`, () => fileTotals(tree, widthOf(tree, spec)).filter((f) => !f.file.startsWith("<")));
    if (!pane.childElementCount) pane.append(el("div", "files"), el("div", "srchost"));
    const list = pane.children[0] as HTMLElement;
    const host = pane.children[1] as HTMLElement;
    const file = this.state.file || files[0]?.file || "";
    // a line or a file adds up its nodes, in whatever threads they ran: no share of wall time
    const total = shareTotal(tree, spec, { perThread: false }) ?? 0;
    list.replaceChildren();
    for (const ft of files) {
      const d = el("div", ft.file === file ? "active" : "");
      d.dataset.file = ft.file;
      d.title = fullPath(ft.file, this.paths);
      d.append(el("span", "v", formatPercent(ft.inc, total)), document.createTextNode(displayPath(ft.file, this.paths)));
      d.addEventListener("click", () => this.set({ file: ft.file, line: 0 }));
      list.appendChild(d);
    }
    if (!file) {
      host.replaceChildren(el("div", "msg", "This profile names no source files."));
      return;
    }
    const lines = lineMetrics(tree, spec, file, inc, excOf(tree, spec));
    // the hot line: the most exclusive (self) value, else the most inclusive
    const hot = lines.reduce((b, l) => (l.exc > b.exc || (l.exc === b.exc && l.inc > b.inc) ? l : b), { line: 0, inc: -1, exc: -1 });
    const line = this.state.line || hot.line;
    const legend = el("span", "legend", `${displayPath(file, this.paths)}: ${lines.length} lines with samples; hottest line ${hot.line} (${formatValue(hot.exc, spec.unit)} exclusive). Gutter: inclusive · % of total · exclusive.`);
    legend.title = fullPath(file, this.paths);
    sub.appendChild(legend);
    const cached = this.sourceText.get(file);
    if (!cached) {
      host.replaceChildren(el("div", "msg", "loading…"));
      loadSource(0, file)
        .then((r) => this.sourceText.set(file, { text: r.text }))
        .catch((e: Error) => this.sourceText.set(file, { error: e.message }))
        .then(() => {
          if (this.state.view === "source") this.render();
        });
      return;
    }
    if ("error" in cached) {
      host.replaceChildren(el("div", "msg err", `cannot show ${displayPath(file, this.paths)}: ${cached.error}`));
      return;
    }
    if (!this.source || host.dataset.file !== file || host.dataset.line !== String(line) || host.dataset.metric !== spec.id) {
      this.source = new SourceView(host);
      this.source.show(file, cached.text, lines, total, spec.unit, line);
      host.dataset.metric = spec.id;
    }
  }

  private renderDiff(sub: HTMLElement): void {
    const pane = this.panes.get("diff")!;
    if (!this.info.baseline) {
      pane.replaceChildren(el("div", "msg", "No baseline: start the GUI with `deepcontext view FILE BASELINE` to compare two profiles."));
      return;
    }
    const d = this.diffTree();
    const tree = d.tree;
    // the diff compares values that add up: a merge statistic's own metric stands in for it
    const spec = { ...this.spec, num: widthMetric(tree, this.spec), den: undefined };
    const cur = tree.inc[spec.num] ?? new Float64Array(tree.n);
    const base = tree.base!.inc[spec.num] ?? new Float64Array(tree.n);
    const f0 = this.focusNode();
    const focus = f0 > 0 ? d.cur[f0] : 0;
    const unit = this.unitOf(spec.num);
    const tc = cur[0];
    const tb = base[0];
    sub.appendChild(el("span", "legend", `${spec.num}: ${formatValue(tc, unit)} now vs ${formatValue(tb, unit)} in the baseline (${tc - tb >= 0 ? "+" : ""}${formatValue(tc - tb, unit)}, ${tb > 0 ? ((100 * (tc - tb)) / tb).toFixed(1) + "%" : "new"}). Red grew, blue shrank (relative to the larger value); box widths are the larger of the two.`));
    if (spec.num !== this.spec.num) sub.appendChild(el("span", "legend note", `${this.spec.num} does not add up: the diff compares ${spec.num}.`));
    this.crumbs(sub, tree, focus, d.toOrig);
    if (!pane.childElementCount) {
      const changes = el("div", "changes");
      const host = el("div", "flamehost");
      const tbl = el("div", "boxcol");
      pane.append(changes, host, tbl);
      this.diffFlame = new FlameGraph(
        host,
        (n, ev) => this.onHover(this.diffFlame!, n, ev),
        (n) => {
          const dd = this.diffTree();
          this.selected = { tree: dd.tree, node: n, toOrig: dd.toOrig };
          this.set({ focus: n === 0 ? 0 : dd.toOrig(n) });
        },
      );
    }
    const [changes, , tblHost] = Array.from(pane.children) as HTMLElement[];
    const delta = this.memo(`delta:${this.hiddenKey()}:${spec.num}`, () => {
      const out = new Float64Array(tree.n);
      for (let i = 0; i < tree.n; i++) {
        const m = Math.max(cur[i], base[i]);
        out[i] = m > 0 ? (cur[i] - base[i]) / m : 0;
      }
      return out;
    });
    // boxes: the current profile's widths, but nodes only in the baseline get theirs so they show
    const widths = this.memo(`dw:${this.hiddenKey()}:${spec.num}`, () => {
      const w = new Float64Array(tree.n);
      const ce = tree.exc[spec.num] ?? new Float64Array(tree.n);
      const be = tree.base!.exc[spec.num] ?? new Float64Array(tree.n);
      for (let i = 0; i < tree.n; i++) w[i] = Math.max(ce[i], be[i]);
      for (let i = tree.n - 1; i > 0; i--) w[tree.parent[i]] += w[i];
      return w;
    });
    const r = this.searchOn(tree, cur);
    this.diffFlame!.set({ tree, values: widths, focus, orientation: this.state.flame, color: (n) => diffColor(delta[n]), dim: r ? r.match : null });
    const dv = this.memo(`dv:${this.hiddenKey()}:${spec.num}`, () => {
      const ci = tree.inc[spec.num] ?? new Float64Array(tree.n);
      const ce = tree.exc[spec.num] ?? new Float64Array(tree.n);
      const be = tree.base!.exc[spec.num] ?? new Float64Array(tree.n);
      const di = new Float64Array(tree.n);
      const de = new Float64Array(tree.n);
      for (let i = 0; i < tree.n; i++) {
        di[i] = ci[i] - base[i];
        de[i] = ce[i] - be[i];
      }
      return { di, de };
    });
    const cols: Column[] = [
      { id: "inc", label: "now", value: (n) => cur[n], unit },
      { id: "base", label: "baseline", value: (n) => base[n], unit },
      { id: "delta", label: "change (incl)", value: (n) => dv.di[n], unit, signed: true },
      { id: "dexc", label: "change (excl)", value: (n) => dv.de[n], unit, signed: true },
    ];
    const sort = cols.some((c) => c.id === this.state.sort) ? this.state.sort : "delta";
    const t = this.table("diff", tblHost, () => ({ tree: this.diffTree().tree, toOrig: this.diffTree().toOrig }));
    const ex = this.expandedFor("diff", `${this.hiddenKey()}:${focus}:${spec.num}`, tree, focus, widths);
    const mk = r?.match;
    t.set({ tree: asTable(tree), columns: cols, sort, root: focus, expanded: ex, mark: mk ? (n) => mk[n] === 1 : null, selected: this.selectedIn(tree) });
    this.renderChanges(changes, spec.num, unit);
  }

  private renderChanges(host: HTMLElement, metric: string, unit: string): void {
    // The server's list splices out Python's import system unless the view shows it.
    const imports = this.state.hidden.includes(IMPORT_SYSTEM) ? "0" : "1";
    const key = `${metric}\u0001${imports}`;
    const list = this.diffList.get(key);
    if (!list) {
      host.replaceChildren(el("div", "msg", "loading the largest changes…"));
      getJSON<DiffList>(`diff?metric=${encodeURIComponent(metric)}&import_frames=${imports}`)
        .then((l) => this.diffList.set(key, l))
        .catch((e: Error) => this.diffList.set(key, { available: false, entries: [], metric: e.message }))
        .then(() => {
          if (this.state.view === "diff") this.renderChanges(host, metric, unit);
        });
      return;
    }
    host.replaceChildren();
    if (!list.available) {
      host.appendChild(el("div", "msg", `largest changes not available${list.metric ? ": " + list.metric : ""}`));
      return;
    }
    // deepcontext.diff leaves what ran inside Python's import system out unless its frames are kept
    if (imports === "0")
      host.appendChild(el("div", "legend imports", "Import time is left out of these changes (start-up, which varies from run to run); untick “import system” under hide kinds to include it."));
    const tbl = el("table");
    const head = el("tr");
    for (const h of ["largest changes by exclusive value (deepcontext.diff)", "status", "baseline (excl)", "now (excl)", "change (excl)", "change (incl)"]) head.appendChild(el("th", "", h));
    tbl.appendChild(head);
    for (const e of list.entries.slice(0, 30)) {
      const tr = el("tr");
      const p = el("td", "p", e.path.slice(-3).join(" › "));
      p.title = e.path.join("\n");
      p.addEventListener("click", () => {
        if (e.node > 0) this.set({ focus: e.node });
        else if (e.base_node > 0) {
          // only in the baseline: focus the closest ancestor that exists now
          this.set({ focus: 0 });
        }
      });
      const dlt = e.exclusive - e.base_exclusive;
      const dli = e.inclusive - e.base_inclusive;
      const sign = (v: number) => (v > 0 ? "up" : v < 0 ? "down" : "");
      tr.append(
        p,
        el("td", "", e.status),
        el("td", "", formatValue(e.base_exclusive, unit)),
        el("td", "", formatValue(e.exclusive, unit)),
        el("td", sign(dlt), `${dlt > 0 ? "+" : ""}${formatValue(dlt, unit)}`),
        el("td", sign(dli), `${dli > 0 ? "+" : ""}${formatValue(dli, unit)}`),
      );
      tbl.appendChild(tr);
    }
    host.appendChild(tbl);
    host.dataset.count = String(list.count ?? 0);
  }

  private renderFindings(sub: HTMLElement): void {
    const pane = this.panes.get("findings")!;
    if (!this.findings) {
      pane.replaceChildren(el("div", "msg", "running the analyzer…"));
      getJSON<Findings>("findings")
        .then((f) => (this.findings = f))
        .catch((e: Error) => (this.findings = { available: false, findings: [], error: e.message }))
        .then(() => {
          if (this.state.view === "findings") this.render();
        });
      return;
    }
    const f = this.findings;
    sub.appendChild(el("span", "legend", f.available ? `${f.findings.length} findings, ranked by estimated saving` : "analyzer not available"));
    const box = el("div", "findings");
    if (f.error) box.appendChild(el("div", "msg err", f.error));
    if (f.available && !f.findings.length) box.appendChild(el("div", "msg", "No findings: no rule matched this profile."));
    f.findings.forEach((x, i) => {
      const card = el("div", "finding");
      card.dataset.index = String(i);
      const h = el("h3", "", `${i + 1}. ${x.title || x.rule} `);
      h.appendChild(el("span", "rule", `${x.rule} · ${(100 * x.share).toFixed(1)}% of ${x.metric} · saving ≈ ${formatValue(x.saving, this.unitOf(x.metric) || "ns")} (${(100 * x.saving_share).toFixed(1)}%, ${x.estimate})`));
      card.appendChild(h);
      card.appendChild(el("div", "", x.summary));
      if (x.location?.path?.length) card.appendChild(el("div", "path", x.location.path.join(" › ")));
      card.appendChild(el("div", "fix", `Suggestion: ${x.suggestion}`));
      if (x.evidence && Object.keys(x.evidence).length) card.appendChild(el("pre", "", JSON.stringify(x.evidence, null, 1)));
      const node = x.location?.node ?? x.nodes?.[0];
      if (node !== undefined && node !== null && node > 0) {
        const b = el("button", "", "Show in flame graph");
        b.dataset.node = String(node);
        b.addEventListener("click", () => this.set({ view: "flame", focus: node }));
        const b2 = el("button", "", "Top-down");
        b2.addEventListener("click", () => this.set({ view: "top", focus: node }));
        card.append(b, b2);
        const src = x.location?.source;
        const m = src ? /^(.*):(\d+)$/.exec(src) : null;
        if (m) {
          const file = this.trees[0].frames.file.find((ff) => ff === m[1] || ff.endsWith("/" + m[1])) ?? m[1];
          const b3 = el("button", "", `Source ${displayPath(file, this.paths)}:${m[2]}`);
          b3.title = `${fullPath(file, this.paths)}:${m[2]}`;
          b3.addEventListener("click", () => this.set({ view: "source", file, line: parseInt(m[2], 10) }));
          card.appendChild(b3);
        }
      }
      box.appendChild(card);
    });
    pane.replaceChildren(box);
  }

  // ---- details panel -----------------------------------------------------------------------
  private renderDetails(): void {
    const d = $("details");
    const cur = this.hover ?? this.selected;
    d.replaceChildren();
    if (!cur || cur.node < 0) {
      d.appendChild(el("div", "where", "Hover or click a frame to see its details. Click a box to zoom into it."));
      return;
    }
    const { tree, node } = cur;
    const f = tree.frames;
    const fr = tree.frame[node];
    const actions = el("div", "actions");
    const isTop = this.selected && this.selected.tree === tree && !this.hover;
    if (node > 0 && f.kind[fr] !== "root") {
      if (!tree.base) {
        const sb = el("button", "", "Callers / callees");
        sb.addEventListener("click", () => this.set({ view: "sandwich", frame: fr }));
        actions.appendChild(sb);
      }
      if (isTop && this.selected && this.selected.toOrig(node) > 0) {
        const orig = this.selected.toOrig(node);
        const fb = el("button", "", "Focus");
        fb.addEventListener("click", () => this.set({ view: this.state.view === "diff" ? "diff" : "flame", focus: orig }));
        actions.appendChild(fb);
      }
      if (f.file[fr] && f.line[fr] > 0) {
        const src = el("button", "", "Source");
        src.addEventListener("click", () => this.set({ view: "source", file: f.file[fr], line: f.line[fr] }));
        actions.appendChild(src);
      }
    }
    d.appendChild(actions);
    d.appendChild(el("div", "title", frameLabel(f, fr)));
    const where = [kindLabel(f.kind[fr])];
    const full: string[] = [];
    const line = f.line[fr] ? ":" + f.line[fr] : "";
    if (f.file[fr]) {
      where.push(displayPath(f.file[fr], this.paths) + line);
      full.push(fullPath(f.file[fr], this.paths) + line);
    }
    if (f.module[fr]) {
      where.push(displayPath(f.module[fr], this.paths));
      full.push(fullPath(f.module[fr], this.paths));
    }
    const w = el("div", "where", where.join(" · "));
    w.title = full.join("\n");
    d.appendChild(w);
    const tbl = el("table");
    const hdr = el("tr");
    const heads = ["metric", "inclusive", "% total", "exclusive"];
    if (tree.base) heads.push("baseline", "change");
    for (const h of heads) hdr.appendChild(el("th", "", h));
    tbl.appendChild(hdr);
    for (const s of this.specs) {
      if (!tree.inc[s.num] || !(tree.inc[s.num][0] > 0 || (tree.base?.inc[s.num]?.[0] ?? 0) > 0)) continue;
      const tr = el("tr");
      const inc = val(tree, s, "inc", node);
      const total = s.den ? null : shareTotal(tree.base ? (tree as Tree) : this.filtered().tree, s, tree);
      const cell = (v: number) => {
        const c = el("td", "", formatValue(v, s.unit));
        if (Number.isNaN(v)) c.title = notCombinableWhy(s.num);
        return c;
      };
      tr.append(el("td", "", s.label), cell(inc), el("td", "", total === null || Number.isNaN(inc) ? "" : formatPercent(inc, total)), cell(val(tree, s, "exc", node)));
      if (tree.base) {
        const b = val(tree.base, s, "inc", node);
        tr.append(el("td", "", formatValue(b, s.unit)), el("td", "", `${inc - b >= 0 ? "+" : ""}${formatValue(inc - b, s.unit)}`));
      }
      tbl.appendChild(tr);
    }
    d.appendChild(tbl);
  }
}

window.__dctx = { ready: false, loadMs: 0, firstViewMs: 0, lastApplyMs: 0 };
const app = new App();
window.__dctx.app = app;
app.start().catch((e: Error) => {
  window.__dctx.error = e.message;
  document.body.dataset.ready = "error";
  $("main").replaceChildren(el("div", "msg err", `Cannot load the profile: ${e.message}`));
  $("status").textContent = "error";
});
