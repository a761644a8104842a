// Greedy decoding with an exported Hecate step (hecate export: model.onnx and its fresh state
// model.onnx.state.npz) in onnxruntime-web. The `ort` module is passed in, so Node
// (generate.mjs) and the browser page (page.mjs) share this code with their own import.
//
//   const dec = await createDecoder(ort, modelBytes, stateNpzBytes);
//   const bytes = await dec.generate(new TextEncoder().encode("def "), 40);  // Uint8Array

import { readNpz } from "./npz.mjs";

const STATE_IN = "state_in_";
const STATE_OUT = "state_out_";

function tensorOf(ort, { dtype, shape, data }) {
  const type = { "<f4": "float32", "<i8": "int64" }[dtype];
  if (!type) throw new Error(`state array of dtype ${dtype}: the step takes float32 or int64`);
  return new ort.Tensor(type, data.slice(), shape);
}

export async function createDecoder(ort, modelBytes, stateNpzBytes) {
  const session = await ort.InferenceSession.create(modelBytes, { executionProviders: ["wasm"] });
  const fresh = await readNpz(stateNpzBytes);
  const stateNames = session.inputNames.filter((n) => n !== "token");
  const missing = stateNames.filter((n) => !fresh.has(n));
  if (missing.length) throw new Error(`the state file lacks the model's inputs ${missing.join(", ")}`);
  let state;

  const reset = () => {
    state = Object.fromEntries(stateNames.map((n) => [n, tensorOf(ort, fresh.get(n))]));
  };

  // Feed one token; returns the next-token logits (Float32Array of the vocabulary's size).
  const step = async (token) => {
    const feeds = { ...state, token: new ort.Tensor("int64", BigInt64Array.of(BigInt(token)), [1]) };
    const out = await session.run(feeds);
    state = Object.fromEntries(stateNames.map((n) => [n, out[STATE_OUT + n.slice(STATE_IN.length)]]));
    return out.logits.data;
  };

  const argmax = (v) => v.reduce((best, x, i) => (x > v[best] ? i : best), 0);

  // The n bytes greedy decoding appends to `prompt` (Uint8Array; empty means "\n", as in
  // `hecate sample`), fed byte by byte from the fresh state.
  const generate = async (prompt, n, onByte = () => {}) => {
    reset();
    let logits = null;
    for (const b of prompt.length ? prompt : new Uint8Array([10])) logits = await step(b);
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      out[i] = argmax(logits);
      onByte(out[i], i);
      if (i + 1 < n) logits = await step(out[i]);
    }
    return out;
  };

  reset();
  return { session, step, generate, reset, get state() { return state; } };
}
