"""The web page of `hecate serve` in a real browser: headless Chromium (Debian's `chromium`
package) driven by Playwright for Python. It types a prompt, clicks Generate, and checks that
the streamed text appears and equals the API's greedy completion; a screenshot is written to
the test's temporary folder. Skips without playwright, chromium or the `serve` extra."""
import os

import pytest

from models.cli import main

CHROMIUM = os.environ.get("HECATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-quic"]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "2",
        "--batch-size", "2", "--no-progress"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    for name in ("fastapi", "uvicorn", "httpx"):
        pytest.importorskip(name)
    pytest.importorskip("playwright.sync_api")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    root = tmp_path_factory.mktemp("browser")
    (root / "corpus.txt").write_text("import os\nprint(os.getcwd())\n" * 60)
    run = root / "run"
    assert main(["train", "--run-dir", str(run), "--data", str(root / "corpus.txt"),
                 "--steps", "2", *TINY]) == 0
    from test_serve_http import server_process
    with server_process(run) as (_, url):
        yield url


def test_page_streams_text(server, tmp_path):
    import httpx
    from playwright.sync_api import sync_playwright
    want = httpx.post(server + "/v1/completions", timeout=30,
                      json={"prompt": "import os", "max_tokens": 60,
                            "temperature": 0}).json()["choices"][0]["text"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 720})
            page.goto(server + "/")
            page.wait_for_function("document.getElementById('model').textContent"
                                   ".includes('step')")
            page.fill("#prompt", "import os")
            page.fill("#max_tokens", "60")
            page.fill("#temperature", "0")
            page.click("#generate")
            page.wait_for_function("document.getElementById('status').textContent"
                                   ".startsWith('done')", timeout=30000)
            shown = page.text_content("#output .generated")
            status = page.text_content("#status")
            page.screenshot(path=str(tmp_path / "serve_page.png"), full_page=True)
        finally:
            browser.close()
    assert shown == want and len(shown) > 0
    assert "finish_reason: length" in status
    assert (tmp_path / "serve_page.png").stat().st_size > 1000
