// Types of `tensorlane/cli` (js/cli.js): the server behind `npx tensorlane serve`.

/** The listening server (a Node `http.Server`; typed structurally, so no `@types/node` is needed). */
export interface HttpServer {
  close(callback?: (err?: Error) => void): unknown;
  address(): unknown;
}

/** A served path: a folder with everything below it, or one model file's folder restricted to the file and its companions. */
export interface Mount {
  /** The first URL segment after `/files/`. */
  name: string;
  /** The folder, canonical. */
  root: string;
  /** For a file: the canonical paths of the file and its companion files (shards, splits, external data); null for a folder. */
  only: string[] | null;
}

/** What `serve` takes. */
export interface ServeOptions {
  /** Model files and folders to serve. */
  paths: string[];
  /** The address to listen on (default 127.0.0.1). */
  host?: string;
  /** The port (default 8080; 0 picks a free one). */
  port?: number;
  /** A bearer token every data request must carry (`Authorization: Bearer TOKEN` or `?token=TOKEN`), or null. */
  token?: string | null;
  /** The package's `open` (from `tensorlane`): finds a model file's companions and lists `/models`. */
  open: (path: string) => { format: string; sources: string[]; tensors: { name: string; dtype: string; shape: number[] }[]; close?: () => void };
  /** The most connections served at once (default 512; 0 counts as 1); one more is answered `503` with `Retry-After: 1` and `Connection: close` at once. */
  maxConnections?: number;
  /** Milliseconds a connection may take to send a request head, from its accept or from the first byte of a later request (default 10000; 0: no limit). */
  headerTimeout?: number;
  /** Milliseconds a kept-alive connection may stay idle between requests, and a client may take none of a response, before it is closed (default 30000; 0: no limit). A request in flight to a client that reads is never cut. */
  idleTimeout?: number;
}

/**
 * Starts the server of `npx tensorlane serve`: the package's inspector at /web-demo/, the files at
 * /files/{mount}/{path} with Range, ETag, conditionals and CORS as the Rust `tensorlane serve`, and
 * /models. It binds the `host` it is given: refusing a non-loopback address without a token is the
 * command's rule (see `isLoopback`). Resolves once it listens.
 */
export declare function serve(options: ServeOptions): Promise<{ server: HttpServer; url: string; mounts: Mount[] }>;

/** What a `Range` header asks of `size` bytes: null (the whole body), 'unsatisfiable' (416), or [start, end) (end exclusive). */
export declare function parseRange(value: string | undefined, size: number): null | 'unsatisfiable' | [number, number];

/** A URL path percent-decoded once and split into components; throws (status 400) on `.`, `..`, backslashes and NULs. */
export declare function components(raw: string): string[];

/** The mounts `serve` makes of `paths`. */
export declare function mountsOf(paths: string[], open: ServeOptions['open']): Promise<Mount[]>;

/** `serve`'s `headerTimeout` default, as the Rust server's: 10000 (10 s). */
export declare const DEFAULT_HEADER_TIMEOUT_MS: number;
/** `serve`'s `idleTimeout` default, as the Rust server's: 30000 (30 s). */
export declare const DEFAULT_IDLE_TIMEOUT_MS: number;
/** `serve`'s `maxConnections` default, as the Rust server's: 512. */
export declare const DEFAULT_MAX_CONNECTIONS: number;

/** Whether an IP address (no brackets) reaches only this machine: 127.0.0.0/8, ::1 or an IPv4-mapped 127.0.0.0/8 address. */
export declare function isLoopback(ip: string): boolean;

/** The credentials of an `Authorization: Bearer TOKEN` header value, the scheme in any case, or null. */
export declare function bearer(value: string | undefined): string | null;

/** A duration as `--header-timeout` takes it (`10s`, `500ms`, `2m`; a bare number is seconds; `0`: no limit), in milliseconds; throws on anything else. */
export declare function parseDuration(text: string): number;
