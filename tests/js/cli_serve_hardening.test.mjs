// `npx tensorlane serve` (js/cli.js) against the Rust `tensorlane serve` on what issue 25 changed
// in the servers: the public-bind rule (same exit code and message), the bearer scheme in any case
// and tokens of other lengths refused, error bodies without server paths, the header and idle
// timeouts (0: off; a slow download to a client that reads is not cut; a client that stops reading
// is closed), the immediate 503 past --max-connections (byte for byte the same answer), and a body
// cut off when its file is rewritten in place while it is sent (the ETag follows the identity).
// Each check runs js/cli.js as a process and, where target/debug/tensorlane is built, the Rust
// binary with the same arguments, side by side. The timing checks run concurrently (~6 s in all).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, realpathSync, renameSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync, writeSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { BIN, missing as noRust } from './_serve.mjs';

const CLI = fileURLToPath(new URL('../../js/cli.js', import.meta.url));
const SERVERS = noRust ? ['node'] : ['node', 'rust'];
const ms = (t) => Number(process.hrtime.bigint() - t) / 1e6;
const sleep = (n) => new Promise((r) => setTimeout(r, n));

let work, dir;
const children = new Set();
before(() => {
  work = realpathSync(mkdtempSync(join(tmpdir(), 'tensorlane-cli-hardening-')));
  dir = join(work, 'served');
  mkdirSync(join(dir, 'sub'), { recursive: true });
  writeFileSync(join(dir, 'small.bin'), Buffer.from(Array.from({ length: 1000 }, (_, i) => i & 0xff)));
  // Larger than loopback's socket buffers, so that the server is still sending it.
  writeFileSync(join(dir, 'slow.bin'), Buffer.from(Array.from({ length: 12 << 20 }, (_, i) => i % 251)));
  writeFileSync(join(dir, 'stall.bin'), '');
  truncateSync(join(dir, 'stall.bin'), 48 << 20); // sparse: zeros
  // A model file that does not open: /models lists it under errors.
  writeFileSync(join(dir, 'broken.safetensors'), Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3]));
});
after(() => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
});

/** The command line of `kind`'s server with `args`. */
const command = (kind, args) => (kind === 'node' ? [process.execPath, [CLI, 'serve', ...args]] : [BIN, ['serve', ...args]]);

/** Starts `kind`'s server on `args` (they name --bind); resolves to { port, base, stop } once it prints its URL. */
function start(kind, args, env = {}) {
  const [cmd, argv] = command(kind, args);
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TENSORLANE_TOKEN: '', ...env } });
  children.add(child);
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${kind} serve printed no URL within 30 s:\n${stderr}`)), 30000);
    child.once('exit', (code) => reject(new Error(`${kind} serve exited (${code}):\n${stderr}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const port = Number(/:(\d+)\//.exec(line)[1]);
      resolve({
        port,
        base: `http://127.0.0.1:${port}`,
        stderr: () => stderr,
        stop: () => {
          children.delete(child);
          child.kill('SIGKILL');
        },
      });
    });
  });
}

/** Serves the scratch folder on 127.0.0.1 with `extra` flags. */
const served = (kind, extra = []) => start(kind, [dir, '--bind', '127.0.0.1:0', ...extra]);

/** Runs `kind`'s server on `args` and waits at most 20 s for it to exit: { code, stderr }, or null while it serves. */
function exits(kind, args) {
  const [cmd, argv] = command(kind, args);
  const child = spawn(cmd, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, TENSORLANE_TOKEN: '' } });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve(null);
    }, 20000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

/** The URL path of `name` in the scratch folder's mount. */
const url = (name) => `/files/served/${name}`;

/**
 * A raw TCP connection to 127.0.0.1:`port`: what it received (`buf`), whether and when it was
 * closed (`closedAt`), and reads of a response head and body.
 */
