"""The HTML report in a real browser: headless Chromium loads it from disk (file://).

Checks: no console errors or exceptions, no network request of any kind, the plots rendered, the
drill-down select box re-renders, no text in a chart printed over other text (labels, ticks,
legends, colour bars), a usable page 390 px wide (a phone: nothing wider than the screen, the
evidence table whole), and screenshots for humans (``test-artifacts/``).  ``python -m
tests.test_html_browser docs/images/report.png`` regenerates the README's screenshot from a fresh
analysis of ``fixtures/drills/lowprec-moe``.

Chromium is driven over the DevTools protocol through ``--remote-debugging-pipe`` (JSON messages
separated by NUL bytes on file descriptors 3 and 4), so no websocket client or selenium is needed.
Skipped when no Chromium is installed (CI installs the Debian ``chromium`` package).
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from ckptscan.api import Result
from ckptscan.report.html import write_html
from ckptscan.store.timeline import Timeline

# every test here starts headless Chromium: left out of the quick loop (pytest -m "not slow")
pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    """A headless Chromium spoken to over the DevTools pipe; one page, events recorded."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000):
        exe = find_chromium()
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()

        def child_fds():  # chromium reads commands on fd 3 and writes replies on fd 4
            a, b = os.dup(cmd_r), os.dup(resp_w)  # dup first: the originals may already be 3 or 4
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            exe,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--disable-quic",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--window-size={width},{height}",
            "--hide-scrollbars",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=child_fds,
        )  # noqa: PLW1509 (no threads here)
        os.close(cmd_r)
        os.close(resp_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        self.session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.viewport(width, height)

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )

    # --- protocol ---------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from chromium")
            ready, _, _ = select.select([self._resp_r], [], [], left)
            if ready:
                chunk = os.read(self._resp_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, timeout: float = 30.0, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session is not None and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e["method"] == method:
                return e
        while True:
            m = self._read_message(deadline)
            if "method" in m:
                self.events.append(m)
                if m["method"] == method:
                    return m

    def evaluate(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expr: str, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.evaluate(expr)
            if v:
                return v
            time.sleep(0.1)
        raise TimeoutError(expr)

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        params = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
            )
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    # --- what the page did ------------------------------------------------------------------
    def problems(self) -> list[str]:
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('exception', {}).get('description') or p}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in (
                "error",
                "warning",
                "assert",
            ):
                out.append(
                    f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p['args']]}"
                )
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):  # already gone: wait/kill below
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._resp_r)


def network_requests(browser: Browser) -> list[str]:
    """Every URL the page asked for, except in-page ``data:``/``blob:`` URLs (plotly draws heatmaps
    into data: images; those never leave the page)."""
    return [u for u in browser.requests() if not u.startswith(("data:", "blob:"))]


def open_report(browser: Browser, path: Path) -> None:
    browser.events.clear()
    browser.call("Page.navigate", url=path.resolve().as_uri())
    browser.wait_event("Page.loadEventFired")
    browser.wait_for("document.body.getAttribute('data-rendered') === '1'")


# every piece of text plotly draws in a chart: labels, tick labels, axis and colour bar titles, and
# the legend's box (which hides what it covers); pairs whose boxes overlap (by more than a pixel each
# way) are printed on each other
OVERLAPS_JS = """(function () {
  var sel = '.annotation-text-g, .xtick text, .ytick text, .y2tick text, .legend, .g-xtitle text, ' +
            '.g-ytitle text, .g-y2title text, .cbtitle text, .cbaxis text';
  var out = [];
  document.querySelectorAll('.js-plotly-plot').forEach(function (plot, k) {
    var items = [];
    new Set(plot.querySelectorAll(sel)).forEach(function (n) {
      var b = n.getBoundingClientRect();
      if (b.width > 0 && b.height > 0 && n.textContent.trim() && getComputedStyle(n).opacity !== '0')
        items.push({text: n.textContent.trim(), b: b});
    });
    for (var i = 0; i < items.length; i++) for (var j = i + 1; j < items.length; j++) {
      var a = items[i].b, c = items[j].b;
      if (a.left < c.right - 1 && c.left < a.right - 1 && a.top < c.bottom - 1 && c.top < a.bottom - 1)
        out.push([k, items[i].text, items[j].text]);
    }
  });
  return out;
})()"""


def text_overlaps(browser: Browser) -> list:
    return browser.evaluate(OVERLAPS_JS)


