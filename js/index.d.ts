// One TypeScript definition for both backends of the npm package `tensorlane`:
// the N-API addon (Node, `exports.node`) and the wasm build (browsers, and Node as fallback).
// Both return identical results for the same input.
// Node: `import` (js/node.js) and `require('tensorlane')` (js/node.cjs; Node 20.19+ / 22.12+)
// give the same module, ready to use (both backends initialise synchronously). Browsers and
// bundlers: js/browser.js, ready after its top-level await; esbuild needs `tensorlane/esbuild`.

/** NumPy names of the dense dtypes. */
export type DType =
  | 'float32' | 'float64' | 'float16' | 'bfloat16'
  | 'int8' | 'int16' | 'int32' | 'int64'
  | 'uint8' | 'uint16' | 'uint32' | 'uint64'
  | 'bool' | 'complex64' | 'complex128';

/**
 * The TypedArray a dtype decodes to: float16/bfloat16 as raw Uint16Array bits (Float32Array with
 * `{widen: true}`), bool as Uint8Array (0 = false), complex as interleaved (re, im) floats,
 * 64-bit integers as BigInt64Array/BigUint64Array.
 */
export interface TypedArrayOf {
  float32: Float32Array; float64: Float64Array; float16: Uint16Array; bfloat16: Uint16Array;
  int8: Int8Array; int16: Int16Array; int32: Int32Array; int64: BigInt64Array;
  uint8: Uint8Array; uint16: Uint16Array; uint32: Uint32Array; uint64: BigUint64Array;
  bool: Uint8Array; complex64: Float32Array; complex128: Float64Array;
}

export type AnyTypedArray =
  | Int8Array | Uint8Array | Uint8ClampedArray | Int16Array | Uint16Array | Int32Array | Uint32Array
  | Float32Array | Float64Array | BigInt64Array | BigUint64Array;

/**
 * A dense tensor. `data` is a view on the caller's ArrayBuffer (`copied: false`) when the body
 * is uncompressed and its offset in that buffer is a multiple of the element size; otherwise
 * (misaligned, compressed, widened) a copy (`copied: true`). Views alias the input: keep the
 * input alive and unchanged as long as you use them.
 */
export interface DecodedDense<D extends DType = DType> {
  kind: 'dense';
  dtype: D;
  /** Outermost dimension first; [] for a scalar. */
  shape: number[];
  data: TypedArrayOf[D] | Float32Array;
  copied: boolean;
}

/**
 * A dict bundle. Entries keep wire order (duplicates kept); `get` returns the last value stored
 * under a key, as tenso does. Iterating yields `[key, value]` pairs.
 */
export declare class Bundle {
  readonly kind: 'bundle';
  entries: Array<[string, Decoded]>;
  constructor(entries: Array<[string, Decoded]>);
  get(key: string): Decoded | undefined;
  has(key: string): boolean;
  keys(): string[];
  readonly size: number;
  toObject(): Record<string, Decoded>;
  [Symbol.iterator](): Iterator<[string, Decoded]>;
}

interface SparseBase {
  kind: 'sparse';
  /** Logical (dense) shape, 2-D. */
  shape: number[];
  /** dtype of `data`. */
  dtype: DType;
  data: AnyTypedArray;
  /** dtypes of the two index arrays, in wire order. */
  indexDtypes: [DType, DType];
  /** True when any component is a copy. */
  copied: boolean;
}
export interface DecodedCoo extends SparseBase { format: 'coo'; row: AnyTypedArray; col: AnyTypedArray }
export interface DecodedCompressed extends SparseBase { format: 'csr' | 'csc'; indices: AnyTypedArray; indptr: AnyTypedArray }
export type DecodedSparse = DecodedCoo | DecodedCompressed;

export type QDType = 'qint8' | 'quint8' | 'qint4' | 'quint4';
export type QuantScheme = 'per_tensor' | 'per_channel' | 'per_group' | 'unknown';

/** A quantized tensor: `value = (q - zeroPoint) * scale` per slice. */
export declare class Quantized {
  readonly kind: 'quantized';
  qdtype: QDType;
  shape: number[];
  scheme: QuantScheme;
  /** The wire scheme byte (0 per-tensor, 1 per-channel, 2 per-group). */
  schemeCode: number;
  /** The channel axis as on the wire (tenso writes -1 as 255). */
  axis: number;
  groupSize: number;
  /** Copies (small). */
  scales: Float32Array;
  zeroPoints: Float32Array;
  /** Packed integers (4-bit: two per byte, low nibble first): a view on the input. */
  data: Uint8Array;
  copied: boolean;
  /** Dequantizes with tenso's float32 arithmetic (a new Float32Array). */
  dequantize(): Float32Array;
}

export interface DecodedStrings {
  kind: 'string';
  strings: string[];
}

export type Decoded = DecodedDense | Bundle | DecodedSparse | Quantized | DecodedStrings;

export interface DecodeOptions {
  /** Verify XXH3 footers where present (default true). */
  verifyIntegrity?: boolean;
  /** Refuse leaf packets without a footer (default false). */
  requireIntegrity?: boolean;
  /** Cap on one decompressed body, in bytes (default 4 GiB; the shape bounds it too). */
  maxDecompressedBytes?: number;
  /** Accept bytes after the packet (default true, as tenso). */
  allowTrailingBytes?: boolean;
  /** Read tenso 0.10 (version 2) packets (default false). */
  allowV2?: boolean;
  /** Refuse bundles with repeated keys (default false). */
  strictKeys?: boolean;
  /** Check sparse components for consistency and bounds (default true). */
  validateSparse?: boolean;
  /** Return float16/bfloat16 as a Float32Array copy instead of raw Uint16Array bits (default false). */
  widen?: boolean;
}

export interface EncodeOptions {
  /** Append XXH3 footers (default false). */
  integrity?: boolean;
  /** LZ4-compress dense bodies (default false). */
  compress?: boolean;
  /** Body alignment, a power of two up to 1 MiB (default 64). */
  alignment?: number;
  /** Apply `compress` to dense leaves inside bundles (default true; tenso 0.24 cannot read those). */
  compressInContainers?: boolean;
  /** Store incompressible bodies uncompressed (default false). */
  skipIncompressible?: boolean;
  /** Footers on sparse components when `integrity` is set (default false, as tenso). */
  sparseIntegrity?: boolean;
}

