"""Screenshot each section of a critpath HTML report in headless Chromium, for a review by eye.

    python examples/report_screenshots.py reports/RUN/report.html --out /tmp/shots

Writes one PNG per top-level section (``01-machine.png``, ``04-family-rpc.png``, ...) cut from one
full-page screenshot, and prints each file with the section's height. Two passes: the first loads a
copy of the page with a probe that writes every section's position into the DOM (the report itself
has no script); the second screenshots the page at its full height. Needs Chromium on PATH
(Debian: apt-get install chromium); pillow comes with matplotlib.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH_PX = 1200
MAX_HEIGHT_PX = 30000  # Chromium's screenshot gives up on taller pages; longer sections are cut
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

PROBE = """<script>
window.addEventListener("load", () => {
  const hs = [...document.querySelectorAll("h1, h2")];
  const out = hs.map((h, i) => ({text: h.textContent, top: h.getBoundingClientRect().top + scrollY,
    end: i + 1 < hs.length ? hs[i + 1].getBoundingClientRect().top + scrollY : document.body.scrollHeight}));
  document.body.setAttribute("data-sections", JSON.stringify({height: document.body.scrollHeight, sections: out}));
});
</script>"""


def _chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args],
        capture_output=True, text=True, timeout=300, check=True)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "section"


def sections(browser: str, page: Path, tmp: Path) -> dict:
    probed = tmp / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium(browser, tmp / "profile", f"--window-size={WIDTH_PX},1000", "--dump-dom", probed.as_uri()).stdout
    found = re.search(r"data-sections=\"([^\"]*)\"", dom)
    if found is None:
        raise SystemExit(f"{page}: the probe did not run (is it a critpath report?)")
    import html

    return json.loads(html.unescape(found.group(1)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report_html", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="directory for the section PNGs")
    args = ap.parse_args(argv)
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if browser is None:
        print("report_screenshots: no Chromium on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    from PIL import Image

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        layout = sections(browser, args.report_html.resolve(), tmp)
        height = min(int(layout["height"]) + 20, MAX_HEIGHT_PX)
        full = tmp / "full.png"
        _chromium(browser, tmp / "profile", f"--window-size={WIDTH_PX},{height}", f"--screenshot={full}",
                  args.report_html.resolve().as_uri())
        image = Image.open(full)
        for i, sec in enumerate(layout["sections"]):
            top, end = int(sec["top"]), min(int(sec["end"]), image.height)
            if top >= image.height:
                print(f"{sec['text']}: below the {MAX_HEIGHT_PX} px the screenshot holds", file=sys.stderr)
                continue
            path = args.out / f"{i:02d}-{_slug(sec['text'])}.png"
            image.crop((0, max(0, top - 10), image.width, end)).save(path)
            print(f"{path}  {end - top} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
