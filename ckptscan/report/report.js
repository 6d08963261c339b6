// ckptscan HTML report: unpacks plotly.js, then draws the plots from the JSON payload
// (ckptscan/report/html.py build_payload). No network access of any kind: plotly.js is inlined
// (gzip + base64), the page's CSP forbids fetches.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("ckptscan-data").textContent);
  var PHONE = window.matchMedia("(max-width: 640px)").matches;
  var CONFIG = {
    displaylogo: false, responsive: true, showLink: false, showSendToCloud: false,
    showEditInChartStudio: false, typesetMath: false, topojsonURL: "data:,",
    displayModeBar: PHONE ? false : "hover",
    modeBarButtonsToRemove: ["sendDataToCloud", "lasso2d", "select2d"]
  };
  // [summary key, label, colour, dash, label height (paper units)]
  var MARKS = [
    ["earliest_step", "earliest anomaly", "#c0392b", "dash", 1.0],
    ["divergence_step", "loss divergence", "#1d2329", "dash", 0.92],
    ["log_only_alarm_step", "log-only alarm", "#e67e22", "dot", 0.84],
    ["first_examined_step", "first examined", "#7f8c8d", "dot", 0.76]
  ];
  // a layer, and a (layer, head), has the same colour in every chart
  var LAYER_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22",
                      "#e377c2", "#393b79", "#637939", "#8c6d31"];
  var HEAD_COLORS = ["#d62728", "#6a3d9a", "#1b9e77", "#d95f02", "#e7298a", "#66a61e", "#a6761d", "#000080",
                     "#b15928", "#008080", "#800000", "#4b0082"];
  function layerColor(layer) { return LAYER_COLORS[layer % LAYER_COLORS.length]; }
  function headColor(layer, head) { return HEAD_COLORS[(layer * 5 + head) % HEAD_COLORS.length]; }

  function el(tag, attrs, parent) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]);
    });
    if (parent) parent.appendChild(e);
    return e;
  }

  function range(xs) {
    var lo = Infinity, hi = -Infinity;
    xs.forEach(function (x) { if (x !== null && x < lo) lo = x; if (x !== null && x > hi) hi = x; });
    return [lo, hi];
  }

  // vertical lines (and labels) at the marker steps; a label right of its line, or left of it in
  // the right third of the chart so that it stays inside the plot
  function markerShapes(xr) {
    var shapes = [], annotations = [];
    MARKS.forEach(function (m) {
      var s = D.markers[m[0]];
      if (s === null || s === undefined) return;
      shapes.push({type: "line", xref: "x", yref: "paper", x0: s, x1: s, y0: 0, y1: 1,
                   line: {color: m[2], width: 1.5, dash: m[3]}});
      var right = xr && s > xr[0] + (xr[1] - xr[0]) * 0.66;
      annotations.push({xref: "x", yref: "paper", x: s, y: m[4], yanchor: "top",
                        xanchor: right ? "right" : "left", bgcolor: "rgba(255,255,255,0.8)",
                        text: m[1] + " " + s, showarrow: false, font: {size: 10, color: m[2]}});
    });
    return {shapes: shapes, annotations: annotations};
  }

  function baseLayout(ytitle, xr) {
    var mk = markerShapes(xr);
    return {
      margin: {l: PHONE ? 48 : 64, r: PHONE ? 8 : 20, t: PHONE ? 10 : 30, b: 40}, hovermode: "closest",
      xaxis: {title: {text: "step"}, zeroline: false},
      yaxis: {title: {text: ytitle || ""}, zeroline: false, automargin: true},
      shapes: mk.shapes, annotations: mk.annotations,
      legend: {orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom", font: {size: 10}},
      paper_bgcolor: "#fff", plot_bgcolor: "#fff", font: {family: "system-ui, sans-serif"}
    };
  }

  function boxesOverlap(a, b) {
    return a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  }

  // labels that would print on top of one another: each later one moves away from its edge (top
  // labels down, bottom labels up) until it is clear of the ones placed before it
  function declutter(div) {
    var anns = div.layout.annotations || [];
    var h = div._fullLayout._size.h;
    var placed = [], update = {};
    anns.forEach(function (a, i) {
      var node = div.querySelector('.annotation[data-index="' + i + '"]');
      if (!node) return;
      var b = node.getBoundingClientRect();
      if (!b.width) return;
      var step = (a.yanchor === "bottom" ? -1 : 1) * (b.height + 2), dy = 0;
      var at = function (d) { return {left: b.left, right: b.right, top: b.top + d, bottom: b.bottom + d}; };
      while (placed.some(function (p) { return boxesOverlap(p, at(dy)); }) && Math.abs(dy) < h) dy += step;
      placed.push(at(dy));
      if (dy) update["annotations[" + i + "].y"] = a.y - dy / h;
    });
    return Object.keys(update).length ? Plotly.relayout(div, update) : Promise.resolve();
  }

  var pending = [];
  function plot(parent, title, desc, traces, layout, cls) {
    el("div", {"class": "plot-title", text: title}, parent);
    var d = el("div", {"class": "plot" + (cls ? " " + cls : "")}, parent);
    if (desc) el("div", {"class": "desc", text: desc}, parent);
    pending.push(Plotly.newPlot(d, traces, layout, CONFIG).then(declutter));
    return d;
  }

  function drawLoss(tdiv) {
    if (!D.loss) {
      el("p", {"class": "muted", text: "No training log was found: no loss curve."}, tdiv);
      return;
    }
    var lt = [{type: "scatter", mode: "lines", name: "loss", x: D.loss.x, y: D.loss.loss,
               line: {color: "#2c3e50", width: 1.2},
               hovertemplate: "step %{x}<br>loss %{y:.4g}<extra></extra>"}];
    var ll = baseLayout("loss", range(D.loss.x));
    if (D.loss.grad_norm) {
      lt.push({type: "scatter", mode: "lines", name: "grad norm (right axis, log)", x: D.loss.grad_norm.x,
               y: D.loss.grad_norm.y, yaxis: "y2", line: {color: "#8e44ad", width: 1}, opacity: 0.6,
               hovertemplate: "step %{x}<br>grad norm %{y:.4g}<extra></extra>"});
      var gr = range(D.loss.grad_norm.y);  // whole decades when it spans two or more, else 1-2-5 steps
      ll.yaxis2 = {title: {text: "grad norm"}, overlaying: "y", side: "right", type: "log", showgrid: false,
                   automargin: true, dtick: gr[0] > 0 && gr[1] / gr[0] >= 100 ? 1 : "D2"};
      ll.margin.r = PHONE ? 40 : 64;
    }
    plot(tdiv, "training loss (" + D.loss.source + ")", "", lt, ll);
  }

  // one label per step at the bottom: "x L1 H0 H2" for the first alarms at that step
  function alarmLabels(alarms) {
    var by = {};
    alarms.forEach(function (a) {
      (by[a.step] = by[a.step] || []).push("L" + a.layer + (a.head === null ? "" : " H" + a.head));
    });
    return Object.keys(by).map(function (s) {
      var names = by[s].filter(function (n, i) { return by[s].indexOf(n) === i; });
      var text = names.slice(0, 4).join(", ") + (names.length > 4 ? " +" + (names.length - 4) : "");
      return {step: +s, text: "\u00d7 " + text};
    });
  }

  function drawTimeline(tdiv, t) {
    var xr = range(t.traces.length ? t.traces[0].x : []);
    var traces = t.traces.map(function (tr) {
      var name = "layer " + tr.layer + (tr.head === null ? "" : " head " + tr.head);
      var color = tr.head === null ? layerColor(tr.layer) : headColor(tr.layer, tr.head);
      return {type: "scatter", mode: "lines", name: name, x: tr.x, y: tr.y,
              line: {width: tr.emph ? 2.5 : 1, color: color},
              opacity: tr.emph ? 1 : 0.6, hovertemplate: name + "<br>step %{x}<br>%{y:.4g}<extra></extra>"};
    });
    var layout = baseLayout(t.monitor, xr);
    layout.showlegend = traces.length <= 12;
    t.alarms.forEach(function (a) {
      layout.shapes.push({type: "line", xref: "x", yref: "paper", x0: a.step, x1: a.step, y0: 0, y1: 0.05,
                          line: {color: "#c0392b", width: 3}});
    });
    alarmLabels(t.alarms).forEach(function (a) {
      var right = a.step > xr[0] + (xr[1] - xr[0]) * 0.66;
      layout.annotations.push({xref: "x", yref: "paper", x: a.step, y: 0.06, yanchor: "bottom",
                               xanchor: right ? "right" : "left", showarrow: false, text: a.text,
                               bgcolor: "rgba(255,255,255,0.8)", font: {size: 10, color: "#c0392b"}});
    });
    plot(tdiv, t.monitor + " (" + t.reduce + ")",
         t.description + " (anomalous direction: " + t.direction + ")", traces, layout);
  }

  // colour by value: linear, or log10 with ticks at the decades (hover shows the value itself)
  function valueTrace(z, scale, title) {
    var tr = {colorscale: "Viridis", customdata: z,
              colorbar: {thickness: 12, title: {text: title, side: "right"}}};
    if (scale.type === "log") {
      var lo = Math.log10(scale.min), hi = Math.log10(scale.max), ticks = [];
      for (var k = Math.ceil(lo); k <= Math.floor(hi); k++) ticks.push(k);
      tr.z = z.map(function (row) { return row.map(function (v) { return v > 0 ? Math.log10(v) : null; }); });
      tr.zmin = lo;
      tr.zmax = hi;
      tr.colorbar.tickvals = ticks;
      tr.colorbar.ticktext = ticks.map(function (k) { return Math.pow(10, k).toExponential(0); });
      tr.colorbar.title.text = title + " (log)";
    } else {
      tr.z = z;
      tr.zmin = scale.min;
      tr.zmax = scale.max;
    }
    return tr;
  }

  function heatmap(div, x, tr, ylabel, xr) {
    var y = tr.z.map(function (_, i) { return i; });
    var layout = baseLayout(ylabel, xr);
    layout.yaxis.tickmode = tr.z.length <= 40 ? "linear" : "auto";
    layout.yaxis.autorange = "reversed";
    var hover = "step %{x}<br>" + ylabel + " %{y}<br>%{customdata:.4g}<extra></extra>";
    var trace = Object.assign({type: "heatmap", x: x, y: y, hoverongaps: false, hovertemplate: hover}, tr);
    return Plotly.react(div, [trace], layout, CONFIG).then(declutter);
  }

  // as the terminal's strips: 0 (pale) to 7 or more (dark red); hover shows the number itself
  var DEPARTURE_MAX = 7;
  function departureTrace(m) {
    var ticks = [0, 1, 2, 3, 4, 5, 6, 7];
    var text = ticks.map(function (t) { return t === DEPARTURE_MAX ? "\u2265" + t : String(t); });
    return {z: m.dev, customdata: m.dev, zmin: 0, zmax: DEPARTURE_MAX, colorscale: "YlOrRd",
            reversescale: true, colorbar: {thickness: 12, title: {text: m.dev_label, side: "right"},
                                           tickvals: ticks, ticktext: text}};
  }

  function drawFamilies(hdiv) {
    D.families.forEach(function (f) {
      var wrap = el("div", {"class": "family", "data-family": f.family}, hdiv);
      var ctl = el("div", {"class": "controls"}, wrap);
      el("b", {text: f.family + " "}, ctl);
      var sel = el("select", {"aria-label": f.family + " monitor"}, ctl);
      f.monitors.forEach(function (m, i) { el("option", {value: String(i), text: m.monitor}, sel); });
      var view = el("select", {"aria-label": f.family + " colour"}, ctl);
      el("option", {value: "dev", text: "colour: departure from the early level"}, view);
      el("option", {value: "value", text: "colour: value"}, view);
      var desc = el("div", {"class": "desc"}, wrap);
      var title = el("div", {"class": "plot-title"}, wrap);
      var d = el("div", {"class": "plot tall"}, wrap);
      var draw = function () {
        var m = f.monitors[+sel.value];
        var xr = range(m.x);
        desc.textContent = m.description + " (" + m.reduce + "; anomalous direction: " + m.direction + ")";
        var dev = view.value === "dev";
        title.textContent = f.family + ": " + m.monitor + (dev ? " (" + m.dev_label + ")" : "");
        return heatmap(d, m.x, view.value === "dev" ? departureTrace(m) : valueTrace(m.z, m.scale, m.monitor),
                       "layer", xr);
      };
      sel.addEventListener("change", draw);
      view.addEventListener("change", draw);
      pending.push(draw());
    });
  }

  function drawHeads() {
    var hc = document.getElementById("head-controls"), hp = document.getElementById("head-plot");
    var ht = document.getElementById("head-title");
    if (!D.heads.length) {
      hp.style.display = "none";
      el("p", {"class": "muted", text: "No head-level attention monitor in this result."}, hc);
      return;
    }
    el("span", {text: "monitor"}, hc);
    var msel = el("select", {"aria-label": "head monitor"}, hc);
    D.heads.forEach(function (h, i) { el("option", {value: String(i), text: h.monitor}, msel); });
    el("span", {text: "layer"}, hc);
    var lsel = el("select", {"aria-label": "layer"}, hc);
    var hdesc = el("span", {"class": "desc"}, hc);
    var fillLayers = function () {
      var h = D.heads[+msel.value], keep = lsel.value;
      lsel.innerHTML = "";
      h.layers.forEach(function (_, i) { el("option", {value: String(i), text: String(i)}, lsel); });
      if (keep && +keep < h.layers.length) lsel.value = keep;
    };
    var draw = function () {
      var h = D.heads[+msel.value], l = +lsel.value;
      hdesc.textContent = h.description;
      ht.textContent = h.monitor + ", layer " + l + ": heads x steps";
      hp.setAttribute("data-title", ht.textContent);
      return heatmap(hp, h.x, valueTrace(h.layers[l], h.scale, h.monitor), "head", range(h.x));
    };
    msel.addEventListener("change", function () { fillLayers(); draw(); });
    lsel.addEventListener("change", draw);
    fillLayers();
    var first = D.timelines.length ? D.timelines[0].alarms : [];
    var firstEv = first.length ? first[0].layer : null;
    if (firstEv !== null && firstEv < D.heads[0].layers.length) lsel.value = String(firstEv);
    pending.push(draw());
  }

  function drawBaseline() {
    if (!D.baseline) return;
    var sec = document.getElementById("baseline");
    sec.hidden = false;
    document.getElementById("baseline-desc").textContent = "Solid: this run; dotted: the baseline (" +
      D.baseline.label + "), the same layer in the same colour, for the layers the evidence names " +
      "(else the ones that moved most).";
    var bdiv = document.getElementById("baseline-plots");
    D.baseline.monitors.forEach(function (m) {
      var traces = [], xs = [];
      m.traces.forEach(function (t) {
        xs = xs.concat(t.run.x, t.base.x);
        traces.push({type: "scatter", mode: "lines", name: "layer " + t.layer, x: t.run.x, y: t.run.y,
                     line: {color: layerColor(t.layer), width: 2}});
        traces.push({type: "scatter", mode: "lines", name: "layer " + t.layer + " (baseline)", x: t.base.x,
                     y: t.base.y, line: {color: layerColor(t.layer), width: 1.5, dash: "dot"}});
      });
      plot(bdiv, m.monitor + " (" + m.reduce + "): this run vs the baseline", "", traces,
           baseLayout(m.monitor, range(xs)));
    });
  }

  function draw() {
    var tdiv = document.getElementById("timeline-plots");
    drawLoss(tdiv);
    D.timelines.forEach(function (t) { drawTimeline(tdiv, t); });
    drawBaseline();
    drawFamilies(document.getElementById("heatmap-plots"));
    drawHeads();
    return Promise.all(pending);
  }

  // plotly.js travels gzip-compressed: unpack it with the browser's own DecompressionStream and run
  // it as an inline script (the CSP allows inline scripts, not eval)
  function loadPlotly() {
    var bin = atob(document.getElementById("plotly-gz").textContent);
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (code) {
      var s = document.createElement("script");
      s.textContent = code;
      document.head.appendChild(s);
    });
  }

  if (typeof DecompressionStream === "undefined") {
    el("p", {"class": "muted", text: "This browser cannot unpack the charts (they need " +
      "DecompressionStream: " +
      "Chrome or Edge 80+, Firefox 113+, Safari 16.4+). The verdict, the evidence and the inputs above and " +
      "below are complete."}, document.getElementById("timeline-plots"));
    document.body.setAttribute("data-rendered", "no-charts");
    return;
  }
  loadPlotly().then(draw).then(function () { document.body.setAttribute("data-rendered", "1"); });
})();
