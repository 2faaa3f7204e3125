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
}

/**
 * Starts the server of `npx tensorlane serve`: the package's inspector at /web-demo/, the files at
 * /files/{mount}/{path} with Range, ETag, conditionals and CORS as the Rust `tensorlane serve`, and
 * /models. Resolves once it listens.
 */
export declare function serve(options: ServeOptions): Promise<{ server: HttpServer; url: string; mounts: Mount[] }>;

/** What a `Range` header asks of `size` bytes: null (the whole body), 'unsatisfiable' (416), or [start, end) (end exclusive). */
export declare function parseRange(value: string | undefined, size: number): null | 'unsatisfiable' | [number, number];

/** A URL path percent-decoded once and split into components; throws (status 400) on `.`, `..`, backslashes and NULs. */
export declare function components(raw: string): string[];

/** The mounts `serve` makes of `paths`. */
export declare function mountsOf(paths: string[], open: ServeOptions['open']): Promise<Mount[]>;
