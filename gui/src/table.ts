// A virtualized tree table: only the rows in view exist in the DOM, so expanding a node with
// 10^5 children or sorting a flat profile of every frame stays fast.

import { Tree, formatPercent, formatValue, frameLabel, kindLabel } from "./model";
import { kindColor } from "./colors";

export const ROW_H = 22;

export interface Column {
  id: string;
  label: string;
  values: Float64Array;
  unit: string;
  /** show the value as a percentage of this total (0: show the value) */
  total?: number;
  /** signed values (diff): sort by absolute value, colour red/blue */
  signed?: boolean;
  title?: string;
}

export interface TableOptions {
  tree: Tree;
  columns: Column[];
  /** column id to sort children by (descending), or "name" */
  sort: string;
  root: number;
  /** nodes to show expanded */
  expanded: Set<number>;
  /** when set, only the root's children with a 1 here are listed (flat view search) */
  filter?: Uint8Array | null;
  /** nodes to mark (search matches) */
  mark?: Uint8Array | null;
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
  lastRowsMs = 0;

  constructor(
    host: HTMLElement,
    private onSort: (col: string) => void,
    private onSelect: (node: number) => void,
    private onActivate: (node: number) => void,
    private onToggle: (node: number, open: boolean) => void,
    name = "table",
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
    this.viewport.appendChild(this.spacer);
    this.el.append(this.head, this.viewport);
    host.appendChild(this.el);
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
    this.template = `minmax(240px, 1fr) ${opts.columns.map(() => "110px").join(" ")}`;
    this.head.replaceChildren();
    this.head.style.gridTemplateColumns = this.template;
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
    for (const c of opts.columns) mk(c.id, c.label, c.title);
    this.computeRows();
    this.paint();
  }

  /** The visible rows: a depth-first walk over expanded nodes, children sorted. */
  private computeRows(): void {
    const t0 = performance.now();
    const o = this.opts!;
    const t = o.tree;
    const col = o.columns.find((c) => c.id === o.sort);
    const vals = col?.values;
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
      let kids = Array.from(t.childIdx.subarray(t.childStart[n], t.childStart[n + 1]));
      if (o.filter && n === o.root) kids = kids.filter((k) => o.filter![k]);
      if (labels) {
        const lab = new Map(kids.map((k) => [k, labels(k)]));
        kids.sort((a, b) => lab.get(a)!.localeCompare(lab.get(b)!));
      } else if (vals) {
        if (signed) kids.sort((a, b) => Math.abs(vals[b]) - Math.abs(vals[a]) || a - b);
        else kids.sort((a, b) => vals[b] - vals[a] || a - b);
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
    const top = i * ROW_H;
    const vh = this.viewport.clientHeight;
    if (top < this.viewport.scrollTop || top > this.viewport.scrollTop + vh - ROW_H) this.viewport.scrollTop = Math.max(0, top - vh / 3);
    this.paint();
  }

  get rowCount(): number {
    return this.rows.length;
  }

  private paint(): void {
    const o = this.opts;
    if (!o) return;
    const t = o.tree;
    const vh = this.viewport.clientHeight || 600;
    const first = Math.max(0, Math.floor(this.viewport.scrollTop / ROW_H) - 5);
    const last = Math.min(this.rows.length, first + Math.ceil(vh / ROW_H) + 10);
    this.body.style.transform = `translateY(${first * ROW_H}px)`;
    const frag = document.createDocumentFragment();
    for (let r = first; r < last; r++) {
      const n = this.rows[r];
      const row = document.createElement("div");
      row.className = "trow";
      if (n === o.selected) row.classList.add("selected");
      if (o.mark && o.mark[n]) row.classList.add("match");
      row.dataset.node = String(n);
      row.style.gridTemplateColumns = this.template;
      const name = document.createElement("div");
      name.className = "tname";
      name.style.paddingLeft = `${4 + 14 * this.depths[r]}px`;
      const caret = document.createElement("span");
      const hasKids = t.childStart[n + 1] > t.childStart[n];
      caret.className = "caret";
      caret.textContent = hasKids ? (o.expanded.has(n) ? "▾" : "▸") : "";
      const fr = t.frame[n];
      const chip = document.createElement("span");
      chip.className = "kind";
      chip.style.background = kindColor(t.frames.kind[fr]);
      chip.title = kindLabel(t.frames.kind[fr]);
      const label = document.createElement("span");
      label.className = "label";
      label.textContent = frameLabel(t.frames, fr);
      label.title = label.textContent + (t.frames.file[fr] ? `\n${t.frames.file[fr]}:${t.frames.line[fr]}` : "");
      name.append(caret, chip, label);
      row.appendChild(name);
      for (const c of o.columns) {
        const cell = document.createElement("div");
        cell.className = "tnum";
        const v = c.values[n];
        if (c.total !== undefined) cell.textContent = formatPercent(v, c.total);
        else {
          cell.textContent = (c.signed && v > 0 ? "+" : "") + formatValue(v, c.unit);
          if (c.signed && v !== 0) cell.classList.add(v > 0 ? "up" : "down");
        }
        row.appendChild(cell);
      }
      frag.appendChild(row);
    }
    this.body.replaceChildren(frag);
  }
}
