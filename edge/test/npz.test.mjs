// The .npz / .npy reader against files NumPy wrote (np.savez and np.savez_compressed of
// f32 = arange(6).reshape(2, 3) / 4, i64 = [7, -3], f64 = 2.5 (shape ()), u8 = [[1, 255]]).
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import test from "node:test";
import { readNpy, readNpz } from "../npz.mjs";

const fixture = (name) => new URL(`./fixtures/${name}`, import.meta.url);

for (const name of ["arrays.npz", "arrays_compressed.npz"]) {
  test(`reads ${name}`, async () => {
    const arrays = await readNpz(new Uint8Array(await readFile(fixture(name))));
    assert.deepEqual([...arrays.keys()].sort(), ["f32", "f64", "i64", "u8"]);
    const f32 = arrays.get("f32");
    assert.equal(f32.dtype, "<f4");
    assert.deepEqual(f32.shape, [2, 3]);
    assert.ok(f32.data instanceof Float32Array);
    assert.deepEqual([...f32.data], [0, 0.25, 0.5, 0.75, 1, 1.25]);
    assert.deepEqual([...arrays.get("i64").data], [7n, -3n]);
    assert.deepEqual(arrays.get("f64").shape, []);
    assert.deepEqual([...arrays.get("f64").data], [2.5]);
    assert.deepEqual(arrays.get("u8").shape, [1, 2]);
    assert.deepEqual([...arrays.get("u8").data], [1, 255]);
  });
}

test("refuses what it cannot read, saying what", async () => {
  await assert.rejects(readNpz(new Uint8Array(100)), /not a zip archive/);
  assert.throws(() => readNpy(new TextEncoder().encode("hello world")), /not a \.npy file/);
  const header = "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }";
  const npy = new Uint8Array([0x93, ...new TextEncoder().encode("NUMPY"), 1, 0, header.length, 0,
    ...new TextEncoder().encode(header), 0, 0, 0, 0, 0, 0, 0, 0]);
  assert.throws(() => readNpy(npy), /dtype <c8 is not supported/);
});

test("a Node Buffer inside a larger pooled ArrayBuffer reads the same", async () => {
  const file = await readFile(fixture("arrays.npz"));
  const pool = Buffer.alloc(file.length + 37, 0xab);
  file.copy(pool, 37);
  const arrays = await readNpz(pool.subarray(37));
  assert.deepEqual([...arrays.get("i64").data], [7n, -3n]);
  assert.deepEqual([...arrays.get("f32").data], [0, 0.25, 0.5, 0.75, 1, 1.25]);
});