function open(port) {
  const s = connect(port, '127.0.0.1');
  // What arrived, in pieces (joined only when read: a large body costs no copy per piece).
  const c = { s, pieces: [], length: 0, closedAt: null, waiters: [] };
  const wake = () => c.waiters.splice(0).forEach((w) => w());
  s.on('data', (d) => {
    c.pieces.push(d);
    c.length += d.length;
    wake();
  });
  /** What arrived and was not read yet, as one buffer. */
  c.joined = () => {
    if (c.pieces.length > 1) c.pieces = [Buffer.concat(c.pieces)];
    return c.pieces[0] ?? Buffer.alloc(0);
  };
  /** Takes the first `n` bytes. */
  c.take = (n) => {
    const all = c.joined();
    c.pieces = n < all.length ? [all.subarray(n)] : [];
    c.length = all.length - n;
    return all.subarray(0, n);
  };
  const closed = () => {
    c.closedAt ??= process.hrtime.bigint();
    wake();
  };
  s.on('end', closed);
  s.on('close', closed);
  s.on('error', closed);
  /** Waits until `ready()` or the close; false when `limit` ms passed first. */
  c.until = (ready, limit = 10000) =>
    new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), limit);
      const check = () => {
        if (ready() || c.closedAt !== null) {
          clearTimeout(timer);
          resolve(ready());
        } else c.waiters.push(check);
      };
      check();
    });
  c.send = (method, path, headers = {}) => s.write(`${method} ${path} HTTP/1.1\r\nHost: x\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
  /** The next response head: { status, headers, raw }; its bytes are taken off `buf`. */
  c.head = async (limit) => {
    const ok = await c.until(() => c.joined().includes('\r\n\r\n'), limit);
    if (!ok) throw new Error(`no response head (${c.closedAt !== null ? 'closed' : 'timed out'}); got ${JSON.stringify(c.joined().toString('latin1').slice(0, 200))}`);
    const raw = c.take(c.joined().indexOf('\r\n\r\n') + 4).toString('latin1');
    const [line, ...rest] = raw.trim().split('\r\n');
    return { status: Number(line.split(' ')[1]), headers: Object.fromEntries(rest.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()])), raw };
  };
  /** The next `n` body bytes. */
  c.body = async (n, limit) => {
    if (!(await c.until(() => c.length >= n, limit))) throw new Error(`${c.length} of ${n} body bytes, then ${c.closedAt !== null ? 'the close' : 'nothing'}`);
    return Buffer.from(c.take(n));
  };
  /** A whole response on this connection: { status, headers, body }. */
  c.request = async (method, path, headers = {}) => {
    c.send(method, path, headers);
    const h = await c.head();
    return { ...h, body: method === 'HEAD' ? Buffer.alloc(0) : await c.body(Number(h.headers['content-length'] ?? 0)) };
  };
  /** Ms until the server closes it (from `since`), or null when it is still open after `limit` ms. */
  c.closedWithin = async (limit, since = process.hrtime.bigint()) => {
    await c.until(() => false, limit);
    return c.closedAt === null ? null : Number(c.closedAt - since) / 1e6;
  };
  c.close = () => s.destroy();
  return c;
}

/** A one-off request on a new connection. */
async function once(port, method, path, headers) {
  const c = open(port);
  try {
    return await c.request(method, path, headers);
  } finally {
    c.close();
  }
}

/** Asks `method path` until it is a 200 (others must be 503s), for at most `limit` ms. */
async function servedAgain(port, method, path, limit) {
  const t = process.hrtime.bigint();
  for (;;) {
    const r = await once(port, method, path);
    if (r.status === 200) return r;
    assert.equal(r.status, 503, `${path}: ${r.body}`);
    assert.ok(ms(t) < limit, `${path}: no free slot within ${limit} ms`);
    await sleep(50);
  }
}

/** Runs `check(kind)` for each server at once. */
const both = (check) => Promise.all(SERVERS.map((kind) => check(kind).catch((e) => Promise.reject(new Error(`${kind}: ${e.message}`, { cause: e })))));

describe('npx tensorlane serve (js/cli.js) hardened as the Rust tensorlane serve', { concurrency: 3 }, () => {
  it('a non-loopback --bind is refused without --token or --public (exit 2, the same message); loopback and either flag serve', async () => {
    const refused = Promise.all(
      ['0.0.0.0:0', '[::]:0', '[::ffff:10.0.0.1]:0'].map(async (bind) => {
        const got = await Promise.all(SERVERS.map((kind) => exits(kind, [dir, '--bind', bind])));
        for (const [i, r] of got.entries()) {
          assert.ok(r, `${SERVERS[i]}: --bind ${bind} without a token served`);
          assert.equal(r.code, 2, `${SERVERS[i]} ${bind}: ${r.stderr}`);
          assert.ok(r.stderr.includes(`--bind ${bind} is not a loopback address`) && r.stderr.includes('--token') && r.stderr.includes('--public'), `${SERVERS[i]}: ${r.stderr}`);
        }
        // The Node command says what the Rust one says, word for word.
        if (got.length === 2) assert.equal(got[0].stderr, got[1].stderr, bind);
      }),
    );
    await refused;
    await both(async (kind) => {
      const [pub, guarded, fromEnv, mapped, other] = await Promise.all([
        start(kind, [dir, '--bind', '0.0.0.0:0', '--public']),
        start(kind, [dir, '--bind', '0.0.0.0:0', '--token', 't0k']),
        start(kind, [dir, '--bind', '0.0.0.0:0'], { TENSORLANE_TOKEN: 'env-t0k' }),
        // Loopback needs neither: another 127/8 address, and an IPv4-mapped one.
        start(kind, [dir, '--bind', '[::ffff:127.0.0.1]:0']),
        start(kind, [dir, '--bind', '127.0.0.2:0']),
      ]);
      try {
        assert.equal((await once(pub.port, 'GET', url('small.bin'))).status, 200);
        assert.match(pub.stderr(), /--public: serving to anyone who can reach 0\.0\.0\.0:\d+ without a token/);
        assert.equal((await once(guarded.port, 'GET', url('small.bin'))).status, 401);
        assert.equal((await once(fromEnv.port, 'GET', url('small.bin'), { Authorization: 'Bearer env-t0k' })).status, 200);
        assert.equal((await once(fromEnv.port, 'GET', url('small.bin'))).status, 401);
        assert.ok(mapped.port > 0 && other.port > 0);
      } finally {
        for (const s of [pub, guarded, fromEnv, mapped, other]) s.stop();
      }
    });
  });

  it('the Bearer scheme in any case; a wrong, shorter or longer token refused, by header or ?token=', async () => {
    await both(async (kind) => {
      const s = await served(kind, ['--token', 's3cret']);
      try {
        for (const ok of ['Bearer s3cret', 'bearer s3cret', 'BEARER  s3cret']) {
          assert.equal((await once(s.port, 'GET', url('small.bin'), { Authorization: ok })).status, 200, ok);
        }
        for (const bad of ['Bearer s3cre', 'Bearer s3crett', 'Bearer S3CRET', 'Basic s3cret', 'bearers3cret', 'Bearer ']) {
          const r = await once(s.port, 'GET', url('small.bin'), { Authorization: bad });
          assert.equal(r.status, 401, bad);
          assert.equal(r.headers['www-authenticate'], 'Bearer', bad);
        }
        assert.equal((await once(s.port, 'GET', `${url('small.bin')}?token=s3cret`)).status, 200);
        assert.equal((await once(s.port, 'GET', `${url('small.bin')}?token=s3%63ret`)).status, 200, 'percent-decoded');
        for (const q of ['s3cre', 's3crett', 'S3CRET', '']) assert.equal((await once(s.port, 'GET', `${url('small.bin')}?token=${q}`)).status, 401, q);
      } finally {
        s.stop();
      }
    });
  });

  it('error bodies name the URL path asked for, never the server path', async () => {
    await both(async (kind) => {
      const s = await served(kind);
      try {
        for (const [path, status] of [[url('sub'), 404], [url('nope.bin'), 404], [url('%2e%2e/x'), 400], ['/files/elsewhere/x', 404]]) {
          const r = await once(s.port, 'GET', path);
          const text = r.body.toString();
          assert.equal(r.status, status, `${path}: ${text}`);
          assert.ok(!text.includes(work), `${path}: the body shows the server's path: ${text}`);
          if (status === 404) assert.ok(text.includes(path), `${path}: the body names the URL: ${text}`);
        }
      } finally {
        s.stop();
      }
    });
    // /models names a model that does not open by its id, with the error's paths as URLs (the
    // Node server's; the Rust server's /models errors are its own).
    const s = await served('node');
    try {
      const listing = JSON.parse((await once(s.port, 'GET', '/models')).body);
      const broken = listing.errors.find((e) => e.id === 'served/broken.safetensors');
      assert.ok(broken, JSON.stringify(listing.errors));
      assert.ok(!JSON.stringify(listing).includes(work), `/models shows the server's path: ${JSON.stringify(listing.errors)}`);
    } finally {
      s.stop();
    }
  });

  it('--header-timeout: silent and slow-head connections are closed after it, and then a request is served', async () => {
    await both(async (kind) => {
      const s = await served(kind, ['--max-connections', '8', '--header-timeout', '1s']);
      try {
        const t = process.hrtime.bigint();
        const idle = Array.from({ length: 7 }, () => open(s.port));
        // The eighth sends a head one byte at a time, never finishing it.
        const slow = open(s.port);
        slow.s.write('GET / HTTP/1.1\r\nHost: x\r\n');
        const drip = setInterval(() => slow.s.writable && slow.s.write('X'), 100);
        try {
          for (const c of [...idle, slow]) {
            const after = await c.closedWithin(8000, t);
            assert.ok(after !== null, 'an idle or slow connection is still open 8 s past a 1 s header timeout');
            assert.ok(after >= 900 && after < 8000, `closed after ${after} ms, with a 1 s header timeout`);
          }
        } finally {
          clearInterval(drip);
        }
        // Served again (a slot is given back a moment after its socket closes).
        const r = await servedAgain(s.port, 'GET', url('small.bin'), 2000);
        assert.equal(r.body.length, 1000);
      } finally {
        s.stop();
      }
    });
  });

  it('--idle-timeout: a kept-alive connection is closed after it (not before); a slow download to a client that reads is not cut', async () => {
    await both(async (kind) => {
      const s = await served(kind, ['--header-timeout', '1s', '--idle-timeout', '1s']);
      try {
        const c = open(s.port);
        assert.equal((await c.request('GET', url('small.bin'))).status, 200);
        await sleep(400);
        // Measured from the request's sending: the server's idle time starts later (when it has
        // answered), so a late look at the clock here cannot make the close look early.
        const sent = process.hrtime.bigint();
        assert.equal((await c.request('GET', url('small.bin'))).status, 200, 'a connection idle for less than the timeout still serves');
        const gone = await c.closedWithin(5000, sent);
        assert.ok(gone !== null, 'a kept-alive connection is still open 5 s past a 1 s idle timeout');
        assert.ok(gone >= 900, `closed after ${gone} ms, with a 1 s idle timeout`);

        // 12 MiB at most 6 MiB/s: about 2 s, longer than both timeouts. The client reads what has
        // come as soon as the rate allows (checked every 10 ms), so the server's writes make
        // progress all along, as a slow reader's would.
        const d = open(s.port);
        d.send('GET', url('slow.bin'));
        const head = await d.head();
        assert.equal(head.status, 200);
        const size = 12 << 20;
        const t = process.hrtime.bigint();
        let got = 0;
        let same = true;
        while (got < size) {
          if (got > (ms(t) / 1000) * (6 << 20)) {
            d.s.pause();
            await sleep(10);
            continue;
          }
          d.s.resume();
          const part = await d.body(Math.min(64 << 10, size - got)).catch((e) => assert.fail(`the slow download was cut at ${got} of ${size} bytes: ${e.message}`));
          for (let i = 0; i < part.length; i += 4099) same &&= part[i] === (got + i) % 251;
          got += part.length;
        }
        d.close();
        assert.ok(ms(t) > 1500, `the download was not slow: ${ms(t)} ms`);
        assert.ok(same, "the slow download's bytes differ");
      } finally {
        s.stop();
      }
    });
  });

  it('--idle-timeout: a client that takes none of a large body is closed and frees its slot', async () => {
    await both(async (kind) => {
      const s = await served(kind, ['--idle-timeout', '1s', '--max-connections', '1']);
      try {
        const c = open(s.port);
        c.send('GET', url('stall.bin'));
        const head = await c.head();
        assert.deepEqual([head.status, Number(head.headers['content-length'])], [200, 48 << 20]);
        // Long enough for the server to fill the socket buffers (tens of MiB on loopback, slowly
        // on a busy machine), then to wait out the idle timeout.
        c.s.pause();
        await sleep(4000);
        let got = c.take(c.length).length;
        c.s.on('data', (d) => (got += d.length));
        c.s.resume();
        assert.ok((await c.closedWithin(5000)) !== null, 'a client that read nothing for 4 s is still connected');
        assert.ok(got < 48 << 20, `a client that read nothing for 4 s got the whole body (${got} bytes)`);
        // Its slot (the only one) is free again.
        await servedAgain(s.port, 'HEAD', url('stall.bin'), 3000);
      } finally {
        s.stop();
      }
    });
  });

  it('--header-timeout 0 --idle-timeout 0: nothing is closed for waiting', async () => {
    await both(async (kind) => {
      const s = await served(kind, ['--header-timeout', '0', '--idle-timeout', '0']);
      try {
        const silent = open(s.port);
        const kept = open(s.port);
        assert.equal((await kept.request('GET', url('small.bin'))).status, 200);
        assert.equal(await silent.closedWithin(1500), null, 'a silent connection was closed with no header timeout');
        assert.equal(kept.closedAt, null, 'a kept-alive connection was closed with no idle timeout');
        assert.equal((await kept.request('GET', url('small.bin'))).status, 200);
        silent.close();
        kept.close();
      } finally {
        s.stop();
      }
    });
  });

  it('past --max-connections: 503 with Retry-After: 1 and Connection: close at once (the same bytes); a freed slot is served again', async () => {
    const answers = {};
    await both(async (kind) => {
      const s = await served(kind, ['--max-connections', '4']);
      try {
        const held = [];
        for (let i = 0; i < 4; i++) {
          const c = open(s.port);
          assert.equal((await c.request('GET', url('small.bin'))).status, 200);
          held.push(c);
        }
        const extra = await Promise.all(
          Array.from({ length: 6 }, async () => {
            const t = process.hrtime.bigint();
            const c = open(s.port);
            c.send('GET', url('small.bin'));
            const h = await c.head(10000);
            const body = await c.body(Number(h.headers['content-length']));
            const closed = await c.closedWithin(3000);
            c.close();
            return { ...h, body, took: ms(t), closed };
          }),
        );
        for (const e of extra) {
          assert.equal(e.status, 503, 'a client past --max-connections');
          assert.equal(e.headers['retry-after'], '1');
          assert.equal(e.headers.connection, 'close');
          assert.ok(e.took < 3000, `the 503 took ${e.took} ms`);
          assert.ok(e.closed !== null, 'the refused connection was not closed');
        }
        answers[kind] = extra[0].raw + extra[0].body;
        for (const c of held) {
          const r = await c.request('GET', url('small.bin'));
          assert.deepEqual([r.status, r.body.length], [200, 1000], 'a served client goes on');
        }
        held.pop().close();
        await servedAgain(s.port, 'GET', url('small.bin'), 5000);
        for (const c of held) c.close();
      } finally {
        s.stop();
      }
    });
    if (answers.rust) assert.equal(answers.node, answers.rust, 'the 503 differs from the Rust server\'s');
  });

  it('a file rewritten in place while it is sent: the body is cut off; the ETag follows the file identity', async () => {
    await both(async (kind) => {
      // Each server its own files: one rewrites them under the other.
      const own = join(work, `identity-${kind}`);
      mkdirSync(own, { recursive: true });
      const big = join(own, 'big.bin');
      const size = 64 << 20;
      writeFileSync(big, '');
      truncateSync(big, size); // sparse: zeros
      const small = join(own, 'small.bin');
      writeFileSync(small, Buffer.alloc(1000, 1));
      const s = await start(kind, [own, '--bind', '127.0.0.1:0']);
      try {
        const c = open(s.port);
        c.send('GET', `/files/identity-${kind}/big.bin`);
        const head = await c.head();
        assert.deepEqual([head.status, Number(head.headers['content-length'])], [200, size]);
        await c.body(2 << 20);
        // Let the server fill the socket buffers and wait, then rewrite a range in place in a
        // later timestamp tick.
        c.s.pause();
        await sleep(300);
        const fd = openSync(big, 'r+');
        writeSync(fd, Buffer.alloc(4096, 0xab), 0, 4096, size - (8 << 20));
        closeSync(fd);
        let got = (2 << 20) + c.length;
        c.s.on('data', (d) => (got += d.length));
        c.s.resume();
        await c.until(() => got >= size, 20000);
        assert.ok(got < size, `a body of a file rewritten while it was sent came through whole (${got} bytes)`);
        assert.ok(c.closedAt !== null, `the body neither ended nor was cut within 20 s (${got} of ${size} bytes)`);

        // Same size and modification time, another inode (a rename over it): a new ETag.
        const path = `/files/identity-${kind}/small.bin`;
        const etag = async () => (await once(s.port, 'HEAD', path)).headers.etag;
        const first = await etag();
        assert.equal(await etag(), first, 'an unchanged file keeps its ETag');
        const { mtime } = statSync(small);
        const next = join(own, 'small.next');
        writeFileSync(next, Buffer.alloc(1000, 7));
        utimesSync(next, mtime, mtime);
        renameSync(next, small);
        const second = await etag();
        assert.notEqual(second, first, 'a file replaced by one of the same size and mtime got the old ETag');
        const r = await once(s.port, 'GET', path, { 'If-None-Match': first });
        assert.deepEqual([r.status, r.body], [200, Buffer.alloc(1000, 7)]);
      } finally {
        s.stop();
      }
    });
  });

  it('bad flag values are refused with what to give (exit 2)', async () => {
    const cases = [
      [['--header-timeout', '10h'], /--header-timeout 10h: "10h": unknown unit "h"; use ms, s or m/],
      [['--idle-timeout', 'soon'], /--idle-timeout soon: "soon" is not a duration/],
      [['--max-connections', 'many'], /--max-connections many: give a whole number/],
      [['--public=yes'], /unknown option --public=yes/],
    ];
    const got = await Promise.all(cases.map(([args]) => exits('node', [dir, '--bind', '127.0.0.1:0', ...args])));
    for (const [i, r] of got.entries()) {
      assert.ok(r, `${cases[i][0]} served`);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, cases[i][1]);
    }
  });
});
