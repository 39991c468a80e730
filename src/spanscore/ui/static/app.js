// spanscore review app: what the server-rendered pages do in the browser. Every value from
// the lake goes into the page as text (textContent), never as markup; writes are JSON posts
// to the app's own /api/.
(function () {
  "use strict";
  var T = SpanscoreTrajectory;
  var el = T.el, add = T.add;
  var dataNode = document.getElementById("page-data");
  var page = dataNode ? JSON.parse(dataNode.textContent) : {};

  function api(method, url, body) {
    return fetch(url, {
      method: method,
      credentials: "same-origin",
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
        return j;
      });
    });
  }
  function say(node, text, bad) {
    if (!node) return;
    node.textContent = text;
    node.className = bad ? "bad" : "ok";
  }
  function stamp() {
    var d = new Date();
    function p(n) { return (n < 10 ? "0" : "") + n; }
    return d.getUTCFullYear() + p(d.getUTCMonth() + 1) + p(d.getUTCDate()) + "-" + p(d.getUTCHours()) + p(d.getUTCMinutes()) + p(d.getUTCSeconds());
  }
  function toQueue(spec, status) {
    return api("POST", "/api/queues", spec).then(function (q) {
      location.href = "/queues/" + encodeURIComponent(q.queue);
    }, function (e) { say(status, e.message, true); });
  }

  // --- who is reviewing -------------------------------------------------------------------
  var who = document.getElementById("reviewer");
  if (who) who.addEventListener("click", function () {
    var input = el("input");
    input.value = who.textContent;
    input.size = 16;
    input.setAttribute("aria-label", "your name");
    who.replaceWith(input);
    input.focus();
    input.addEventListener("keydown", function (e) {
      if (e.key !== "Enter") return;
      var name = input.value.trim().slice(0, 100);
      document.cookie = "spanscore_reviewer=" + encodeURIComponent(name) + "; path=/; SameSite=Strict";
      location.reload();
    });
  });

  // --- a run: review its failures ---------------------------------------------------------
  document.querySelectorAll("button.queue-failures").forEach(function (b) {
    b.addEventListener("click", function () {
      toQueue({ name: "failures-" + b.dataset.run.slice(0, 8) + "-" + stamp(), run: b.dataset.run, size: 50 }, null);
    });
  });
  document.querySelectorAll("button.queue-metric").forEach(function (b) {
    b.addEventListener("click", function () {
      var name = "review-" + b.dataset.metric.replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 40) + "-" + stamp();
      toQueue({ name: name, run: b.dataset.run, metric: b.dataset.metric, failed_only: false, size: 20 }, null);
    });
  });
  document.querySelectorAll("button.queue-filter").forEach(function (b) {
    b.addEventListener("click", function () {
      toQueue({ name: "filter-" + stamp(), filter: page.filter || {}, size: 50 }, null);
    });
  });
  var newQueue = document.getElementById("new-queue");
  if (newQueue) newQueue.addEventListener("submit", function (e) {
    e.preventDefault();
    var f = new FormData(newQueue);
    var spec = { name: f.get("name"), run: f.get("run"), size: Number(f.get("size")),
                 sample: f.get("sample"), seed: Number(f.get("seed")) };
    if (f.get("metric")) spec.metric = f.get("metric");
    toQueue(spec, document.getElementById("queue-status"));
  });

  // --- a conversation ---------------------------------------------------------------------
  function labelBody(form, base) {
    var f = new FormData(form);
    var body = Object.assign({}, base);
    if (f.get("passed")) body.passed = f.get("passed") === "true";
    if (f.get("judge_agreed")) body.judge_agreed = f.get("judge_agreed") === "true";
    if (f.get("value") !== null && f.get("value") !== "") body.value = Number(f.get("value"));
    if (f.get("label")) body.label = f.get("label");
    if (f.get("comment")) body.comment = f.get("comment");
    return body;
  }

  var trajectory = document.getElementById("trajectory");
  if (trajectory && page.conversation_id !== undefined) {
    if (page.detail) T.render(trajectory, page.detail, { conversationId: page.conversation_id });
    else trajectory.appendChild(el("p", "note", "No trajectory: the lake holds no span of it."));
    trajectory.dataset.ready = "1";
    var shownScores = page.scores.filter(function (s) { return s.run_id === page.shown_run; });
    var form = document.getElementById("label-form");
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var base = { conversation_id: page.conversation_id };
      var target = document.getElementById("label-target").value;
      if (target !== "") {
        var s = shownScores[Number(target)];
        base.metric = s.metric; base.run_id = s.run_id;
        if (s.scenario_id) base.scenario_id = s.scenario_id;
      }
      var status = document.getElementById("label-status");
      api("POST", "/api/labels", labelBody(form, base)).then(function () {
        say(status, "saved");
        location.reload();
      }, function (err) { say(status, err.message, true); });
    });
    var spansButton = document.getElementById("show-spans");
    var spansBox = document.getElementById("spans");
    var offset = 0;
    function moreSpans() {
      api("GET", "/api/spans/" + encodeURIComponent(page.conversation_id).replace(/%2F/g, "/") + "?offset=" + offset + "&limit=200").then(function (r) {
        r.spans.forEach(function (s) { spansBox.appendChild(el("pre", "span", JSON.stringify(s, null, 2))); });
        offset += r.spans.length;
        spansButton.textContent = offset < r.total ? "More raw spans (" + offset + " of " + r.total + ")" : "All " + r.total + " raw spans shown";
        spansButton.disabled = offset >= r.total;
      }, function (err) { spansBox.appendChild(el("p", "warning", err.message)); });
    }
    spansButton.addEventListener("click", function () { spansBox.hidden = false; moreSpans(); });
    document.querySelectorAll("button.judge-prompt").forEach(function (b) {
      b.addEventListener("click", function () {
        var out = b.nextElementSibling;
        var q = "run=" + encodeURIComponent(b.dataset.run) + "&metric=" + encodeURIComponent(b.dataset.metric) +
                "&conversation_id=" + encodeURIComponent(page.conversation_id);
        api("GET", "/api/judge/exchange?" + q).then(function (r) {
          var text = (r.note ? "(" + r.note + ")\n\n" : "") + (r.messages || []).map(function (m) {
            return "[" + m.role + "]\n" + m.content;
          }).join("\n\n") + "\n\n[the judge answered]\n" + JSON.stringify(r.answer, null, 2);
          out.textContent = text;
          out.hidden = false;
        }, function (err) { out.textContent = err.message; out.hidden = false; });
      });
    });
    var promote = document.getElementById("promote");
    if (promote) promote.addEventListener("click", function () { showPromote(); });
  }

  function showPromote() {
    var box = document.getElementById("promote-box");
    box.hidden = false;
    box.replaceChildren();
    var suites = page.promote_into || [];
    var command = "spanscore promote " + page.conversation_id + " --lake LAKE --suite SUITE";
    if (!suites.length) {
      add(box, el("p", "note", "This app may write no suite file: start it with --promote-into SUITE " +
          "to promote from here, or run:"), el("pre", null, command));
      return;
    }
    var form = el("form", "promote-form");
    var suite = el("select"); suite.name = "suite";
    suites.forEach(function (s) { var o = el("option", null, s); o.value = s; suite.appendChild(o); });
    var scenario = el("input"); scenario.name = "scenario_id"; scenario.placeholder = "scenario id (optional)";
    var mode = el("select"); mode.name = "arguments";
    ["exact", "partial"].forEach(function (m) { var o = el("option", null, m + " arguments"); o.value = m; mode.appendChild(o); });
    var preview = el("button", null, "Preview"); preview.type = "button"; preview.id = "promote-preview";
    var write = el("button", null, "Append to the suite"); write.type = "submit"; write.id = "promote-write";
    var out = el("pre", "promote-preview");
    var status = el("span"); status.id = "promote-status"; status.setAttribute("role", "status");
    add(form, suite, scenario, mode, preview, write, status);
    add(box, form, out);
    function body(dry) {
      var b = { conversation_id: page.conversation_id, suite: suite.value, arguments: mode.value, dry_run: dry };
      if (scenario.value) b.scenario_id = scenario.value;
      return b;
    }
    function shown(r, what) {
      out.textContent = r.text + (r.notes && r.notes.length ? "\n# " + r.notes.join("\n# ") : "");
      say(status, what);
    }
    preview.addEventListener("click", function () {
      api("POST", "/api/promote", body(true)).then(function (r) { shown(r, "preview of " + r.scenario_id); },
        function (err) { say(status, err.message, true); });
    });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      api("POST", "/api/promote", body(false)).then(function (r) {
        shown(r, "appended " + r.scenario_id + " to " + r.path + (r.line ? " at line " + r.line : ""));
      }, function (err) { say(status, err.message, true); });
    });
  }

  // --- a review queue ---------------------------------------------------------------------
  var review = document.getElementById("review-form");
  if (review && page.queue !== undefined) {
    var items = page.items;
    var at = page.next === null ? 0 : items.findIndex(function (i) { return i.position === page.next; });
    var verdict = { passed: null, judge_agreed: null, value: null };
    var current = null;
    var itemHead = document.getElementById("item-head");
    var itemScore = document.getElementById("item-score");
    var itemTrajectory = document.getElementById("item-trajectory");
    var verdictNode = document.getElementById("verdict");
    var status = document.getElementById("review-status");
    var list = document.getElementById("queue-items");

    function showVerdict() {
      var parts = [];
      if (verdict.passed !== null) parts.push(verdict.passed ? "pass" : "fail");
      if (verdict.judge_agreed !== null) parts.push(verdict.judge_agreed ? "agrees with the judge" : "disagrees with the judge");
      verdictNode.textContent = parts.length ? parts.join(" · ") : "(p pass, f fail, a/d agree/disagree)";
    }
    function progress() {
      var done = items.filter(function (i) { return i.done; }).length;
      document.getElementById("progress").textContent = done + " of " + items.length;
      document.getElementById("progress-bar").value = done;
      list.querySelectorAll("li").forEach(function (li, k) {
        li.classList.toggle("done", items[k].done);
        li.classList.toggle("current", k === at);
      });
    }
    function load() {
      progress();
      verdict = { passed: null, judge_agreed: null, value: null };
      review.reset();
      showVerdict();
      say(status, "");
      if (at < 0 || at >= items.length) {
        itemHead.replaceChildren(el("p", "note", "Every item of this queue has your label."));
        itemScore.replaceChildren(); itemTrajectory.replaceChildren();
        return;
      }
      var item = items[at];
      current = item;
      var url = "/api/conversations/" + encodeURIComponent(item.conversation_id).replace(/%2F/g, "/") + (item.run_id ? "?run=" + encodeURIComponent(item.run_id) : "");
      itemHead.replaceChildren(el("h2", null, (at + 1) + ". " + item.conversation_id));
      var link = el("a", null, "open its page");
      link.href = "/conversations/" + encodeURIComponent(item.conversation_id).replace(/%2F/g, "/");
      itemHead.appendChild(link);
      itemTrajectory.dataset.ready = "";
      api("GET", url).then(function (view) {
        if (current !== item) return;
        itemScore.replaceChildren();
        var scores = view.scores.filter(function (s) {
          return (!item.run_id || s.run_id === item.run_id) && (!item.metric || s.metric === item.metric);
        });
        if (item.metric) {
          scores.slice(0, 1).forEach(function (s) {
            add(itemScore, add(el("p", "judge-says"), el("b", null, "The judge: "),
              el("span", null, s.metric + " " + (s.error ? "error" : s.passed ? "passed" : s.passed === false ? "failed" : "-") +
                (s.value !== null ? " (" + s.value + ")" : "") + (s.label ? " " + s.label : "")),
              el("div", "expl", s.explanation || s.error || "")));
          });
        }
        itemTrajectory.replaceChildren();
        if (view.detail) T.render(itemTrajectory, view.detail, { conversationId: item.conversation_id });
        itemTrajectory.dataset.ready = "1";
      }, function (err) { itemTrajectory.replaceChildren(el("p", "warning", err.message)); itemTrajectory.dataset.ready = "1"; });
    }
    function save() {
      if (!current) return;
      var f = new FormData(review);
      var body = { conversation_id: current.conversation_id, queue: page.queue };
      if (current.metric) {
        body.metric = current.metric;
        if (current.run_id) body.run_id = current.run_id;
        if (current.scenario_id) body.scenario_id = current.scenario_id;
      }
      if (verdict.passed !== null) body.passed = verdict.passed;
      if (verdict.judge_agreed !== null) body.judge_agreed = verdict.judge_agreed;
      if (f.get("value") !== "") body.value = Number(f.get("value"));
      if (f.get("comment")) body.comment = f.get("comment");
      api("POST", "/api/labels", body).then(function () {
        current.done = true;
        var next = items.findIndex(function (i, k) { return k > at && !i.done; });
        if (next < 0) next = items.findIndex(function (i) { return !i.done; });
        at = next;
        load();
      }, function (err) { say(status, err.message, true); });
    }
    review.addEventListener("submit", function (e) { e.preventDefault(); save(); });
    document.addEventListener("keydown", function (e) {
      var typing = e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA" || e.target.tagName === "SELECT");
      if (typing) {
        if (e.key === "Escape") e.target.blur();
        return;
      }
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      var k = e.key;
      if (k === "j") { at = Math.min(items.length - 1, at + 1); load(); }
      else if (k === "k") { at = Math.max(0, at - 1); load(); }
      else if (k === "p") { verdict.passed = true; showVerdict(); }
      else if (k === "f") { verdict.passed = false; showVerdict(); }
      else if (k === "a") { verdict.judge_agreed = true; showVerdict(); }
      else if (k === "d") { verdict.judge_agreed = false; showVerdict(); }
      else if (/^[0-9]$/.test(k)) { review.elements.value.value = k; }
      else if (k === "c") { e.preventDefault(); review.elements.comment.focus(); }
      else if (k === "Enter") { e.preventDefault(); save(); }
      else return;
    });
    list.querySelectorAll("li").forEach(function (li, k) {
      li.addEventListener("click", function () { at = k; load(); });
    });
    load();
  }
  document.documentElement.dataset.ready = "1";
})();
