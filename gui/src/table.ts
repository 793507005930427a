// A virtualized tree table: only the rows in view exist in the DOM, so expanding a node with
// 10^5 children or sorting a flat profile of every frame stays fast.

import { Frames, Tree, formatPercent, formatValue, frameLabel, kindLabel } from "./model";
import { kindColor } from "./colors";

export const ROW_H = 22;
const VALUE_COL_W = 104;

/** The name column's width: one for every table, kept across views and reloads (localStorage)
 * once the user drags it, else a share of the window, so deep frames keep their names. */
export const NAME_COLUMN = { storageKey: "deepcontext.nameColumnWidth", share: 0.5, min: 240, max: 6000 };

export function defaultNameWidth(windowWidth: number): number {
  return Math.max(NAME_COLUMN.min, Math.round(windowWidth * NAME_COLUMN.share));
}

export function clampNameWidth(w: number): number {
  return Math.round(Math.min(NAME_COLUMN.max, Math.max(NAME_COLUMN.min, w)));
}

/** The width to use: the stored one when it is a number, else the default for the window. */
export function nameWidth(stored: string | null, windowWidth: number): number {
  const w = stored === null ? NaN : Number(stored);
  return Number.isFinite(w) && w > 0 ? clampNameWidth(w) : defaultNameWidth(windowWidth);
}

/** Sets the name column's width on the page (the CSS variable every table's grid reads). */
class NameColumn {
  width = 0;
  constructor() {
    this.refresh();
    window.addEventListener("resize", () => this.refresh());
  }
  private stored(): string | null {
    try {
      return window.localStorage.getItem(NAME_COLUMN.storageKey);
    } catch {
      return null; // storage disabled: the default for the window
    }
  }
  refresh(): void {
    this.apply(nameWidth(this.stored(), window.innerWidth));
  }
  apply(w: number): void {
    this.width = clampNameWidth(w);
    document.documentElement.style.setProperty("--namew", `${this.width}px`);
  }
  save(): void {
    try {
      window.localStorage.setItem(NAME_COLUMN.storageKey, String(this.width));
    } catch {
      /* kept for this page only */
    }
  }
  reset(): void {
    try {
      window.localStorage.removeItem(NAME_COLUMN.storageKey);
    } catch {
      /* nothing stored */
    }
    this.refresh();
  }
}

let nameColumn: NameColumn | null = null;

/** What the table needs of a tree: frames, and children on demand (a lazy tree computes them). */
export interface TableTree {
  frames: Frames;
  frame: ArrayLike<number>;
  children(n: number): ArrayLike<number>;
  hasChildren(n: number): boolean;
}

export function tableTree(t: Tree): TableTree {
  return {
    frames: t.frames,
    frame: t.frame,
    children: (n) => t.childIdx.subarray(t.childStart[n], t.childStart[n + 1]),
    hasChildren: (n) => t.childStart[n + 1] > t.childStart[n],
  };
}

export interface Column {
  id: string;
  label: string;
  value: (n: number) => number;
  unit: string;
  /** show the value as a percentage of this total (0: show the value) */
  total?: number;
  /** signed values (diff): sort by absolute value, colour red/blue */
  signed?: boolean;
  title?: string;
  /** why a value can be unknown (NaN, shown as n/a): the n/a cells' tooltip */
  naTitle?: string;
}

/** The text of a value cell ("n/a" for an unknown value: a statistic that does not combine). */
export function cellText(v: number, col: Column): string {
  if (col.total !== undefined) return formatPercent(v, col.total);
  return (col.signed && v > 0 ? "+" : "") + formatValue(v, col.unit);
}

/** Sort key of a value: unknown values last. */
const sortKey = (v: number): number => (Number.isNaN(v) ? -Infinity : v);

export interface TableOptions {
  tree: TableTree;
  columns: Column[];
  /** column id to sort children by (descending), or "name" */
  sort: string;
  root: number;
  /** nodes to show expanded */
  expanded: Set<number>;
  /** when set, only the root's children that pass are listed (flat view search) */
  filter?: ((n: number) => boolean) | null;
  /** nodes to mark (search matches) */
  mark?: ((n: number) => boolean) | null;
  selected?: number;
}

export class TreeTable {
  readonly el: HTMLElement;
  private head: HTMLElement;
  private viewport: HTMLElement;
  private spacer: HTMLElement;
  private body: HTMLElement;
  private opts: TableOptions | null = null;
  private rows: Int32Array = new Int32Array(0);
  private depths: Int32Array = new Int32Array(0);
  private template = "";
  private pool: PoolRow[] = [];
  lastRowsMs = 0;

