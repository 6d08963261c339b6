// ckptscan HTML report: draws the plots from the JSON payload (ckptscan/report/html.py build_payload).
// No network access of any kind: plotly.js is inlined above, the page's CSP forbids fetches.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("ckptscan-data").textContent);
  var CONFIG = {
    displaylogo: false, responsive: true, showLink: false, showSendToCloud: false,
    showEditInChartStudio: false, typesetMath: false, topojsonURL: "data:,",
    modeBarButtonsToRemove: ["sendDataToCloud", "lasso2d", "select2d"]
  };
  // [summary key, label, colour, dash, label height]: labels at different heights, so that close
  // steps do not print on top of each other
  var MARKS = [
    ["earliest_step", "earliest anomaly", "#c0392b", "dash", 1.0],
    ["divergence_step", "loss divergence", "#1d2329", "dash", 0.9],
    ["log_only_alarm_step", "log-only alarm", "#e67e22", "dot", 0.8]
  ];

  function el(tag, attrs, parent) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]);
    });
    if (parent) parent.appendChild(e);
    return e;
  }

  // vertical lines (and labels) at the marker steps
  function markerShapes() {
    var shapes = [], annotations = [];
    MARKS.forEach(function (m) {
      var s = D.markers[m[0]];
      if (s === null || s === undefined) return;
      shapes.push({type: "line", xref: "x", yref: "paper", x0: s, x1: s, y0: 0, y1: 1,
                   line: {color: m[2], width: 1.5, dash: m[3]}});
      annotations.push({xref: "x", yref: "paper", x: s, y: m[4], yanchor: "top", xanchor: "left",
                        bgcolor: "rgba(255,255,255,0.75)", text: m[1] + " " + s,
                        showarrow: false, font: {size: 10, color: m[2]}});
    });
    return {shapes: shapes, annotations: annotations};
  }

  function baseLayout(title, ytitle) {
    var mk = markerShapes();
    return {
      title: {text: title, font: {size: 14}, x: 0, xanchor: "left"},
      margin: {l: 60, r: 20, t: 48, b: 40}, hovermode: "closest",
      xaxis: {title: {text: "step"}, zeroline: false}, yaxis: {title: {text: ytitle || ""}, zeroline: false},
      shapes: mk.shapes, annotations: mk.annotations, legend: {font: {size: 10}},
      paper_bgcolor: "#fff", plot_bgcolor: "#fff", font: {family: "system-ui, sans-serif"}
    };
  }

  function plotDiv(parent, cls) {
    return el("div", {"class": "plot" + (cls ? " " + cls : "")}, parent);
  }

  // --- timelines: loss, then the leading monitors -------------------------------------------
  var tdiv = document.getElementById("timeline-plots");
  if (D.loss) {
    var lt = [{type: "scatter", mode: "lines", name: "loss", x: D.loss.x, y: D.loss.loss,
               line: {color: "#2c3e50", width: 1.2}, hovertemplate: "step %{x}<br>loss %{y:.4g}<extra></extra>"}];
    var ll = baseLayout("training loss (" + D.loss.source + ")", "loss");
    if (D.loss.grad_norm) {
      lt.push({type: "scatter", mode: "lines", name: "grad norm", x: D.loss.grad_norm.x, y: D.loss.grad_norm.y,
               yaxis: "y2", line: {color: "#8e44ad", width: 1}, opacity: 0.6,
               hovertemplate: "step %{x}<br>grad norm %{y:.4g}<extra></extra>"});
      ll.yaxis2 = {title: {text: "grad norm"}, overlaying: "y", side: "right", type: "log", showgrid: false,
                    tickformat: ".2~g"};
      ll.margin.r = 60;
    }
    Plotly.newPlot(plotDiv(tdiv), lt, ll, CONFIG);
  } else {
    el("p", {"class": "muted", text: "No training log was found: no loss curve."}, tdiv);
  }
  D.timelines.forEach(function (t) {
    var traces = t.traces.map(function (tr) {
      return {type: "scatter", mode: "lines", name: tr.name, x: tr.x, y: tr.y,
              line: {width: tr.emph ? 2.5 : 1}, opacity: tr.emph ? 1 : 0.55,
              hovertemplate: tr.name + "<br>step %{x}<br>%{y:.4g}<extra></extra>"};
    });
    var layout = baseLayout(t.monitor + " (" + t.reduce + ")", t.monitor);
    t.alarms.forEach(function (a) {
      layout.shapes.push({type: "line", xref: "x", yref: "paper", x0: a.step, x1: a.step, y0: 0, y1: 0.06,
                          line: {color: "#c0392b", width: 3}});
      layout.annotations.push({xref: "x", yref: "paper", x: a.step, y: 0.06, yanchor: "bottom", showarrow: false,
                               text: "\u00d7 L" + a.layer + (a.head === null ? "" : " H" + a.head),
                               font: {size: 10, color: "#c0392b"}});
    });
    var d = plotDiv(tdiv);
    el("div", {"class": "desc", text: t.description + " (anomalous direction: " + t.direction + ")"}, tdiv);
    Plotly.newPlot(d, traces, layout, CONFIG);
  });

  // --- heatmaps: one per family, a select box picks the monitor ------------------------------
  function heatmap(div, title, x, z, ylabel, yname) {
    var y = z.map(function (_, i) { return i; });
    var layout = baseLayout(title, yname);
    layout.yaxis.tickmode = z.length <= 40 ? "linear" : "auto";
    layout.yaxis.autorange = "reversed";
    var trace = {type: "heatmap", x: x, y: y, z: z, colorscale: "Viridis", hoverongaps: false,
                 colorbar: {thickness: 12},
                 hovertemplate: "step %{x}<br>" + ylabel + " %{y}<br>%{z:.4g}<extra></extra>"};
    Plotly.react(div, [trace], layout, CONFIG);
  }
  var hdiv = document.getElementById("heatmap-plots");
  D.families.forEach(function (f) {
    var wrap = el("div", {"class": "family", "data-family": f.family}, hdiv);
    var ctl = el("div", {"class": "controls"}, wrap);
    el("b", {text: f.family + " "}, ctl);
    var sel = el("select", {"aria-label": f.family + " monitor"}, ctl);
    f.monitors.forEach(function (m, i) { el("option", {value: String(i), text: m.monitor}, sel); });
    var desc = el("div", {"class": "desc"}, wrap);
    var d = plotDiv(wrap, "tall");
    function draw() {
      var m = f.monitors[+sel.value];
      desc.textContent = m.description + " (" + m.reduce + "; anomalous direction: " + m.direction + ")";
      heatmap(d, f.family + ": " + m.monitor, m.x, m.z, "layer", "layer");
    }
    sel.addEventListener("change", draw);
    draw();
  });

  // --- per-head drill-down ------------------------------------------------------------------
  var hc = document.getElementById("head-controls"), hp = document.getElementById("head-plot");
  if (!D.heads.length) {
    hp.style.display = "none";
    el("p", {"class": "muted", text: "No head-level attention monitor in this result."}, hc);
  } else {
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
    var drawHeads = function () {
      var h = D.heads[+msel.value], l = +lsel.value;
      hdesc.textContent = h.description;
      heatmap(hp, h.monitor + ", layer " + l + ": heads x steps", h.x, h.layers[l], "head", "head");
    };
    msel.addEventListener("change", function () { fillLayers(); drawHeads(); });
    lsel.addEventListener("change", drawHeads);
    fillLayers();
    var firstEv = (D.timelines.length && D.timelines[0].alarms.length) ? D.timelines[0].alarms[0].layer : null;
    if (firstEv !== null && firstEv < D.heads[0].layers.length) lsel.value = String(firstEv);
    drawHeads();
  }
  document.body.setAttribute("data-rendered", "1");
})();
