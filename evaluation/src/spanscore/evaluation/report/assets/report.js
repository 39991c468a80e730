// spanscore report: the conversations table (filter, sort, pages) and the conversation view.
// Every value from the data goes into the page as text (textContent), never as markup.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var doc = D.doc;
  var C = doc.conversations;
  var N = C.id.length;
  var PAGE = 50;
  var chunks = {};

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function num(v, digits) {
    return v === null || v === undefined ? "-" : Number(v).toFixed(digits === undefined ? 2 : digits);
  }
  function ms(v) {
    if (v === null || v === undefined) return "";
    return v >= 10 ? v.toFixed(0) + " ms" : v.toPrecision(2) + " ms";
  }
  function shown(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "string") return v;
    var flat = JSON.stringify(v);
    return flat.length <= 100 ? flat : JSON.stringify(v, null, 2);
  }
  function scoreKey(s) {
    return s.scenario_id ? s.scenario_id + "/" + s.metric : s.metric;
  }
  function traceLink(traceId, spanId, conversationId) {
    if (!doc.trace_url || !traceId) return null;
    var values = { trace_id: traceId, span_id: spanId || "", conversation_id: conversationId || "" };
    var href = doc.trace_url.replace(/\{(trace_id|span_id|conversation_id)\}/g, function (_, k) {
      return encodeURIComponent(values[k]);
    });
    var a = el("a", "trace", "trace");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    return a;
  }

  // --- the table ------------------------------------------------------------------------------
  var hay = new Array(N);
  for (var i = 0; i < N; i++) hay[i] = (C.id[i] + "\n" + (C.first_message[i] || "")).toLowerCase();
  var state = { q: "", scenario: "", result: "", failing: "", agent: "", service: "", change: "",
                sort: "start", dir: 1, page: 0 };
  var columns = [
    { key: "id", title: "conversation", get: function (i) { return C.id[i]; } },
    { key: "scenario", title: "scenario", get: function (i) { return C.scenario[i]; } },
    { key: "result", title: "result", get: function (i) { return C.result[i]; } },
  ];
  var labels = C.labels || {};
  C.metrics.forEach(function (m) {
    // A metric scored with labels shows its label where it has no value.
    var named = labels[m];
    columns.push({ key: "m:" + m, title: m, metric: m, get: function (i) {
      var v = C.values[m][i];
      return v === null && named ? named[i] : v;
    } });
  });
  // An agent or service that is the same for every conversation (or none recorded) is said
  // once, above the table, instead of a column.
  var constant = [];
  ["agent", "service"].forEach(function (k) {
    var values = distinct(C[k]);
    if (N > 1 && values.length === 1 && C[k].every(function (v) { return v === values[0]; })) {
      constant.push(k + " " + values[0]);
    } else if (N > 0 && !values.length) {
      constant.push(k + " not recorded");
    }
  });
  function shownColumn(k) { return !constant.some(function (c) { return c.indexOf(k + " ") === 0; }); }
  columns.push({ key: "failing", title: "failing", get: function (i) { return C.failing[i].length; } });
  if (shownColumn("agent")) columns.push({ key: "agent", title: "agent", get: function (i) { return C.agent[i]; } });
  if (shownColumn("service")) columns.push({ key: "service", title: "service", get: function (i) { return C.service[i]; } });
  columns.push({ key: "start", title: "time", get: function (i) { return C.start[i]; } });
  if (doc.baseline) {
    columns.splice(3, 0, { key: "change", title: "change", get: function (i) { return C.change[i]; } });
  }

  function distinct(values) {
    var seen = {};
    values.forEach(function (v) { if (v !== null && v !== undefined) seen[v] = true; });
    return Object.keys(seen).sort();
  }
  function select(name, label, options, labels) {
    var s = el("select");
    s.name = name;
    s.setAttribute("aria-label", label);
    add(s, el("option", null, label + ": all"));
    s.firstChild.value = "";
    options.forEach(function (o, k) {
      var opt = el("option", null, labels ? labels[k] : o);
      opt.value = String(o);
      s.appendChild(opt);
    });
    s.addEventListener("change", function () { state[name] = s.value; state.page = 0; update(); });
    return s;
  }
  var filters = document.getElementById("filters");
  var search = el("input");
  search.type = "search";
  search.name = "q";
  search.placeholder = "search the first user message or the id";
  search.setAttribute("aria-label", "search");
  search.addEventListener("input", function () { state.q = search.value.toLowerCase(); state.page = 0; update(); });
  add(filters, search,
      select("scenario", "scenario", distinct(C.scenario)),
      select("result", "result", distinct(C.result)),
      select("failing", "failing", C.keys.map(function (_, k) { return k; }), C.keys),
      shownColumn("agent") ? select("agent", "agent", distinct(C.agent)) : null,
      shownColumn("service") ? select("service", "service", distinct(C.service)) : null,
      doc.baseline ? select("change", "change", ["regressed", "fixed", "changed"]) : null);
  var counter = el("span", "count");
  filters.appendChild(counter);
  if (constant.length) {
    filters.parentNode.insertBefore(
      el("p", "constant", "Every conversation: " + constant.join(", ") + "."), filters.nextSibling);
  }

  function matches(i) {
    if (state.q && hay[i].indexOf(state.q) < 0) return false;
    if (state.scenario && C.scenario[i] !== state.scenario) return false;
    if (state.result && C.result[i] !== state.result) return false;
    if (state.failing && C.failing[i].indexOf(Number(state.failing)) < 0) return false;
    if (state.agent && C.agent[i] !== state.agent) return false;
    if (state.service && C.service[i] !== state.service) return false;
    if (state.change && C.change[i] !== state.change) return false;
    return true;
  }
  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    return a < b ? -1 : 1;
  }

  var table = el("table", "convs");
  var thead = el("thead");
  var headRow = el("tr");
  columns.forEach(function (c) {
    // A zero-width space after _ . / - lets a long metric name wrap there, not mid-word.
    var th = el("th");
    th.appendChild(el("span", null, c.title.replace(/([_./-])/g, "$1\u200b")));
    th.dataset.key = c.key;
    th.title = "sort by " + c.title;
    th.addEventListener("click", function () {
      state.dir = state.sort === c.key ? -state.dir : 1;
      state.sort = c.key;
      update();
    });
    headRow.appendChild(th);
  });
  add(table, add(thead, headRow));
  var tbody = el("tbody");
  table.appendChild(tbody);
  document.getElementById("table").appendChild(table);
  var pager = document.getElementById("pager");
  var rows = [];

  function update() {
    rows = [];
    for (var i = 0; i < N; i++) if (matches(i)) rows.push(i);
    var column = columns.filter(function (c) { return c.key === state.sort; })[0];
    if (column) {
      var dir = state.dir;
      rows.sort(function (a, b) { return compare(column.get(a), column.get(b)) * dir || a - b; });
    }
    var pages = Math.max(1, Math.ceil(rows.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    headRow.childNodes.forEach(function (th) {
      th.className = th.dataset.key === state.sort ? (state.dir > 0 ? "asc" : "desc") : "";
    });
    var body = document.createDocumentFragment();
    rows.slice(state.page * PAGE, (state.page + 1) * PAGE).forEach(function (i) {
      var tr = el("tr", C.result[i]);
      tr.dataset.id = C.id[i];
      columns.forEach(function (c) {
        var v = c.get(i);
        var td;
        if (c.metric) {
          var ok = C.passed[c.metric][i];
          var verdict = ok === false ? " fail" : ok === true ? " pass" : "";
          td = typeof v === "string" ? el("td", "label" + verdict, v) : el("td", "num" + verdict, num(v));
        } else if (c.key === "failing") {
          td = el("td", "failing", C.failing[i].map(function (k) { return C.keys[k]; }).join(", "));
        } else if (c.key === "start") {
          td = el("td", "time", v ? v.replace("T", " ").slice(0, 19) : "");
        } else if (c.key === "id") {
          td = el("td", "id");
          var a = el("a", null, v);
          a.href = "#c=" + encodeURIComponent(v);
          td.appendChild(a);
          if (C.first_message[i]) td.title = C.first_message[i];
        } else {
          td = el("td", c.key === "result" || c.key === "change" ? "tag " + (v || "") : "text " + c.key, v);
        }
        tr.appendChild(td);
      });
      tr.addEventListener("click", function (event) {
        if (event.target.tagName !== "A") location.hash = "c=" + encodeURIComponent(C.id[i]);
      });
      body.appendChild(tr);
    });
    tbody.replaceChildren(body);
    counter.textContent = rows.length + " of " + N + " conversations";
    pager.replaceChildren();
    var prev = el("button", null, "previous");
    prev.disabled = state.page === 0;
    prev.addEventListener("click", function () { state.page--; update(); });
    var next = el("button", null, "next");
    next.disabled = state.page >= pages - 1;
    next.addEventListener("click", function () { state.page++; update(); });
    add(pager, prev, el("span", "page", "page " + (state.page + 1) + " of " + pages), next);
  }

  // --- the conversation view -------------------------------------------------------------------
  var view = document.getElementById("conversation");

  function chunk(slot) {
    var k = Math.floor(slot / D.chunk_size);
    if (!chunks[k]) {
      var text = document.getElementById("tj-" + k).textContent;
      var bytes = Uint8Array.from(atob(text), function (c) { return c.charCodeAt(0); });
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      chunks[k] = new Response(stream).text().then(JSON.parse);
    }
    return chunks[k].then(function (list) { return list[slot % D.chunk_size]; });
  }

  function badge(s, kind, note) {
    var ok = kind === "matched";
    var b = el("div", "mark " + (ok ? "pass" : "fail") + " " + kind);
    add(b, el("b", null, (ok ? "✓ " : "✗ ") + scoreKey(s)), el("span", null, " " + note));
    if (s.explanation) b.title = s.explanation;
    return b;
  }

  function toolCard(step, detail, conversationId) {
    var card = el("div", "step tool" + (step.error ? " error" : ""));
    card.dataset.index = step.index;
    var head = el("div", "head");
    add(head, el("span", "kind", "tool"), el("b", "name", step.name),
        el("span", "meta", "#" + (step.index + 1) + (step.call_id ? "  " + step.call_id : "")),
        el("span", "meta", (step.offset_ms !== null ? "+" + ms(step.offset_ms) : "") +
           (step.latency_ms !== null ? "  " + ms(step.latency_ms) : "")),
        traceLink(step.trace_id, step.span_id, conversationId));
    card.appendChild(head);
    if (detail.duration_ms && step.offset_ms !== null) {
      var track = el("div", "timing");
      var bar = el("span");
      bar.style.left = Math.min(100, (100 * step.offset_ms) / detail.duration_ms) + "%";
      bar.style.width = Math.max(0.5, (100 * (step.latency_ms || 0)) / detail.duration_ms) + "%";
      track.appendChild(bar);
      card.appendChild(track);
    }
    add(card, el("div", "label", "arguments"), el("pre", "args", shown(step.arguments)));
    if (step.error) add(card, el("div", "label", "error"), el("pre", "err", shown(step.error)));
    if (step.result !== null && step.result !== undefined) {
      add(card, el("div", "label", "result"), el("pre", "result", shown(step.result)));
    }
    var marks = detail.marks.filter(function (m) { return m.call === step.index; });
    if (marks.length) {
      var box = el("div", "marks");
      marks.forEach(function (m) { box.appendChild(badge(detail.scores[m.score], m.kind, m.note)); });
      card.appendChild(box);
    }
    return card;
  }

  function modelCard(step, conversationId) {
    var card = el("div", "step model" + (step.error ? " error" : ""));
    var requested = step.requested.length ? "→ " + step.requested.join(", ") : "answers";
    var tokens = step.input_tokens !== null ? "  tokens " + step.input_tokens + "/" + step.output_tokens : "";
    add(card, add(el("div", "head"), el("span", "kind", "model"), el("b", "name", step.name),
        el("span", "meta", requested), el("span", "meta",
          (step.offset_ms !== null ? "+" + ms(step.offset_ms) : "") + "  " + ms(step.latency_ms) + tokens),
        traceLink(step.trace_id, step.span_id, conversationId)));
    if (step.response) card.appendChild(el("pre", "text", step.response));
    if (step.error) card.appendChild(el("pre", "err", step.error));
    return card;
  }

  function renderDetail(i, detail) {
    var id = C.id[i];
    view.replaceChildren();
    var close = el("button", "close", "close ×");
    close.addEventListener("click", function () { history.pushState("", "", location.pathname); hide(); });
    var head = el("div", "chead");
    add(head, close, el("h2", null, id),
        el("p", "sub", [C.scenario[i] || "(no scenario)", C.result[i],
                        C.change[i] && C.change[i] + " since the baseline", C.agent[i] && "agent " + C.agent[i],
                        C.service[i] && "service " + C.service[i],
                        C.start[i] && C.start[i].replace("T", " ").slice(0, 19)].filter(Boolean).join(" · ")),
        traceLink(C.trace_id[i], null, id));
    view.appendChild(head);
    if (!detail) {
      add(view, el("p", "note", "The trajectory of this conversation is not embedded in this " +
          "report (see the notes at the top); `spanscore show " + id + "` prints it."),
          el("p", null, "Failing: " + (C.failing[i].map(function (k) { return C.keys[k]; }).join(", ") || "none")));
      return;
    }
    (detail.warnings || []).forEach(function (w) { view.appendChild(el("p", "warning", w)); });
    // The scores, failing first, with their explanations (the judge's too).
    var scores = el("table", "scores");
    add(scores, add(el("thead"), add(el("tr"), el("th", null, "score"), el("th", null, "value"),
        el("th", null, "verdict"), el("th", null, "explanation"))));
    var sbody = el("tbody");
    detail.scores.map(function (s, k) { return k; }).sort(function (a, b) {
      var fa = detail.scores[a].passed === false || detail.scores[a].error ? 0 : 1;
      var fb = detail.scores[b].passed === false || detail.scores[b].error ? 0 : 1;
      return fa - fb || a - b;
    }).forEach(function (k) {
      var s = detail.scores[k];
      var failing = s.passed === false || !!s.error;
      var tr = el("tr", failing ? "fail" : s.passed ? "pass" : "");
      var value = s.label !== null ? s.label + (s.value !== null ? " (" + num(s.value) + ")" : "") : num(s.value);
      var verdict = s.error ? "error" : s.passed === null ? "-" : s.passed ? "passed" : "failed";
      if (s.threshold !== null && s.threshold !== undefined) verdict += " (threshold " + s.threshold + ")";
      var why = el("td", "why");
      why.appendChild(el("div", "expl", s.error || s.explanation || ""));
      if (s.details !== null && s.details !== undefined) {
        var more = el("details");
        add(more, el("summary", null, "details"), el("pre", null, shown(s.details)));
        why.appendChild(more);
      }
      add(tr, el("td", "key", scoreKey(s)), el("td", "num", value), el("td", null, verdict), why);
      sbody.appendChild(tr);
    });
    add(view, el("h3", null, "Scores"), add(scores, sbody));
    if (detail.missing.length) {
      var missing = el("div", "missing-calls");
      missing.appendChild(el("h3", null, "Expected calls not made"));
      detail.missing.forEach(function (m) {
        missing.appendChild(badge(detail.scores[m.score], "missing", "missing " + m.name + ": " + m.note));
      });
      view.appendChild(missing);
    }
    // The timeline: turns, model calls, tool calls (parallel ones side by side), hand-offs.
    var timeline = el("div", "timeline");
    detail.turns.forEach(function (turn) {
      var t = el("div", "turn");
      add(t, el("div", "turn-title", "turn " + (turn.index + 1)));
      if (turn.user_message !== null) add(t, add(el("div", "user"), el("b", null, "user "), el("span", null, shown(turn.user_message))));
      var k = 0;
      while (k < turn.steps.length) {
        var step = turn.steps[k];
        if (step.kind === "tool_call" && step.parallel_group !== null) {
          var row = el("div", "parallel");
          while (k < turn.steps.length && turn.steps[k].kind === "tool_call" &&
                 turn.steps[k].parallel_group === step.parallel_group) {
            row.appendChild(toolCard(turn.steps[k], detail, id));
            k++;
          }
          if (row.childNodes.length > 1) row.insertBefore(el("div", "plabel", "in parallel"), row.firstChild);
          t.appendChild(row);
          continue;
        }
        if (step.kind === "tool_call") t.appendChild(toolCard(step, detail, id));
        else if (step.kind === "model_call") t.appendChild(modelCard(step, id));
        else t.appendChild(el("div", "step handoff", "hand-off " + (step.from_agent || "?") + " → " + (step.to_agent || "?")));
        k++;
      }
      if (turn.final_response !== null) add(t, add(el("div", "answer"), el("b", null, "answer "), el("span", null, shown(turn.final_response))));
      timeline.appendChild(t);
    });
    add(view, el("h3", null, "Trajectory"), timeline);
  }

  function hide() { view.hidden = true; document.body.classList.remove("viewing"); }

  function route() {
    var found = /^#c=(.*)$/.exec(location.hash);
    if (!found) return hide();
    var id = decodeURIComponent(found[1]);
    var i = C.id.indexOf(id);
    if (i < 0) return hide();
    view.hidden = false;
    document.body.classList.add("viewing");
    view.dataset.conversation = id;
    view.dataset.loaded = "";
    var slot = D.slots[i];
    var done = function (detail) {
      if (view.dataset.conversation !== id) return;
      renderDetail(i, detail);
      view.scrollTop = 0;
      view.dataset.loaded = id;
    };
    if (slot === null) done(null);
    else chunk(slot).then(done, function (err) { view.replaceChildren(el("p", "warning", "cannot read the trajectory: " + err)); });
  }

  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && !view.hidden) { history.pushState("", "", location.pathname); hide(); }
  });
  update();
  route();
  document.documentElement.dataset.readyMs = performance.now().toFixed(1);
  document.documentElement.dataset.ready = "1";
})();