/** A dense tensor to encode; `dtype` defaults to the TypedArray's, `shape` to `[length]`. */
export interface DenseInput {
  kind?: 'dense';
  dtype?: DType;
  shape?: ArrayLike<number>;
  /** Little-endian element bytes of `dtype` (any TypedArray, DataView or ArrayBuffer). */
  data: AnyTypedArray | DataView | ArrayBuffer;
}

export interface SparseInput {
  kind: 'sparse';
  format: 'coo' | 'csr' | 'csc';
  shape: ArrayLike<number>;
  dtype?: DType;
  data: AnyTypedArray;
  row?: AnyTypedArray; col?: AnyTypedArray;
  indices?: AnyTypedArray; indptr?: AnyTypedArray;
  indexDtypes?: [DType, DType];
}

export interface QuantizedInput {
  kind: 'quantized';
  qdtype: QDType;
  shape: ArrayLike<number>;
  scheme?: QuantScheme;
  schemeCode?: number;
  axis?: number;
  groupSize?: number;
  scales: Float32Array | ArrayLike<number>;
  zeroPoints: Float32Array | ArrayLike<number>;
  data: AnyTypedArray | ArrayBuffer;
}

export interface StringsInput { kind: 'string'; strings: string[] }

/**
 * What `encode` accepts: a TypedArray, a dense/sparse/quantized/string description (including
 * anything `decode` returned), or a bundle: a `Bundle`, a `Map`, or a plain object whose own
 * entries are values. (Use a Map for a bundle whose keys look like a dense tensor's fields.)
 */
export type EncodeInput =
  | AnyTypedArray | DenseInput | SparseInput | QuantizedInput | StringsInput | Decoded
  | Bundle | Map<string, EncodeInput> | { [key: string]: EncodeInput };

/** Decodes one packet. Throws a TensorlaneError (message with the byte offset) on bad input. */
export declare function decode(bytes: Uint8Array | ArrayBuffer | ArrayBufferView, options?: DecodeOptions): Decoded;

/** Encodes a value into a new packet. */
export declare function encode(value: EncodeInput, options?: EncodeOptions): Uint8Array;

export interface StreamLimits {
  /** Largest packet accepted (default 1 GiB). */
  maxPacketBytes?: number;
  /** Most bytes held at once (default 1 GiB + 64 KiB). */
  maxBufferedBytes?: number;
}

/** Frames packets written back to back (tenso's write_stream format). */
export declare class StreamDecoder {
  constructor(limits?: StreamLimits);
  /** Adds received bytes (any chunking; copied into the framer). */
  push(chunk: Uint8Array | ArrayBuffer | ArrayBufferView): void;
  /** The next whole packet (a new Uint8Array), or null until enough bytes arrived. */
  next(): Uint8Array | null;
  /** Bytes held and not yet returned. */
  readonly buffered: number;
  /** Yields every whole packet of an (async) iterable of chunks. */
  packets(source: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): AsyncGenerator<Uint8Array>;
}

/** Decodes every packet of an (async) iterable of chunks. */
export declare function decodeStream(
  source: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  options?: DecodeOptions & StreamLimits,
): AsyncGenerator<Decoded>;

/** Widens raw float16/bfloat16 bits to a new Float32Array. */
export declare function widen(dtype: 'float16' | 'bfloat16', bits: Uint16Array): Float32Array;

/**
 * An error from the codec, the `.zt` reader or a model-format reader. `offset` is the byte offset
 * where the problem is (when known).
 */
export declare class TensorlaneError extends Error {
  offset: number | undefined;
  /** Model formats: the format that refused the file (`'safetensors'`, `'gguf'`, ...; `'formats'` when none matched). */
  format?: string;
  /** Model formats: what went wrong, as a stable category. */
  kind?: FormatErrorKind;
  /** Model formats: the tensor concerned, when known. */
  tensor?: string;
  /** Bundle keys / sparse component names leading to the fault ('' at top level). */
  path: string;
  /** `.zt` errors: the spec's rule name (`'BlobAlignment'`, `'Digest'`, ...; `'Unsupported'`, `'NotFound'` for non-rejections). */
  rule?: string;
  /** `.zt` errors: the object and part concerned, when the message names them. */
  object?: string;
  part?: string;
}

/** dtype -> TypedArray constructor. */
export declare const DTYPES: { readonly [D in DType]: { new (buffer: ArrayBufferLike, byteOffset?: number, length?: number): TypedArrayOf[D]; BYTES_PER_ELEMENT: number } };

/** Input bytes the last decode copied into wasm memory (headers only for dense packets; 0 for the addon). */
export declare function copiedBytes(): number;

/** 'addon' or 'wasm'. */
export declare const backendName: 'addon' | 'wasm';

/** This build's version, `tensorlane X.Y.Z`: one version for the package, its wasm, its addon and the `tensorlane` binary. */
export declare const version: string;

// ---------------------------------------------------------------------------------------------
// Model formats: one open() for safetensors (+ shard index), GGUF (+ splits), PyTorch, NumPy,
// ONNX (+ external data), HDF5, .zt v2 (+ shards), legacy .zt and Tenso packet files

/** The formats `open()` reads (as a reader's `format` names them; `zt-v1`/`zt-v0`: legacy `.zt` v1.2/v0.1). */
export type ModelFormat = 'safetensors' | 'safetensors-index' | 'gguf' | 'pt' | 'pt-legacy' | 'npy' | 'npz' | 'onnx' | 'hdf5' | 'zt' | 'zt-v1' | 'zt-v0' | 'tenso';

/** Categories of model-format errors (the core's `ErrorKind`, plus `not-found` for an unknown tensor name). */
export type FormatErrorKind =
  | 'truncated' | 'header-too-large' | 'syntax' | 'unsupported-version' | 'unsupported' | 'out-of-bounds'
  | 'overlap' | 'gap' | 'size-mismatch' | 'duplicate' | 'overflow' | 'limit' | 'refused' | 'companion'
  | 'checksum' | 'io' | 'not-found'
  /** open(url) only (see {@link HttpError}). */
  | 'http' | 'network' | 'range' | 'changed' | 'url';

