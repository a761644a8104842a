// generate.mjs and the decoder against ONNX Runtime in Python. The cases come from the pytest
// that drives these tests (tests/models/test_edge.py): HECATE_EDGE_CASES names a JSON list of
// {model, prompt, n, text, logits}, where `text` is what Python's onnxruntime decoded greedily
// and `logits` its logits after each prompt byte. Without it these tests are skipped.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import test from "node:test";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-web";
import { createDecoder } from "../decoder.mjs";

const GENERATE = fileURLToPath(new URL("../generate.mjs", import.meta.url));
const casesFile = process.env.HECATE_EDGE_CASES;
const cases = casesFile ? JSON.parse(readFileSync(casesFile, "utf8")) : [];
const skip = casesFile ? false : "HECATE_EDGE_CASES not set (run tests/models/test_edge.py)";

const generate = (...args) => spawnSync(process.execPath, [GENERATE, ...args], { encoding: "utf8" });

test("the cases file holds cases", { skip }, () => assert.ok(cases.length > 0));

for (const c of cases) {
  test(`generate.mjs prints what Python's onnxruntime decodes: ${c.label}`, { skip }, () => {
    const proc = generate(c.model, c.prompt, String(c.n));
    assert.equal(proc.status, 0, proc.stderr);
    assert.equal(proc.stderr, "");
    assert.equal(proc.stdout, c.text);
  });

  test(`logits after each prompt byte agree to 1e-4: ${c.label}`, { skip }, async () => {
    ort.env.wasm.numThreads = 1;
    const dec = await createDecoder(ort, readFileSync(c.model), readFileSync(`${c.model}.state.npz`));
    const prompt = new TextEncoder().encode(c.prompt);
    assert.equal(c.logits.length, prompt.length);
    for (let i = 0; i < prompt.length; i++) {
      const got = await dec.step(prompt[i]);
      const worst = Math.max(...c.logits[i].map((x, j) => Math.abs(x - got[j])));
      assert.ok(worst < 1e-4, `byte ${i}: logits differ by ${worst}`);
    }
    assert.equal(dec.state.state_in_pos.data[0], BigInt(prompt.length));
  });
}

test("bad arguments: one line on stderr, exit status 2", { skip }, () => {
  const model = cases[0].model;
  for (const [args, message] of [
    [[model, "x"], /expected 3 arguments, got 2/],
    [[model, "x", "0"], /N must be a positive integer, got "0"/],
    [[model, "x", "ten"], /N must be a positive integer/],
    [[`${model}.missing`, "x", "3"], /no such file.*hecate export/i],
  ]) {
    const proc = generate(...args);
    assert.equal(proc.status, 2, proc.stderr);
    assert.equal(proc.stdout, "");
    assert.match(proc.stderr, message);
    assert.equal(proc.stderr.trim().split("\n").length, 1);
  }
});