  constructor(
    host: HTMLElement,
    private onSort: (col: string) => void,
    private onSelect: (node: number) => void,
    private onActivate: (node: number) => void,
    private onToggle: (node: number, open: boolean) => void,
    name = "table",
    /** a frame's file as shown on hover (the full path) */
    private fullPath: (file: string) => string = (file) => file,
  ) {
    this.el = document.createElement("div");
    this.el.className = "ttable";
    this.el.dataset.name = name;
    this.head = document.createElement("div");
    this.head.className = "thead";
    this.viewport = document.createElement("div");
    this.viewport.className = "tviewport";
    this.spacer = document.createElement("div");
    this.spacer.className = "tspacer";
    this.body = document.createElement("div");
    this.body.className = "tbody";
    this.spacer.appendChild(this.body);
    // the header sits inside the scroller (sticky at the top) so it scrolls sideways with the rows
    this.viewport.append(this.head, this.spacer);
    this.el.append(this.viewport);
    host.appendChild(this.el);
    nameColumn ??= new NameColumn();
    this.viewport.addEventListener("scroll", () => this.paint());
    this.body.addEventListener("click", (ev) => {
      const row = (ev.target as HTMLElement).closest(".trow") as HTMLElement | null;
      if (!row) return;
      const n = parseInt(row.dataset.node!, 10);
      if ((ev.target as HTMLElement).classList.contains("caret")) {
        this.onToggle(n, !this.opts!.expanded.has(n));
      } else {
        this.select(n);
        this.onSelect(n);
      }
    });
    this.body.addEventListener("dblclick", (ev) => {
      const row = (ev.target as HTMLElement).closest(".trow") as HTMLElement | null;
      if (row) this.onActivate(parseInt(row.dataset.node!, 10));
    });
  }

  set(opts: TableOptions): void {
    this.opts = opts;
    this.template = `var(--namew) ${opts.columns.map(() => `${VALUE_COL_W}px`).join(" ")}`;
    this.el.style.setProperty("--minw", `calc(var(--namew) + ${VALUE_COL_W * opts.columns.length}px)`);
    this.head.replaceChildren();
    this.head.style.gridTemplateColumns = this.template;
    this.el.style.setProperty("--cols", this.template);
    const mk = (id: string, label: string, title?: string) => {
      const h = document.createElement("div");
      h.className = "th" + (opts.sort === id ? " sorted" : "");
      h.dataset.col = id;
      h.textContent = label + (opts.sort === id ? (id === "name" ? " ▲" : " ▼") : "");
      if (title) h.title = title;
      h.addEventListener("click", () => this.onSort(id));
      this.head.appendChild(h);
    };
    mk("name", "name");
    this.head.firstElementChild!.appendChild(this.resizeHandle());
    for (const c of opts.columns) mk(c.id, c.label, c.title);
    this.computeRows();
    this.paint();
  }

  /** The drag handle at the name header's right edge; a double-click goes back to the default. */
  private resizeHandle(): HTMLElement {
    const h = document.createElement("span");
    h.className = "colresize";
    h.title = "drag to resize the name column (double-click: default width)";
    h.addEventListener("click", (ev) => ev.stopPropagation()); // not a sort
    h.addEventListener("dblclick", (ev) => {
      ev.stopPropagation();
      nameColumn!.reset();
    });
    h.addEventListener("pointerdown", (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      h.setPointerCapture(ev.pointerId);
      const x0 = ev.clientX;
      const w0 = nameColumn!.width;
      const move = (e: PointerEvent) => nameColumn!.apply(w0 + e.clientX - x0);
      const up = () => {
        h.removeEventListener("pointermove", move);
        h.removeEventListener("pointerup", up);
        h.removeEventListener("pointercancel", up);
        if (nameColumn!.width !== w0) nameColumn!.save(); // a plain click keeps following the window
      };
      h.addEventListener("pointermove", move);
      h.addEventListener("pointerup", up);
      h.addEventListener("pointercancel", up);
    });
    return h;
  }

  /** The visible rows: a depth-first walk over expanded nodes, children sorted. */
  private computeRows(): void {
    const t0 = performance.now();
    const o = this.opts!;
    const t = o.tree;
    const col = o.columns.find((c) => c.id === o.sort);
    const vals = col?.value;
    const signed = col?.signed;
    const labels = o.sort === "name" ? (i: number) => frameLabel(t.frames, t.frame[i]) : null;
    const rows: number[] = [];
    const depths: number[] = [];
    const stack: number[] = [o.root];
    const dstack: number[] = [0];
    while (stack.length) {
      const n = stack.pop()!;
      const d = dstack.pop()!;
      rows.push(n);
      depths.push(d);
      if (!o.expanded.has(n)) continue;
      let kids = Array.from(t.children(n));
      if (o.filter && n === o.root) kids = kids.filter((k) => o.filter!(k));
      if (labels) {
        const lab = new Map(kids.map((k) => [k, labels(k)]));
        kids.sort((a, b) => lab.get(a)!.localeCompare(lab.get(b)!));
      } else if (vals) {
        const v = new Map(kids.map((k) => [k, sortKey(vals(k))]));
        if (signed) kids.sort((a, b) => Math.abs(v.get(b)!) - Math.abs(v.get(a)!) || a - b);
        else kids.sort((a, b) => v.get(b)! - v.get(a)! || a - b);
      }
      for (let k = kids.length - 1; k >= 0; k--) {
        stack.push(kids[k]);
        dstack.push(d + 1);
      }
    }
    this.rows = Int32Array.from(rows);
    this.depths = Int32Array.from(depths);
    this.spacer.style.height = `${this.rows.length * ROW_H}px`;
    this.el.dataset.rows = String(this.rows.length);
    this.lastRowsMs = performance.now() - t0;
  }

