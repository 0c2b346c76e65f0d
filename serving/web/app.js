// bencao web page: asks /v1/chat/completions and shows the answer, clickable citations,
// reasoning paths with scores and the source snippets with book › volume › section.
"use strict";

const $ = (id) => document.getElementById(id);
const keyInput = $("api-key");
keyInput.value = sessionStorage.getItem("bencao-api-key") || "";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function show(id, visible) { $(id).hidden = !visible; }

// Answer text with [n] / [1,2] / 【n】 turned into links to the numbered source.
function renderAnswer(text, known) {
  const box = $("answer");
  box.replaceChildren();
  const re = /[\[【［]\s*(\d+(?:\s*[,，、]\s*\d+)*)\s*[\]】］]/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    box.append(text.slice(last, m.index));
    const nums = m[1].split(/\s*[,，、]\s*/);
    box.append("[");
    nums.forEach((n, i) => {
      if (i) box.append(",");
      box.append(known.has(Number(n)) ? el("a", { class: "cite", href: "#src-" + n, "data-n": n }, n) : n);
    });
    box.append("]");
    last = re.lastIndex;
  }
  box.append(text.slice(last));
}

// A path of the Evidence: names[0] —relations[0]→ names[1] ...; "~r" walks r backwards.
function pathLabel(p) {
  let out = p.names[0];
  p.relations.forEach((r, i) => {
    out += r.startsWith("~") ? ` ←${r.slice(1)}— ${p.names[i + 1]}` : ` —${r}→ ${p.names[i + 1]}`;
  });
  return out;
}

function renderPaths(evidence) {
  const list = $("paths");
  list.replaceChildren();
  const paths = (evidence && evidence.paths) || [];
  for (const p of paths.slice(0, 10)) {
    const planned = p.planned_by === "llm" ? el("span", { class: "tag" }, "planned") : "";
    list.append(el("li", {}, pathLabel(p), planned, el("span", { class: "score" }, p.score.toFixed(3))));
  }
  show("paths-box", paths.length > 0);
}

function renderSources(references, citations) {
  const list = $("sources");
  list.replaceChildren();
  const cited = new Set(citations.map((c) => c.n));
  const refs = references.length ? references : citations;
  for (const r of refs) {
    const heading = (r.path || []).join(" › ") || r.heading || r.snippet_id;
    const text = (r.text || "").length > 400 ? r.text.slice(0, 400) + "…" : (r.text || "");
    // teacher-written reasoning (the personalized layer) is cited, but never passed off as a source text
    const tag = r.generated ? el("span", { class: "tag generated" }, "generated reasoning, not a source text") : "";
    list.append(el("li", { id: "src-" + r.n, value: r.n, class: (cited.has(r.n) ? "cited" : "") + (r.generated ? " generated" : "") },
      el("div", { class: "heading" }, heading, tag), el("div", { class: "snippet" }, text)));
  }
  show("sources-box", refs.length > 0);
  return new Set(refs.map((r) => r.n));
}

async function ask(question) {
  const headers = { "Content-Type": "application/json" };
  const key = keyInput.value.trim();
  if (key) headers["Authorization"] = "Bearer " + key;
  sessionStorage.setItem("bencao-api-key", key);
  const resp = await fetch("/v1/chat/completions", {
    method: "POST", headers,
    body: JSON.stringify({ messages: [{ role: "user", content: question }] }),
  });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error((body.error && body.error.message) || `HTTP ${resp.status}`);
  return body;
}

$("ask-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = $("question").value.trim();
  if (!q) return;
  $("ask").disabled = true;
  $("status").textContent = "searching the knowledge graph…";
  show("error-box", false);
  try {
    const res = await ask(q);
    const evidence = res.evidence || {};
    const citations = res.citations || [];
    const refs = renderSources(res.references || [], citations);
    renderAnswer(res.choices[0].message.content, refs);
    $("answered-by").textContent = res.answered_by ? `answered by ${res.answered_by}` + (res.timings ? ` in ${res.timings.total_s}s` : "") : "";
    renderPaths(evidence);
    show("answer-box", true);
    $("status").textContent = "";
  } catch (err) {
    $("error").textContent = err.message;
    show("error-box", true);
    $("status").textContent = "";
  } finally {
    $("ask").disabled = false;
  }
});
