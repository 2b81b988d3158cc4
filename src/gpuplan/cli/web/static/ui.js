// gpuplan ui: one tab per command; the URL holds the open tab and its form (?cmd=train&gpus=64), so
// a plan is shared as a link; each submission asks the server to run the command with --json.
"use strict";

const sections = Array.from(document.querySelectorAll("section.command"));
// plotly.js (4.6 MB) loads async: the forms work before it has been parsed, the figures wait for it
const plotlyReady = new Promise((resolve, reject) => {
  if (window.Plotly) return resolve();
  const tag = document.getElementById("plotly");
  tag.addEventListener("load", () => resolve());
  tag.addEventListener("error", () => reject(new Error("plotly.js did not load")));
});

function open(cmd) {
  for (const s of sections) s.hidden = s.dataset.cmd !== cmd;
  for (const t of document.querySelectorAll(".tab")) t.setAttribute("aria-selected", String(t.dataset.cmd === cmd));
}

function query(form) {
  const q = new URLSearchParams();
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") { if (el.checked) q.set(el.name, "on"); }
    else if (el.value.trim() !== "") q.set(el.name, el.value.trim());
  }
  return q;
}

function clearErrors(form) {
  form.querySelector(".form-error").textContent = "";
  for (const el of form.querySelectorAll(".field-error")) el.textContent = "";
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
}

function showError(form, error) {
  const cmd = form.dataset.cmd;
  const input = error.field && document.getElementById(`${cmd}-${error.field}`);
  if (input) {
    input.setAttribute("aria-invalid", "true");
    document.getElementById(`${cmd}-${error.field}-error`).textContent = error.message;
  } else {
    form.querySelector(".form-error").textContent = error.message;
  }
}

async function render(form, res) {
  const out = document.getElementById(`results-${form.dataset.cmd}`);
  out.replaceChildren();
  if (res.error) showError(form, res.error);
  if (!res.doc) return;
  const line = document.createElement("p");
  line.className = "command-line";
  line.textContent = res.command_line;
  out.append(line);
  if (res.error) {  // exit 3: the plan does not fit, and the document says by how much
    const warn = document.createElement("p");
    warn.className = "warning";
    warn.textContent = res.error.message;
    out.append(warn);
  }
  const divs = res.figures.map((f, i) => {
    const div = document.createElement("div");
    div.className = "figure";
    div.id = `figure-${form.dataset.cmd}-${i}`;
    out.append(div);
    return div;
  });
  const table = document.createElement("div");
  table.innerHTML = res.numbers_html;  // built by the server from the JSON document, escaped there
  out.append(table);
  await plotlyReady;
  res.figures.forEach((f, i) => Plotly.newPlot(divs[i], f.data, f.layout, {responsive: true, displaylogo: false}));
}

async function submit(form) {
  const cmd = form.dataset.cmd;
  const q = query(form);
  history.replaceState(null, "", "?" + new URLSearchParams([["cmd", cmd], ...q]).toString());
  clearErrors(form);
  form.querySelector(".form-error").textContent = "computing...";
  document.body.dataset.state = "busy";
  try {
    const r = await fetch(`/api/${cmd}?${q}`);
    const res = await r.json();
    form.querySelector(".form-error").textContent = "";
    await render(form, res);
  } catch (e) {
    form.querySelector(".form-error").textContent = `no answer from the gpuplan server (${e})`;
  }
  document.body.dataset.state = "done";
}

for (const t of document.querySelectorAll(".tab")) {
  t.addEventListener("click", () => {
    open(t.dataset.cmd);
    history.replaceState(null, "", "?cmd=" + t.dataset.cmd);
  });
}
for (const form of document.querySelectorAll("form.command")) {
  form.addEventListener("submit", (e) => { e.preventDefault(); submit(form); });
}

// The form in the URL: open its tab, fill its fields, and answer it
const params = new URLSearchParams(location.search);
const cmd = params.get("cmd") || sections[0].dataset.cmd;
open(cmd);
const form = document.querySelector(`form[data-cmd="${cmd}"]`);
if (form && [...params.keys()].some((k) => k !== "cmd")) {
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") el.checked = params.get(el.name) === "on";
    else if (params.has(el.name)) el.value = params.get(el.name);
    else el.value = "";
  }
  submit(form);
} else {
  document.body.dataset.state = "ready";
}
performance.mark("gpuplan-forms-ready");