/**
 * Element type names: the dense dtypes, the 1-byte float8 types and packed float4 (raw bytes), or
 * for GGUF block-quantized tensors the ggml type name (`'Q4_0'`, `'Q6_K'`, `'IQ2_XS'`, ...).
 */
export type ModelElementType =
  | DType | 'float8_e4m3fn' | 'float8_e5m2' | 'float8_e4m3fnuz' | 'float8_e5m2fnuz' | 'float8_e8m0fnu' | 'float4_e2m1fn'
  | (string & {});

/**
 * A metadata or attribute value. Integers beyond 2^53 are BigInts, non-finite floats NaN/±Infinity,
 * byte strings that are not UTF-8 a Uint8Array.
 */
export type MetaValue = null | boolean | number | bigint | string | Uint8Array | MetaValue[] | { [key: string]: MetaValue };

/** One part of a tensor stored as parts (`TensorLayout.parts`). */
export interface TensorPart {
  /** The part's name (`data`, `indptr`, `values`, `scale`, ...). */
  name: string;
  /** Its element type as read (a dtype; the file's type name when this reader does not know it). */
  dtype: string;
  /** The type as the file names it (`f32`, `u64`, `bool`, ...). */
  type: string;
  /** Decoded bytes. */
  length: number;
  /** Where its bytes are (`{kind: 'range' | 'encoded', source, offset, length, ...}`). */
  storage: { kind: string; source?: string; offset?: number; length?: number; decoded?: number; codec?: string };
}

/** Where a tensor's bytes are and how they are laid out. */
export interface TensorLayout {
  /**
   * `range`: bytes of a file; `deflate`: inside a deflated zip member; `inline`: decoded at open
   * (ONNX typed fields, HDF5 compact); `chunked`: HDF5 chunks; `encoded`: stored under a codec
   * (`.zt` zstd-seekable, legacy `.zt` zstd, Tenso LZ4), decoded when read; `parts`: several
   * parts under a layout (`.zt` sparse, group-quantized, MX objects): read each with `part()`.
   */
  storage: 'range' | 'deflate' | 'inline' | 'chunked' | 'encoded' | 'parts';
  /** The file: `''` is the opened one, others are companions (`sources`). */
  source?: string;
  /** Byte offset and stored length in that file (range, deflate). */
  offset?: number;
  length?: number;
  /** deflate: inflated size of the member, and where the tensor starts in it. */
  inflated?: number;
  skip?: number;
  /** encoded: the codec (`zt.zstd-seekable/1`, `zstd`, `lz4`) and the decoded length. */
  codec?: string;
  decoded?: number;
  /** parts: the layout id (`zt.sparse_csr/1`, `zt.quant_group/1`, ...) and the parts. */
  layoutId?: string;
  parts?: TensorPart[];
  /** The stored bytes are the tensor (C order, little-endian): tensor() can be a view. */
  zeroCopy: boolean;
  /** Stored big-endian (swapped on read). */
  bigEndian: boolean;
  /** A strided view (PyTorch views, Fortran order), in elements. */
  view?: { offset: number; strides: number[] };
}

/** GGUF tensors: the ggml type. */
export interface GgmlInfo {
  /** The `GGML_TYPE_*` id. */
  type: number;
  name: string;
  /** Block-quantized (read values with dequantize()). */
  quantized: boolean;
  /** Elements and bytes per block. */
  blockSize: number | null;
  typeSize: number | null;
}

/** One tensor of a model, as listed at open (nothing read yet). */
export interface TensorEntry {
  name: string;
  dtype: ModelElementType;
  /** Row-major; [] for a scalar. */
  shape: number[];
  /** Bytes of the tensor in C order (packed float4: half the element count; GGUF blocks: the block bytes); null on overflow. */
  nbytes: number | null;
  layout: TensorLayout;
  /**
   * Per-tensor details of the source format (stored dtype, strides, shard, filters, GGUF offsets,
   * ...). `.zt`: `layout` (the layout id), `parts` (`{name: {dtype, type?, offset, length, shard?,
   * encoding?, decoded_length?, digest?}}`) and the object's own `attributes`.
   */
  attributes: Record<string, MetaValue>;
  ggml?: GgmlInfo;
}

/** What a Node path, an http(s) URL, bytes or a Blob can be: the first argument of open() and a companion. */
export type ModelSource = string | URL | Blob | Uint8Array | ArrayBuffer | ArrayBufferView;

export interface OpenOptions {
  /** Force a format instead of detecting it by content. */
  format?: ModelFormat;
  /**
   * Companion files by the name the model gives them (or their base name): safetensors shards,
   * .zt shards (by the file names `<stem>-<name>.zt`, `<name>`, `<name>.zt`), GGUF splits, ONNX
   * external data. For a Node path they are otherwise found in the model's folder, for a URL
   * next to it. A `.zt` shard found nowhere leaves the file open; its tensors fail with kind
   * `'companion'` when read.
   * Names that would leave that folder are refused by the reader before they are asked for.
   */
  companions?: Record<string, ModelSource>;
  /** The file name of bytes (GGUF split sets are named after the first file). */
  name?: string;
  /**
   * Bound on fetch-and-parse rounds per open() or tensor() (default 4096): each round parses
   * with the bytes fetched so far and fetches the first missing range.
   */
  maxRounds?: number;
  /**
   * The most bytes one whole-tensor read (tensor(), dequantize(), and values() of a tensor not
   * stored as-is) may allocate, for every tensor of this reader unless the call gives its own
   * (default 4 GiB, as the CLI's --max-tensor-bytes and Rust's `ReadLimits`). A tensor whose
   * whole read needs more (a zip member that declares a huge array included) is refused with a
   * TensorlaneError of kind 'limit' that names the tensor, the size and this option, before
   * anything is allocated. stats(), readBytes() and values() of a tensor stored as-is read in
   * slices and are not limited; neither are views on bytes in memory or a mapped path. A Node
   * path read whole (a file opened with `{format}` or `{companions}`, an ONNX model for graph();
   * not `{mmap: true}`) is refused over it the same way. A RangeError when not a non-negative
   * safe integer.
   */
  maxTensorBytes?: number;
  /**
   * Node path, addon backend: map the file (private copy-on-write) instead of reading it, so that
   * tensors stored as-is are zero-copy views on the mapping. Default false: the file is read with
   * pread by the native host, tensor by tensor, and a file truncated or
   * rewritten while it is read gives a TensorlaneError. With `mmap: true` the caller promises
   * that the file stays as it is while the reader and its views live (publish files by writing
   * beside them and renaming): a mapping handed to JavaScript can have no guard, and a file
   * truncated underneath kills the process with SIGBUS when a missing page is touched.
   * Ignored by the wasm backend, which always reads.
   */
  mmap?: boolean;
  /** Called after every read while listing or reading a tensor. */
  onProgress?: (p: { phase: 'open' | 'tensor'; bytesRead: number; reads: number }) => void;
  // --- open(url) only (HTTP Range reads through fetch; companions are fetched as sibling URLs)
  /** Ranged GETs in flight per file (default 8). */
  concurrency?: number;
  /** Reads longer than this are split into parallel ranged GETs of this size (default 8 MiB). */
  partBytes?: number;
  /** Bytes of the first ranged GET, which also gives the length and ETag (default 64 KiB). */
  probeBytes?: number;
  /** Retries per request on 5xx/429 and network errors, with backoff 100 ms, 200 ms, ... (default 4). */
  retries?: number;
  /** Send the open-time ETag as If-Match (default true; the response's ETag is compared either way). */
  ifMatch?: boolean;
  /** fetch's credentials mode (default 'same-origin'). */
  credentials?: 'omit' | 'same-origin' | 'include';
  /** Aborts every request of this reader. */
  signal?: AbortSignal;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: typeof fetch;
}

