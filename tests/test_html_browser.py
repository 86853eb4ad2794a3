"""The html report in a real browser: headless Chromium (Debian's `chromium`, which .ci/run
installs) over the DevTools protocol (tests/browser.py). One browser for the module, one tab
reused for every page.

Each fixture's page must load with no console error, no CSP violation and no request other than
the page itself; draw one timeline row per process of the model; put the boundary mark on the line
and at the time the boundary proof names. A `<script>` in a log must show as text. Screenshots of
the 4-rank odd-one-out fixture and of a generated 256-rank run are kept in
$RLTRIAGE_ARTEFACTS (default: test-artefacts/html/, not committed).

Without chromium the tests skip, unless RLTRIAGE_REQUIRE_BROWSER=1 (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rltriage
from rltriage import KnowledgeBase
from rltriage.inputs.normalize import timestamp
from rltriage.pipeline.redact import redact
from rltriage.pipeline.timeline import clean
from rltriage.tools.batch import run_batch

from .browser import Browser, Page, chromium_path
from .conftest import FIXTURES, REPO, all_fixtures, rendered
from .generated_runs import SCRIPT, SECRET, hostile, many_ranks

ARTEFACTS = Path(os.environ.get("RLTRIAGE_ARTEFACTS") or REPO / "test-artefacts" / "html")
MAX_BYTES = 2 * 1024 * 1024
MAX_OPEN_SECONDS = 2.0

# What a test reads off a loaded page, in one round trip.
PROBE = """(() => {
  const rows = [...document.querySelectorAll('#tl .row')];
  const primary = [...document.querySelectorAll('#tl .m.k-boundary.primary')].map(m => ({
    path: m.dataset.path, line: Number(m.dataset.line), left: parseFloat(m.style.left),
    row: m.closest('.row').dataset.id, title: m.getAttribute('title')}));
  const marks = [...document.querySelectorAll('#tl .m')];
  const width = el => el.getBoundingClientRect().width;
  return {
    rows: rows.map(r => r.dataset.id),
    boundary: primary,
    scripts: document.scripts.length,
    pwned: window.__rltriage_pwned === undefined ? null : window.__rltriage_pwned,
    text: document.body.innerText,
    sections: [...document.querySelectorAll('main > section > h2')].map(h => h.textContent),
    outside: marks.filter(m => { const t = m.parentElement.getBoundingClientRect(), b = m.getBoundingClientRect();
      return b.left + b.width / 2 < t.left - 1 || b.left + b.width / 2 > t.right + 1; }).length,
    track: rows.length ? width(rows[0].querySelector('.tl-track')) : 0,
  };
})()"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("RLTRIAGE_REQUIRE_BROWSER") == "1":
            pytest.fail("RLTRIAGE_REQUIRE_BROWSER=1 but no chromium found (apt-get install chromium)")
        pytest.skip("no chromium on this machine (apt-get install chromium, or set RLTRIAGE_CHROMIUM)")
    started = Browser(executable)
    yield started
    started.close()


@pytest.fixture(scope="module")
def page(browser: Browser) -> Iterator[Page]:
    tab = browser.new_page()
    yield tab
    tab.close()


@pytest.fixture(scope="module")
def pages_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pages")


def _open(page: Page, html: str, path: Path) -> tuple[dict, float]:
    path.write_text(html, encoding="utf-8")
    seconds = page.open(path.as_uri())
    problems = page.problems()
    assert not problems, f"{path.name}: {problems}"
    assert page.requests() == [path.as_uri()], f"{path.name}: requests beyond the page itself: {page.requests()}"
    return page.evaluate(PROBE), seconds


FIXTURE_DIRS = all_fixtures()


@pytest.mark.parametrize("folder", FIXTURE_DIRS, ids=[str(p.relative_to(FIXTURES)) for p in FIXTURE_DIRS])
def test_every_fixture_page_in_a_browser(folder: Path, kb: KnowledgeBase, page: Page, pages_dir: Path) -> None:
    made = rendered(folder, kb)
    probe, _seconds = _open(page, made.html, pages_dir / (made.name.replace("/", "__") + ".html"))
    timeline = made.details.timeline
    assert probe["rows"] == [r.id for r in timeline.rows], "one drawn row per process of the model"
    assert probe["outside"] == 0, "every mark inside its track"
    for title in ("Failure summary", "Boundary proof", "Root-cause ranking", "Minimal fix", "Patch plan", "Verification"):
        assert title in probe["sections"]
    proof = made.analysis.diagnosis.boundary.evidence
    if timeline.boundary is None:
        assert probe["boundary"] == []
        return
    assert len(probe["boundary"]) == 1
    drawn = probe["boundary"][0]
    assert (drawn["path"], drawn["line"]) == (proof[0].path, proof[0].line), "the mark sits on the proof's line"
    holder = next(r for r in timeline.rows if any(m is timeline.boundary for m in r.marks))
    assert drawn["row"] == holder.id
    assert clean(proof[0].text).strip()[:60] in drawn["title"], "hover shows the line"
    stamp = timestamp(proof[0].text)
    if timeline.clock == "time" and stamp is not None and timeline.boundary.placed == "time":
        assert timeline.start is not None and timeline.end is not None
        expected = 100 * (stamp - timeline.start) / (timeline.end - timeline.start)
        assert drawn["left"] == pytest.approx(expected, abs=0.01), "the mark is at the proof's time"


