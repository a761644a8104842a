// A reader for NumPy's .npz (a zip of .npy files) and .npy, for Node and browsers alike.
//
// readNpz(bytes) -> Promise<Map<name, {dtype, shape, data}>>, name without ".npy", data a
// Float32Array / Float64Array / Int32Array / BigInt64Array / Uint8Array. Entries may be
// stored (np.savez) or deflated (np.savez_compressed); sizes come from the central directory
// (np.savez writes local headers with ZIP64 placeholders), ZIP64 extra fields included.
//
//   import { readNpz } from "./npz.mjs";
//   const arrays = await readNpz(new Uint8Array(await (await fetch("m.onnx.state.npz")).arrayBuffer()));
//   arrays.get("state_in_pos")   // {dtype: "<i8", shape: [1], data: BigInt64Array [0n]}

const TYPED = {
  "<f4": Float32Array, "<f8": Float64Array, "<i4": Int32Array, "<i8": BigInt64Array,
  "|u1": Uint8Array, "<u1": Uint8Array, "|b1": Uint8Array,
};

function fail(message) {
  throw new Error(`npz: ${message}`);
}

// One .npy file: the magic, a version, a Python-dict header, then the raw little-endian data.
// A plain Uint8Array view of `bytes`: a Node Buffer is one too, but its slice() shares memory
// (and often a pooled ArrayBuffer), where a typed array's slice() copies.
function plain(bytes) {
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function readNpy(bytes) {
  bytes = plain(bytes);
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // "\x93NUMPY"
  if (bytes.length < 10 || magic.some((b, i) => bytes[i] !== b)) fail("not a .npy file");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const major = bytes[6];
  const headerLen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder("latin1").decode(bytes.subarray(start, start + headerLen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const fortran = /'fortran_order':\s*(True|False)/.exec(header)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  if (!descr || !fortran || shapeText === undefined) fail(`unreadable .npy header ${header}`);
  if (fortran === "True") fail("Fortran-ordered arrays are not supported");
  const Typed = TYPED[descr];
  if (!Typed) fail(`dtype ${descr} is not supported (${Object.keys(TYPED).join(", ")})`);
  const shape = shapeText.split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const offset = start + headerLen;
  const raw = bytes.slice(offset, offset + count * Typed.BYTES_PER_ELEMENT); // aligned copy
  if (raw.length !== count * Typed.BYTES_PER_ELEMENT) fail("truncated .npy data");
  return { dtype: descr, shape, data: new Typed(raw.buffer, 0, count) };
}

async function inflateRaw(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// The ZIP64 extended-information extra field (id 1) holds the 64-bit values whose 32-bit
// fields are 0xFFFFFFFF, in the order uncompressed size, compressed size, header offset.
function zip64(view, start, length, wanted) {
  let p = start;
  while (p + 4 <= start + length) {
    const id = view.getUint16(p, true);
    const size = view.getUint16(p + 2, true);
    if (id === 1) {
      const values = [];
      for (let q = p + 4; q + 8 <= p + 4 + size; q += 8) {
        values.push(Number(view.getBigUint64(q, true)));
      }
      return wanted.map((w, i) => (w === 0xffffffff ? values.shift() : w));
    }
    p += 4 + size;
  }
  return wanted;
}

export async function readNpz(bytes) {
  bytes = plain(bytes);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let eocd = -1;
  for (let p = bytes.length - 22; p >= Math.max(0, bytes.length - 22 - 65535); p--) {
    if (view.getUint32(p, true) === 0x06054b50) { eocd = p; break; }
  }
  if (eocd < 0) fail("not a zip archive (no end-of-central-directory record)");
  let entries = view.getUint16(eocd + 10, true);
  let dirOffset = view.getUint32(eocd + 16, true);
  if (dirOffset === 0xffffffff || entries === 0xffff) {   // a ZIP64 end record precedes it
    const locator = eocd - 20;
    if (view.getUint32(locator, true) !== 0x07064b50) fail("broken ZIP64 locator");
    const end64 = Number(view.getBigUint64(locator + 8, true));
    entries = Number(view.getBigUint64(end64 + 32, true));
    dirOffset = Number(view.getBigUint64(end64 + 48, true));
  }
  const out = new Map();
  let p = dirOffset;
  for (let i = 0; i < entries; i++) {
    if (view.getUint32(p, true) !== 0x02014b50) fail("broken central directory");
    const method = view.getUint16(p + 10, true);
    const nameLen = view.getUint16(p + 28, true);
    const extraLen = view.getUint16(p + 30, true);
    const commentLen = view.getUint16(p + 32, true);
    const name = new TextDecoder().decode(bytes.subarray(p + 46, p + 46 + nameLen));
    const [size, csize, local] = zip64(view, p + 46 + nameLen, extraLen, [
      view.getUint32(p + 24, true), view.getUint32(p + 20, true), view.getUint32(p + 42, true)]);
    if (view.getUint32(local, true) !== 0x04034b50) fail(`broken local header of ${name}`);
    const dataStart = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    const packed = bytes.subarray(dataStart, dataStart + csize);
    let raw;
    if (method === 0) raw = packed;
    else if (method === 8) raw = await inflateRaw(packed);
    else fail(`${name}: compression method ${method} is not supported (stored or deflate)`);
    if (raw.length !== size) fail(`${name}: expected ${size} bytes, got ${raw.length}`);
    out.set(name.replace(/\.npy$/, ""), readNpy(raw));
    p += 46 + nameLen + extraLen + commentLen;
  }
  return out;
}