/**
 * Errors of open(url) are TensorlaneErrors with `format: 'http'`, `kind` (`'http'`, `'network'`,
 * `'range'`: the server does not do Range right, `'changed'`: the object was replaced while read,
 * `'url'`), the `url`, the HTTP `status` when there was one and the byte `offset` of the read.
 */
export interface HttpError extends TensorlaneError {
  format: 'http';
  kind: 'http' | 'network' | 'range' | 'changed' | 'url';
  url: string;
  status?: number;
}

interface ModelReaderBase {
  readonly format: ModelFormat;
  /** Every tensor, in file order (a shard index: the index's order). */
  readonly tensors: TensorEntry[];
  /** File-level metadata: safetensors `__metadata__`, GGUF key/values, ONNX model fields, HDF5 root attributes, ... */
  readonly metadata: Record<string, MetaValue>;
  /** Entries that are not tensors, and why (HDF5 string datasets, pickle leaves, ...). */
  readonly skipped: { name: string; reason: string }[];
  /** The files the model reads: `''` (the opened file), then companions relative to it. */
  readonly sources: string[];
  /** Bytes read so far and in how many reads: what open() and tensor() handed to the parsers, plus tensors read from Blobs or files (views on memory are not counted; 0 for a path the addon opens: its host maps the file and reads nothing itself). */
  readonly bytesRead: number;
  readonly reads: number;
  /** Tensor names in file order. */
  keys(): string[];
  /** The listing entry of a tensor (throws a TensorlaneError with kind `'not-found'`, or `'unsupported'` with the reason for a skipped entry). */
  info(name: string): TensorEntry;
  /** Frees the backend's session (wasm memory) and closes file descriptors. */
  close(): void;
  /**
   * A tensor's stored bytes (C order, little-endian) by range: straight from a Blob or file, one
   * read per call; views on memory or a mapping; a tensor that must be decoded first is decoded
   * once. `read` gives a Promise for a Blob source.
   */
  byteReader(name: string): { length: number; lazy: boolean; read(offset: number, length: number): Uint8Array | Promise<Uint8Array> };
  /** The computation graph of an ONNX model (other formats throw, kind `'unsupported'`); a Promise for a Blob source. */
  graph(): OnnxGraph | Promise<OnnxGraph>;
}

/** A graph input or output: its ONNX element type name (`FLOAT`, ...) and shape (numbers, symbolic names, null for unknown; null when not given). */
export interface OnnxValueInfo {
  name: string;
  elem_type: string;
  shape: (number | string | null)[] | null;
}

/** A node of an ONNX graph; attributes are summarised (`kind` as `onnx.AttributeProto` names it in lower case, `summary` a short text of the value). */
export interface OnnxNode {
  name: string;
  op_type: string;
  /** '' is the default domain (ai.onnx). */
  domain: string;
  inputs: string[];
  outputs: string[];
  attributes: { name: string; kind: string; summary: string }[];
}

/** The main graph of an ONNX model (`reader.graph()`), read by the core (`tensorlane_core::formats::onnx_graph`). */
export interface OnnxGraph {
  name: string;
  ir_version: number;
  producer_name: string;
  producer_version: string;
  /** domain -> version (the default domain is `ai.onnx`). */
  opset_import: Record<string, number>;
  inputs: OnnxValueInfo[];
  outputs: OnnxValueInfo[];
  /** Initializer names in file order. */
  initializers: string[];
  /** Nodes in file (topological) order. */
  nodes: OnnxNode[];
}

/** One tensor present in both models with the same element count, compared value by value (float64 of each side, non-finite pairs left out). */
export interface TensorDiff {
  name: string;
  /** `dtypeA` or `'A → B'` when they differ. */
  dtype: string;
  dtypeA: string;
  dtypeB: string;
  shape: number[];
  /** Value pairs (finite or not). */
  count: number;
  /** Pairs where a or b is NaN or ±Inf. */
  nonfinite: number;
  /** max |a - b| */
  maxAbs: number;
  /** mean |a - b| */
  meanAbs: number;
  /** ‖a − b‖ / ‖a‖ (0 when both are 0, Infinity when only ‖a‖ is). */
  relL2: number;
  /** a·b / (‖a‖‖b‖) (NaN when a norm is 0). */
  cosine: number;
  normA: number;
  normB: number;
  normDiff: number;
}

