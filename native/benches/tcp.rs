//! Packets over loopback TCP: packets/s for small packets and bytes/s for one 64 MiB tensor,
//! through the tokio codec and the blocking helpers, against a raw socket copy loop.
//!
//! ```text
//! cargo bench -p tensorlane --bench tcp -- --warm-up-time 1 --measurement-time 2
//! ```
//!
//! Each measurement opens a fresh loopback connection, sends `iters` packets one way while the
//! other side frames (and, for the codecs, decodes) them, and stops the clock when the last one
//! has arrived.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures::{SinkExt, StreamExt};
use tensorlane::net::{TensoCodec, read_packet_into, write_packet};
use tensorlane_core::wire::{self, EncodeOptions, Packet};
use tensorlane_core::{DType, Tensor};
use tokio_util::codec::{FramedRead, FramedWrite};

fn tensor(nbytes: usize) -> Tensor<'static> {
    let data: Vec<u8> = (0..nbytes).map(|i| (i * 7 % 251) as u8).collect();
    Tensor::new(DType::F32, vec![(nbytes / 4) as u64], data).unwrap()
}

fn tokio_run(rt: &tokio::runtime::Runtime, packet: &Packet<'static>, iters: u64) -> Duration {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let receiver = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut r = FramedRead::new(s, TensoCodec::new());
            let mut n = 0u64;
            while let Some(b) = r.next().await {
                let b = b.unwrap();
                std::hint::black_box(wire::decode(&b).unwrap());
                n += 1;
            }
            n
        });
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        let start = Instant::now();
        let mut w = FramedWrite::new(s, TensoCodec::new());
        for _ in 0..iters {
            w.feed(packet).await.unwrap();
        }
        SinkExt::<&Packet<'_>>::close(&mut w).await.unwrap();
        drop(w);
        assert_eq!(receiver.await.unwrap(), iters);
        start.elapsed()
    })
}

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    (a, b)
}

fn blocking_run(packet: &Packet<'static>, iters: u64, buffered: bool) -> Duration {
    let (a, b) = pair();
    let receiver = std::thread::spawn(move || {
        let mut n = 0u64;
        let mut r = BufReader::with_capacity(256 << 10, b);
        let mut p = Vec::new();
        while read_packet_into(&mut r, &mut p, 1 << 30).unwrap().is_some() {
            std::hint::black_box(wire::decode(&p).unwrap());
            n += 1;
        }
        n
    });
    let start = Instant::now();
    let opts = EncodeOptions::default();
    if buffered {
        let mut w = BufWriter::with_capacity(256 << 10, &a);
        for _ in 0..iters {
            write_packet(&mut w, packet, &opts).unwrap();
        }
        w.flush().unwrap();
    } else {
        let mut w = &a;
        for _ in 0..iters {
            write_packet(&mut w, packet, &opts).unwrap();
        }
    }
    a.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(receiver.join().unwrap(), iters);
    start.elapsed()
}

/// The floor: the same bytes through the same socket with `write_all` / `read_exact` into a
/// preallocated, reused buffer (both sides buffered like the blocking helpers), no framing.
fn raw_run(bytes: &[u8], iters: u64) -> Duration {
    let (a, b) = pair();
    let len = bytes.len();
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; len];
        let mut b = BufReader::with_capacity(256 << 10, b);
        for _ in 0..iters {
            b.read_exact(&mut buf).unwrap();
        }
        std::hint::black_box(&buf);
    });
    let start = Instant::now();
    let mut w = BufWriter::with_capacity(256 << 10, &a);
    for _ in 0..iters {
        w.write_all(bytes).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    receiver.join().unwrap();
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for (label, nbytes) in [("1KiB", 1usize << 10), ("4KiB", 4 << 10)] {
        // The packet is `nbytes` on the wire: header + padding (64) + body.
        let packet = Packet::Dense(tensor(nbytes - 64));
        let encoded = wire::encode(&packet, &EncodeOptions::default()).unwrap();
        assert_eq!(encoded.len(), nbytes);
        let mut g = c.benchmark_group(format!("tcp/packets_{label}"));
        g.throughput(Throughput::Elements(1));
        g.bench_function("tokio_codec", |b| b.iter_custom(|iters| tokio_run(&rt, &packet, iters)));
        g.bench_function("blocking_buffered", |b| {
            b.iter_custom(|iters| blocking_run(&packet, iters, true))
        });
        g.bench_function("raw_socket", |b| b.iter_custom(|iters| raw_run(&encoded, iters)));
        g.finish();
    }
    let nbytes = 64usize << 20;
    let packet = Packet::Dense(tensor(nbytes));
    let encoded = wire::encode(&packet, &EncodeOptions::default()).unwrap();
    let mut g = c.benchmark_group("tcp/tensor_64MiB");
    g.throughput(Throughput::Bytes(encoded.len() as u64));
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("tokio_codec", "64MiB"), |b| {
        b.iter_custom(|iters| tokio_run(&rt, &packet, iters))
    });
    g.bench_function(BenchmarkId::new("blocking_vectored", "64MiB"), |b| {
        b.iter_custom(|iters| blocking_run(&packet, iters, false))
    });
    g.bench_function(BenchmarkId::new("raw_socket", "64MiB"), |b| {
        b.iter_custom(|iters| raw_run(&encoded, iters))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
