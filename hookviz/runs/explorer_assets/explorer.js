/* hookviz explorer: the run's samples from explorer-data.js, filtered, sorted and drawn on screen only.
   Routes: #/?FILTERS (the list), #/sample/NAME?FILTERS (one sample), #/channel/LAYER/INDEX (an atlas channel).
   Every text from the run is set with textContent or setAttribute: nothing the run holds is parsed as HTML. */
(function () {
  'use strict';
  var DATA = window.HOOKVIZ_DATA;
  var BASE = window.HOOKVIZ_BASE || '';  // the run folder, where the page is not in it (a notebook's embed)
  var app = document.getElementById('app');
  var ROW = 84;
  var state = {cols: {}, n: 0, view: null, query: '', names: null, sel: {layer: null, kind: null}, lastList: ''};

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === 'text') node.textContent = attrs[k];
      else if (k === 'cls') node.className = attrs[k];
      else if (k.slice(0, 2) === 'on') node.addEventListener(k.slice(2), attrs[k]);
      else if ((k === 'src' || k === 'href') && attrs[k] && String(attrs[k]).charAt(0) !== '#') node.setAttribute(k, BASE + attrs[k]);
      else if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c) node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return node;
  }
  function path() { return Array.prototype.map.call(arguments, function (p) { return String(p).split('/').map(encodeURIComponent).join('/'); }).join('/'); }
  function fmt(v) { return (v === null || v === undefined || (typeof v === 'number' && isNaN(v))) ? '' : (typeof v === 'number' ? String(+v.toPrecision(4)) : String(v)); }

  // ---------------------------------------------------------------- columns
  function decode() {
    state.n = DATA.count;
    DATA.columns.forEach(function (c) {
      var col = {name: c.name, type: c.type};
      if (c.codes) { col.values = c.values; col.codes = Int32Array.from(c.codes); }
      else if (c.type === 'float') { col.num = new Float64Array(state.n); c.data.forEach(function (v, i) { col.num[i] = v === null ? NaN : v; }); }
      else if (c.type === 'int' || c.type === 'bool') { col.num = new Float64Array(state.n); c.data.forEach(function (v, i) { col.num[i] = v === null ? NaN : v; }); }
      else col.data = c.data;
      state.cols[c.name] = col;
    });
    state.thumbs = DATA.thumbs;
  }
  function value(col, i) {
    if (col.codes) return col.values[col.codes[i]];
    if (col.num) return col.type === 'bool' ? (isNaN(col.num[i]) ? null : !!col.num[i]) : col.num[i];
    return col.data[i];
  }
  function nameOf(i) { return value(state.cols.name, i); }
  // a sample's path as it lies in the data (tabby/1.png): the data's image column (a run folder written before
  // it was: its path as given, less the folder that holds them all, its run's root)
  function shownPath(image) { var root = DATA.run.root || ''; return root && image.slice(0, root.length) === root ? image.slice(root.length) : image; }
  function inData() { return state.inData || (state.inData = {type: 'str', data: state.cols.image.data.map(shownPath)}); }
  function indexOf(name) {
    if (!state.names) { state.names = new Map(); for (var i = 0; i < state.n; i++) state.names.set(nameOf(i), i); }
    return state.names.has(name) ? state.names.get(name) : -1;
  }

  // ---------------------------------------------------------------- filters and sort, from the address
  function parseQuery(q) {
    var params = new URLSearchParams(q || '');
    var out = {};
    params.forEach(function (v, k) { if (v !== '') out[k] = v; });
    return out;
  }
  function test(col, want) {
    var n = state.n, keep = new Uint8Array(n), i;
    if (col.codes) {
      var wanted = want.split('|'), codes = new Uint8Array(col.values.length);
      col.values.forEach(function (v, c) { if (wanted.indexOf(v) >= 0 || (v === '' && wanted.indexOf('(none)') >= 0)) codes[c] = 1; });
      for (i = 0; i < n; i++) keep[i] = codes[col.codes[i]];
    } else if (col.num) {
      var lo = -Infinity, hi = Infinity, none = want === 'none';
      if (col.type === 'bool') { var b = want === 'true' ? 1 : 0; for (i = 0; i < n; i++) keep[i] = none ? isNaN(col.num[i]) : col.num[i] === b; return keep; }
      if (want.indexOf('..') >= 0) { var p = want.split('..'); if (p[0] !== '') lo = +p[0]; if (p[1] !== '') hi = +p[1]; } else if (!none) { lo = hi = +want; }
      for (i = 0; i < n; i++) { var x = col.num[i]; keep[i] = none ? isNaN(x) : (x >= lo && x <= hi); }
    } else {
      var needle = want.toLowerCase(), lower = col.lower || (col.lower = col.data.map(function (t) { return String(t).toLowerCase(); }));
      for (i = 0; i < n; i++) keep[i] = lower[i].indexOf(needle) >= 0 ? 1 : 0;
    }
    return keep;
  }
  function filtered(params) {
    var n = state.n, keep = new Uint8Array(n).fill(1), i;
    Object.keys(params).forEach(function (k) {
      var col = state.cols[k], mask = null;
      if (k === 'q') {
        var a = test(state.cols.name, params.q), b = test(inData(), params.q);
        mask = a; for (i = 0; i < n; i++) mask[i] = a[i] | b[i];
      } else if (col) mask = test(col, params[k]);
      if (mask) for (i = 0; i < n; i++) keep[i] &= mask[i];
    });
    var count = 0; for (i = 0; i < n; i++) count += keep[i];
    var view = new Int32Array(count), j = 0;
    for (i = 0; i < n; i++) if (keep[i]) view[j++] = i;
    return sorted(view, params.sort);
  }
  function sortKey(col) {
    if (col.num) return col.num;
    var key = new Float64Array(state.n), i;
    if (col.codes) {
      var order = col.values.map(function (v, c) { return c; }).sort(function (a, b) { return col.values[a] < col.values[b] ? -1 : col.values[a] > col.values[b] ? 1 : 0; });
      var rank = new Float64Array(col.values.length); order.forEach(function (c, r) { rank[c] = col.values[c] === '' ? NaN : r; });
      for (i = 0; i < state.n; i++) key[i] = rank[col.codes[i]];
    } else {
      var idx = Array.from({length: state.n}, function (_, k) { return k; });
      idx.sort(function (a, b) { return col.data[a] < col.data[b] ? -1 : col.data[a] > col.data[b] ? 1 : 0; });
      idx.forEach(function (k, r) { key[k] = r; });
    }
    return key;
  }
  var keys = {};
  function sorted(view, sort) {
    if (!sort) return view;
    var desc = sort.charAt(0) === '-', name = desc ? sort.slice(1) : sort, col = state.cols[name];
    if (!col) return view;
    var key = keys[name] || (keys[name] = sortKey(col));
    var sign = desc ? -1 : 1;
    return view.sort(function (a, b) {
      var x = key[a], y = key[b];
      if (isNaN(x)) return isNaN(y) ? a - b : 1;  // samples without a value last
      if (isNaN(y)) return -1;
      return x === y ? a - b : (x < y ? -sign : sign);
    });
  }

  // ---------------------------------------------------------------- the list
  // the list's filters as the address holds them now: a control changed before the last one's route has run keeps it
  function addressQuery() { var h = location.hash, at = h.indexOf('?'); return at < 0 ? '' : h.slice(at + 1); }
  function setQuery(params) {
    var q = new URLSearchParams();
    Object.keys(params).forEach(function (k) { if (params[k] !== '' && params[k] !== undefined) q.set(k, params[k]); });
    var text = q.toString();
    location.hash = '#/' + (text ? '?' + text : '');
  }
  function control(params, key, labelText, options) {
    var current = params[key] || '';
    var select = el('select', {name: key, 'data-filter': key, onchange: function () { var p = parseQuery(addressQuery()); p[key] = select.value; setQuery(p); }});
    select.appendChild(el('option', {value: '', text: 'any'}));
    options.forEach(function (o) { var opt = el('option', {value: o[0], text: o[1]}); if (o[0] === current) opt.selected = true; select.appendChild(opt); });
    return el('label', {}, [labelText + ' ', select]);
  }
  function range(params, key, labelText) {
    var parts = (params[key] || '').split('..');
    function input(side) {
      var box = el('input', {type: 'number', step: 'any', 'data-filter': key + (side ? ':max' : ':min'), placeholder: side ? 'max' : 'min', value: parts.length === 2 ? parts[side] : '',
        onchange: function () { var p = parseQuery(addressQuery()); var lo = box.parentNode.children[0].value, hi = box.parentNode.children[1].value; p[key] = (lo || hi) ? lo + '..' + hi : ''; setQuery(p); }});
      return box;
    }
    return el('div', {cls: 'range'}, [el('span', {text: labelText}), el('span', {cls: 'pair'}, [input(0), input(1)])]);
  }
  function searchBox(params, key, labelText, placeholder) {  // a text the column holds (any case)
    var search = el('input', {type: 'search', name: key, placeholder: placeholder, value: params[key] || '', 'data-filter': key,
      onchange: function () { var p = parseQuery(addressQuery()); p[key] = search.value; setQuery(p); }});
    return el('label', {}, [labelText + ' ', search]);
  }
  function classOptions(name) { var col = state.cols[name]; return col.values.filter(function (v) { return v !== ''; }).sort().map(function (v) { return [v, v]; }); }
  function filters(params) {
    var box = el('form', {cls: 'filters', onsubmit: function (e) { e.preventDefault(); }});
    box.appendChild(searchBox(params, 'q', 'name or path', 'name or path in the data'));
    if (state.cols.true_class.values.some(function (v) { return v; })) box.appendChild(control(params, 'true_class', 'true class', classOptions('true_class')));
    box.appendChild(control(params, 'predicted', 'predicted', classOptions('predicted')));
    box.appendChild(control(params, 'correct', 'right or wrong', [['true', 'right'], ['false', 'wrong'], ['none', 'no true class']]));
    box.appendChild(control(params, 'status', 'status', state.cols.status.values.map(function (v) { return [v, v]; })));
    if (state.cols.failure.data.some(function (t) { return t; })) box.appendChild(searchBox(params, 'failure', 'failure', 'words of its message'));
    box.appendChild(range(params, 'confidence', 'confidence (top-1 probability)'));
    [['dead', 'dead layers'], ['zero_grad', 'layers without gradient'], ['nonfinite', 'non-finite values'], ['notes', 'notes'], ['drift_findings', 'drift findings']].forEach(function (h) {
      box.appendChild(control(params, h[0], h[1], [['1..', 'some'], ['0', 'none']]));
    });
    if (DATA.run.compared) { box.appendChild(control(params, 'target_changed', 'target changed', [['true', 'yes'], ['false', 'no']])); box.appendChild(range(params, 'drift', 'largest relative change')); }
    DATA.columns.forEach(function (c) {
      if (DATA.run.fixed.indexOf(c.name) >= 0) return;
      if (c.type === 'str') box.appendChild(control(params, c.name, c.name, [['passes', 'passes'], ['fails', 'fails']]));
      else box.appendChild(range(params, c.name, c.name));
    });
    var sort = el('select', {name: 'sort', 'data-filter': 'sort', onchange: function () { var p = parseQuery(addressQuery()); p.sort = sort.value; setQuery(p); }});
    sort.appendChild(el('option', {value: '', text: 'run order'}));
    DATA.columns.forEach(function (c) {
      [['', ' \u2191'], ['-', ' \u2193']].forEach(function (d) { var opt = el('option', {value: d[0] + c.name, text: c.name + d[1]}); if (params.sort === d[0] + c.name) opt.selected = true; sort.appendChild(opt); });
    });
    box.appendChild(el('label', {}, ['sort ', sort]));
    box.appendChild(el('a', {href: '#/', cls: 'clear', text: 'clear the filters'}));
    return box;
  }
  function counts(view, params) {
    var box = el('div', {cls: 'counts'});
    var tc = state.cols.true_class, pc = state.cols.predicted, hasTrue = tc.values.some(function (v) { return v; });
    function tally(col) { var t = new Int32Array(col.values.length); for (var j = 0; j < view.length; j++) t[col.codes[view[j]]]++; return t; }
    var byPred = tally(pc), byTrue = hasTrue ? tally(tc) : null;
    function top(col, t, k) { return col.values.map(function (v, c) { return c; }).filter(function (c) { return t[c] > 0 && col.values[c] !== ''; }).sort(function (a, b) { return t[b] - t[a]; }).slice(0, k); }
    var table = el('table', {cls: 'classes'}, [el('caption', {text: 'samples per class, the most frequent (of those listed)'}), el('tr', {}, [el('th', {text: 'class'}), hasTrue ? el('th', {text: 'true'}) : null, el('th', {text: 'predicted'})])]);
    var names = [];
    if (hasTrue) top(tc, byTrue, 12).forEach(function (c) { names.push(tc.values[c]); });
    top(pc, byPred, 12).forEach(function (c) { if (names.indexOf(pc.values[c]) < 0) names.push(pc.values[c]); });
    names.slice(0, 16).forEach(function (name) {
      var t = hasTrue ? tc.values.indexOf(name) : -1, p = pc.values.indexOf(name);
      table.appendChild(el('tr', {}, [el('td', {text: name}),
        hasTrue ? el('td', {}, [link(params, {true_class: name}, String(t >= 0 ? byTrue[t] : 0))]) : null,
        el('td', {}, [link(params, {predicted: name}, String(p >= 0 ? byPred[p] : 0))])]));
    });
    if (names.length) box.appendChild(table);  // none listed has a class: no table of headings alone
    if (hasTrue) box.appendChild(confusion(view, params, top(tc, byTrue, 8).map(function (c) { return tc.values[c]; })));
    return box;
  }
  function link(params, more, text) { var p = Object.assign({}, params, more); var q = new URLSearchParams(); Object.keys(p).forEach(function (k) { q.set(k, p[k]); }); return el('a', {href: '#/?' + q.toString(), text: text}); }
  function confusion(view, params, classes) {
    var tc = state.cols.true_class, pc = state.cols.predicted, k = classes.length;
    var m = new Int32Array((k + 1) * (k + 1));
    var tIndex = tc.values.map(function (v) { var x = classes.indexOf(v); return x < 0 ? k : x; });
    var pIndex = pc.values.map(function (v) { var x = classes.indexOf(v); return x < 0 ? k : x; });
    for (var j = 0; j < view.length; j++) { var i = view[j]; m[tIndex[tc.codes[i]] * (k + 1) + pIndex[pc.codes[i]]]++; }
    var table = el('table', {cls: 'confusion'}, [el('caption', {text: 'confusion: true class (rows) by predicted class (columns)'})]);
    var head = el('tr', {}, [el('th', {text: ''})]);
    // columns by number, rows by number and name: class names cut to a column's width could not be told apart
    classes.concat(['other']).forEach(function (c, j) { head.appendChild(el('th', {text: j < k ? String(j + 1) : 'other', title: c})); });
    table.appendChild(head);
    classes.concat(['other']).forEach(function (t, r) {
      var row = el('tr', {}, [el('th', {cls: 'rowname', text: r < k ? (r + 1) + '. ' + t : t, title: t})]);
      classes.concat(['other']).forEach(function (p, c) {
        var count = m[r * (k + 1) + c];
        var cell = el('td', {cls: r === c && r < k ? 'diag' : (count ? 'off' : '')});
        if (count && r < k && c < k) cell.appendChild(link(params, {true_class: t, predicted: p}, String(count))); else cell.textContent = count ? String(count) : '';
        row.appendChild(cell);
      });
      table.appendChild(row);
    });
    return table;
  }
  function rowNode(i, top, q) {
    var name = nameOf(i), thumb = state.thumbs.values[state.thumbs.codes[i]];
    var a = el('a', {cls: 'row', 'data-sample': name, title: inData().data[i], href: '#/sample/' + encodeURIComponent(name) + (q ? '?' + q : ''), style: 'top:' + top + 'px'});
    a.appendChild(thumb ? el('img', {src: path(name, thumb), alt: '', loading: 'lazy'}) : el('span', {cls: 'nothumb', text: '\u2014'}));
    var pred = value(state.cols.predicted, i), conf = value(state.cols.confidence, i), truth = value(state.cols.true_class, i), ok = value(state.cols.correct, i);
    var where = inData().data[i], stem = where.replace(/^.*[\\/]/, '').replace(/\.[^.]*$/, '');
    // the path in the data beside a name that does not say it (a name made distinct: 0-9bb521ea for cat/0.png)
    var lines = [where && (stem !== name || where.indexOf(stem) !== 0) ? el('span', {}, [el('b', {text: name}), el('span', {cls: 'path', text: ' ' + where})]) : el('b', {text: name})];
    var l2 = [], prompt = state.cols.prompt ? value(state.cols.prompt, i) : '';  // a vision-language model's photo: its prompt, its answer
    if (pred) l2.push((prompt ? 'answered ' : 'predicted ') + pred + (isNaN(conf) ? '' : ' (' + (prompt ? 'p=' + fmt(conf) : conf.toFixed(3)) + ')'));
    if (truth) l2.push('true ' + truth);
    var status = value(state.cols.status, i);
    if (status !== 'done') l2.push(status);
    if (prompt) lines.push(el('span', {cls: 'prompt', text: 'prompt ' + prompt}));
    lines.push(el('span', {text: l2.join(' \u00b7 ')}));
    var explained = prompt ? value(state.cols.target, i) : '';
    if (explained) lines.push(el('span', {cls: 'explained', text: 'explained ' + explained}));
    var flags = [];
    if (ok === false) flags.push(['wrong', 'bad']);
    if (ok === true) flags.push(['right', 'good']);
    [['dead', 'dead'], ['zero_grad', 'zero-grad'], ['nonfinite', 'non-finite'], ['drift_findings', 'drift']].forEach(function (h) { if (value(state.cols[h[0]], i) > 0) flags.push([h[1], 'bad']); });
    if (value(state.cols.target_changed, i) === true) flags.push(['target changed', 'bad']);
    if (value(state.cols.notes, i) > 0) flags.push(['notes', 'note']);
    var failure = value(state.cols.failure, i);
    if (failure) flags.push([failure, 'bad']);
    lines.push(el('span', {cls: 'flags'}, flags.map(function (f) { return el('span', {cls: 'flag ' + f[1], text: f[0]}); })));
    a.appendChild(el('span', {cls: 'text'}, lines));
    return a;
  }
  function drawRows(scroller, inner, view, q) {
    var first = Math.max(0, Math.floor(scroller.scrollTop / ROW) - 4);
    var last = Math.min(view.length, Math.ceil((scroller.scrollTop + scroller.clientHeight) / ROW) + 4);
    if (inner.dataset.first === String(first) && inner.dataset.last === String(last)) return;
    inner.dataset.first = first; inner.dataset.last = last;
    var frag = document.createDocumentFragment();
    for (var j = first; j < last; j++) frag.appendChild(rowNode(view[j], j * ROW, q));
    inner.replaceChildren(frag);
  }
  function showList(q) {
    var params = parseQuery(q);
    var t0 = performance.now();
    var view = filtered(params);
    state.view = view; state.query = q; state.lastList = q;
    var page = state.listPage || (state.listPage = listPage(params));
    if (app.firstChild !== page.root) app.replaceChildren(page.root);
    syncFilters(page.root, params);
    page.status.textContent = view.length + ' of ' + state.n + ' samples';
    page.status.setAttribute('data-count', view.length);
    page.inner.style.height = (view.length * ROW) + 'px';
    page.inner.dataset.first = -1;
    page.scroller.scrollTop = 0;
    page.draw = function () { drawRows(page.scroller, page.inner, view, q); };
    page.draw();
    page.extra.replaceChildren(counts(view, params));
    state.filterMs = performance.now() - t0;
  }
  function listPage(params) {
    var scroller = el('div', {id: 'list', cls: 'list'});
    var inner = el('div', {cls: 'rows'});
    scroller.appendChild(inner);
    var status = el('p', {id: 'shown', cls: 'shown'});
    var extra = el('div');
    var root = el('div', {cls: 'explorer'}, [el('aside', {}, [filters(params)]), el('section', {cls: 'listing'}, [status, scroller]), el('section', {cls: 'extra'}, [extra, atlasLinks()])]);
    var page = {root: root, scroller: scroller, inner: inner, status: status, extra: extra};
    scroller.addEventListener('scroll', function () { page.draw(); });
    return page;
  }
  function syncFilters(root, params) {
    Array.prototype.forEach.call(root.querySelectorAll('[data-filter]'), function (box) {
      var key = box.getAttribute('data-filter'), side = key.indexOf(':m') > 0 && /:(min|max)$/.test(key) ? key.slice(-3) : null;
      if (side) { var parts = (params[key.slice(0, -4)] || '').split('..'); box.value = parts.length === 2 ? parts[side === 'min' ? 0 : 1] : ''; }
      else box.value = params[key] || '';
    });
  }
  function atlasLinks() {
    if (!DATA.run.atlas) return null;
    var box = el('div', {cls: 'atlaslinks'}, [el('h3', {text: 'atlas'})]);
    (DATA.run.layers || []).forEach(function (l) { box.appendChild(el('a', {href: '#/channel/' + encodeURIComponent(l) + '/0', text: l + ': channels'})); });
    box.appendChild(el('a', {href: '#/channel/', text: 'every layer of the atlas'}));
    return box;
  }

  // ---------------------------------------------------------------- one sample
  var loading = {};
  function load(src, ready) {
    if (loading[src] === true) return ready();
    var script = el('script', {src: src});
    script.onload = function () { loading[src] = true; ready(); };
    script.onerror = function () { ready(new Error(src)); };
    document.head.appendChild(script);
  }
  function details(i, ready) {
    var k = Math.floor(i / DATA.chunk);
    var have = function () { return window.HOOKVIZ_SAMPLES && window.HOOKVIZ_SAMPLES[k]; };
    if (have()) return ready(have()[i - k * DATA.chunk]);
    load('explorer-samples-' + k + '.js', function (err) { ready(err || !have() ? null : have()[i - k * DATA.chunk]); });
  }
  function step(i, by) {
    var view = state.view || filtered(parseQuery(state.query));
    state.view = view;
    var at = -1; for (var j = 0; j < view.length; j++) if (view[j] === i) { at = j; break; }
    if (at < 0) return null;
    var to = at + by;
    return to >= 0 && to < view.length ? {index: view[to], at: to, of: view.length} : null;
  }
  function showSample(name, q) {
    if (q !== state.query || !state.view) { state.view = filtered(parseQuery(q)); state.query = q; }
    var i = indexOf(name);
    if (i < 0) { app.replaceChildren(el('p', {cls: 'missing', text: 'No sample named ' + name + ' in this run.'}), el('a', {href: '#/' + (q ? '?' + q : ''), text: 'back to the list'})); return; }
    details(i, function (d) { renderSample(i, d, q); });
  }
  function sampleHref(i, q) { return '#/sample/' + encodeURIComponent(nameOf(i)) + (q ? '?' + q : ''); }
  function renderSample(i, d, q) {
    var name = nameOf(i), prev = step(i, -1), next = step(i, 1), here = step(i, 0);
    var nav = el('nav', {cls: 'samplenav'}, [
      el('a', {href: '#/' + (q ? '?' + q : ''), id: 'back', text: '\u2190 list'}),
      prev ? el('a', {href: sampleHref(prev.index, q), id: 'prev', text: '\u2190 previous'}) : el('span', {text: '(first)'}),
      next ? el('a', {href: sampleHref(next.index, q), id: 'next', text: 'next \u2192'}) : el('span', {text: '(last)'}),
      el('span', {cls: 'meta', text: here ? 'sample ' + (here.at + 1) + ' of ' + here.of + ' listed \u00b7 keys: \u2190 \u2192 step, \u2191 \u2193 layer, 1-9 picture, Esc list' : ''})]);
    var page = el('div', {cls: 'sample', 'data-sample': name}, [nav, el('h2', {}, [el('code', {text: d ? d.image : value(state.cols.image, i)})])]);
    var body = el('div', {cls: 'samplebody'});
    body.appendChild(pictures(name, d));
    body.appendChild(numbers(i, d));
    page.appendChild(body);
    app.replaceChildren(page);
    window.scrollTo(0, 0);
  }
  function pictures(name, d) {
    var box = el('div', {cls: 'pictures'});
    if (!d) { box.appendChild(el('p', {text: 'No pictures: ' + (value(state.cols.failure, indexOf(name)) || value(state.cols.status, indexOf(name)))})); return box; }
    var strip = el('div', {cls: 'photos'});
    if (d.clip) strip.appendChild(el('a', {href: path(name, d.clip)}, [el('img', {src: path(name, d.clip), alt: 'the CAM over the clip, animated', cls: 'clip'})]));
    d.photos.forEach(function (p) { strip.appendChild(el('a', {href: path(name, p[0])}, [el('img', {src: path(name, p[0]), alt: p[1], title: p[1]})])); });
    box.appendChild(strip);
    if (!d.layers.length) return box;
    var layer = d.layers.filter(function (l) { return l.name === state.sel.layer; })[0] || d.layers[0];
    state.sel.layer = layer.name;
    var tabs = el('div', {cls: 'tabs layers'});
    d.layers.forEach(function (l) {
      tabs.appendChild(el('button', {type: 'button', 'data-layer': l.name, cls: l === layer ? 'on' : '', text: l.name, title: l.type, onclick: function () { state.sel.layer = l.name; redraw(); }}));
    });
    box.appendChild(tabs);
    var kind = layer.pictures.filter(function (p) { return p[0] === state.sel.kind; })[0] || layer.pictures[0];
    var kindTabs = el('div', {cls: 'tabs kinds'});
    layer.pictures.forEach(function (p) {
      kindTabs.appendChild(el('button', {type: 'button', 'data-kind': p[0], cls: p === kind ? 'on' : '', text: p[0], onclick: function () { state.sel.kind = p[0]; redraw(); }}));
    });
    box.appendChild(kindTabs);
    if (layer.note) box.appendChild(el('p', {cls: 'note', text: layer.note}));
    if (layer.channels && layer.channels.length) box.appendChild(topChannels(layer));
    if (kind) {
      state.sel.kind = kind[0];
      var shown = el('div', {cls: 'shown-picture'});
      if (d.change && d.base) shown.appendChild(figure('before (baseline)', d.base + '/' + path(name, kind[1])));
      shown.appendChild(figure(d.change ? 'after' : layer.name + ' \u00b7 ' + kind[0], path(name, kind[1]), 'picture'));
      var diffPicture = d.change ? d.change.layers.filter(function (l) { return l[0] === layer.name; })[0] : null;
      if (diffPicture) shown.appendChild(figure('change', path(name, diffPicture[1])));
      box.appendChild(shown);
    }
    return box;
  }
  function topChannels(layer) {  // --top-channels: each links its atlas page when the run has an atlas
    var line = el('p', {cls: 'topchannels'}, [el('span', {text: 'channels the prediction rested on: '})]);
    layer.channels.forEach(function (c, k) {
      var text = 'channel ' + c[0] + (c[2] ? ' (' + c[2] + ')' : '') + ', share ' + fmt(c[1]);
      line.appendChild(DATA.run.atlas ? el('a', {href: '#/channel/' + encodeURIComponent(layer.name) + '/' + c[0], 'data-channel': layer.name + '/' + c[0], text: text}) : el('span', {text: text}));
      if (k < layer.channels.length - 1) line.appendChild(document.createTextNode(' \u00b7 '));
    });
    return line;
  }
  function figure(caption, src, id) {
    return el('figure', {}, [el('a', {href: src}, [el('img', {src: src, alt: caption, id: id || null})]), el('figcaption', {text: caption})]);
  }
  function numbers(i, d) {
    var box = el('div', {cls: 'numbers'});
    if (d) {
      if (d.heading) box.appendChild(el('h3', {text: d.heading}));
      box.appendChild(el('ol', {cls: 'top5'}, d.items.map(function (t) { return el('li', {text: t}); })));
      if (d.objective) box.appendChild(el('p', {text: 'objective: ' + d.objective}));
    }
    var table = el('table', {cls: 'figures'});
    DATA.columns.forEach(function (c) {
      if (c.name === 'name' || c.name === 'image') return;
      var v = value(state.cols[c.name], i);
      if (v === null || v === '' || (typeof v === 'number' && isNaN(v))) return;
      table.appendChild(el('tr', {}, [el('th', {text: c.name}), el('td', {text: fmt(v)})]));
    });
    box.appendChild(table);
    if (d && d.notes.length) box.appendChild(el('ul', {cls: 'notes'}, d.notes.map(function (t) { return el('li', {text: t}); })));
    if (d && d.change) {
      box.appendChild(el('h3', {text: 'change from the baseline'}));
      box.appendChild(el('ul', {cls: d.change.drifted ? 'drift' : 'steady'}, d.change.lines.map(function (t) { return el('li', {text: t}); })));
      if (d.change.findings.length) box.appendChild(el('ul', {cls: 'findings'}, d.change.findings.map(function (t) { return el('li', {text: t}); })));
      if (d.change.more) box.appendChild(el('p', {text: 'and ' + d.change.more + ' more in diff.json'}));
    }
    var folder = nameOf(i);
    box.appendChild(el('p', {}, [el('a', {href: path(folder, 'report.json'), text: 'report.json'})]));
    return box;
  }
  var redraw = function () { route(); };

  // ---------------------------------------------------------------- an atlas channel
  function showChannel(layerName, index) {
    if (!DATA.run.atlas) { app.replaceChildren(el('p', {text: 'This run has no atlas (hookviz atlas).'}), el('a', {href: '#/', text: 'back to the list'})); return; }
    if (!window.HOOKVIZ_ATLAS) { load('explorer-atlas.js', function () { if (window.HOOKVIZ_ATLAS) showChannel(layerName, index); else app.replaceChildren(el('p', {text: 'explorer-atlas.js is missing'})); }); return; }
    var atlas = window.HOOKVIZ_ATLAS;
    var layer = atlas.layers.filter(function (l) { return l.name === layerName; })[0];
    var nav = el('nav', {cls: 'samplenav'}, [el('a', {href: '#/' + (state.lastList ? '?' + state.lastList : ''), id: 'back', text: '\u2190 list'})]);
    atlas.layers.forEach(function (l) { nav.appendChild(el('a', {href: '#/channel/' + encodeURIComponent(l.name) + '/0', cls: l === layer ? 'on' : '', text: l.name})); });
    if (!layer) { app.replaceChildren(nav, el('p', {text: layerName ? 'The atlas has no layer ' + layerName + '.' : 'Pick a layer.'})); return; }
    var item = layer.items.filter(function (it) { return String(it.index) === String(index); })[0];
    var page = el('div', {cls: 'channel', 'data-channel': layer.name + '/' + index}, [nav]);
    page.appendChild(el('h2', {text: layer.name + ' \u00b7 channel ' + index + ' of ' + layer.channels}));
    var k = layer.items.indexOf(item);
    var steps = el('p', {}, [k > 0 ? el('a', {id: 'prev', href: '#/channel/' + encodeURIComponent(layer.name) + '/' + layer.items[k - 1].index, text: '\u2190 previous channel'}) : null, ' ',
      item && k < layer.items.length - 1 ? el('a', {id: 'next', href: '#/channel/' + encodeURIComponent(layer.name) + '/' + layer.items[k + 1].index, text: 'next channel \u2192'}) : null]);
    page.appendChild(steps);
    if (!item) { page.appendChild(el('p', {text: 'No channel ' + index + ' in this layer.'})); app.replaceChildren(page); return; }
    if (item.label) page.appendChild(el('p', {cls: 'label', text: 'responds to: ' + item.label.concept + ' (' + fmt(item.label.score) + '; next ' + item.label.runner_up + ' ' + fmt(item.label.runner_up_score) + ')'}));
    var st = item.stats || {}, q = st.max_quantiles || {};
    var table = el('table', {cls: 'figures'});
    [['mean', st.mean], ['dead', st.dead], ['max, median', q['0.5']], ['max, 90th percentile', q['0.9']], ['max, 99th percentile', q['0.99']]].forEach(function (r) {
      table.appendChild(el('tr', {}, [el('th', {text: r[0]}), el('td', {text: fmt(r[1])})]));
    });
    page.appendChild(table);
    page.appendChild(cropGrid(item.relevance_top ? 'fires most: top samples by activation' : 'top samples', item.top || [], atlas.folder, atlas.rank || 'score'));
    if (item.relevance_top) page.appendChild(cropGrid('matters most: top samples by relevance (red: for the class, blue: against)', item.relevance_top, atlas.folder, 'relevance'));
    if ((st.classes || []).length) page.appendChild(el('table', {cls: 'classes'}, [el('caption', {text: 'by class'}), el('tr', {}, [el('th', {text: 'class'}), el('th', {text: 'mean max'}), el('th', {text: 'samples'})])].concat(st.classes.slice(0, 10).map(function (c) { return el('tr', {}, [el('td', {text: c['class']}), el('td', {text: fmt(c.mean_max)}), el('td', {text: String(c.count)})]); }))));
    if (item.page) page.appendChild(el('p', {}, [el('a', {href: atlas.folder + '/' + path(item.page), text: 'the atlas\u2019s page of this channel'})]));
    app.replaceChildren(page);
  }
  function cropGrid(title, top, folder, measure) {  // each crop with what it is ranked by over it (its overlay), when the atlas drew one
    var grid = el('div', {cls: 'crops'}, [el('h3', {text: title})]);
    top.forEach(function (t) {
      var shown = t.shown || String(t.source).split(/[\\/]/).pop();  // as it lies in the data (an older atlas: its file name)
      grid.appendChild(el('figure', {title: shown}, [el('img', {src: folder + '/' + path(t.overlay || t.crop), alt: shown}), el('figcaption', {text: shown + ' \u00b7 ' + measure + ' ' + fmt(t.score)})]));
    });
    return grid;
  }

  // ---------------------------------------------------------------- routes and keys
  function route() {
    var hash = location.hash.replace(/^#/, '') || '/';
    var at = hash.indexOf('?'), where = at < 0 ? hash : hash.slice(0, at), q = at < 0 ? '' : hash.slice(at + 1);
    var parts = where.split('/').slice(1);
    var decode = function (t) { try { return decodeURIComponent(t); } catch (e) { return t; } };  // a hand-typed '%'
    if (parts[0] === 'sample' && parts.length > 1) showSample(decode(parts.slice(1).join('/')), q);
    else if (parts[0] === 'channel') showChannel(decode(parts[1] || ''), decode(parts[2] || '0'));
    else showList(q);
  }
  if (BASE) document.addEventListener('click', function (e) {  // in an srcdoc frame '#/...' resolves against the notebook's address
    var a = e.target.closest ? e.target.closest('a[href^="#"]') : null;
    if (!a || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) return;
    e.preventDefault();
    location.hash = a.getAttribute('href');
  });
  document.addEventListener('keydown', function (e) {
    if (/^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName)) return;
    var go = function (id) { var a = document.getElementById(id); if (a) { location.hash = a.getAttribute('href'); e.preventDefault(); } };
    if (e.key === 'ArrowRight' || e.key === 'j') go('next');
    else if (e.key === 'ArrowLeft' || e.key === 'k') go('prev');
    else if (e.key === 'Escape') go('back');
    else if (e.key === 'ArrowUp' || e.key === 'ArrowDown') {
      var tabs = Array.prototype.slice.call(document.querySelectorAll('.tabs.layers button'));
      var on = tabs.findIndex(function (b) { return b.classList.contains('on'); });
      var to = tabs[on + (e.key === 'ArrowDown' ? 1 : -1)];
      if (to) { to.click(); e.preventDefault(); }
    } else if (/^[1-9]$/.test(e.key)) {
      var kinds = document.querySelectorAll('.tabs.kinds button');
      if (kinds[+e.key - 1]) kinds[+e.key - 1].click();
    }
  });

  if (!DATA) { app.replaceChildren(el('p', {text: 'explorer-data.js is missing or unreadable: rerun hookviz to write it.'})); return; }
  decode();
  window.hookvizExplorer = {route: route, state: state, filtered: function (q) { return filtered(parseQuery(q)).length; }};
  window.addEventListener('hashchange', route);
  route();
  state.readyMs = performance.now();  // since the page began to load: what bench/explorer_scale.py reports
})();