  /** Marks `node` selected without rebuilding the rows (keeps a double-click on the same row). */
  select(node: number): void {
    if (!this.opts) return;
    this.opts.selected = node;
    this.body.querySelectorAll(".trow.selected").forEach((r) => r.classList.remove("selected"));
    this.body.querySelector(`.trow[data-node="${node}"]`)?.classList.add("selected");
  }

  scrollToNode(node: number): void {
    const i = this.rows.indexOf(node);
    if (i < 0) return;
    const top = i * ROW_H + this.head.offsetHeight;
    const vh = this.viewport.clientHeight;
    if (top < this.viewport.scrollTop || top > this.viewport.scrollTop + vh - ROW_H) this.viewport.scrollTop = Math.max(0, top - vh / 3);
    this.paint();
  }

  get rowCount(): number {
    return this.rows.length;
  }

  /** Fills the rows in view, reusing their elements (only text and classes change). */
  private paint(): void {
    const o = this.opts;
    if (!o) return;
    const t = o.tree;
    const vh = this.viewport.clientHeight || 600;
    const first = Math.max(0, Math.floor((this.viewport.scrollTop - this.head.offsetHeight) / ROW_H) - 5);
    const last = Math.min(this.rows.length, first + Math.ceil(vh / ROW_H) + 10);
    this.body.style.transform = `translateY(${first * ROW_H}px)`;
    const need = last - first;
    const ncols = o.columns.length;
    while (this.pool.length < need) this.pool.push(this.makeRow());
    for (let k = 0; k < this.pool.length; k++) {
      const row = this.pool[k];
      if (k >= need) {
        if (row.el.parentNode) row.el.remove();
        continue;
      }
      if (!row.el.parentNode || row.el.parentNode !== this.body) this.body.appendChild(row.el);
      const r = first + k;
      const n = this.rows[r];
      const el = row.el;
      el.dataset.node = String(n);
      el.className = "trow" + (n === o.selected ? " selected" : "") + (o.mark && o.mark(n) ? " match" : "");
      row.name.style.paddingLeft = `${4 + 14 * this.depths[r]}px`;
      row.caret.textContent = t.hasChildren(n) ? (o.expanded.has(n) ? "▾" : "▸") : "";
      const fr = t.frame[n];
      const kind = t.frames.kind[fr];
      if (row.chip.dataset.kind !== kind) {
        row.chip.dataset.kind = kind;
        row.chip.style.background = kindColor(kind);
        row.chip.title = kindLabel(kind);
      }
      const text = frameLabel(t.frames, fr);
      row.label.textContent = text;
      row.label.title = text + (t.frames.file[fr] ? `\n${this.fullPath(t.frames.file[fr])}:${t.frames.line[fr]}` : "");
      while (row.cells.length < ncols) {
        const c = document.createElement("div");
        row.cells.push(c);
      }
      for (let c = 0; c < row.cells.length; c++) {
        const cell = row.cells[c];
        if (c >= ncols) {
          if (cell.parentNode) cell.remove();
          continue;
        }
        if (!cell.parentNode) el.appendChild(cell);
        const col = o.columns[c];
        const v = col.value(n);
        let cls = "tnum";
        cell.textContent = cellText(v, col);
        if (col.signed && v !== 0 && col.total === undefined) cls += v > 0 ? " up" : v < 0 ? " down" : "";
        if (Number.isNaN(v)) {
          cls += " na";
          cell.title = col.naTitle ?? "unknown";
        } else if (cell.title) cell.title = "";
        cell.className = cls;
      }
    }
  }

  private makeRow(): PoolRow {
    const el = document.createElement("div");
    const name = document.createElement("div");
    name.className = "tname";
    const caret = document.createElement("span");
    caret.className = "caret";
    const chip = document.createElement("span");
    chip.className = "kind";
    const label = document.createElement("span");
    label.className = "label";
    name.append(caret, chip, label);
    el.appendChild(name);
    return { el, name, caret, chip, label, cells: [] };
  }
}

interface PoolRow {
  el: HTMLElement;
  name: HTMLElement;
  caret: HTMLElement;
  chip: HTMLElement;
  label: HTMLElement;
  cells: HTMLElement[];
}
