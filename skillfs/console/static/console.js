// skillfs console: progressive enhancement only. Every action also works as a plain form post.
"use strict";

(function () {
  const body = document.body;
  const csrf = body.dataset.csrf || "";

  // ------------------------------------------------------------ small helpers
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function toast(parts) {
    const box = document.getElementById("toasts");
    if (!box) return;
    const t = el("div", "toast");
    parts.forEach(function (p) { t.appendChild(typeof p === "string" ? document.createTextNode(p) : p); });
    box.appendChild(t);
    setTimeout(function () { t.remove(); }, 6000);
  }

  // ------------------------------------------------------------ toggles, confirms, back, copy
  // Enter in a field that belongs to one button of a larger form (the editor's canary rule)
  // submits with that button, never with the form's first one (Save, Save anyway).
  document.querySelectorAll("input[data-submit-with]").forEach(function (input) {
    input.addEventListener("keydown", function (ev) {
      if (ev.key !== "Enter") return;
      ev.preventDefault();
      const button = document.getElementById(input.dataset.submitWith) || document.getElementById("save");
      if (button && input.form) input.form.requestSubmit(button);
    });
  });

  // A panel behind a button (New skill, Upload zip, Save as canary…) comes open, and its
  // button hidden, so that it works without this script; here it folds behind its button,
  // unless the page opened it (data-open).
  document.querySelectorAll("[data-toggle]").forEach(function (btn) {
    const target = document.getElementById(btn.dataset.toggle);
    if (!target) return;
    btn.hidden = false;
    if (target.dataset.open === undefined) target.hidden = true;
    btn.addEventListener("click", function () {
      target.hidden = !target.hidden;
      const first = target.querySelector("input:not([type=hidden]), textarea");
      if (!target.hidden && first) first.focus();
    });
  });
  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    const asker = (ev.submitter && ev.submitter.dataset.confirm) ? ev.submitter : form;
    if (asker.dataset && asker.dataset.confirm && !window.confirm(asker.dataset.confirm)) ev.preventDefault();
  });
  document.querySelectorAll("[data-back]").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      if (window.history.length > 1) { ev.preventDefault(); window.history.back(); }
    });
  });
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      const src = document.getElementById(btn.dataset.copy);
      if (!src || !navigator.clipboard) return;
      navigator.clipboard.writeText(src.textContent).then(function () {
        btn.textContent = "Copied";
        setTimeout(function () { btn.textContent = "Copy"; }, 1500);
      });
    });
  });

  // ------------------------------------------------------------ folding directories, filtering lists
  // A tree ([data-tree]) has directory rows (data-dir, their path) and rows inside one
  // (data-in, the directory's path); a folded directory hides every row below it.
  const folded = new Map();  // tree element -> Set of folded directory paths

  function inFolded(set, dir) {
    for (const f of set) { if (dir === f || dir.startsWith(f + "/")) return true; }
    return false;
  }

  function applyTree(tree) {
    const set = folded.get(tree);
    tree.querySelectorAll("[data-row]").forEach(function (row) {
      row.hidden = inFolded(set, row.dataset.in || "");
      if (row.dataset.dir !== undefined) {
        const btn = row.querySelector(".folder");
        if (btn) btn.setAttribute("aria-expanded", String(!set.has(row.dataset.dir)));
      }
    });
  }

  function foldAll(tree, open) {
    const set = new Set();
    if (!open) {
      const keep = tree.dataset.keep || "";
      tree.querySelectorAll("[data-dir]").forEach(function (row) {
        const dir = row.dataset.dir;
        if (!(keep === dir || keep.startsWith(dir + "/"))) set.add(dir);
      });
    }
    folded.set(tree, set);
    applyTree(tree);
  }

  document.querySelectorAll("[data-tree]").forEach(function (tree) {
    folded.set(tree, new Set());
    if (tree.dataset.folded !== undefined) foldAll(tree, false);
    tree.addEventListener("click", function (ev) {
      const btn = ev.target.closest(".folder");
      const row = btn && btn.closest("[data-dir]");
      if (!row) return;
      const set = folded.get(tree);
      if (set.has(row.dataset.dir)) set.delete(row.dataset.dir); else set.add(row.dataset.dir);
      applyTree(tree);
    });
  });
  document.querySelectorAll("[data-fold]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      const tree = document.getElementById(btn.dataset.fold);
      if (tree) foldAll(tree, btn.dataset.open === "1");
    });
  });

  // A filter box ([data-filter] names the list) hides the rows shown that do not hold every
  // word typed; in a tree, a directory stays while a file below it matches. Enter asks the
  // server for every match of a paged list; a box over a list that is not paged stays local.
  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    const list = document.getElementById(input.dataset.filter);
    const count = document.querySelector("[data-filter-count='" + input.dataset.filter + "']");
    if (!list) return;
    const form = input.closest("form");
    if (form && form.dataset.local !== undefined) {
      form.addEventListener("submit", function (ev) { ev.preventDefault(); });
    }
    input.addEventListener("input", function () {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      const rows = Array.from(list.querySelectorAll("[data-row]"));
      const hit = function (text) {
        const t = text.toLowerCase();
        return words.every(function (w) { return t.indexOf(w) >= 0; });
      };
      if (!words.length) {
        rows.forEach(function (r) { r.hidden = false; });
        if (folded.has(list)) applyTree(list);
        if (count) count.textContent = "";
        return;
      }
      let shown = 0, files = 0;
      const dirsHit = new Set();
      rows.forEach(function (r) {
        if (r.dataset.dir !== undefined) return;
        files++;
        const ok = hit(r.dataset.path || r.textContent);
        r.hidden = !ok;
        if (ok) {
          shown++;
          const parts = (r.dataset.in || "").split("/");
          for (let i = 1; i <= parts.length; i++) dirsHit.add(parts.slice(0, i).join("/"));
        }
      });
      rows.forEach(function (r) {
        if (r.dataset.dir !== undefined) r.hidden = !dirsHit.has(r.dataset.dir);
      });
      if (count) count.textContent = shown + " of " + files + " shown";
    });
  });

  // ------------------------------------------------------------ live revision (Server-Sent Events)
  const live = document.getElementById("live");
  if (live && window.EventSource) {
    const revEl = document.getElementById("live-rev");
    const source = new EventSource("/events?domain=" + encodeURIComponent(live.dataset.domain));
    const setRev = function (rev) { revEl.textContent = rev ? String(rev.counter) : "—"; };
    source.addEventListener("open", function () { live.classList.add("connected"); });
    source.addEventListener("error", function () { live.classList.remove("connected"); });
    source.addEventListener("trouble", function (ev) {
      live.classList.remove("connected");
      live.title = "Live updates paused: " + JSON.parse(ev.data).message;
    });
    source.addEventListener("signed-out", function () {
      source.close();  // the session ended: reconnecting would only be refused
      live.classList.remove("connected");
      live.title = "Live updates ended: your session ended, sign in again";
    });
    source.addEventListener("revision", function (ev) {
      live.classList.add("connected");
      setRev(JSON.parse(ev.data).revision);
    });
    source.addEventListener("change", function (ev) {
      const c = JSON.parse(ev.data);
      setRev(c.revision);
      live.classList.remove("bump"); void live.offsetWidth; live.classList.add("bump");
      const what = c.op === "remove" ? "deleted" : "committed v" + c.version;
      toast([el("b", "", c.skill), " " + what + " in " + c.scope + " · revision " + c.revision.counter]);
      if (body.dataset.skill && c.skill === body.dataset.skill && c.scope === body.dataset.scope &&
          String(c.version) !== body.dataset.version) {
        const banner = document.getElementById("stale-banner");
        if (banner) {
          banner.textContent = c.op === "remove"
            ? "This skill was just deleted by someone else. Saving will ask what to do."
            : "Someone just committed version " + c.version + " of this skill. Saving keeps their changes: yours is merged into them (or, if you chose to stop, you see what changed first); where you both changed the same lines, you resolve them before anything is written.";
          banner.hidden = false;
        }
      }
    });
    window.addEventListener("beforeunload", function () { source.close(); });
  }

  // ------------------------------------------------------------ the editor
  // The textarea is the form's field and the editor without scripts; editor.js (CodeMirror)
  // draws the editor in its place and keeps it equal to the text, so the form posts the same.
  const area = document.getElementById("content");
  const form = document.getElementById("editor-form");
  if (!area || !form) return;

  const statusEl = document.getElementById("check-status");
  const dirtyEl = document.getElementById("dirty");
  const original = area.value;
  let submitting = false;
  let timer = null;
  let seq = 0;

  function save() {
    const button = document.getElementById("save");
    if (button) form.requestSubmit(button);
  }

  function changed() {
    dirtyEl.hidden = area.value === original && !document.getElementById("conflict");
    clearTimeout(timer);
    timer = setTimeout(validate, 450);
  }

  const editor = window.SkillfsEditor
    ? window.SkillfsEditor.mount(area, {
      path: form.elements.path.value, wrap: area.closest(".editor").classList.contains("wrap"),
      onChange: changed, onSave: save,
    })
    : null;
  window.skillfsEditor = editor;  // for tests and the screenshots: set the text as typing would

  // The lines the findings name, marked in the gutter: an error's red, a warning's amber.
  function markLines() {
    if (!editor) return;
    const marks = {};
    document.querySelectorAll("#findings .finding[data-line]").forEach(function (li) {
      const line = li.dataset.line;
      if (marks[line] !== "bad") marks[line] = li.classList.contains("error") ? "bad" : "meh";
    });
    editor.mark(marks);
  }

  function goToLine(n) {
    if (editor) { editor.goToLine(n); return; }
    const lines = area.value.split("\n");
    let pos = 0;
    for (let i = 0; i < n - 1 && i < lines.length; i++) pos += lines[i].length + 1;
    area.focus();
    area.setSelectionRange(pos, pos + (lines[n - 1] || "").length);
  }

  function bindFindingClicks() {
    document.querySelectorAll("#findings .finding[data-line]").forEach(function (li) {
      li.addEventListener("click", function () { goToLine(Number(li.dataset.line)); });
    });
  }

  function showFindings(result) {
    const list = document.getElementById("findings");
    const none = document.getElementById("no-findings");
    list.replaceChildren();
    result.findings.forEach(function (f) {
      const li = el("li", "finding " + f.severity);
      if (f.line) li.dataset.line = f.line;
      li.appendChild(el("span", "sev", f.severity));
      if (f.line) li.appendChild(el("span", "where", "line " + f.line));
      li.appendChild(el("span", "msg", f.message));
      list.appendChild(li);
    });
    if (none) none.hidden = result.findings.length > 0;
    document.getElementById("findings-count").textContent = String(result.findings.length);
    const e = result.errors, w = result.warnings;
    statusEl.className = "check-status " + (e ? "bad" : w ? "meh" : "good");
    statusEl.textContent = e ? e + " error" + (e > 1 ? "s" : "") + (w ? ", " + w + " warning" + (w > 1 ? "s" : "") : "")
      : w ? w + " warning" + (w > 1 ? "s" : "") : "valid";
    markLines();
    bindFindingClicks();
  }

  function validate() {
    const mine = ++seq;
    statusEl.className = "check-status busy";
    statusEl.textContent = "checking…";
    fetch(form.dataset.validate, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({
        scope: body.dataset.scope, skill: body.dataset.skill,
        path: form.elements.path.value, base: Number(form.elements.base.value), content: area.value,
      }),
    }).then(function (r) {
      if (r.ok) return r.json();
      return r.json().then(function (e) { return Promise.reject(e.error); },
                           function () { return Promise.reject(r.status); });
    })
      .then(function (result) { if (mine === seq) showFindings(result); })
      .catch(function (why) {
        if (mine !== seq) return;
        statusEl.className = "check-status meh";
        statusEl.textContent = typeof why === "string" ? "not checked: " + why
          : "could not check (the store may be down)";
      });
  }

  if (!editor) {
    area.addEventListener("input", changed);
    area.addEventListener("keydown", function (ev) {
      if ((ev.ctrlKey || ev.metaKey) && ev.key === "s") { ev.preventDefault(); save(); }
    });
  }
  const checkBtn = document.getElementById("check");
  if (checkBtn) checkBtn.addEventListener("click", validate);
  form.addEventListener("submit", function () { submitting = true; });
  window.addEventListener("beforeunload", function (ev) {
    if (!submitting && area.value !== original && !area.readOnly) { ev.preventDefault(); ev.returnValue = ""; }
  });

  markLines();
  bindFindingClicks();
  if (document.getElementById("rejected") || document.getElementById("conflict")) dirtyEl.hidden = false;
})();