/** What compare() finds. */
export interface CompareResult {
  onlyA: { name: string; dtype: string; shape: number[]; nbytes: number }[];
  onlyB: { name: string; dtype: string; shape: number[]; nbytes: number }[];
  /** Tensors in both whose dtype or shape differ (still compared when the element counts agree). */
  changed: { name: string; a: { dtype: string; shape: number[] }; b: { dtype: string; shape: number[] }; dtypeChanged: boolean; shapeChanged: boolean }[];
  /** Compared tensors, largest change first (relative L2, then max |a-b|). */
  tensors: TensorDiff[];
  /** Tensors that could not be compared (an element type without values, a read error). */
  errors: { name: string; kind: string; message: string }[];
  bytesCompared: number;
  summary: { tensorsA: number; tensorsB: number; common: number; compared: number; changed: number; onlyA: number; onlyB: number; errors: number };
}

/** Options of compare(). */
export interface CompareOptions {
  /** Bytes of the wider tensor read at a time (default 4 MiB). */
  chunkBytes?: number;
  onProgress?: (p: { phase: 'compare'; tensor: string | null; tensorsDone: number; tensorsTotal: number; bytesDone: number; bytesTotal: number }) => void;
  /** Stops the comparison between slices (the Promise rejects with the signal's reason or an AbortError). */
  signal?: AbortSignal;
}

/**
 * Statistics of one tensor, the same names and numbers on the addon and the wasm build (the core's
 * `tensorlane_core::stats`). Every element becomes one float64 value as `numpy.astype(float64)`
 * makes it (complex: its real and imaginary parts, two values; GGUF blocks: their dequantized
 * float32 values). `min`, `max`, `mean` and `std` (population, ddof 0) are over the finite values
 * (NaN when there is none); `zeros` counts +0 and -0. The histogram is exactly
 * `numpy.histogram(finite, bins, range=(min, max))` (`[0, 1]` with all counts 0 when nothing is
 * finite; `min == max` widens to ±0.5 as NumPy does): `edges` has `bins + 1` entries, the last bin
 * is closed.
 */
export interface TensorStats {
  name: string;
  dtype: string;
  shape: number[];
  /** Values (finite or not). */
  count: number;
  /** Values that are neither NaN nor ±Inf. */
  finite: number;
  min: number;
  max: number;
  mean: number;
  std: number;
  zeros: number;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  histogram: { edges: Float64Array; counts: number[] };
}

/** Options of stats(). */
export interface StatsOptions {
  /** Histogram bins (default 64; at most 2^20). */
  bins?: number;
  /**
   * Bytes read and fed at a time (default 4 MiB): from a Blob each slice is one `blob.slice`, so
   * a tensor of any size is never held whole (a tensor that must be decoded first, inflated or
   * gathered, is read whole as by tensor()).
   */
  chunkBytes?: number;
  /** Called after each slice: pass 1 (`'summary'`) then pass 2 (`'histogram'`); `bytesDone` counts up to `bytesTotal`, twice the tensor's bytes. */
  onProgress?: (p: { phase: 'summary' | 'histogram'; bytesDone: number; bytesTotal: number }) => void;
  /** Stops between slices with the signal's reason (an AbortError) once aborted (the native path over a Node path runs to the end). */
  signal?: AbortSignal;
  /** Slices requested ahead of the one being summed (default 4): a Blob or URL reads while the core works. */
  readAhead?: number;
  /**
   * Over HTTP, the most bytes of the tensor (or span) that pass 1 keeps in memory for pass 2, so
   * each byte is fetched once (default 512 MiB; 0: fetch twice, hold nothing).
   */
  keepBytes?: number;
}

/** One part of a tensor's stored bytes for statistics in parts (`statsSpans`). */
export interface StatsSpan {
  /** First byte, from the start of the tensor's stored bytes. */
  offset: number;
  /** Length in bytes (a whole number of elements and ggml blocks). */
  bytes: number;
  /** Elements in it. */
  elements: number;
}

/**
 * What verify() found: every checksum the file carries (`checks`) matched and every tensor
 * (`tensors`) read in full. A `.zt` v2 file is checked by the container's deep verify (every
 * rule, layout profile, part and shard digest) and adds its report.
 */
export interface VerifyReport {
  format: ModelFormat;
  checks: number;
  tensors: number;
  /** `.zt` v2: parts whose digest matched, parts without one (content rules still checked), shards whose digest matched. */
  partsDigestChecked?: number;
  partsWithoutDigest?: number;
  shardsChecked?: number;
  /** `.zt` v2: [object, part] pairs in shards that were not found (not checked). */
  unresolved?: [string, string][];
  /** `.zt` v2: a manifest-less data shard (no tensors). */
  dataShard?: boolean;
}

/** The summary of a tensor's statistics (pass 1): TensorStats' numbers, `null` for min, max, mean and std when no value is finite. */
export interface StatsSummary {
  count: number;
  finite: number;
  min: number | null;
  max: number | null;
  mean: number | null;
  std: number | null;
  zeros: number;
  nan: number;
  pos_inf: number;
  neg_inf: number;
}

/** Options of one pass over one span (`statsSummaryPart`, `statsHistogramPart`); `onProgress` counts that span's bytes. */
export interface StatsPartOptions extends Omit<StatsOptions, 'onProgress'> {
  onProgress?: (p: { phase: 'summary' | 'histogram'; bytesDone: number; bytesTotal: number }) => void;
}

/** Options of ModelReader.tensor() and dequantize(). */
export interface TensorReadOptions {
  /** float16/bfloat16 as float32 values instead of raw Uint16Array bits. */
  widen?: boolean;
  /** This read's limit on the bytes it allocates (default: open()'s `maxTensorBytes`, else 4 GiB). */
  maxTensorBytes?: number;
}

/**
 * A model over bytes in memory or a Node path (the addon opens the file with the native host,
 * `tensorlane::model::Model`, which reads it with pread, and with `{mmap: true}` views zero-copy
 * tensors on a mapping of it; the wasm build reads it on demand): everything is synchronous (`lazy` is true only when a companion is a Blob).
 */
