//! Loopback TCP: thousands of mixed packets both ways at once, through the tokio codec and through
//! the blocking helpers; every packet must arrive and decode equal to what was sent.

use std::io::{BufWriter, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tensorlane::net::{TensoCodec, read_packet, write_packet, write_packet_bytes};
use tensorlane_core::wire::{
    self, Bundle, EncodeOptions, Packet, QDType, QuantizeParams, Quantized, Sparse, SparseFormat, Strings,
};
use tensorlane_core::{DType, Tensor};
use tokio_util::codec::{Framed, FramedRead, FramedWrite};

/// Packets per direction.
const N: usize = 3000;
/// Wall-clock bound for each transport run.
const LIMIT: Duration = Duration::from_secs(120);

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

fn dense(r: &mut Rng, max_elems: u64) -> Tensor<'static> {
    let dtype = DType::ALL[r.below(DType::ALL.len() as u64) as usize];
    let n = r.below(max_elems + 1);
    let shape = match r.below(4) {
        0 => vec![n],
        1 if n.is_multiple_of(2) => vec![2, n / 2],
        2 if n == 1 => vec![],
        _ => vec![1, n, 1],
    };
    let mut data = r.bytes(n as usize * dtype.itemsize());
    if dtype == DType::Bool {
        data.iter_mut().for_each(|b| *b &= 1);
    }
    Tensor::new(dtype, shape, data).unwrap()
}

fn sparse(r: &mut Rng) -> Sparse<'static> {
    let (rows, cols) = (1 + r.below(40), 1 + r.below(40));
    let nnz = r.below(rows * cols / 2 + 1);
    let data: Vec<f64> = (0..nnz).map(|i| i as f64 * 0.5 - 3.0).collect();
    if r.below(2) == 0 {
        let row: Vec<i64> = (0..nnz).map(|_| r.below(rows) as i64).collect();
        let col: Vec<i32> = (0..nnz).map(|_| r.below(cols) as i32).collect();
        Sparse {
            format: SparseFormat::Coo,
            shape: vec![rows, cols],
            components: [
                Tensor::from_values(vec![nnz], &data).unwrap(),
                Tensor::from_values(vec![nnz], &row).unwrap(),
                Tensor::from_values(vec![nnz], &col).unwrap(),
            ],
        }
    } else {
        // CSR: spread nnz over rows.
        let mut counts = vec![0u64; rows as usize];
        for _ in 0..nnz {
            counts[r.below(rows) as usize] += 1;
        }
        let mut indptr = vec![0i32];
        let mut indices = Vec::new();
        for c in counts {
            for _ in 0..c {
                indices.push(r.below(cols) as i32);
            }
            indptr.push(indices.len() as i32);
        }
        Sparse {
            format: SparseFormat::Csr,
            shape: vec![rows, cols],
            components: [
                Tensor::from_values(vec![nnz], &data).unwrap(),
                Tensor::from_values(vec![nnz], &indices).unwrap(),
                Tensor::from_values(vec![rows + 1], &indptr).unwrap(),
            ],
        }
    }
}

fn quantized(r: &mut Rng) -> Quantized<'static> {
    let (a, b) = (1 + r.below(16), 1 + r.below(64));
    let values: Vec<f32> = (0..a * b).map(|_| (r.below(2000) as f32 - 1000.0) / 37.0).collect();
    let q = [QDType::QInt8, QDType::QUInt8, QDType::QInt4, QDType::QUInt4][r.below(4) as usize];
    let params = match r.below(3) {
        0 => QuantizeParams::PerTensor,
        1 => QuantizeParams::PerChannel {
            axis: r.below(2) as i64,
        },
        _ => QuantizeParams::PerGroup {
            group_size: 1 + r.below(9) as u32,
        },
    };
    Quantized::quantize(&values, &[a, b], q, params).unwrap()
}

fn strings(r: &mut Rng) -> Strings<'static> {
    let words = ["", "a", "tensor", "βeta", "🦀", "lane", "0123456789"];
    let items: Vec<String> = (0..r.below(30))
        .map(|_| words[r.below(words.len() as u64) as usize].repeat(1 + r.below(3) as usize))
        .collect();
    Strings::from_items(&items)
}

fn leaf(r: &mut Rng) -> Packet<'static> {
    match r.below(5) {
        0 | 1 => Packet::Dense(dense(r, 300)),
        2 => Packet::from(sparse(r)),
        3 => Packet::from(quantized(r)),
        _ => Packet::Strings(strings(r)),
    }
}

/// Packet `i` of a side, and the options to encode it with. Sizes run from empty to 1 MiB.
fn make(seed: u64, i: usize) -> (Packet<'static>, EncodeOptions) {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let mut opts = EncodeOptions {
        integrity: r.below(3) == 0,
        ..EncodeOptions::default()
    };
    if r.below(4) == 0 {
        opts.alignment = 1 << r.below(8);
    }
    let p = match i % 10 {
        0..=3 => Packet::Dense(dense(&mut r, if i % 500 == 7 { 256 << 10 } else { 1024 })),
        4 => Packet::from(sparse(&mut r)),
        5 => Packet::from(quantized(&mut r)),
        6 => Packet::Strings(strings(&mut r)),
        _ => {
            // Bundles may compress their dense leaves: entries are length-prefixed, so they frame.
            opts.compress = r.below(2) == 0;
            opts.sparse_integrity = opts.integrity;
            let mut b = Bundle::new();
            for k in 0..r.below(6) {
                let v = if r.below(5) == 0 {
                    Packet::Bundle(Bundle::new().with("inner", leaf(&mut r)))
                } else {
                    leaf(&mut r)
                };
                b = b.with(format!("k{k}"), v);
            }
            Packet::Bundle(b)
        }
    };
    (p, opts)
}

