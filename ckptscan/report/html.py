"""Self-contained HTML report: one file that opens offline, with interactive plotly.js charts.

Why plotly: zoom, hover values and heatmaps for free from a maintained library, and its Python
package ships ``plotly.min.js`` (``plotly.offline.get_plotlyjs()``) which we inline.  We use only
that JavaScript: figures are plain JSON built here (no plotly Python figure objects, which are slow
to validate for large heatmaps).

Offline by construction:
* everything (JS, CSS, data) is inlined; no ``<script src>``, ``<link>``, fonts or images by URL;
* a Content-Security-Policy ``default-src 'none'`` forbids the page any fetch, even by mistake;
* plotly's MathJax and topojson are never used (no math in labels, no geo traces).

Size: plotly.js is inlined gzip-compressed and base64-encoded, plus the data (sizes: docs/report.md).
Data are kept compact: values rounded to 4 significant
digits, heatmaps reduced to at most ``MAX_HEATMAP_COLS`` step columns, overview series to
``MAX_SERIES_POINTS`` points (min/max per bin so spikes survive), the per-head drill-down to
``MAX_HEAD_CELLS`` cells per monitor.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import math
import re
from pathlib import Path

import numpy as np

from ckptscan import __version__
from ckptscan.report import data

MAX_SERIES_POINTS = 2000
MAX_PLOT_POINTS = 64_000  # all traces of one timeline plot together
MAX_HEATMAP_COLS = 600
MAX_HEAD_CELLS = 250_000
TIMELINE_MONITORS = 4
DRILL_MONITORS = 4
BASELINE_LAYERS = 4

_HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
    "font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)


# --- compact numeric JSON -----------------------------------------------------------------------


class _Arr:
    """A numeric array to be written as a JSON list with ``digits`` significant digits (NaN/Inf -> null)."""

    def __init__(self, a, digits: int = 4):
        self.a = np.asarray(a)
        self.digits = digits


def _fmt_array(a: np.ndarray, digits: int = 4) -> str:
    if a.ndim > 1:
        return "[" + ",".join(_fmt_array(r, digits) for r in a) + "]"
    if a.dtype.kind in "iub":
        return "[" + ",".join(str(int(v)) for v in a) + "]"
    vals = np.asarray(a, dtype=np.float64)
    out = []
    for v in vals.tolist():
        out.append(f"{v:.{digits}g}" if math.isfinite(v) else "null")
    return "[" + ",".join(out) + "]"


def to_json(obj) -> str:
    """JSON with numpy arrays written compactly; safe to embed in a ``<script>`` element."""
    arrays: list[_Arr] = []

    def default(o):
        if isinstance(o, _Arr):
            arrays.append(o)
            return f"\x00ARR{len(arrays) - 1}\x00"
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return None if not np.isfinite(o) else float(o)
        if isinstance(o, Path):
            return str(o)
        raise TypeError(type(o))

    text = json.dumps(obj, default=default, allow_nan=False, separators=(",", ":"))

    def fmt(m):
        arr = arrays[int(m.group(1))]
        return _fmt_array(arr.a, arr.digits)

    text = re.sub(r'"\\u0000ARR(\d+)\\u0000"', fmt, text)
    # "</script>" or "<!--" inside a string must not end the element early
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# --- the data the page plots ------------------------------------------------------------------


def build_payload(result, baseline=None) -> dict:
    """Everything report.js draws, as plain JSON-able data (tested without a browser).

    ``baseline``: (label, Timeline) of a healthy run to draw beside this one; by default the
    reference run the judgement used (``--baseline``), when its stored analysis is still there."""
    s = result.summary
    tl = result.timeline
    steps = np.asarray(tl.steps) if tl is not None else np.zeros(0, np.int64)
    names = tl.names() if tl is not None else []
    marks = data.markers(s)
    payload: dict = {
        "markers": marks,
        "timelines": [],
        "families": [],
        "heads": [],
        "loss": None,
        "baseline": None,
    }

    curve = data.loss_curve(s)
    if curve is not None:
        x, y = data.downsample_xy(curve.steps, curve.loss, MAX_SERIES_POINTS)
        loss = {"source": curve.source, "x": _Arr(x), "loss": _Arr(y), "grad_norm": None}
        if curve.grad_norm is not None and np.isfinite(curve.grad_norm).any():
            gx, gy = data.downsample_xy(curve.steps, curve.grad_norm, MAX_SERIES_POINTS)
            loss["grad_norm"] = {"x": _Arr(gx), "y": _Arr(gy)}
        payload["loss"] = loss

    if len(steps) == 0:
        return payload

    for name in data.leading_monitors(s, names, k=TIMELINE_MONITORS):
        info = data.monitor_info(name)
        arr = tl.get(name)
        mat = data.layer_matrix(arr, info.direction)
        alarms = data.alarm_steps(s, name)
        per_trace = max(200, min(MAX_SERIES_POINTS, MAX_PLOT_POINTS // (mat.shape[0] + len(alarms))))
        traces = []
        for layer in range(mat.shape[0]):
            x, y = data.downsample_xy(steps, mat[layer], per_trace)
            traces.append({"layer": layer, "head": None, "x": _Arr(x), "y": _Arr(y), "emph": False})
        for a in alarms:  # the heads the evidence names, drawn on top
            lay, head = a["layer"], a["head"]
            if head is None or not (0 <= lay < arr.shape[1] and 0 <= head < arr.shape[2]):
                continue
            if arr.shape[2] == 1:
                traces[lay]["emph"] = True
                continue
            if any(t["layer"] == lay and t["head"] == head for t in traces):
                continue
            x, y = data.downsample_xy(steps, arr[:, lay, head], per_trace)
            traces.append({"layer": lay, "head": head, "x": _Arr(x), "y": _Arr(y), "emph": True})
        payload["timelines"].append(
            {
                "monitor": name,
                "description": info.description,
                "direction": info.direction,
                "reduce": _reduce_label(info),
                "traces": traces,
                "alarms": alarms[:50],
            }
        )

    for fam, members in data.families(names).items():
        payload["families"].append(
            {"family": fam, "monitors": [_heatmap(s, tl, name, steps) for name in members]}
        )

    drill = [
        n
        for n in data.leading_monitors(s, names, k=len(names))
        if data.monitor_info(n).family in ("attention", "act_attention") and tl.get(n).shape[2] > 1
    ]
    for name in drill[:DRILL_MONITORS]:
        info = data.monitor_info(name)
        arr = tl.get(name)  # [N, L, H]
        n_layers, n_heads = arr.shape[1], arr.shape[2]
        cols = max(16, min(MAX_HEATMAP_COLS, MAX_HEAD_CELLS // max(1, n_layers * n_heads)))
        layers = []
        xs = steps
        for layer in range(n_layers):
            xs, red = data.reduce_columns(arr[:, layer, :].T, steps, cols, info.direction)
            layers.append(_Arr(red))
        payload["heads"].append(
            {
                "monitor": name,
                "description": info.description,
                "x": _Arr(xs),
                "layers": layers,
                "scale": _scale(arr),
            }
        )

    payload["baseline"] = _baseline_view(s, tl, baseline if baseline is not None else _reference_run(s))
    return payload


def _heatmap(s: dict, tl, name: str, steps: np.ndarray) -> dict:
    """One layer x step heatmap: the values (on a log scale when positive and spanning more than a
    factor 10) and the departure the terminal strips show (robust sigmas from the layer's early
    level in the anomalous direction, or the detector's score for trending series), where an
    onset stands out whatever the series' own range."""
    info = data.monitor_info(name)
    mat = data.layer_matrix(tl.get(name), info.direction)
    xs, red = data.reduce_columns(mat, steps, MAX_HEATMAP_COLS, info.direction)
    scores = data.detector_scores(s, tl, name)
    if scores is not None:
        _, dev = data.reduce_columns(np.clip(scores, 0.0, None), steps, MAX_HEATMAP_COLS, "up")
        dev_label = "detector score"
    else:
        dev = np.where(np.isfinite(red), data.deviation(red, info.direction), np.nan)
        dev_label = "sigmas from early level"
    return {
        "monitor": name,
        "description": info.description,
        "direction": info.direction,
        "reduce": _reduce_label(info),
        "x": _Arr(xs),
        "z": _Arr(red),
        "scale": _scale(red),
        "dev": _Arr(dev, digits=2),
        "dev_label": dev_label,
    }


def _scale(values: np.ndarray) -> dict:
    """How to colour ``values``: log where they are all positive and span more than a factor 10,
    else linear; the range ([v, v + 1] for a constant v >= 0: a count that stayed 0 is not centred
    on 0)."""
    fin = np.asarray(values, dtype=np.float64)
    fin = fin[np.isfinite(fin)]
    if len(fin) == 0:
        return {"type": "linear", "min": 0.0, "max": 1.0}
    lo, hi = float(fin.min()), float(fin.max())
    if lo > 0 and hi / lo > 10:
        return {"type": "log", "min": lo, "max": hi}
    if hi == lo:
        return {"type": "linear", "min": lo if lo >= 0 else lo - 1.0, "max": lo + 1.0 if lo >= 0 else lo}
    return {"type": "linear", "min": lo, "max": hi}


def _reference_run(summary: dict):
    """The stored analysis of the reference run the judgement used, if it is still there."""
    ref = data.detection(summary).get("reference_out")
    path = Path(ref) / "timeline.h5" if ref else None
    if path is None or not path.is_file():
        return None
    from ckptscan.store.timeline import Timeline

    try:
        return (str(data.detection(summary).get("reference_run") or ref), Timeline.load(path))
    except (OSError, KeyError, ValueError):  # a report renders without it
        return None


def _baseline_view(s: dict, tl, baseline) -> dict | None:
    """Per leading monitor the baseline has too: this run's and the baseline's series of the layers
    the evidence names (else the ones that moved most), at most ``BASELINE_LAYERS``."""
    if baseline is None:
        return None
    label, base = baseline
    bsteps = np.asarray(base.steps)
    steps = np.asarray(tl.steps)
    monitors = []
    for name in data.leading_monitors(s, [n for n in tl.names() if n in base], k=TIMELINE_MONITORS):
        info = data.monitor_info(name)
        mat = data.layer_matrix(tl.get(name), info.direction)
        bmat = data.layer_matrix(base.get(name), info.direction)
        both = min(len(mat), len(bmat))
        layers = sorted({a["layer"] for a in data.alarm_steps(s, name) if a["layer"] < both})
        if not layers:
            moved = data.deviation(mat[:both], info.direction).max(axis=1)
            layers = sorted(int(i) for i in np.argsort(-moved, kind="stable")[:BASELINE_LAYERS])
        traces = []
        for layer in layers[:BASELINE_LAYERS]:
            x, y = data.downsample_xy(steps, mat[layer], MAX_SERIES_POINTS)
            bx, by = data.downsample_xy(bsteps, bmat[layer], MAX_SERIES_POINTS)
            traces.append(
                {"layer": layer, "run": {"x": _Arr(x), "y": _Arr(y)}, "base": {"x": _Arr(bx), "y": _Arr(by)}}
            )
        monitors.append(
            {"monitor": name, "reduce": _reduce_label(info), "direction": info.direction, "traces": traces}
        )
    return {"label": label, "monitors": monitors} if monitors else None


def _reduce_label(info: data.MonitorInfo) -> str:
    if info.scope != "head":
        return "per layer"
    return {"down": "min over heads", "up": "max over heads"}.get(info.direction, "mean over heads")


# --- the page ---------------------------------------------------------------------------------


def _e(x) -> str:
    return html.escape("-" if x is None else str(x))


STATE_CLASS = {data.ANOMALOUS: "bad", data.INCONCLUSIVE: "warn", data.HEALTHY: "ok", data.NO_VERDICT: "none"}


def _verdict_html(s: dict) -> str:
    v = data.verdict(s)
    m = data.markers(s)
    o = data.outcome(s)
    head = (
        f'<div class="verdict {STATE_CLASS[o.state]}" data-state="{_e(o.state)}">'
        f'<span class="tag">{_e(o.label)}</span> {_e(o.text)}</div>'
    )
    facts = [
        ("loss divergence step", m["divergence_step"]),
        ("lead time over the loss (steps)", data.lead_text(s)),
        ("log-only detector alarm step", data.log_only_text(s)),
        ("log-only detector lead time (steps)", s.get("log_only_lead_time_steps")),
    ]
    facts_html = "".join(f"<div><span>{_e(k)}</span><b>{_e(val)}</b></div>" for k, val in facts)
    rows = "".join(
        f"<tr><td>{_e(data.evidence_monitor(e))}</td><td>{_e(e.get('layer'))}</td><td>{_e(e.get('head'))}</td>"
        f"<td>{_e(data.evidence_step_text(s, e))}</td><td>{_e(data.score_text(e))}</td></tr>"
        for e in v["evidence"][:50]
    )
    ev = (
        (
            "<div class='scroll'><table class='ev'><thead><tr><th>monitor</th><th>layer</th><th>head</th>"
            f"<th>first alarm step</th><th>score</th></tr></thead><tbody>{rows}</tbody></table></div>"
            f"<p class='muted'>{_e(data.score_note(s))}</p>"
        )
        if rows
        else "<p class='muted'>no evidence items</p>"
    )
    findings = "".join(
        f"<li>{_e(f.get('kind'))} at step {_e(f.get('step'))} layer {_e(f.get('layer'))}: "
        f"{_e(f.get('nonfinite'))} NaN/Inf values in {_e(', '.join(map(str, f.get('tensors', []))))}</li>"
        for f in (s.get("findings") or [])[:50]
    )
    findings = f"<h3>findings</h3><ul>{findings}</ul>" if findings else ""
    reason = f"<p>{_e(v['reason'])}</p>" if v.get("reason") and o.state != data.INCONCLUSIVE else ""
    uncounted = data.uncounted_note(s)
    reason += f"<p class='muted'>not counted: {_e(uncounted)}</p>" if uncounted else ""
    aside = data.set_aside_note(s)
    reason += f"<p class='muted'>set aside: {_e(aside)}</p>" if aside else ""
    against = data.reference_text(s)  # no fine print: it says how to read the verdict
    reason += f"<p>baseline: {_e(against)}</p>" if against else ""
    return f"{head}{reason}<div class='facts'>{facts_html}</div><h3>evidence</h3>{ev}{findings}"


def _inputs_html(result) -> str:
    s = result.summary
    ck = s.get("checkpoints") or {}
    lay = s.get("layout") or {}
    cfg = lay.get("config") or {}
    cfg_s = ", ".join(f"{k}={v}" for k, v in cfg.items() if v not in (None, {}, []))
    skipped = ck.get("skipped") or []
    log = s.get("log") or (s.get("loss") or {}).get("log")
    rows = [
        ("run", s.get("run")),
        ("output folder", result.out_dir or s.get("out")),  # where it is read from now (``report``)
        ("layout", f"{lay.get('family', '?')}" + (f" ({cfg_s})" if cfg_s else "")),
        (
            "attention blocks / routers",
            f"{len(lay.get('attention') or [])} / {len(lay.get('routers') or [])}",
        ),
        ("points", data.points_text(s)),
        ("examined", data.examined_text(s) or "-"),
        ("checkpoints skipped", len(skipped)),
        ("training log", log.get("path") if isinstance(log, dict) else None),
        ("device", s.get("device")),
        ("analysis", _timing(s)),
        ("command", " ".join(map(str, s.get("command") or []))),
        (
            "versions",
            (
                f"analysed by ckptscan {s.get('ckptscan_version', '?')}; report by ckptscan {__version__}, "
                f"plotly.js {_plotly_version()}; schema {s.get('schema', '?')}"
            ),
        ),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    sk = "".join(
        f"<tr><td>{_e(x.get('path'))}</td><td>{_e(x.get('reason'))}</td>"
        f"<td>{'error' if x.get('error', True) else 'expected'}</td></tr>"
        for x in skipped[:500]
    )
    sk_html = (
        (
            f"<h3>skipped inputs</h3><div class='scroll'><table class='ev'><thead><tr><th>path</th>"
            f"<th>reason</th><th>kind</th></tr></thead><tbody>{sk}</tbody></table></div>"
        )
        if sk
        else ""
    )
    notes = lay.get("notes") or []
    notes_html = "".join(f"<li>{_e(n)}</li>" for n in notes)
    notes_html = f"<h3>layout notes</h3><ul>{notes_html}</ul>" if notes_html else ""
    return f"<div class='scroll'><table class='kv'>{body}</table></div>{sk_html}{notes_html}"


def _timing(s: dict) -> str:
    """When and how long, saying how much of it was reused (a re-run that reuses every stored
    checkpoint takes a fraction of the first analysis)."""
    ck = s.get("checkpoints") or {}
    started = f"started {s['started_at']}, " if s.get("started_at") else ""
    elapsed = s.get("elapsed_s")
    took = f"{elapsed:.1f} s in this invocation" if isinstance(elapsed, (int, float)) else "time not recorded"
    reused = f"{ck.get('reused', 0)} of {ck.get('analyzed', 0)} checkpoints reused from earlier runs"
    return f"{started}{took} ({reused})"


def _plotly_version() -> str:
    try:
        import plotly

        return f"inlined from the plotly {plotly.__version__} Python package"
    except ImportError:
        return "?"


@functools.lru_cache(maxsize=1)
def _plotly_js_packed() -> str:
    """plotly.min.js gzip-compressed and base64-encoded (docs/report.md: sizes); the page unpacks it with
    the browser's DecompressionStream and runs it as an inline script (the CSP allows no eval)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as e:  # declared dependency; a clear message if an install lacks it
        from ckptscan.errors import UsageError

        raise UsageError("--html needs the 'plotly' package (pip install plotly)") from e
    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), 9, mtime=0)).decode("ascii")


def render_html(result, baseline=None) -> str:
    """The page; ``baseline``: (label, Timeline) of a run to draw beside this one (``build_payload``)."""
    s = result.summary
    template = (_HERE / "template.html").read_text()
    app = (_HERE / "report.js").read_text()
    title = f"ckptscan report: {Path(str(s.get('run', 'run'))).name}"
    parts = {
        "CSP": CSP,
        "TITLE": html.escape(title),
        "RUN": _e(s.get("run")),
        "VERDICT": _verdict_html(s),
        "INPUTS": _inputs_html(result),
        "DATA": to_json(build_payload(result, baseline)),
        "PLOTLY": _plotly_js_packed(),
        "APP": app,
    }
    # one pass, so that nothing inserted is scanned for placeholders again
    return re.sub(
        r"@@(CSP|TITLE|RUN|VERDICT|INPUTS|DATA|PLOTLY|APP)@@", lambda m: parts[m.group(1)], template
    )


def write_html(result, path: str | Path, baseline=None) -> Path:
    """Write the report to ``path`` (atomically); returns the path."""
    from ckptscan.store.timeline import atomic_write

    path = Path(path)
    atomic_write(path, render_html(result, baseline))
    return path