export interface ModelReader extends ModelReaderBase {
  readonly lazy: boolean;
  /**
   * The tensor's values (C order, little-endian): a view on the caller's bytes or the mapped file
   * (`{mmap: true}`) when they are stored that way and aligned, else a copy. Types as `decode` (float16/bfloat16
   * raw Uint16Array bits unless `{widen: true}`); float8/float4 and GGUF blocks as raw Uint8Array.
   * A copy over `maxTensorBytes` (this call's, else open()'s, default 4 GiB) throws a
   * TensorlaneError of kind 'limit' before it is allocated (see OpenOptions.maxTensorBytes).
   */
  tensor(name: string, options?: TensorReadOptions): AnyTypedArray;
  /**
   * float32 values: GGUF blocks dequantized (as `gguf.quants.dequantize`), others converted. The
   * stored tensor is read whole first, under `maxTensorBytes` as tensor().
   */
  dequantize(name: string, options?: Pick<TensorReadOptions, 'maxTensorBytes'>): Float32Array;
  /** Statistics of a tensor (two passes over its stored bytes; see TensorStats). */
  stats(name: string, options?: StatsOptions): TensorStats;
  /** Stored bytes [offset, offset + length) of a tensor stored as-is (`layout.zeroCopy`); other layouts throw. */
  readBytes(name: string, offset?: number, length?: number): Uint8Array;
  /**
   * A tensor stored as-is cut into at most `parts` spans for statistics in parts (one per
   * Worker): run statsSummaryPart on each, mergeSummaries, statsHistogramPart on each with that
   * summary, then mergeStats. The result is stats()'s (counts, min, max and histogram exactly,
   * mean and std to rounding). Other layouts throw (use stats()).
   */
  statsSpans(name: string, parts: number): StatsSpan[];
  /** Pass 1 over one span: the part's state (10 numbers; postMessage copies it exactly) for mergeSummaries. */
  statsSummaryPart(name: string, span: StatsSpan, options?: StatsPartOptions): Float64Array;
  /** Pass 2 over one span: its finite values in `bins` bins over the merged summary's [min, max], for mergeStats. */
  statsHistogramPart(name: string, span: StatsSpan, summary: StatsSummary, options?: StatsPartOptions): { edges: Float64Array; counts: number[] };
  /**
   * Part `part` of a tensor stored as parts (`layout.storage === 'parts'`: a `.zt` sparse,
   * group-quantized or MX object) as a TypedArray of the part's dtype (raw Uint8Array for a type
   * without one), decoded and checked against its digest, under `maxTensorBytes`. Other tensors
   * and unknown parts throw (kind `'unsupported'`).
   */
  part(name: string, part: string, options?: Pick<TensorReadOptions, 'maxTensorBytes'>): AnyTypedArray;
  /** Checks the whole file (see VerifyReport); throws the first failure (`.zt`: with its `rule`). */
  verify(): VerifyReport;
  /**
   * Elements [start, start + count) as numbers, reading only their bytes when the tensor is stored
   * as-is (GGUF: the blocks around them, dequantized): float16/bfloat16/float8/float4 decoded,
   * integers and bools as numbers. Float64Array for float64 and 32/64-bit integers, else
   * Float32Array. Complex tensors throw.
   */
  values(name: string, start?: number, count?: number): Float32Array | Float64Array;
}

/** A model over a Blob/File: open read only header-like bytes; each tensor is read when asked for. */
export interface ModelBlobReader extends ModelReaderBase {
  readonly lazy: true;
  /** As ModelReader.tensor; over `maxTensorBytes` the Promise rejects (kind 'limit') before the read. */
  tensor(name: string, options?: TensorReadOptions): Promise<AnyTypedArray>;
  /** As ModelReader.dequantize, under `maxTensorBytes`. */
  dequantize(name: string, options?: Pick<TensorReadOptions, 'maxTensorBytes'>): Promise<Float32Array>;
  /** Statistics of a tensor, reading it in `chunkBytes` slices twice (never whole; see StatsOptions). */
  stats(name: string, options?: StatsOptions): Promise<TensorStats>;
  /** As ModelReader.readBytes: one slice of the Blob, or ranged GETs of a URL. */
  readBytes(name: string, offset?: number, length?: number): Promise<Uint8Array>;
  /** As ModelReader.statsSpans. */
  statsSpans(name: string, parts: number): StatsSpan[];
  /** As ModelReader.statsSummaryPart, reading the span in `chunkBytes` slices. */
  statsSummaryPart(name: string, span: StatsSpan, options?: StatsPartOptions): Promise<Float64Array>;
  /** As ModelReader.statsHistogramPart. */
  statsHistogramPart(name: string, span: StatsSpan, summary: StatsSummary, options?: StatsPartOptions): Promise<{ edges: Float64Array; counts: number[] }>;
  /** As ModelReader.values, reading only the bytes of those elements. */
  values(name: string, start?: number, count?: number): Promise<Float32Array | Float64Array>;
  /** As ModelReader.part: only that part's bytes are read. */
  part(name: string, part: string, options?: Pick<TensorReadOptions, 'maxTensorBytes'>): Promise<AnyTypedArray>;
  /** As ModelReader.verify; the Blob or URL is read whole for it. */
  verify(): Promise<VerifyReport>;
}

/**
 * Opens a model file of any supported format, detected by content: safetensors (and a
 * `model.safetensors.index.json` with its shards), GGUF (and its splits), PyTorch (zip and
 * legacy; nothing is executed), `.npy`/`.npz`, ONNX (and external data), HDF5, `.zt` v2 (and its
 * shards), legacy `.zt` v1.2/v0.1, or a Tenso packet file: one reader for all of them. Only the
 * bytes the format's reader asks for are read: a Blob of any size lists from its header. A path
 * or bytes give a reader at once; a Blob gives a Promise of a lazy reader. Errors are
 * TensorlaneErrors with `format`, `kind`, `offset` and `tensor` (`.zt`: `rule`, `object`, `part`).
 */
export declare function open(source: Blob, options?: OpenOptions): Promise<ModelBlobReader>;
/**
 * A file on an HTTP(S) server (in a browser any string, resolved against the page), read with
 * Range requests: one ranged GET of the first 64 KiB gives length, ETag and the header, then only
 * what the reader asks for, in parallel parts, retried on 5xx/network errors, each checked against
 * the ETag. Companions (shards, GGUF splits, ONNX external data, .zt shards) are the URLs next to it.
 */
