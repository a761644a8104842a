// The page of index.html: load model.onnx and model.onnx.state.npz from the same server,
// decode greedily, show the bytes as they come. onnxruntime-web's files come from the local
// node_modules (npm ci), never from a CDN. Query parameters model, prompt and n fill the form;
// autorun=1 starts at once. When a run ends, <body data-state> is "done" (or "error").

import * as ort from "./node_modules/onnxruntime-web/dist/ort.wasm.min.mjs";
import { createDecoder } from "./decoder.mjs";

ort.env.wasm.wasmPaths = new URL("./node_modules/onnxruntime-web/dist/", import.meta.url).href;
ort.env.wasm.numThreads = 1;   // threads need cross-origin isolation; one is enough here
ort.env.logLevel = "error";

const $ = (id) => document.getElementById(id);
const decoders = new Map();   // model URL -> decoder, so a second run does not reload it

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} (export a model there with hecate export)`);
  return new Uint8Array(await response.arrayBuffer());
}

async function decoderFor(url) {
  if (!decoders.has(url)) {
    const [model, state] = await Promise.all([fetchBytes(url), fetchBytes(`${url}.state.npz`)]);
    decoders.set(url, { dec: await createDecoder(ort, model, state), size: model.length });
  }
  return decoders.get(url);
}

async function run() {
  const url = $("model").value.trim();
  const prompt = $("prompt").value;
  const n = Number($("n").value);
  $("run").disabled = true;
  document.body.dataset.state = "running";
  $("status").className = "";
  $("prompt-echo").textContent = prompt || "\n";
  $("generated").textContent = "";
  try {
    if (!Number.isInteger(n) || n < 1) throw new Error(`Bytes must be a positive integer, got ${$("n").value}`);
    $("status").textContent = `loading ${url} ...`;
    const { dec, size } = await decoderFor(url);
    const text = new TextDecoder("utf-8");
    const started = performance.now();
    const out = await dec.generate(new TextEncoder().encode(prompt), n, (byte) => {
      $("generated").textContent += text.decode(new Uint8Array([byte]), { stream: true });
    });
    $("generated").textContent = new TextDecoder("utf-8").decode(out);   // exact, whole
    const seconds = (performance.now() - started) / 1000;
    $("status").textContent = `${n} bytes in ${seconds.toFixed(2)} s (${(n / seconds).toFixed(0)} bytes/s) · ` +
      `${url}: ${(size / 1024).toFixed(1)} KiB · onnxruntime-web ${ort.env.versions?.web ?? ""} (wasm)`;
    document.body.dataset.state = "done";
  } catch (e) {
    $("status").textContent = `error: ${e.message}`;
    $("status").className = "error";
    document.body.dataset.state = "error";
  } finally {
    $("run").disabled = false;
  }
}

$("form").addEventListener("submit", (event) => { event.preventDefault(); run(); });
const params = new URLSearchParams(location.search);
for (const key of ["model", "prompt", "n"]) if (params.has(key)) $(key).value = params.get(key);
if (params.get("autorun") === "1") run();
