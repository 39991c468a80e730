// spanscore trajectory renderer: one conversation's scores and timeline, drawn from its detail
// document (report/conversations.py). The report and the review app both draw with it.
// Every value goes into the page as text (textContent), never as markup. A long conversation
// is drawn a page of steps at a time, the next page when its end scrolls into view, so that a
// conversation of tens of thousands of spans opens at once and scrolls without freezing.
var SpanscoreTrajectory = (function () {
  "use strict";
  var STEPS_PER_PAGE = 200;

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
  // A link to the user's tracing UI from a template with {trace_id}, {span_id} and
  // {conversation_id}; only http(s) templates are accepted where the template is set.
  function traceLink(template, traceId, spanId, conversationId) {
    if (!template || !traceId) return null;
    var values = { trace_id: traceId, span_id: spanId || "", conversation_id: conversationId || "" };
    var href = template.replace(/\{(trace_id|span_id|conversation_id)\}/g, function (_, k) {
      return encodeURIComponent(values[k]);
    });
    if (!/^https?:\/\//i.test(href)) return null;
    var a = el("a", "trace", "trace");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    return a;
  }

  function badge(s, kind, note) {
    var ok = kind === "matched";
    var b = el("div", "mark " + (ok ? "pass" : "fail") + " " + kind);
    add(b, el("b", null, (ok ? "✓ " : "✗ ") + scoreKey(s)), el("span", null, " " + note));
    if (s.explanation) b.title = s.explanation;
    return b;
  }

  function toolCard(step, detail, o) {
    var card = el("div", "step tool" + (step.error ? " error" : ""));
    card.dataset.index = step.index;
    var head = el("div", "head");
    add(head, el("span", "kind", "tool"), el("b", "name", step.name),
        el("span", "meta", "#" + (step.index + 1) + (step.call_id ? "  " + step.call_id : "")),
        el("span", "meta", (step.offset_ms !== null ? "+" + ms(step.offset_ms) : "") +
           (step.latency_ms !== null ? "  " + ms(step.latency_ms) : "")),
        traceLink(o.traceUrl, step.trace_id, step.span_id, o.conversationId));
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
    var marks = o.marksByCall[step.index] || [];
    if (marks.length) {
      var box = el("div", "marks");
      marks.forEach(function (m) { box.appendChild(badge(detail.scores[m.score], m.kind, m.note)); });
      card.appendChild(box);
    }
    return card;
  }

  function modelCard(step, o) {
    var card = el("div", "step model" + (step.error ? " error" : ""));
    var requested = step.requested.length ? "→ " + step.requested.join(", ") : "answers";
    var tokens = step.input_tokens !== null ? "  tokens " + step.input_tokens + "/" + step.output_tokens : "";
    add(card, add(el("div", "head"), el("span", "kind", "model"), el("b", "name", step.name),
        el("span", "meta", requested), el("span", "meta",
          (step.offset_ms !== null ? "+" + ms(step.offset_ms) : "") + "  " + ms(step.latency_ms) + tokens),
        traceLink(o.traceUrl, step.trace_id, step.span_id, o.conversationId)));
    if (step.response) card.appendChild(el("pre", "text", step.response));
    if (step.error) card.appendChild(el("pre", "err", step.error));
    return card;
  }

  function scoresTable(detail) {
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
    return add(scores, sbody);
  }

  // The steps as a flat list of (turn, step index) so that pages can cut through turns.
  function timeline(detail, o) {
    var box = el("div", "timeline");
    var turns = detail.turns;
    var position = { turn: 0, step: 0 };
    var current = null; // the turn element being filled
    var more = el("button", "more", "");
    var total = 0;
    turns.forEach(function (t) { total += t.steps.length; });
    var drawn = 0;

    function openTurn(turn) {
      current = el("div", "turn");
      add(current, el("div", "turn-title", "turn " + (turn.index + 1)));
      if (turn.user_message !== null) add(current, add(el("div", "user"), el("b", null, "user "), el("span", null, shown(turn.user_message))));
      box.insertBefore(current, more);
    }
    function closeTurn(turn) {
      if (turn.final_response !== null) add(current, add(el("div", "answer"), el("b", null, "answer "), el("span", null, shown(turn.final_response))));
    }
    function page() {
      var budget = STEPS_PER_PAGE;
      while (position.turn < turns.length && budget > 0) {
        var turn = turns[position.turn];
        if (position.step === 0 && (current === null || current.dataset.turn !== String(position.turn))) {
          openTurn(turn);
          current.dataset.turn = String(position.turn);
        }
        var steps = turn.steps;
        while (position.step < steps.length && budget > 0) {
          var step = steps[position.step];
          if (step.kind === "tool_call" && step.parallel_group !== null) {
            var row = el("div", "parallel");
            while (position.step < steps.length && steps[position.step].kind === "tool_call" &&
                   steps[position.step].parallel_group === step.parallel_group) {
              row.appendChild(toolCard(steps[position.step], detail, o));
              position.step++; budget--; drawn++;
            }
            if (row.childNodes.length > 1) row.insertBefore(el("div", "plabel", "in parallel"), row.firstChild);
            current.appendChild(row);
            continue;
          }
          if (step.kind === "tool_call") current.appendChild(toolCard(step, detail, o));
          else if (step.kind === "model_call") current.appendChild(modelCard(step, o));
          else current.appendChild(el("div", "step handoff", "hand-off " + (step.from_agent || "?") + " → " + (step.to_agent || "?")));
          position.step++; budget--; drawn++;
        }
        if (position.step >= steps.length) {
          closeTurn(turn);
          position.turn++;
          position.step = 0;
        }
      }
      var left = total - drawn;
      more.hidden = position.turn >= turns.length;
      more.textContent = "show more (" + left + " more steps)";
      box.dataset.drawn = String(drawn);
    }
    more.addEventListener("click", page);
    box.appendChild(more);
    page();
    if (!more.hidden && "IntersectionObserver" in window) {
      var seen = new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; }) && !more.hidden) page();
        if (more.hidden) seen.disconnect();
      }, { rootMargin: "600px" });
      seen.observe(more);
    }
    return box;
  }

  // Draw `detail` into `container` (after what it holds): warnings, scores, the expected calls
  // not made, and the timeline. Options: conversationId, traceUrl (a link template).
  function render(container, detail, options) {
    var o = { conversationId: options && options.conversationId, traceUrl: options && options.traceUrl,
              marksByCall: {} };
    detail.marks.forEach(function (m) { (o.marksByCall[m.call] = o.marksByCall[m.call] || []).push(m); });
    (detail.warnings || []).forEach(function (w) { container.appendChild(el("p", "warning", w)); });
    if (detail.scores.length) add(container, el("h3", null, "Scores"), scoresTable(detail));
    if (detail.missing.length) {
      var missing = el("div", "missing-calls");
      missing.appendChild(el("h3", null, "Expected calls not made"));
      detail.missing.forEach(function (m) {
        missing.appendChild(badge(detail.scores[m.score], "missing", "missing " + m.name + ": " + m.note));
      });
      container.appendChild(missing);
    }
    add(container, el("h3", null, "Trajectory"), timeline(detail, o));
  }

  return { render: render, el: el, add: add, shown: shown, num: num, traceLink: traceLink };
})();