def test_a_script_in_a_log_is_shown_as_text(tmp_path: Path, page: Page) -> None:
    run = hostile(tmp_path / "run")
    probe, _seconds = _open(page, rltriage.report([str(run)], "html"), tmp_path / "hostile.html")
    assert probe["pwned"] is None, "markup from a log ran"
    assert probe["scripts"] == 1, "the page's own script only"
    assert SCRIPT in probe["text"], "the line is shown as text"
    assert SECRET not in probe["text"] and redact(SECRET) in probe["text"]
    hovered = page.evaluate(
        """(() => { const m = document.querySelector('#tl .m.k-failure');
        m.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
        return document.getElementById('hover').textContent; })()"""
    )
    assert "RuntimeError: judge returned <script>" in hovered, "hover shows the line"


def test_timeline_filter_and_copy_work(page: Page, kb: KnowledgeBase, pages_dir: Path) -> None:
    made = rendered(FIXTURES / "stacks/odd_rank_in_reward", kb)
    _open(page, made.html, pages_dir / "controls.html")
    visible = page.evaluate(
        """(() => { const f = document.getElementById('tl-filter'); f.value = 'rank2';
        f.dispatchEvent(new Event('input'));
        return [...document.querySelectorAll('#tl .row')].filter(r => r.style.display !== 'none').map(r => r.dataset.id); })()"""
    )
    assert visible == ["rank2"]
    flagged = page.evaluate(
        """(() => { const f = document.getElementById('tl-filter'); f.value = ''; f.dispatchEvent(new Event('input'));
        const c = document.getElementById('tl-flagged'); c.checked = true; c.dispatchEvent(new Event('change'));
        return [...document.querySelectorAll('#tl .row')].filter(r => r.style.display !== 'none').map(r => r.dataset.id); })()"""
    )
    assert flagged == ["rank0", "rank2"]  # the boundary's row and the odd one out
    copied = page.evaluate("(() => { const b = document.querySelector('button.copy'); b.click(); return [b.textContent, String(window.getSelection())]; })()")
    assert copied[0] in ("Copied", "Selected: press Ctrl+C") and "num_generations: 8 -> 2" in copied[1]
    assert not page.problems()


def test_screenshot_of_the_odd_rank_fixture(page: Page, kb: KnowledgeBase, pages_dir: Path) -> None:
    made = rendered(FIXTURES / "stacks/odd_rank_in_reward", kb)
    _open(page, made.html, pages_dir / "odd_rank.html")
    target = ARTEFACTS / "odd_rank_in_reward.png"
    page.screenshot(target)
    assert target.stat().st_size > 10_000


def test_256_ranks_page_is_small_opens_fast_and_is_screenshot(tmp_path: Path, page: Page) -> None:
    run = many_ranks(tmp_path / "run")
    html = rltriage.report([str(run)], "html")
    size = len(html.encode("utf-8"))
    assert size < MAX_BYTES, f"{size} bytes"
    path = tmp_path / "ranks256.html"
    timings = []
    for _ in range(3):
        probe, seconds = _open(page, html, path)
        timings.append(seconds)
    assert len(probe["rows"]) == 257 and probe["outside"] == 0
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    (ARTEFACTS / "ranks256.json").write_text(json.dumps({"bytes": size, "open_seconds": timings}, indent=2) + "\n")
    assert min(timings) < MAX_OPEN_SECONDS, f"opening took {timings} s"
    page.screenshot(ARTEFACTS / "ranks256.png", max_height=5200)
    top = page.evaluate("document.getElementById('timeline').getBoundingClientRect().top + window.scrollY")
    page.screenshot(ARTEFACTS / "ranks256-timeline.png", clip=(0, top, 1400, 720))
    # The README's picture (docs/images/html-timeline-256-ranks.png is this, through pngquant): the
    # rows around the stuck rank under the sticky time axis.
    page.call("Emulation.setDeviceMetricsOverride", {"width": 1200, "height": 560, "deviceScaleFactor": 1, "mobile": False})
    page.evaluate("document.getElementById('row-131').scrollIntoView({block: 'start'}); window.scrollBy(0, -60)")
    page.viewport_screenshot(ARTEFACTS / "ranks256-readme.png")
    page.call("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    assert (ARTEFACTS / "ranks256.png").stat().st_size > 10_000


def test_batch_index_sorts_in_the_browser(tmp_path: Path, page: Page) -> None:
    root = tmp_path / "runs"
    for name in ("stacks/odd_rank_in_reward", "trl/reward_never_returned", "stages/clean_grpo_run"):
        shutil.copytree(FIXTURES / name, root / name.replace("/", "-"))
    pages = tmp_path / "pages"
    run_batch(str(root), html=str(pages))
    index = pages / "index.html"
    started = time.perf_counter()
    page.open(index.as_uri())
    assert time.perf_counter() - started < 10
    assert not page.problems() and page.requests() == [index.as_uri()]
    order = page.evaluate(
        """(() => { const th = [...document.querySelectorAll('table.runs th')].find(h => h.textContent === 'score');
        const read = () => [...document.querySelectorAll('table.runs tbody tr')].map(r => r.cells[4].textContent);
        th.click(); const up = read(); th.click(); return [up, read()]; })()"""
    )
    assert order[0] == sorted(order[0], key=lambda v: float(v or -1)) and order[1] == order[0][::-1]
    page.screenshot(ARTEFACTS / "batch-index.png", max_height=1200)
    links = page.evaluate("[...document.querySelectorAll('table.runs a')].map(a => a.getAttribute('href'))")
    assert len(links) == 3
    for link in links:
        page.open((pages / link).as_uri())
        assert not page.problems()