fn corpus(seed: u64) -> Arc<Vec<(Packet<'static>, EncodeOptions)>> {
    Arc::new((0..N).map(|i| make(seed, i)).collect())
}

fn check(received: &[u8], expected: &Packet<'_>, i: usize, side: &str) {
    let got = wire::decode_with(
        received,
        &wire::DecodeOptions {
            allow_trailing_bytes: false,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{side} packet {i}: {e}"));
    assert_eq!(got.packet, *expected, "{side} packet {i}");
}

async fn tokio_side(
    socket: tokio::net::TcpStream,
    send: Arc<Vec<(Packet<'static>, EncodeOptions)>>,
    expect: Arc<Vec<(Packet<'static>, EncodeOptions)>>,
    side: &'static str,
) -> usize {
    socket.set_nodelay(true).unwrap();
    let (rd, wr) = socket.into_split();
    let codec = TensoCodec::new().with_max_packet_bytes(8 << 20);
    let mut stream = FramedRead::new(rd, codec.clone());
    let mut sink = FramedWrite::new(wr, codec);
    let sender = async move {
        for (i, (p, opts)) in send.iter().enumerate() {
            if i % 2 == 0 {
                // Pre-encoded bytes, with this packet's own options.
                let b = Bytes::from(wire::encode(p, opts).unwrap());
                SinkExt::<Bytes>::feed(&mut sink, b).await.unwrap();
            } else {
                // A Packet value, encoded by the codec (default options).
                SinkExt::<&Packet<'_>>::feed(&mut sink, p).await.unwrap();
            }
            if i % 64 == 63 {
                SinkExt::<Bytes>::flush(&mut sink).await.unwrap();
            }
        }
        SinkExt::<Bytes>::close(&mut sink).await.unwrap();
    };
    let receiver = async move {
        let mut n = 0;
        while let Some(b) = stream.next().await {
            let b = b.unwrap_or_else(|e| panic!("{side}: {e}"));
            assert!(n < expect.len(), "{side}: more packets than sent");
            check(&b, &expect[n].0, n, side);
            n += 1;
        }
        n
    };
    let ((), n) = tokio::join!(sender, receiver);
    n
}

#[test]
fn tokio_codec_both_ways() {
    let (a, b) = (corpus(1), corpus(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let start = Instant::now();
    let (na, nb) = rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (a1, b1, a2, b2) = (a.clone(), b.clone(), a.clone(), b.clone());
            let server = tokio::spawn(async move {
                let (s, _) = listener.accept().await.unwrap();
                tokio_side(s, b1, a1, "server").await
            });
            let client = tokio::spawn(async move {
                let s = tokio::net::TcpStream::connect(addr).await.unwrap();
                tokio_side(s, a2, b2, "client").await
            });
            (server.await.unwrap(), client.await.unwrap())
        })
        .await
        .expect("loopback exchange finished in time")
    });
    assert_eq!((na, nb), (N, N));
    eprintln!("tokio: {N} packets each way in {:?}", start.elapsed());
}

fn blocking_side(
    stream: TcpStream,
    send: Arc<Vec<(Packet<'static>, EncodeOptions)>>,
    expect: Arc<Vec<(Packet<'static>, EncodeOptions)>>,
    side: &'static str,
) -> usize {
    stream.set_nodelay(true).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    stream.set_write_timeout(Some(LIMIT)).unwrap();
    let w = stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut w = BufWriter::with_capacity(64 << 10, w);
        for (i, (p, opts)) in send.iter().enumerate() {
            if i % 3 == 0 {
                write_packet_bytes(&mut w, &wire::encode(p, opts).unwrap()).unwrap();
            } else {
                write_packet(&mut w, p, opts).unwrap();
            }
        }
        w.flush().unwrap();
        w.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
    });
    // Unbuffered reads: read_packet must take exactly one packet each time.
    let mut r = &stream;
    let mut n = 0;
    while let Some(bytes) = read_packet(&mut r).unwrap_or_else(|e| panic!("{side}: {e}")) {
        assert!(n < expect.len(), "{side}: more packets than sent");
        check(&bytes, &expect[n].0, n, side);
        n += 1;
    }
    writer.join().unwrap();
    n
}

#[test]
fn blocking_helpers_both_ways() {
    let (a, b) = (corpus(3), corpus(4));
    let start = Instant::now();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (a1, b1) = (a.clone(), b.clone());
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        blocking_side(s, b1, a1, "server")
    });
    let client = blocking_side(TcpStream::connect(addr).unwrap(), a, b, "client");
    assert_eq!(server.join().unwrap(), N);
    assert_eq!(client, N);
    assert!(start.elapsed() < LIMIT);
    eprintln!("blocking: {N} packets each way in {:?}", start.elapsed());
}

#[test]
fn codec_refuses_oversized_header_over_tcp() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            // A dense u8 header declaring 10^8 elements, then nothing.
            let t = Tensor::new(DType::U8, vec![4], vec![0u8; 4]).unwrap();
            let mut p = wire::encode(&Packet::Dense(t), &EncodeOptions::default()).unwrap();
            p[10..14].copy_from_slice(&100_000_000u32.to_le_bytes());
            s.write_all(&p[..64]).await.unwrap();
            s // keep the socket open: the refusal must come from the header alone
        });
        let (s, _) = listener.accept().await.unwrap();
        let mut framed = Framed::new(s, TensoCodec::new().with_max_packet_bytes(1 << 20));
        let r = tokio::time::timeout(Duration::from_secs(10), framed.next())
            .await
            .expect("refused without waiting");
        let e = r.unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("limit of 1048576"), "{e}");
        drop(sender.await.unwrap());
    });
}
