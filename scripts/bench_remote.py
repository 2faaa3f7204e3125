"""Reading every tensor of a sharded safetensors set from a local S3 server, three ways, in one run:

  1. tensorlane: `Model::open("s3://...index.json")` + `for_each_tensor` (native/examples/remote_read.rs,
     release build; defaults: 8 MiB parts, 16 in flight);
  2. a tuned raw parallel GET of the same bytes: boto3 `download_fileobj` with
     TransferConfig(multipart_chunksize=8 MiB, max_concurrency=16) into a discarding sink, shards
     one after the other;
  3. the usual path: download each shard to disk (boto3 `download_file`, default TransferConfig),
     then `safetensors.safe_open(framework="numpy")` and `get_tensor` every tensor;
  4. the same with each shard downloaded by one streamed GET, as `huggingface_hub.hf_hub_download`
     does without hf_transfer.

Also what listing costs (requests and bytes of `remote_read --list`) for one shard, for the index
(all shards' headers) and for a GGUF fixture.

    bash tests/python/setup_s3_venv.sh
    cargo build --release -p tensorlane --example remote_read
    tests/.venv-s3/bin/python scripts/bench_remote.py [--gb 1.0] [--shards 4] [--repeat 3] [--server moto|s3s|nginx]

The server: `moto` (moto_server from the venv, SigV4 checked; Python, about 14 MB/s here, so it
bounds every path), `s3s` (s3s-fs from crates.io, a Rust S3 server over a folder, SigV4 checked
with the access key given on its command line: `cargo install s3s-fs --version 0.14.1 --features
binary --locked`; it streams objects in 4 KiB reads, about 0.5 GB/s here, so it bounds every path
too), or `nginx` (Debian's nginx serving the bucket folder: the read side of S3 for an anonymous,
public bucket -- path-style `GetObject`/`HeadObject` with `Range`, `ETag`, no signature -- as a
CDN or an R2/S3 public bucket serves it; the one server here faster than a client, which is what
S3 itself is. Both clients read unsigned: boto3 with `UNSIGNED`, tensorlane with
`AWS_SKIP_SIGNATURE=true`. The set is written into the folder instead of uploaded).

The set is generated (random f16 tensors of 16 MiB) in a temporary folder and removed afterwards.
Prints a Markdown table (median of --repeat runs; each path reads every byte every run).
"""
import argparse
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import boto3
import numpy as np
from boto3.s3.transfer import TransferConfig
from botocore import UNSIGNED
from botocore.config import Config
from safetensors import safe_open
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# nginx as Debian ships it for static files (as in scripts/bench_serve.sh), over the bucket folder:
# `GET /bench/set/x.safetensors` is path-style S3 `GetObject` of bucket `bench`, key `set/x...`.
NGINX_CONF = """worker_processes auto;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
daemon off;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path {work}/tmp; proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp;
  uwsgi_temp_path {work}/tmp; scgi_temp_path {work}/tmp;
  server {{
    listen 127.0.0.1:{port};
    root {root};
  }}
}}
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Discard(io.RawIOBase):
    """A seekable sink that keeps nothing (boto3 writes parts out of order)."""

    def __init__(self):
        self.pos = 0
        self.n = 0

    def writable(self):
        return True

    def seekable(self):
        return True

    def write(self, b):
        self.n += len(b)
        self.pos += len(b)
        return len(b)

    def seek(self, pos, whence=0):
        self.pos = pos
        return pos

    def tell(self):
        return self.pos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--server", choices=["moto", "s3s", "nginx"], default="moto")
    ap.add_argument("--exe", default=os.path.join(ROOT, "target/release/examples/remote_read"),
                    help="the remote_read example binary (default: the release build)")
    args = ap.parse_args()
    exe = args.exe
    if not os.path.exists(exe):
        sys.exit("build it first: cargo build --release -p tensorlane --example remote_read")

    work = tempfile.mkdtemp(prefix="tl-bench-remote-")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    if args.server == "moto":
        moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
        cmd = [moto, "-H", "127.0.0.1", "-p", str(port)]
    elif args.server == "nginx":
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            sys.exit("nginx is missing: apt-get install nginx-light (scripts/setup.sh installs it)")
        root = os.path.join(work, "bucket-root")
        os.makedirs(os.path.join(root, "bench"))
        os.makedirs(os.path.join(work, "tmp"))
        # nginx started as root serves as `nobody`: the folders must be readable by others.
        os.chmod(work, 0o755)
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(work=work, port=port, root=root))
        cmd = [nginx, "-p", work, "-c", os.path.join(work, "nginx.conf")]
    else:
        s3s = shutil.which("s3s-fs") or os.path.expanduser("~/.cargo/bin/s3s-fs")
        if not os.path.exists(s3s):
            sys.exit("s3s-fs is missing: cargo install s3s-fs --version 0.14.1 --features binary --locked")
        root = os.path.join(work, "s3s-root")
        os.makedirs(root)
        s3s_creds = {"key_id": "TLBENCHKEY", "secret": "tl-bench-secret-key"}
        cmd = [s3s, "--host", "127.0.0.1", "--port", str(port), "--access-key", s3s_creds["key_id"],
               "--secret-key", s3s_creds["secret"], root]
    server = subprocess.Popen(cmd, env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    sys.exit(f"{cmd[0]} did not start")
                time.sleep(0.1)
        if args.server == "moto":
            creds = json.loads(subprocess.check_output(
                [sys.executable, os.path.join(ROOT, "tests/python/s3_setup.py"), endpoint, "bench"]))
        elif args.server == "s3s":
            creds = s3s_creds
        else:
            creds = None
        keys = dict(aws_access_key_id=creds["key_id"], aws_secret_access_key=creds["secret"]) if creds else {}
        unsigned = {} if creds else {"signature_version": UNSIGNED}
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys,
                          config=Config(s3={"addressing_style": "path"}, max_pool_connections=32, **unsigned))
        if args.server == "s3s":
            s3.create_bucket(Bucket="bench")

        def put_file(path, key):
            if creds:
                s3.upload_file(path, "bench", key, Config=TransferConfig(multipart_chunksize=64 << 20))
            else:
                dest = os.path.join(root, "bench", key)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copyfile(path, dest)

        # The set: args.shards shards of f16 tensors of 16 MiB, written, uploaded, deleted locally.
        tensor_bytes = 16 << 20
        per_shard = max(1, int(args.gb * (1 << 30) / args.shards / tensor_bytes))
        rng = np.random.default_rng(0)
        names, weight_map, total = [], {}, 0
        for s in range(args.shards):
            name = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
            tensors = {f"layers.{s}.{i}.weight": rng.standard_normal(tensor_bytes // 2, dtype=np.float32)
                       .astype(np.float16).reshape(-1, 4096) for i in range(per_shard)}
            path = os.path.join(work, name)
            save_file(tensors, path)
            total += sum(t.nbytes for t in tensors.values())
            for k in tensors:
                weight_map[k] = name
            put_file(path, f"set/{name}")
            os.remove(path)
            names.append(name)
        index = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}).encode()
        index_path = os.path.join(work, "model.safetensors.index.json")
        with open(index_path, "wb") as f:
            f.write(index)
        put_file(index_path, "set/model.safetensors.index.json")
        sizes = {n: s3.head_object(Bucket="bench", Key=f"set/{n}")["ContentLength"] for n in names}
        wire = sum(sizes.values())

        env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true")
        if creds:
            env.update(AWS_ACCESS_KEY_ID=creds["key_id"], AWS_SECRET_ACCESS_KEY=creds["secret"])
        else:
            env["AWS_SKIP_SIGNATURE"] = "true"

        def tensorlane():
            out = subprocess.check_output([exe, "s3://bench/set/model.safetensors.index.json"], env=env)
            r = json.loads(out)
            assert r["bytes"] == total, r
            return r["seconds"]

        def raw():
            cfg = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20,
                                 max_concurrency=16, use_threads=True)
            t = time.perf_counter()
            n = 0
            for name in names:
                sink = Discard()
                s3.download_fileobj("bench", f"set/{name}", sink, Config=cfg)
                n += sink.n
            assert n == wire, (n, wire)
            return time.perf_counter() - t

        def download_then_open(download):
            # Each shard downloaded to disk by `download(key, path)`, then every tensor read with
            # safetensors.safe_open, the file removed.
            d = os.path.join(work, "dl")
            os.makedirs(d, exist_ok=True)
            t = time.perf_counter()
            n = 0
            for name in names:
                p = os.path.join(d, name)
                download(f"set/{name}", p)
                with safe_open(p, framework="numpy") as f:
                    for k in f.keys():
                        n += f.get_tensor(k).nbytes
                os.remove(p)
            assert n == total, (n, total)
            return time.perf_counter() - t

        def one_get(key, path):
            # What huggingface_hub's hf_hub_download does without hf_transfer: one streamed GET a
            # file, written to disk.
            body = s3.get_object(Bucket="bench", Key=key)["Body"]
            with open(path, "wb") as f:
                for chunk in body.iter_chunks(8 << 20):
                    f.write(chunk)

        def usual():
            return download_then_open(lambda key, path: s3.download_file("bench", key, path))

        def single_stream():
            return download_then_open(one_get)

        rows = {"tensorlane for_each_tensor (8 MiB x 16)": [], "boto3 TransferConfig raw GET (8 MiB x 16)": [],
                "download (boto3 download_file), then safetensors.safe_open": [],
                "download (one GET a shard, as hf_hub_download), then safe_open": []}
        for _ in range(args.repeat):
            for label, fn in zip(rows, (tensorlane, raw, usual, single_stream)):
                rows[label].append(fn())
        print(f"\nserver: {args.server}; set: {args.shards} shards, {len(weight_map)} tensors, {total / 1e9:.2f} GB of tensors "
              f"({wire / 1e9:.2f} GB on the wire); median of {args.repeat}\n")
        print("| path | seconds | GB/s | vs raw GET |")
        print("| --- | ---: | ---: | ---: |")
        raw_s = statistics.median(rows["boto3 TransferConfig raw GET (8 MiB x 16)"])
        for label, ts in rows.items():
            m = statistics.median(ts)
            print(f"| {label} | {m:.2f} | {total / m / 1e9:.2f} | {raw_s / m:.2f}x |")

        # Listing.
        gguf = os.path.join(ROOT, "tests/data/fixtures/gguf/tiny-llama.gguf")
        put_file(gguf, "gguf/tiny-llama.gguf")
        print("\n| listing | requests | bytes |")
        print("| --- | ---: | ---: |")
        for label, key in [(f"one shard ({sizes[names[0]] / 1e6:.0f} MB)", f"set/{names[0]}"),
                           (f"index + {len(names)} shards", "set/model.safetensors.index.json"),
                           ("GGUF tiny-llama fixture", "gguf/tiny-llama.gguf")]:
            r = json.loads(subprocess.check_output([exe, f"s3://bench/{key}", "--list"], env=env))
            print(f"| {label} | {r['requests']} | {r['wire_bytes']} |")
    finally:
        # SIGTERM, not SIGKILL: nginx's master then stops its workers too.
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
