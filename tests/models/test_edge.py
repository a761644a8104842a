"""edge/: the exported step in onnxruntime-web, under Node (`node --test` in edge/, fed cases
that Python's onnxruntime decoded) and in headless Chromium (edge/index.html served locally,
its text compared and its screenshot checked). Skips when node, edge/node_modules (`npm ci`
in edge/), Playwright or Chromium is missing."""
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from models.config import ModelConfig                                  # noqa: E402
from models.export import (OnnxDecoder, build_step_model, fresh_state,   # noqa: E402
                           save_state)
from models.export.quantize import quantize_int8                       # noqa: E402
from models.model import init_params                                   # noqa: E402

EDGE = Path(__file__).resolve().parents[2] / "edge"
NODE = shutil.which("node")
CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
                 if p and Path(p).exists()), None)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-quic"]

needs_ort_web = pytest.mark.skipif(
    not (EDGE / "node_modules" / "onnxruntime-web").is_dir(),
    reason="edge/node_modules missing (run `npm ci` in edge/)")

# Random weights: their greedy bytes are varied (non-ASCII included), unlike a barely trained
# run's; key_shift, a Titans memory with three levels, MAL; a plain MAG delta model.
CONFIGS = {
    "titans": ModelConfig(d_model=16, layers=2, window=8, seq_len=16, levels=3,
                          periods=(1, 4, 16), rule="titans", composition="MAL", key_shift=True),
    "delta": ModelConfig(d_model=16, layers=1, window=8, seq_len=16, levels=2, periods=(1, 4)),
}


def export(cfg: ModelConfig, path: Path, int8: bool = False) -> Path:
    model = build_step_model(init_params(cfg, seed=3), cfg)
    if int8:
        quantize_int8(model, path)
    else:
        onnx.save(model, str(path))
    save_state(str(path) + ".state.npz", fresh_state(cfg))
    return path


def case(label: str, model: Path, prompt: str, n: int) -> dict:
    dec = OnnxDecoder(model)
    text = dec.generate(prompt.encode(), n).decode("utf-8", errors="replace")
    dec.reset()
    logits = [dec.step(b).tolist() for b in prompt.encode()]
    return {"label": label, "model": str(model), "prompt": prompt, "n": n, "text": text,
            "logits": logits}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edge")
    titans = export(CONFIGS["titans"], tmp / "titans.onnx")
    return [case("titans MAL key_shift, 3 levels", titans, "héllo", 50),
            case("delta MAG, empty prompt", export(CONFIGS["delta"], tmp / "delta.onnx"), "", 30),
            case("titans int8", export(CONFIGS["titans"], tmp / "titans8.onnx", int8=True),
                 "def ", 30)]


@needs_ort_web
@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_node_tests(cases, tmp_path):
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    assert any(any(ord(ch) > 127 for ch in c["text"]) for c in cases)   # non-ASCII output too
    proc = subprocess.run([NODE, "--test", "--test-reporter=tap"], cwd=EDGE, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "HECATE_EDGE_CASES": str(cases_file)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # every test ran (none skipped) and the generation cases were among them
    assert "# fail 0" in proc.stdout and "# skipped 0" in proc.stdout, proc.stdout[-2000:]
    assert proc.stdout.count("generate.mjs prints what Python's onnxruntime decodes") == 2 * 3


class _Handler(http.server.SimpleHTTPRequestHandler):
    """edge/ at /, and the exported models' folder at /models/."""
    models: Path

    def translate_path(self, path):
        clean = path.split("?", 1)[0]
        if clean.startswith("/models/"):
            return str(self.models / Path(clean[len("/models/"):]).name)
        return super().translate_path(path)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(cases):
    handler = type("Handler", (_Handler,), {"models": Path(cases[0]["model"]).parent})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(handler, directory=str(EDGE)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@needs_ort_web
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_page_in_headless_chromium(cases, server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    c = cases[0]
    from urllib.parse import quote
    url = (f"{server}/index.html?model=/models/{Path(c['model']).name}"
           f"&prompt={quote(c['prompt'])}&n={c['n']}&autorun=1")
    errors = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 640})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            page.goto(url)
            page.wait_for_function("['done', 'error'].includes(document.body.dataset.state)",
                                   timeout=120_000)
            status = page.inner_text("#status")
            assert page.evaluate("document.body.dataset.state") == "done", status
            assert page.text_content("#generated") == c["text"]
            assert page.text_content("#prompt-echo") == c["prompt"]
            assert f"{c['n']} bytes in" in status and "(wasm)" in status
            shot = tmp_path / "page.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert not errors, errors
    import matplotlib.image
    img = matplotlib.image.imread(str(shot))[..., :3]
    # the blue Generate button, dark text on the light page, and a mostly light page
    blue = np.all(np.abs(img - np.array([0x2f, 0x6f, 0xd0]) / 255) < 0.05, axis=-1)
    assert blue.sum() > 500
    assert (img.mean(axis=-1) < 0.3).sum() > 500
    assert img.mean() > 0.8
