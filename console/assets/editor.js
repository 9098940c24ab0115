// The console's editor (docs/console.md, "Editor"): CodeMirror 6 over the editor page's
// textarea. The textarea stays the form's field, kept equal to the text on every change, so
// the form posts the same way with or without this script (progressive enhancement); this
// file only draws a better editor in its place. console.js mounts it and feeds it findings.
import { EditorState, StateEffect, StateField, RangeSet } from "@codemirror/state";
import {
  EditorView, GutterMarker, drawSelection, gutterLineClass, highlightActiveLine,
  highlightActiveLineGutter, highlightSpecialChars, keymap, lineNumbers,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentMore } from "@codemirror/commands";
import {
  LanguageSupport, bracketMatching, defaultHighlightStyle, syntaxHighlighting,
} from "@codemirror/language";
import { highlightSelectionMatches, searchKeymap } from "@codemirror/search";
import { markdownLanguage } from "@codemirror/lang-markdown";
import { yaml, yamlFrontmatter } from "@codemirror/lang-yaml";

// The lines a validation finding names, marked in the line-number gutter: "bad" (an error) or
// "meh" (a warning), as the findings list beside the editor says.
const setMarks = StateEffect.define();
class LineMark extends GutterMarker {
  constructor(kind) { super(); this.elementClass = kind; }
}
const MARKS = { bad: new LineMark("bad"), meh: new LineMark("meh") };
const marks = StateField.define({
  create() { return RangeSet.empty; },
  update(value, tr) {
    for (const e of tr.effects) {
      if (e.is(setMarks)) {
        const ranges = [];
        for (const [line, kind] of Object.entries(e.value)) {
          const n = Number(line);
          if (n >= 1 && n <= tr.state.doc.lines && MARKS[kind]) {
            ranges.push(MARKS[kind].range(tr.state.doc.line(n).from));
          }
        }
        return RangeSet.of(ranges, true);
      }
    }
    return value.map(tr.changes);
  },
  provide: (f) => gutterLineClass.from(f),
});

// Markdown (CommonMark and GitHub's extensions, without the nested HTML, CSS and JavaScript
// languages, which would triple the bundle) with its YAML frontmatter for SKILL.md and other prose, YAML for .yaml files; any
// other file is plain text with line numbers.
function language(path) {
  if (/\.(md|markdown|mdx)$/i.test(path)) return [yamlFrontmatter({ content: new LanguageSupport(markdownLanguage) })];
  if (/\.ya?ml$/i.test(path)) return [yaml()];
  return [];
}

// Tab indents (two spaces at the cursor, or every selected line); Escape then Tab leaves the
// editor (CodeMirror's tab-focus mode), Shift+Tab is the browser's: the focus moves back.
function tab(view) {
  if (view.state.readOnly) return false;
  const sel = view.state.selection.main;
  if (view.state.doc.lineAt(sel.from).number !== view.state.doc.lineAt(sel.to).number) {
    return indentMore(view);
  }
  view.dispatch(view.state.replaceSelection("  "), { scrollIntoView: true, userEvent: "input" });
  return true;
}

// The console's look, inside the editor's shadow root (its styles are constructed sheets
// there, which the console's Content-Security-Policy allows; a <style> element it refuses).
// The console's CSS variables reach in.
const theme = EditorView.theme({
  "&": { minHeight: "320px", font: "13px/20px var(--mono)", background: "#fff", color: "#1d2430" },
  "&.cm-focused": { outline: "2px solid #bac8ff", outlineOffset: "-1px" },
  ".cm-scroller": { font: "inherit", lineHeight: "20px" },
  ".cm-content": { padding: "10px 0" },
  ".cm-gutters": { background: "#f8f9fb", borderRight: "1px solid var(--line)", color: "#98a2b3" },
  ".cm-gutterElement.bad": { color: "var(--err)", fontWeight: "700", background: "var(--err-soft)" },
  ".cm-gutterElement.meh": { color: "var(--warn)", fontWeight: "700", background: "var(--warn-soft)" },
});

function mount(textarea, options) {
  const readOnly = textarea.readOnly;
  const host = document.createElement("div");
  host.className = "cm-host";
  const root = host.attachShadow({ mode: "open" });
  const view = new EditorView({
    root,
    parent: root,
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        lineNumbers(), highlightActiveLineGutter(), highlightSpecialChars(), history(),
        drawSelection(), bracketMatching(), highlightActiveLine(), highlightSelectionMatches(),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        theme, marks, language(options.path || ""),
        options.wrap ? EditorView.lineWrapping : [],
        EditorState.tabSize.of(4),
        EditorState.readOnly.of(readOnly),
        EditorView.contentAttributes.of({
          "aria-label": textarea.getAttribute("aria-label") || "File contents",
          spellcheck: "false",
        }),
        keymap.of([
          { key: "Tab", run: tab },
          { key: "Mod-s", run: () => { options.onSave(); return true; }, preventDefault: true },
          ...defaultKeymap, ...historyKeymap, ...searchKeymap,
        ]),
        EditorView.updateListener.of((u) => {
          if (!u.docChanged) return;
          textarea.value = u.state.doc.toString();
          options.onChange();
        }),
      ],
    }),
  });
  // Escape counts for one Tab: coming back, Tab indents again at once.
  view.contentDOM.addEventListener("focus", () => view.setTabFocusMode(false));
  textarea.parentNode.insertBefore(host, textarea);
  textarea.hidden = true;
  return {
    view,
    text: () => view.state.doc.toString(),
    // Replace the whole text, as typing would (the page validates on the change).
    set(text) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text }, userEvent: "input" });
    },
    mark(lines) { view.dispatch({ effects: setMarks.of(lines) }); },
    goToLine(n) {
      const line = view.state.doc.line(Math.max(1, Math.min(n, view.state.doc.lines)));
      view.dispatch({ selection: { anchor: line.from, head: line.to }, scrollIntoView: true });
      view.focus();
    },
  };
}

window.SkillfsEditor = { mount };
