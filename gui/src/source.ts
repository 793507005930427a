// The source view: CodeMirror 6, read-only, with a gutter of per-line inclusive/exclusive values
// and a heat background on the lines that cost time.

import { EditorState, RangeSetBuilder } from "@codemirror/state";
import { Decoration, EditorView, GutterMarker, gutter, lineNumbers } from "@codemirror/view";
import { defaultHighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { cpp } from "@codemirror/lang-cpp";
import { LineValues } from "./transforms";
import { formatPercent, formatValue } from "./model";

class ValueMarker extends GutterMarker {
  constructor(private text: string, private cls: string) {
    super();
  }
  eq(other: GutterMarker): boolean {
    return other instanceof ValueMarker && other.text === this.text;
  }
  toDOM(): Node {
    const s = document.createElement("span");
    s.className = this.cls;
    s.textContent = this.text;
    return s;
  }
}

function language(file: string) {
  if (/\.(py|pyi)$/.test(file)) return [python()];
  if (/\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh)$/.test(file)) return [cpp()];
  return [];
}

export class SourceView {
  private view: EditorView | null = null;

  constructor(private host: HTMLElement) {}

  show(file: string, text: string, lines: LineValues[], total: number, unit: string, line: number): void {
    const byLine = new Map(lines.map((l) => [l.line, l]));
    const max = lines.reduce((m, l) => Math.max(m, l.inc), 0);
    const incGutter = gutter({
      class: "cm-metric-gutter",
      lineMarker: (view, block) => {
        const ln = view.state.doc.lineAt(block.from).number;
        const v = byLine.get(ln);
        return v ? new ValueMarker(`${formatValue(v.inc, unit)} ${formatPercent(v.inc, total)}`, "inc") : null;
      },
      initialSpacer: () => new ValueMarker("000.00 ms 00.0%", "inc"),
    });
    const excGutter = gutter({
      class: "cm-metric-gutter",
      lineMarker: (view, block) => {
        const ln = view.state.doc.lineAt(block.from).number;
        const v = byLine.get(ln);
        return v && v.exc ? new ValueMarker(formatValue(v.exc, unit), "exc") : null;
      },
      initialSpacer: () => new ValueMarker("000.00 ms", "exc"),
    });
    const doc = EditorState.create({ doc: text }).doc;
    const heat = new RangeSetBuilder<Decoration>();
    for (let ln = 1; ln <= doc.lines; ln++) {
      const v = byLine.get(ln);
      if (!v || !(max > 0) || v.inc <= 0) continue;
      const a = Math.min(0.6, 0.08 + (0.52 * v.inc) / max);
      heat.add(doc.line(ln).from, doc.line(ln).from, Decoration.line({ attributes: { style: `background: rgba(255, 90, 40, ${a.toFixed(3)})`, "data-hot": "1" }, class: ln === line ? "cm-target-line" : "" }));
    }
    const state = EditorState.create({
      doc,
      extensions: [
        EditorState.readOnly.of(true),
        EditorView.editable.of(false),
        lineNumbers(),
        incGutter,
        excGutter,
        syntaxHighlighting(defaultHighlightStyle),
        EditorView.decorations.of(heat.finish()),
        ...language(file),
      ],
    });
    this.view?.destroy();
    this.host.replaceChildren();
    this.view = new EditorView({ state, parent: this.host });
    if (line > 0 && line <= state.doc.lines) {
      const pos = state.doc.line(line).from;
      this.view.dispatch({ effects: EditorView.scrollIntoView(pos, { y: "center" }) });
    }
    this.host.dataset.file = file;
    this.host.dataset.line = String(line);
  }
}
