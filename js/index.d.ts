// One TypeScript definition for both backends of the npm package `tensorlane`:
// the N-API addon (Node, `exports.node`) and the wasm build (browsers, and Node as fallback).
// Both return identical results for the same input.

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

/** An error from the codec; `offset` is the byte offset the message ends with. */
export declare class TensorlaneError extends Error {
  offset: number | undefined;
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

// ---------------------------------------------------------------------------------------------
// .zt v2 containers

/** Element type names of `.zt` objects: the dense dtypes, FP8/FP4 (raw bytes) or an unknown logical type. */
export type ZtElementType = DType | 'float8_e4m3fn' | 'float8_e5m2' | 'float8_e4m3fnuz' | 'float8_e5m2fnuz' | 'float8_e8m0fnu' | 'float4_e2m1fn' | (string & {});

/** One part of an object, as `metadata()` describes it. */
export interface ZtPartMetadata {
  /** Storage dtype (NumPy name; `bool` is stored as `uint8` with type `bool`). */
  dtype: DType;
  /** Logical type as written (`bool`, `f4_e2m1`, `complex64`, ...). */
  type?: string;
  /** Encoding id (`zt.zstd-seekable/1`); undefined = raw. */
  encoding?: string;
  /** Decoded bytes. */
  nbytes: number;
  /** `algo:hex` over the decoded bytes. */
  digest?: string;
  /** Blob offset and stored length (in `shard` when set). */
  offset: number;
  length: number;
  shard?: string;
}

export interface ZtMetadata {
  layout: string;
  shape: number[];
  /** Element type of a dense object. */
  dtype?: ZtElementType;
  parts: Record<string, ZtPartMetadata>;
  attributes?: Record<string, unknown>;
}

/**
 * A dense object. `data` is a view on the source (the caller's buffer, the mapped file in Node,
 * or the bytes read from a Blob) when the part is raw and aligned (`copied: false`); a copy when
 * it was decoded (zstd) or misaligned. FP8/FP4/unknown types come back as raw Uint8Array bytes.
 */
export interface ZtDense {
  dtype: ZtElementType;
  shape: number[];
  data: AnyTypedArray;
  copied: boolean;
}

/** A non-dense object (sparse, quantized, ...): its parts' data, structurally. */
export interface ZtObject {
  layout: string;
  shape: number[];
  attributes?: Record<string, unknown>;
  parts: Record<string, { dtype: DType; type?: string; data: AnyTypedArray; copied: boolean }>;
}

export interface ZtVerifyReport {
  partsDigestChecked: number;
  partsWithoutDigest: number;
  /** [object, part] pairs in shards that were not checked. */
  unresolved: [string, string][];
  dataShard: boolean;
}

interface ZtReaderBase {
  /** Object names in bytewise order. */
  keys(): string[];
  /** Shape, layout, parts and attributes of an object (sync for every source). */
  metadata(name: string): ZtMetadata;
  readonly dataShard: boolean;
  readonly attributes?: Record<string, unknown>;
  readonly shards?: Record<string, { size: number; digest: string }>;
}

/** A reader over bytes in memory (a Uint8Array/ArrayBuffer, or a path in Node): everything is synchronous. */
export interface ZtReader extends ZtReaderBase {
  readonly lazy: false;
  get(name: string): ZtDense | ZtObject;
  /** Deep verify; throws a TensorlaneError with `rule` on the first failure. */
  verify(): ZtVerifyReport;
}

/** A reader over a Blob/File: open read only the header, footer and manifest; `get` and `verify` read (async). */
export interface ZtBlobReader extends ZtReaderBase {
  readonly lazy: true;
  get(name: string): Promise<ZtDense | ZtObject>;
  /** Reads the whole Blob, then verifies. */
  verify(): Promise<ZtVerifyReport>;
}

/**
 * Opens a `.zt` v2 file (validated like the spec's §13; shards are not resolved at open).
 * A path (Node only: mapped by the addon, read by the wasm backend; shards are found next to it
 * as `<stem>-<name>.zt`) or bytes give a synchronous reader; a Blob/File gives a Promise of a
 * lazy reader.
 */
export declare function open(source: string | Uint8Array | ArrayBuffer | ArrayBufferView): ZtReader;
export declare function open(source: Blob): Promise<ZtBlobReader>;

/** What `writeZt` accepts per object. */
export type ZtEntry =
  | AnyTypedArray
  | { dtype?: ZtElementType; shape?: number[]; data: AnyTypedArray | ArrayBuffer; attributes?: Record<string, unknown> }
  | { layout: string; shape: number[]; attributes?: Record<string, unknown>; parts: Record<string, { dtype?: ZtElementType; type?: string; data: AnyTypedArray | ArrayBuffer }> };

/** Writes a `.zt` v2 file (canonical form by default: byte-identical to the reference writer) and returns its bytes. */
export declare function writeZt(
  entries: Record<string, ZtEntry> | Map<string, ZtEntry> | [string, ZtEntry][],
  options?: { canonical?: boolean; attributes?: Record<string, unknown> },
): Uint8Array;
