(function () {
  'use strict';
  function byId(id) { return document.getElementById(id); }
  function each(list, f) { Array.prototype.forEach.call(list, f); }

  // Copy buttons: the text of the element named by data-target, to the clipboard (else selected for Ctrl+C).
  each(document.querySelectorAll('button.copy'), function (b) {
    b.addEventListener('click', function () {
      var src = byId(b.getAttribute('data-target'));
      var text = src ? src.textContent : '';
      function done(ok) {
        b.setAttribute('data-copied', ok ? '1' : '0');
        b.textContent = ok ? 'copied' : 'selected: press Ctrl+C';
        if (!ok && src) {
          var r = document.createRange(); r.selectNodeContents(src);
          var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(r);
        }
      }
      function fallback() {
        var t = document.createElement('textarea'); t.value = text; t.setAttribute('readonly', '');
        t.style.position = 'fixed'; t.style.opacity = '0'; document.body.appendChild(t); t.select();
        var ok = false;
        try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
        document.body.removeChild(t); done(ok);
      }
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(function () { done(true); }, fallback);
      } else { fallback(); }
    });
  });

  // Sortable tables: a click on a header with data-sort orders the rows by that column's data-v (or text).
  each(document.querySelectorAll('table.sortable'), function (table) {
    var body = table.tBodies[0];
    each(table.querySelectorAll('th[data-sort]'), function (th) {
      th.setAttribute('role', 'button'); th.tabIndex = 0;
      function sort() {
        var col = th.cellIndex, numeric = th.getAttribute('data-sort') === 'num';
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        each(table.querySelectorAll('th[data-sort]'), function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var rows = Array.prototype.slice.call(body.rows);
        function key(r) {
          var cell = r.cells[col], v = cell ? (cell.getAttribute('data-v') || cell.textContent) : '';
          return numeric ? parseFloat(v) : v.toLowerCase();
        }
        rows.sort(function (x, y) {
          var a = key(x), b = key(y), d = a < b ? -1 : a > b ? 1 : 0;
          return asc ? d : -d;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sort(); } });
    });
  });

  // A packed block (data-encoding="deflate-base64"): deflated JSON in base64, inflated by the browser's
  // DecompressionStream; else plain JSON.
  function inflate(dataEl, done) {
    if (dataEl.getAttribute('data-encoding') !== 'deflate-base64') { done(JSON.parse(dataEl.textContent)); return; }
    var bin = atob(dataEl.textContent.trim()), bytes = new Uint8Array(bin.length);
    for (var k = 0; k < bin.length; k++) { bytes[k] = bin.charCodeAt(k); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    new Response(stream).text().then(function (text) { done(JSON.parse(text)); });
  }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }

  // A large run's flipped questions come packed (harness/report/packed.py): drawn here as the template draws a
  // small run's, every text by textContent (model output is untrusted), then the filter is set up on the rows.
  var flipsData = byId('flips-data');
  if (flipsData && byId('flips')) { inflate(flipsData, drawFlips); } else { flipFilter(); }
  function titled(e, title) { e.title = title; return e; }
  function markOf(ok) {  // right, wrong or no answer: as the template's mark()
    return ok === true ? titled(el('span', '✓', 'mark r'), 'right')
      : ok === false ? titled(el('span', '✗', 'mark w'), 'wrong') : titled(el('span', '–', 'mark e'), 'no answer');
  }
  function add(parent, items) {  // strings as text nodes, never markup
    items.forEach(function (x) { parent.appendChild(typeof x === 'string' ? document.createTextNode(x) : x); });
    return parent;
  }
  function outputPre(ans, split) {
    var pre = el('pre');
    if (split) {
      add(pre, [split.before, titled(el('mark', split.mark, 'fd'), 'where the two outputs part'), split.after]);
    } else { pre.textContent = ans.output; }
    if (ans.cut) { pre.appendChild(document.createTextNode(' …[cut]')); }
    return pre;
  }
  function flipAnswers(side, mean, arm) {
    var td = el('td', null, 'ans'), first = side[0], many = side.length > 1;
    td.setAttribute('data-v', String(mean)); td.setAttribute('data-arm', arm);
    if (first) {
      var head = add(el('div'), [markOf(first.correct), ' parsed ', el('span', first.pred, 'pred')]);
      if (many) { add(head, [' ', el('span', 'r' + first.repeat, 'muted')]); }
      if (first.finish && first.finish !== 'stop') { add(head, [' ', el('span', 'finish: ' + first.finish, 'muted')]); }
      add(td, [head, outputPre(first, first.split)]);
    }
    if (many) {
      var line = el('div', 'repeats: ', 'muted');
      side.forEach(function (a, k) {
        add(line, ['r' + a.repeat + ' ', markOf(a.correct), ' ' + a.pred + (k < side.length - 1 ? ' · ' : '')]);
      });
      var d = add(el('details'), [el('summary', "other repeats' outputs")]);
      side.slice(1).forEach(function (a) {
        var head = add(el('div'), ['r' + a.repeat + ': ', markOf(a.correct), ' parsed ', el('span', a.pred, 'pred')]);
        add(d, [head, outputPre(a, null)]);
      });
      add(td, [line, d]);
    }
    return td;
  }
  function drawFlips(rows) {
    var body = byId('flips').tBodies[0], heads = byId('flips').tHead.rows[0].cells;
    var cats = {b: ['B right', 'ok'], a: ['A right', 'no'], mixed: ['mixed', 'muted']};
    rows.forEach(function (f) {
      var tr = el('tr', null, 'flip'), cat = cats[f.cat] || [f.cat, 'muted'];
      tr.setAttribute('data-cat', f.cat);
      var num = add(el('td', null, 'num'), [String(f.index), el('br'), el('span', cat[0], 'cat ' + cat[1])]);
      num.setAttribute('data-v', String(f.index));
      if (f.a.length > 1 || f.b.length > 1) {
        add(num, [el('br'), add(el('span', null, 'cat muted'), ['A ' + f.score_a, el('br'), 'B ' + f.score_b])]);
      }
      var label = add(el('td', null, 'num'), [el('strong', f.label)]);
      label.setAttribute('data-v', String(f.label));
      add(tr, [num, el('td', f.question, 'q'), label,
               flipAnswers(f.a, f.mean_a, heads[3].textContent), flipAnswers(f.b, f.mean_b, heads[4].textContent)]);
      body.appendChild(tr);
    });
    flipFilter();
  }

  // The flipped questions: filter by text and outcome.
  function flipFilter() {
    var q = byId('flip-q'), s = byId('flip-cat'), n = byId('flip-n');
    if (!q || !s || !n) { return; }
    var rows = Array.prototype.slice.call(document.querySelectorAll('#flips tbody tr.flip'));
    function apply() {
      var t = q.value.toLowerCase(), c = s.value, k = 0;
      rows.forEach(function (r) {
        var ok = (!c || r.getAttribute('data-cat') === c) && (!t || r.textContent.toLowerCase().indexOf(t) >= 0);
        r.hidden = !ok;
        if (ok) { k++; }
      });
      n.textContent = String(k);
    }
    q.addEventListener('input', apply);
    s.addEventListener('change', apply);
    apply();
  }

  // The question browser's rows: plain JSON, or (a large run) packed as columns over a table of distinct texts.
  function questionRows(dataEl, done) {
    if (dataEl.getAttribute('data-encoding') !== 'deflate-base64') { inflate(dataEl, done); return; }
    inflate(dataEl, function (p) {
      var S = p.s;
      function str(id) { return S[id]; }
      function arm(x, n) { return {p: x.p[n].map(str), ok: x.ok[n], o: S[x.o[n]]}; }
      done(p.i.map(function (i, n) {
        return {i: i, c: p.c[n], q: S[p.q[n]], l: p.l[n], a: arm(p.a, n), b: arm(p.b, n)};
      }));
    });
  }

  // The question browser: every question from the embedded JSON, filtered by outcome and text, a page at a time.
  // Model output is untrusted: it only ever reaches the page as textContent.
  var qbData = byId('questions-data');
  if (qbData && byId('qb-rows')) { questionRows(qbData, questionBrowser); }
  function questionBrowser(all) {
    var body = byId('qb-rows'), labels = JSON.parse(byId('qb-outcomes').textContent);
    var q = byId('qb-q'), s = byId('qb-cat'), n = byId('qb-n'), more = byId('qb-more'), PAGE = 50, shown = PAGE;
    var heads = document.querySelectorAll('#qb thead th');
    function armCell(arm, k) {
      var td = el('td', null, 'ans');
      if (heads[k]) { td.setAttribute('data-arm', heads[k].textContent); }  // the arm's name where rows stack
      var line = el('div');
      arm.p.forEach(function (p, k) {
        var ok = arm.ok[k];
        line.appendChild(el('span', ok === true ? '✓' : ok === false ? '✗' : '–', ok === true ? 'ok' : ok === false ? 'no' : 'muted'));
        line.appendChild(el('span', ' ' + p + (k < arm.p.length - 1 ? ' · ' : ''), 'pred'));
      });
      td.appendChild(line);
      if (arm.o) {
        var d = el('details'); d.appendChild(el('summary', 'output (repeat 1)')); d.appendChild(el('pre', arm.o));
        td.appendChild(d);
      }
      return td;
    }
    function matches(r, t, c) {
      if (c && r.c !== c) { return false; }
      if (!t) { return true; }
      if (t.charAt(0) === '#') { return String(r.i) === t.slice(1); }  // one question, by its number
      return (String(r.i) + ' ' + r.q + ' ' + r.l + ' ' + r.a.p.join(' ') + ' ' + r.b.p.join(' ') + ' ' + r.a.o + ' ' + r.b.o)
        .toLowerCase().indexOf(t) >= 0;
    }
    function render() {
      var t = q.value.toLowerCase(), c = s.value;
      var hits = all.filter(function (r) { return matches(r, t, c); });
      while (body.firstChild) { body.removeChild(body.firstChild); }
      hits.slice(0, shown).forEach(function (r) {
        var tr = el('tr'); tr.setAttribute('data-cat', r.c);
        tr.appendChild(el('td', r.i, 'num'));
        tr.appendChild(el('td', labels[r.c] || r.c, 'cat ' + (r.c === 'b' ? 'ok' : r.c === 'a' ? 'no' : 'muted')));
        tr.appendChild(el('td', r.q, 'q'));
        tr.appendChild(el('td', r.l, 'num'));
        tr.appendChild(armCell(r.a, 4)); tr.appendChild(armCell(r.b, 5));
        body.appendChild(tr);
      });
      n.textContent = Math.min(shown, hits.length) + ' of ' + hits.length;
      more.hidden = hits.length <= shown;
    }
    q.addEventListener('input', function () { shown = PAGE; render(); });
    s.addEventListener('change', function () { shown = PAGE; render(); });
    more.addEventListener('click', function () { shown += PAGE * 4; render(); });
    each(document.querySelectorAll('a.qlink'), function (a) {  // a question named elsewhere: shown in the browser
      a.addEventListener('click', function () { q.value = '#' + a.getAttribute('data-q'); shown = PAGE; render(); });
    });
    render();
  }
  // a plot wider than a narrow page scrolls inside its box: show its marker (the estimate), not its left edge
  Array.prototype.forEach.call(document.querySelectorAll('.plotbox'), function (box) {
    var m = box.querySelector('[id^="focus-"]');
    if (!m || box.scrollWidth <= box.clientWidth) { return; }
    var r = m.getBoundingClientRect(), b = box.getBoundingClientRect();
    box.scrollLeft += (r.left + r.width / 2) - (b.left + b.width / 2);
  });
})();