def fault_result(n=80, layers=3, heads=4) -> Result:
    """A result shaped like a low-precision-attention fault: one head's D2 entropy collapses (and
    first alarms, the log-only alarm and the divergence close together, whose labels must not
    print on one another)."""
    rng = np.random.default_rng(1)
    steps = np.arange(1, n + 1) * 25
    series = {}
    for name in ("attn.D2.entropy2", "attn.M.entropy2", "attn.M.spectral_norm"):
        a = 0.8 + 0.01 * rng.standard_normal((n, layers, heads))
        if name == "attn.D2.entropy2":
            a[n // 2 :, 1, 2] -= np.linspace(0, 0.5, n - n // 2)
            a[0] = np.nan
        series[name] = a
    series["router.similarity"] = 0.1 + 0.01 * rng.standard_normal((n, layers, 1))
    series["numerics.nonfinite"] = np.zeros((n, layers, 1))
    tl = Timeline.from_arrays(steps, series, {})
    first = int(steps[n // 2 + 4])
    summary = {
        "schema": "ckptscan/1",
        "ckptscan_version": "0.1.0",
        "run": "/nonexistent/run",
        "out": "/tmp/x",
        "command": ["ckptscan", "analyze", "/nonexistent/run"],
        "layout": {"family": "mixtral"},
        "device": "cpu",
        "checkpoints": {
            "analyzed": n,
            "reused": 0,
            "steps": steps.tolist(),
            "skipped": [{"path": "checkpoint-9", "reason": "truncated safetensors header", "error": True}],
        },
        "monitors": tl.names(),
        "findings": [],
        "verdict": {
            "anomalous": True,
            "earliest_step": first,
            "fault_type": "lowprec_attention",
            "confidence": 0.9,
            "evidence": [
                {
                    "monitor": "attn.D2.entropy2",
                    "layer": lay,
                    "head": head,
                    "first_alarm_step": int(steps[n // 2 + 4 + k]),
                    "score": 9.1,
                }
                for k, (lay, head) in enumerate([(1, 2), (1, 0), (2, 1), (0, 3), (2, 2)])
            ]
            + [
                {"monitor": "attn.M.entropy2", "layer": 1, "head": 2, "first_alarm_step": first, "score": 4.0}
            ],
        },
        "loss": {
            "divergence_step": int(steps[-6]),
            "log_only_alarm_step": int(steps[-5]),
            "curve": {
                "steps": steps.tolist(),
                "loss": (3 - np.log(steps / 10) * 0.2).tolist(),
                "grad_norm": np.geomspace(0.5, 2e4, n).tolist(),
            },
        },
        "lead_time_steps": int(steps[-6] - first),
        "log_only_lead_time_steps": int(steps[-6] - steps[-5]),
        # the first examined step: a fourth marker line ("first examined") on every chart
        "detection": {"coverage": {"first_examined_step": int(steps[n // 4]), "layers_not_examined": []}},
    }
    return Result(Path("/nonexistent/run"), Path("/tmp/x"), summary, tl, [])


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium); CI installs it")
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def test_report_renders_offline_without_errors(browser, tmp_path):
    path = write_html(fault_result(), tmp_path / "report.html")
    open_report(browser, path)
    n_plots = browser.evaluate("document.querySelectorAll('.js-plotly-plot').length")
    # loss + 4 leading-monitor timelines (3 available here: D2, M.entropy2, router.similarity)
    # + one heatmap per family (attention, router, numerics) + the head drill-down
    assert n_plots == 1 + 3 + 3 + 1, n_plots
    assert browser.evaluate("document.querySelectorAll('.main-svg').length") >= n_plots
    # heatmaps drew their images, line plots their paths
    assert browser.evaluate("document.querySelectorAll('.hm image, .heatmaplayer image').length") >= 4
    assert browser.evaluate("document.querySelectorAll('.scatterlayer .trace path.js-line').length") >= 4
    # the verdict is in the page text (rendered server-side)
    text = browser.evaluate("document.getElementById('verdict').innerText")
    assert "ANOMALOUS" in text and "lowprec_attention" in text

    # the drill-down re-renders for another layer
    before = browser.evaluate("document.getElementById('head-plot').getAttribute('data-title')")
    assert "layer 1" in before  # opens on the layer the evidence names
    browser.evaluate("""(function(){var s=document.querySelector('select[aria-label=layer]');
        s.value='0'; s.dispatchEvent(new Event('change')); return 1;})()""")
    browser.wait_for("document.getElementById('head-plot').getAttribute('data-title').includes('layer 0')")
    # every colour bar is titled
    titles = browser.evaluate("[...document.querySelectorAll('.cbtitle')].map(e => e.textContent)")
    assert len(titles) == 4 and all(titles), titles
    # the first examined step is drawn, labelled, with the other markers (and overlaps none of them)
    labels = browser.evaluate("[...document.querySelectorAll('.annotation-text')].map(e => e.textContent)")
    assert any(t.startswith("first examined ") for t in labels), labels
    assert text_overlaps(browser) == []

    ARTIFACTS.mkdir(exist_ok=True)
    browser.screenshot(ARTIFACTS / "report.png")
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000

    assert browser.problems() == []
    assert network_requests(browser) == [path.resolve().as_uri()]  # the report itself, nothing else


def test_healthy_report_without_loss_or_heads(browser, tmp_path):
    """A result with nothing optional (no log, no head-level series) still renders cleanly."""
    steps = np.arange(1, 11) * 100
    tl = Timeline.from_arrays(steps, {"router.similarity": np.full((10, 2, 1), 0.1)}, {})
    summary = {
        "schema": "ckptscan/1",
        "ckptscan_version": "0.1.0",
        "run": "/nonexistent",
        "out": "/tmp/y",
        "command": [],
        "checkpoints": {"analyzed": 10, "reused": 0, "steps": steps.tolist(), "skipped": []},
        "monitors": tl.names(),
        "findings": [],
        "verdict": {
            "anomalous": False,
            "earliest_step": None,
            "fault_type": "healthy",
            "confidence": 0.0,
            "evidence": [],
        },
        "loss": {"divergence_step": None, "log_only_alarm_step": None},
        "lead_time_steps": None,
    }
    path = write_html(Result(Path("/nonexistent"), Path("/tmp/y"), summary, tl, []), tmp_path / "h.html")
    open_report(browser, path)
    assert browser.evaluate("document.querySelectorAll('.js-plotly-plot').length") == 2  # timeline + heatmap
    assert "HEALTHY" in browser.evaluate("document.getElementById('verdict').innerText")
    assert browser.problems() == []
    assert network_requests(browser) == [path.resolve().as_uri()]


def test_phone_layout_is_usable_and_charts_keep_their_text_apart(browser, tmp_path):
    """390 px wide: nothing wider than the screen, the evidence table whole, the charts drawn, and
    no text on other text in any chart; the same head has the same colour in every chart."""
    path = write_html(fault_result(), tmp_path / "phone.html")
    browser.viewport(390, 844, mobile=True)
    try:
        open_report(browser, path)
        assert browser.evaluate("document.documentElement.scrollWidth") <= 390
        table = browser.evaluate("""(function(){var t=document.querySelector('#verdict table.ev');
            return [t.getBoundingClientRect().right, t.parentNode.getBoundingClientRect().right];})()""")
        assert table[0] <= table[1] <= 390, table  # whole, not cut by its box or the screen
        widths = browser.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].map(p => p.getBoundingClientRect().right)"
        )
        assert len(widths) == 8 and max(widths) <= 390
        assert text_overlaps(browser) == []
        ARTIFACTS.mkdir(exist_ok=True)
        browser.screenshot(ARTIFACTS / "report-390px.png")
        colours = browser.evaluate("""[...document.querySelectorAll('.js-plotly-plot')]
            .map(p => (p.data || [])
            .filter(t => t.name === 'layer 1 head 2').map(t => t.line.color)).flat()""")
        assert len(colours) >= 2 and len(set(colours)) == 1, colours
        assert browser.problems() == []
    finally:
        browser.viewport(1400, 1000)


def test_overlapping_labels_would_be_caught(browser, tmp_path):
    """The overlap check can fail: two labels put on the same spot on purpose are found."""
    page = tmp_path / "overlap.html"
    page.write_text(write_html(fault_result(), tmp_path / "r.html").read_text())
    open_report(browser, page)
    browser.evaluate("""(function(){var d=document.querySelector('.js-plotly-plot');
        var at = {x: 0.5, y: 0.5, xref: 'paper', yref: 'paper', showarrow: false};
        var one = Object.assign({text: 'one'}, at), two = Object.assign({text: 'two'}, at);
        Plotly.relayout(d, {annotations: [one, two]});
        return 1;})()""")
    assert [o[1:] for o in text_overlaps(browser)] == [["one", "two"]]


def test_a_network_request_would_be_caught(browser, tmp_path):
    """The checks above can fail: a page that fetches something shows up in requests/problems."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body><img src='https://cdn.example.com/x.png'>"
        "<script>console.error('boom')</script></body></html>"
    )
    browser.events.clear()
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait_event("Page.loadEventFired")
    assert any("cdn.example.com" in u for u in network_requests(browser))
    assert any("boom" in p for p in browser.problems())


def screenshot_fixture_report(png: Path, work: Path) -> list[str]:
    """Analyse ``fixtures/drills/lowprec-moe`` afresh (into ``work``), render its HTML report and
    take the README's screenshot (1280 x 900, the top of the page) to ``png``; returns the page's
    problems (console errors, network requests)."""
    from ckptscan.api import analyze

    run = Path(__file__).resolve().parent.parent / "fixtures" / "drills" / "lowprec-moe"
    res = analyze(Path(os.path.relpath(run)), out_dir=work / "out")  # the page shows fixtures/drills/...
    page = write_html(res, work / "report.html")
    b = Browser(work / "profile", width=1280, height=900)
    try:
        open_report(b, page)
        b.screenshot(png, full_page=False)
        return b.problems() + [u for u in network_requests(b) if u != page.resolve().as_uri()]
    finally:
        b.close()


def test_readme_screenshot_script(browser, tmp_path):
    """The script behind docs/images/report.png runs (here into test-artifacts/)."""
    ARTIFACTS.mkdir(exist_ok=True)
    assert screenshot_fixture_report(ARTIFACTS / "readme-report.png", tmp_path) == []
    assert (ARTIFACTS / "readme-report.png").stat().st_size > 50_000


if __name__ == "__main__":  # python -m tests.test_html_browser docs/images/report.png
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        problems = screenshot_fixture_report(Path(sys.argv[1]), Path(tmp))
    print(sys.argv[1], "problems:", problems)
    sys.exit(1 if problems else 0)
