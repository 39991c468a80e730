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

  // The helpers and the conversation view are the trajectory renderer's (trajectory.js).
  var T = SpanscoreTrajectory;
  var el = T.el, add = T.add, num = T.num;
  function traceLink(traceId, spanId, conversationId) {
    return T.traceLink(doc.trace_url, traceId, spanId, conversationId);
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
    T.render(view, detail, { conversationId: id, traceUrl: doc.trace_url });
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
