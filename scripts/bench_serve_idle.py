#!/usr/bin/env python3
"""`tensorlane serve` with idle connections beside the load: do they cost the busy clients anything?

    python3 scripts/bench_serve_idle.py [--seconds 5] [--rounds 3] [--clients 64] [--idle 64]
                                        [--range 65536] [--bin target/release/tensorlane]
                                        [--max-connections 512] [--serve-arg=--header-timeout=1s ...]

Starts the server on a free 127.0.0.1 port over a 64 MiB file, then alternates rounds of the
same load (wrk, `--clients` keep-alive connections, each asking a fixed `Range` of `--range`
bytes) without and with `--idle` connections that connect and never send a byte (reconnected
as soon as the server closes one after its header timeout, so that the number stays up). Prints
a Markdown table: requests/s and MiB/s per round, the ratio of the medians, with / without
(bar, issue 25: >= 0.9x), and the ratio of each round's back-to-back pair (steadier on a loaded
machine). Without wrk (apt install wrk) the load is a Python client, which
measures Python more than the server.
"""

import argparse
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def start_server(binary, folder, extra):
    p = subprocess.Popen(
        [binary, "serve", folder, "--bind", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = p.stdout.readline().strip()
    if not line.startswith("http://"):
        p.kill()
        sys.exit(f"the server printed {line!r}, not its URL")
    host = line[len("http://"):].split("/")[0]
    h, port = host.rsplit(":", 1)
    return p, (h, int(port))


class Idle:
    """`n` connections that never send a byte, reconnected when the server closes them."""

    def __init__(self, addr, n):
        self.addr, self.n = addr, n
        self.stop = threading.Event()
        self.reconnects = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        sel = selectors.DefaultSelector()
        for _ in range(self.n):
            sel.register(socket.create_connection(self.addr), selectors.EVENT_READ)
        while not self.stop.is_set():
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                try:
                    gone = s.recv(4096) == b""
                except OSError:
                    gone = True
                if gone:
                    sel.unregister(s)
                    s.close()
                    sel.register(socket.create_connection(self.addr), selectors.EVENT_READ)
                    self.reconnects += 1
        for key in list(sel.get_map().values()):
            key.fileobj.close()

    def __enter__(self):
        self.thread.start()
        time.sleep(0.5)  # all connected and accepted
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.thread.join()


def load_wrk(url, rng, clients, seconds):
    out = subprocess.run(
        ["wrk", "-t2", f"-c{clients}", f"-d{seconds}s", "-H", f"Range: bytes=0-{rng - 1}", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    reqs = float(next(l.split()[1] for l in out.splitlines() if l.startswith("Requests/sec:")))
    errors = [l.strip() for l in out.splitlines() if "errors" in l or "Non-2xx" in l]
    return reqs, errors


def load_python(addr, path, rng, clients, seconds):
    counts = [0] * clients
    errors = []
    deadline = time.monotonic() + seconds
    req = f"GET {path} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-{rng - 1}\r\n\r\n".encode()

    def client(i):
        s = socket.create_connection(addr)
        f = s.makefile("rb")
        try:
            while time.monotonic() < deadline:
                s.sendall(req)
                status = f.readline()
                length = 0
                while True:
                    line = f.readline()
                    if line in (b"\r\n", b""):
                        break
                    k, _, v = line.decode().partition(":")
                    if k.lower() == "content-length":
                        length = int(v)
                if b" 206 " not in status or len(f.read(length)) != length:
                    errors.append(status.decode(errors="replace").strip())
                    return
                counts[i] += 1
        finally:
            s.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(counts) / (time.monotonic() - t), errors[:3]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--idle", type=int, default=64)
    ap.add_argument("--range", type=int, default=65536, dest="rng")
    ap.add_argument("--bin", default="target/release/tensorlane")
    ap.add_argument("--max-connections", default="512")
    ap.add_argument("--serve-arg", action="append", default=[], help="one more argument for tensorlane serve")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        sys.exit(f"{a.bin}: no such binary (cargo build --release -p tensorlane-cli)")
    work = tempfile.mkdtemp(prefix="bench-serve-idle-")
    folder = os.path.join(work, "data")
    os.mkdir(folder)
    with open(os.path.join(folder, "big.bin"), "wb") as f:
        f.write(os.urandom(1 << 20) * 64)
    server, addr = start_server(a.bin, folder, ["--max-connections", a.max_connections, *a.serve_arg])
    path = "/files/data/big.bin"
    url = f"http://{addr[0]}:{addr[1]}{path}"
    wrk = shutil.which("wrk")
    run = (lambda: load_wrk(url, a.rng, a.clients, a.seconds)) if wrk else (
        lambda: load_python(addr, path, a.rng, a.clients, a.seconds))
    rows = {"without": [], "with": []}
    reconnects = 0
    try:
        run()  # warm the page cache and the server
        for _ in range(a.rounds):
            for case in ("without", "with"):
                if case == "with":
                    with Idle(addr, a.idle) as idle:
                        reqs, errors = run()
                    reconnects += idle.reconnects
                else:
                    reqs, errors = run()
                if errors:
                    print(f"{case} idle connections: errors: {errors}", file=sys.stderr)
                rows[case].append(reqs)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    load = "wrk -t2" if wrk else "python threads"
    print(f"load: {load}, {a.clients} keep-alive clients, Range {a.rng} bytes, {a.seconds} s x {a.rounds} rounds "
          f"per case; idle: {a.idle} connections that send nothing ({reconnects} reconnects after the server "
          f"closed them); serve --max-connections {a.max_connections} {' '.join(a.serve_arg)}\n")
    print("| case | req/s per round | median req/s | median MiB/s |")
    print("|---|---|---:|---:|")
    for case in ("without", "with"):
        r = rows[case]
        print(f"| {case} {a.idle} idle | {', '.join(f'{x:.0f}' for x in r)} | {statistics.median(r):.0f} | "
              f"{statistics.median(r) * a.rng / (1 << 20):.0f} |")
    ratio = statistics.median(rows["with"]) / statistics.median(rows["without"])
    pairs = [w / o for w, o in zip(rows["with"], rows["without"])]
    print(f"\nwith / without: **{ratio:.2f}x** (medians; bar >= 0.9x); round by round (each pair run back to "
          f"back): {', '.join(f'{p:.2f}' for p in pairs)}, median {statistics.median(pairs):.2f}x")


if __name__ == "__main__":
    main()