export declare function open(source: URL | `http://${string}` | `https://${string}`, options?: OpenOptions): Promise<ModelBlobReader>;
/** A Node path or bytes: synchronous. */
export declare function open(source: string | Uint8Array | ArrayBuffer | ArrayBufferView, options?: OpenOptions): ModelReader;

/**
 * Statistics of values in memory, as `reader.stats()` gives them: `data` holds `dtype` elements
 * as tensor() returns them (float16/bfloat16 as raw Uint16Array bits, float8 as bytes, float4 two
 * per byte; `dtype` is inferred from a Float32Array, Int8Array, ... when omitted); `shape`
 * defaults to `[data.length]` and must match the bytes.
 */
export declare function stats(
  tensor: { dtype?: string; shape?: number[]; data: ArrayBufferView; name?: string },
  options?: Pick<StatsOptions, 'bins' | 'chunkBytes' | 'onProgress'>,
): TensorStats;

/**
 * The summary of the parts `statsSummaryPart` gave for the spans of one tensor, merged in span
 * order (the core's StatsPart merge). A part no pass could have made is a TensorlaneError of
 * kind 'syntax' naming the part and the rule it breaks.
 */
export declare function mergeSummaries(parts: Float64Array[]): StatsSummary;

/**
 * What stats() gives, from the tensor's info (`reader.info(name)`), the merged summary and the
 * spans' histograms (their counts added; different edges are a RangeError).
 */
export declare function mergeStats(
  tensor: { name: string; dtype: string; shape: number[] },
  summary: StatsSummary,
  histograms: { edges: Float64Array | number[]; counts: number[] }[],
): TensorStats;

/**
 * Compares two models tensor by tensor: names only in A or B, changed dtype/shape, and max/mean
 * |a-b|, relative L2 and cosine of every tensor both hold (the core's DiffAccumulator over both
 * stored byte streams, read in `chunkBytes` slices: never whole).
 */
export declare function compare(a: ModelReader | ModelBlobReader, b: ModelReader | ModelBlobReader, options?: CompareOptions): Promise<CompareResult>;

/** Element type names of `.zt` objects: the dense dtypes, FP8/FP4 (raw bytes) or an unknown logical type. */
export type ZtElementType = DType | 'float8_e4m3fn' | 'float8_e5m2' | 'float8_e4m3fnuz' | 'float8_e5m2fnuz' | 'float8_e8m0fnu' | 'float4_e2m1fn' | (string & {});

/** What `writeZt` accepts per object. */
export type ZtEntry =
  | AnyTypedArray
  | { dtype?: ZtElementType; shape?: number[]; data: AnyTypedArray | ArrayBuffer; attributes?: Record<string, unknown> }
  | { layout: string; shape: number[]; attributes?: Record<string, unknown>; parts: Record<string, { dtype?: ZtElementType; type?: string; data: AnyTypedArray | ArrayBuffer }> };

/** Writes a `.zt` v2 file (canonical form by default: byte-identical to the reference writer) and returns its bytes; read it back with open(). */
export declare function writeZt(
  entries: Record<string, ZtEntry> | Map<string, ZtEntry> | [string, ZtEntry][],
  options?: { canonical?: boolean; attributes?: Record<string, unknown> },
): Uint8Array;

/** Progress of `run()` while it reads the resident weights onto the device. */
export interface RunProgress {
  phase: 'load';
  /** Bytes read so far. */
  loaded: number;
  /** Bytes to read before generation can start (vectors, embedding, resident rows). */
  total: number;
}

/** Options of `run()`. */
export interface RunOptions {
  /** Device bytes for the weights, KV cache, norms and activations (absent: every weight resident). Below the plan's minimum: a RunError with code 'budget' and `minimum`. */
  budget?: number;
  /** KV cache positions (default: the model's training context, at most 4096). */
  context?: number;
  /** Offload policy under a budget: 'scheduler' (default), 'all-resident', 'sync-jit', 'full-offload', 'flexgen-like'. */
  policy?: string;
  /** Browser: 'auto' (the default: WebGPU on a hardware adapter, else the wasm CPU executor), 'webgpu', or 'wasm' (tensorlane-llm's CPU executor in wasm, one thread, simd128). Node: 'cpu' (the default; the addon's CPU executor, the only device there). */
  device?: 'auto' | 'webgpu' | 'wasm' | 'cpu';
  onProgress?: (p: RunProgress) => void;
  /** Bind each weight in parts of at most this many bytes (default and ceiling: the adapter's maxStorageBufferBindingSize, the limit a weight over it is split by). Browser only. */
  bindLimit?: number;
  /** Worker threads of the CPU executor (default: the available parallelism). Node only. */
  threads?: number;
  /** How the KV cache keeps keys and values: 'f16' (the CPU executors' default, as `tensorlane run`), 'f32', or 'q8_0' (llama.cpp's: 8 bits per value and a scale per 32, about half of f16; for models whose attention heads are a multiple of 32 wide). WebGPU keeps 'f32' only: another type sends 'auto' to wasm and is refused under 'webgpu'. */
  cacheType?: RunCacheType;
}

/** A KV cache type of `RunOptions.cacheType`. */
export type RunCacheType = 'f16' | 'f32' | 'q8_0';

/** Sampling of `RunSession.generate()`; greedy by default (the same sampler as `tensorlane run`). */
export interface RunSampling {
  /** 0 (default): greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
  /** Tokens to generate at most (default 64). */
  maxTokens?: number;
  /** Stop after an end-of-generation token (default true; the token is still yielded). */
  stopAtEog?: boolean;
  /** Called as each streamed weight is written into its slot of the plan's ring (`slot`: byte offset in the ring). Browser only. */
  onStream?: (s: { tensor: string; slot: number; bytes: number }) => void;
}

/** One generated token. */
export interface RunToken {
  id: number;
  /** The token's bytes (possibly part of a UTF-8 character). */
  piece: Uint8Array;
  /** The text completed by this token (a streaming UTF-8 decode of the pieces). */
  text: string;
}

