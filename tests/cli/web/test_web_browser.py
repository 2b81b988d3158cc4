"""The page and the HTML reports in a real browser: headless Chromium from the system's packages
(Debian's ``chromium``), driven by Playwright pointed at it; nothing is downloaded. Skipped, with
the reason, where either is missing (.ci/run installs both). One browser for the module."""

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from cli_runner import run

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)

CHROMIUM = os.environ.get("GPUPLAN_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
if CHROMIUM is None and os.environ.get("GPUPLAN_REQUIRE_BROWSER"):
    pytest.fail("GPUPLAN_REQUIRE_BROWSER is set but no Chromium was found", pytrace=False)
if CHROMIUM is None:
    pytest.skip(
        "no Chromium on this machine (apt-get install chromium, or set GPUPLAN_CHROMIUM)", allow_module_level=True
    )

# Screenshots land here (CI keeps them as artifacts when it sets the variable)
SHOTS = Path(os.environ.get("GPUPLAN_SCREENSHOTS", "")) if os.environ.get("GPUPLAN_SCREENSHOTS") else None


@pytest.fixture(scope="module")
def server():
    from gpuplan.cli.web.server import make_server

    srv = make_server(0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def context(browser):
    # one context: its HTTP cache keeps plotly.js (4.6 MB) between the tests' pages
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    yield ctx
    ctx.close()


@pytest.fixture
def page(context):
    """A fresh page that records console errors and uncaught exceptions."""
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    pg.close()


def _shot(pg, name, tmp_path):
    path = (SHOTS or tmp_path) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:4] == b"\x89PNG"


def _cells(pg, scope):
    cells = pg.eval_on_selector_all(f"{scope} td[data-key]", "els => els.map(e => [e.dataset.key, e.dataset.value])")
    return {k: json.loads(v) for k, v in cells}


def _lookup(doc, key):
    for part in key.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _cli_json(command_line, capsys):
    import shlex

    code, out, err = run([*shlex.split(command_line)[1:], "--json"], capsys)
    assert code in (0, 3), err
    return json.loads(out)


def test_the_page_loads_without_console_errors_and_paints(page, server, tmp_path):
    page.goto(server + "/")  # waits for the load event: plotly.js (async) included
    page.wait_for_function("document.body.dataset.state === 'ready' && window.Plotly !== undefined")
    assert page.locator(".tab").count() == 9
    assert page.locator("#section-train").is_visible()
    paint = page.evaluate("performance.getEntriesByName('first-contentful-paint').map(e => e.startTime)")
    assert paint, "the page painted"
    _shot(page, "ui-start", tmp_path)
    assert page.errors == []


def test_a_train_form_renders_the_numbers_the_cli_prints(page, server, capsys, tmp_path):
    page.goto(server + "/?cmd=train", wait_until="domcontentloaded")
    page.wait_for_function("document.body.dataset.state === 'ready'")
    for name, value in {"gpus": "8", "tp": "2", "zero": "1", "tokens": "1B"}.items():
        page.fill(f"#train-{name}", value)
    page.click("#section-train button[type=submit]")
    page.wait_for_selector("#results-train td[data-key]")
    page.wait_for_selector("#results-train .figure .main-svg")
    doc = _cli_json(page.text_content("#results-train .command-line"), capsys)
    cells = _cells(page, "#results-train")
    assert {"memory.per_gpu.total", "time.step_s", "mfu", "cost_usd"} <= set(cells)
    for key, value in cells.items():
        assert value == _lookup(doc, key), key
    assert "gpus=8" in page.url and "tokens=1B" in page.url  # the form, shareable as a link
    assert page.locator("#results-train .figure").count() == 2
    _shot(page, "ui-train", tmp_path)
    assert page.errors == []


def test_a_bad_value_shows_the_cli_message_beside_its_field(page, server, capsys):
    page.goto(server + "/?cmd=whatif", wait_until="domcontentloaded")
    page.wait_for_function("document.body.dataset.state === 'ready'")
    page.fill("#whatif-cost", "soon")
    page.click("#section-whatif button[type=submit]")
    page.wait_for_function("document.getElementById('whatif-cost-error').textContent !== ''")
    code, _, err = run(["cluster", "whatif", "--checkpoint-cost", "soon"], capsys)
    assert code == 2
    assert page.text_content("#whatif-cost-error") == err.strip()
    assert page.get_attribute("#whatif-cost", "aria-invalid") == "true"
    assert page.errors == []


def test_a_shared_link_reopens_its_form_and_answer(page, server, capsys):
    page.goto(
        server + "/?cmd=serve&model=llama-3.1-8b&concurrency=8&itl_slo=20ms&target_rps=4", wait_until="domcontentloaded"
    )
    page.wait_for_selector("#results-serve td[data-key]")
    assert page.input_value("#serve-concurrency") == "8"
    assert page.locator("#section-serve").is_visible()
    doc = _cli_json(page.text_content("#results-serve .command-line"), capsys)
    for key, value in _cells(page, "#results-serve").items():
        assert value == _lookup(doc, key), key
    assert page.errors == []


def test_the_html_report_opens_from_a_file_url(page, capsys, tmp_path):
    report = tmp_path / "pipeline.html"
    code, out, err = run(["pipeline", "--stages", "8", "--microbatches", "16", "--json", "--html", str(report)], capsys)
    assert code == 0, err
    page.goto(report.as_uri())
    page.wait_for_selector("#figure-0 .main-svg")
    assert page.locator("#figure-0 .main-svg .bars path").count() > 0
    doc = json.loads(out)
    for key, value in _cells(page, "body").items():
        assert value == _lookup(doc, key), key
    _shot(page, "report-pipeline", tmp_path)
    assert page.errors == []
