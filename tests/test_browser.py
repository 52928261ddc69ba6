"""The rendered book in a real browser (headless Chromium through chromedriver; part of `make test-html`).

For every page of the book, at 1400 px and on a 412 px phone: every claims table keeps its verdict
column (headed *holds*) inside the visible column; the browser's console shows no error; in dark mode every claims
table's caption has a contrast of at least 4.5:1 against what is behind it. Needs Debian's
``chromium`` and ``chromium-driver`` (``make test-html`` installs them when it runs as root) and the
``selenium`` package; a missing browser fails the tests, it never passes them silently. A resource the
browser cannot fetch because the machine is offline (the widgets' scripts come from a CDN) is not an
error of the book: failed loads of http(s) addresses are left out.
"""
import pathlib
import shutil

import pytest

from tfbook.build import pdf

ROOT = pathlib.Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.html
WIDTHS = (1400, 412)

VERDICT_JS = """
document.querySelectorAll('details.tfbook-claims-fold').forEach(d => { d.open = true; });
const view = document.documentElement.clientWidth;
const column = document.querySelector('.bd-article-container, .bd-article, main');
const right = Math.min(view, column ? column.getBoundingClientRect().right : view);
const out = [];
document.querySelectorAll('table.tfbook-claims, .tfbook-claims-section table').forEach((table, i) => {
  const box = table.getBoundingClientRect();
  if (box.width === 0) return;  // folded (a closed dropdown): checked when opened
  const head = [...table.querySelectorAll('thead th, tr:first-child th')];
  const at = head.findIndex(th => th.textContent.trim() === 'holds');
  if (at < 0) return;
  table.querySelectorAll('tr').forEach((row, j) => {
    const cell = row.children[at];
    if (!cell) return;
    const r = cell.getBoundingClientRect();
    if (r.right > Math.min(right, box.right) + 1 || r.left < box.left - 1)
      out.push(`table ${i + 1}, row ${j}: verdict at ${Math.round(r.left)}-${Math.round(r.right)} px, ` +
               `visible column ends at ${Math.round(Math.min(right, box.right))} px`);
  });
});
return out;
"""

CONTRAST_JS = """
function rgb(s) { const m = s.match(/[\\d.]+/g) || []; return m.map(Number); }
function lum(c) {
  const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}
function background(el) {
  for (; el; el = el.parentElement) {
    const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c;
  }
  return [255, 255, 255];
}
return [...document.querySelectorAll('table.tfbook-claims caption')].map(cap => {
  const a = lum(rgb(getComputedStyle(cap).color)), b = lum(background(cap));
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
});
"""


@pytest.fixture(scope="module")
def browser():
    if not (HTML / "index.html").exists():
        pytest.skip("no _build/html: run make book-stored first")
    exe, driver_exe = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    assert exe and driver_exe, "no chromium/chromedriver: apt-get install chromium chromium-driver"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"):
        options.add_argument(flag)
    options.binary_location = exe
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_exe), options=options)
    yield driver
    driver.quit()


@pytest.mark.parametrize("name", pdf.pages())
def test_page_in_the_browser(browser, name):
    browser.set_window_size(WIDTHS[0], 1000)
    browser.get((HTML / f"{name}.html").resolve().as_uri())
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"
              and not (e["message"].startswith("http") and "net::ERR_" in e["message"])]
    assert not errors, f"{name}: console errors {errors[:3]}"
    for width in WIDTHS:
        browser.set_window_size(width, 1000)
        outside = browser.execute_script(VERDICT_JS)
        assert not outside, f"{name} at {width} px: {len(outside)} verdicts out of view, e.g. {outside[:2]}"
    browser.set_window_size(WIDTHS[0], 1000)
    browser.execute_script("document.documentElement.dataset.theme = 'dark';")
    ratios = browser.execute_script(CONTRAST_JS)
    low = [round(r, 2) for r in ratios if r < 4.5]
    assert not low, f"{name}: dark-mode claims captions with contrast {low} (need 4.5:1)"