/** The figures of the last `generate()`. */
export interface RunStats {
  promptTokens: number[];
  tokens: number[];
  text: string;
  prefillTokens: number;
  prefillS: number;
  prefillTokensPerS: number;
  decodeTokens: number;
  decodeS: number;
  decodeTokensPerS: number;
  /** Forward passes (a prefill of more than 32 tokens takes several). */
  passes: number;
  /** Weight bytes written into the ring: passes x the plan's streamed bytes. */
  streamedBytes: number;
  /** Bytes fetched from the source during generation (network bytes for a URL; in Node the streamed bytes, copied from the model's mapped pages). */
  fetchedBytes: number;
  /** Seconds spent recording passes on the CPU (waits for streamed weights included). Browser only. */
  encodeS?: number;
  /** Seconds spent waiting for the device to finish passes. Browser only. */
  deviceWaitS?: number;
  /** The plan's streamed bytes per forward pass (0 without a budget). Node only. */
  planStreamedBytes?: number;
  /** Seconds spent copying streamed weights in. Node only. */
  copyS?: number;
  /** CPU executor threads. Node only. */
  threads?: number;
  cancelled: boolean;
}

/** What every browser `RunSession.info` has, whichever device runs. */
export interface RunInfoBrowserBase {
  spec: Record<string, unknown>;
  context: number;
  weightBytes: number;
  workingSet: number;
  fileBytes: number;
  minimumBudget: number | null;
  /** The KV cache type the session keeps ('f32' on WebGPU). */
  cacheType: RunCacheType;
}

/** `RunSession.info` in the browser (WebGPU). */
export interface RunInfoWebGpu extends RunInfoBrowserBase {
  plan: null | { policy: string; budget_bytes: number; resident_bytes: number; device_resident_bytes: number; streamed_bytes: number; ring_bytes: number; tensors: { name: string; bytes: number; resident_bytes: number; streamed_bytes: number; gather: boolean }[]; chunks: { tensor: string; tensor_offset: number; bytes: number; slot: number }[] };
  headerBytes: number;
  residentRead: number;
  streamedPerForward: number;
  /** Weights on the device and the bindings they take (more than one for a weight over the binding limit). */
  bindings: { weights: number; parts: number; limit: number };
  loadFetched: number;
  adapter: { maxStorageBufferBindingSize: number; maxBufferSize: number; features: string[] };
  /** What ran: 'webgpu'. */
  device: 'webgpu';
  /** Why this device ('asked for', or what 'auto' saw). */
  deviceWhy: string;
  /** What the adapter says it is. */
  adapterInfo: { vendor: string; architecture: string; device: string; description: string; isFallbackAdapter: boolean };
}

/** `RunSession.info` in the browser on the wasm CPU executor (`device` 'wasm', or 'auto' without a hardware WebGPU adapter). */
export interface RunInfoWasm extends RunInfoBrowserBase {
  device: 'wasm';
  /** Why this device: 'asked for', or why 'auto' did not take WebGPU (no WebGPU, no adapter, a software adapter). */
  deviceWhy: string;
  /** What the WebGPU adapter said it is, when there was one. */
  adapterInfo?: { vendor: string; architecture: string; device: string; description: string; isFallbackAdapter: boolean };
  plan: RunInfoWebGpu['plan'];
  headerBytes: number;
  /** Weight bytes read into wasm memory when the session opened. */
  residentRead: number;
  /** Weight bytes read (synchronously, in the plan's order) at each forward pass. */
  streamedPerForward: number;
  bindings: null;
  loadFetched: number;
  /** 1: the wasm executor runs on one thread. */
  threads: 1;
}

/** `RunSession.info` in Node (the addon's CPU executor; the figures `tensorlane run --json` reports). */
export interface RunInfoCpu {
  device: 'cpu';
  /** 'llama', 'mistral', 'qwen2', ... */
  architecture: string;
  spec: { n_layer: number; n_embd: number; n_head: number; n_head_kv: number; head_dim: number; n_ff: number; n_vocab: number; n_ctx_train: number };
  context: number;
  /** Stored bytes of the weight matrices. */
  weightBytes: number;
  /** Of them, resident (all without a budget). */
  residentBytes: number;
  /** Weight bytes the plan streams per forward pass (0 without a budget). */
  streamedPerForward: number;
  /** KV cache, vectors and activations under a budget (0 without one). */
  workingSet: number;
  /** The smallest budget for this context and policy (null without a budget). */
  minimumBudget: number | null;
  /** The offload policy (null without a budget). */
  policy: string | null;
  threads: number;
  /** The measured copy rate from the model's pages under a budget, GB/s (0 without one). */
  linkGbps: number;
  /** The KV cache type the session keeps. */
  cacheType: RunCacheType;
}

/** A model opened by `run()`. */
export interface RunSession {
  /** Browser: the architecture, the plan (null without a budget), budget figures and the adapter's limits. Node (`device: 'cpu'`): the architecture and the executor's figures. */
  info: RunInfoWebGpu | RunInfoWasm | RunInfoCpu;
  stats: RunStats | null;
  /** Generates from text (tokenized with BOS) or token ids, one token at a time. */
  generate(prompt: string | number[] | Uint32Array, sampling?: RunSampling): AsyncGenerator<RunToken, void, void>;
  /** Stops the generation under way (no further fetch or pass; in Node, after the token being computed). */
  cancel(): void;
  /** Ends the worker (Node: the session's thread; the model is unmapped). */
  close(): void;
}

/** Why `run()` or `generate()` failed. */
export declare class RunError extends Error {
  code: 'no-webgpu' | 'budget' | 'unsupported' | 'cancelled' | 'error';
  /** With code 'budget': the smallest budget that works, in bytes. */
  minimum?: number;
}

/**
 * Runs a GGUF language model (llama, mistral, qwen2). In the browser on WebGPU, in a module
 * Worker, its weights streamed from a File (slices) or a URL (HTTP Range) into a device arena
 * sized by `budget`. In Node on the N-API addon's CPU executor (that of `tensorlane run`) on a
 * thread of its own, so the event loop keeps running: `source` a path or file: URL (mapped), or
 * bytes, a Blob or an http(s) URL (read whole into a temporary file); under a budget the
 * streamed rows are copied from the mapped file each pass. Without the addon (the wasm
 * fallback) it rejects with code 'unsupported'.
 */
export declare function run(source: Blob | File | URL | string | Uint8Array, options?: RunOptions): Promise<RunSession>;
