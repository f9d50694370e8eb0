"""The HTML report renders in a real browser: headless Chromium loads it, every plot decodes, and
the console stays silent. Skipped with a reason where Chromium is not installed."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import another_run

from harness.cli import main
from harness.core import registry
from harness.core.store import load_run

RUN = Path(__file__).parent / "fixtures" / "run_mixed"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for path in map(shutil.which, BROWSERS) if path), None)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH (Debian: apt-get install chromium)"),
]

# Appended to a copy of the report (the report itself has no script): after the load event, which
# waits for every image, count the images that decoded and write the result into the DOM.
PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.querySelectorAll("figure[data-plot] img")];
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  document.body.setAttribute("data-probe", `images=${imgs.length} broken=${bad.length}`);
  console.log("critpath-probe-done");
});
</script>"""


def _chromium(url: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line]


def render(report_html: Path, tmp: Path) -> tuple[str, str]:
    """Load a report in headless Chromium with the probe; returns (DOM, the probe's summary) after
    checking that the page loaded and the console said nothing but the probe's own message."""
    probed = report_html.with_name("probed.html")
    probed.write_text(report_html.read_text().replace("</body>", PROBE + "</body>"))
    proc = _chromium(probed.as_uri(), tmp / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The probe's own message shows that console output is captured; anything else is from the page.
    lines = _console_lines(proc.stderr)
    assert any("critpath-probe-done" in line for line in lines), proc.stderr[-2000:]
    assert [line for line in lines if "critpath-probe-done" not in line] == []
    found = re.findall(r'data-probe="([^"]*)"', proc.stdout)
    return proc.stdout, found[0] if found else proc.stdout[:500]


def test_report_renders_with_plots_and_no_console_errors(tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(RUN), "--out", str(out)]) == 0
    dom, probe = render(out / "report.html", tmp_path)
    assert "<h1>critpath report: fixture-mixed</h1>" in dom
    # Every plot of every family in the run is on the page, by name, and each decoded.
    expected = {spec.name for family in load_run(RUN).families() for spec in registry.get(family).plots}
    shown = set(re.findall(r'<figure data-plot="([^"]+)"', dom))
    assert shown == expected and len(expected) >= 7
    assert probe == f"images={len(expected)} broken=0"


def test_the_probe_can_fail(tmp_path):
    """A broken image and a script error are seen: the check above is not vacuous."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><figure data-plot="x"><img alt="x" '
                    'src="data:image/png;base64,AAAA"></figure><script>undefinedFunction();</script>'
                    + PROBE + "</body></html>")
    proc = _chromium(page.as_uri(), tmp_path / "profile")
    assert 'data-probe="images=1 broken=1"' in proc.stdout
    assert any("undefinedFunction" in line for line in _console_lines(proc.stderr)), proc.stderr[-2000:]


def test_a_comparison_renders_with_every_plot(tmp_path):
    second = another_run(RUN, tmp_path / "second", "second")  # another run, not a copy
    out = tmp_path / "compare"
    assert main(["report", str(RUN), str(second), "--label", "a", "--label", "b", "--out", str(out)]) == 0
    dom, probe = render(out / "report.html", tmp_path)
    assert "<h1>critpath comparison: a vs b</h1>" in dom
    expected = {spec.name for family in load_run(RUN).families() for spec in registry.get(family).plots}
    assert set(re.findall(r'<figure data-plot="([^"]+)"', dom)) == expected
    assert probe == f"images={len(expected)} broken=0"


FONT_PROBE = """<script>
window.addEventListener("load", async () => {
  await document.fonts.ready;
  const faces = [...document.fonts].map(f => `${f.family.replace(/["']/g, "")}:${f.status}`);
  document.body.setAttribute("data-probe", faces.join(";"));
  console.log("critpath-probe-done");
});
</script>"""


def test_the_embedded_cjk_font_loads_in_the_browser(tmp_path):
    """The original titles' font decodes in Chromium (a WOFF it refuses would leave them as boxes)."""
    from harness.claims.baselines import load_dir
    from harness.report.build import _sources
    from harness.document.blocks import to_html

    page = tmp_path / "sources.html"
    page.write_text(to_html(_sources(load_dir()), "sources").replace("</body>", FONT_PROBE + "</body>"))
    proc = _chromium(page.as_uri(), tmp_path / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'data-probe="critpath CJK subset:loaded"' in proc.stdout, proc.stdout[-500:]
