//! # tensorlane-fuzz-targets
//!
//! The body of every fuzz target, one plain function per parser entry point, so that the same
//! code runs under libFuzzer (`fuzz/fuzz_targets/*.rs`, `cargo +nightly fuzz run NAME`, see
//! `fuzz/README.md` and `scripts/fuzz.sh`) and under an ordinary `cargo test` on stable
//! (`tests/replay.rs` feeds every file of the saved corpus `fuzz/corpus/NAME/` to [`run`]).
//!
//! Each function takes any bytes and must never panic, hang, or allocate what the input merely
//! claims; the assertions inside are properties the parsers promise (a decoded packet re-encodes
//! to itself, a range read agrees with the full decode, ...). Whole-tensor reads are skipped
//! above [`MAX_READ`] so that a fuzzer's memory limit is never the finding.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, ggml};
use tensorlane_core::wire::{self, DecodeOptions, EncodeOptions, StreamDecoder, StreamLimits};
use tensorlane_core::zt::legacy::{self, LegacyReader};
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::seekable::{self, SeekTable};

/// The largest declared tensor, part or decompressed body a target reads whole (64 MiB).
pub const MAX_READ: u64 = 64 << 20;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target: its name (the cargo-fuzz binary and the corpus folder `fuzz/corpus/NAME`) and
/// its body.
pub const TARGETS: &[(&str, Target)] = &[
    ("wire_decode", wire_decode),
    ("wire_stream", wire_stream),
    ("zt_open", zt_open),
    ("zt_legacy", zt_legacy),
    ("zt_seekable", zt_seekable),
    ("formats_open", formats_open),
    ("format_safetensors", format_safetensors),
    ("format_gguf", format_gguf),
    ("format_pt", format_pt),
    ("format_npy", format_npy),
    ("format_npz", format_npz),
    ("format_onnx", format_onnx),
    ("format_hdf5", format_hdf5),
    ("formats_tenso", formats_tenso),
    ("pickle", pickle),
    ("bindings_packets", bindings_packets),
    ("bindings_zt", bindings_zt),
    ("bindings_formats", bindings_formats),
    ("bindings_stats", bindings_stats),
];

/// Runs the target called `name` on `data`; `false` when there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, f)) => {
            f(data);
            true
        }
        None => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Tenso packets

/// Any bytes: decode, measure and re-encode must never panic, and a packet that decodes must
/// re-encode to bytes that decode and re-encode to themselves (compared as bytes: scales may be
/// NaN, which no `==` on values would accept).
pub fn wire_decode(data: &[u8]) {
    let _ = wire::measure(data);
    let opts = DecodeOptions {
        max_decompressed_bytes: MAX_READ,
        ..Default::default()
    };
    if let Ok(d) = wire::decode_with(data, &opts)
        && let Ok(again) = wire::encode(&d.packet, &EncodeOptions::default())
    {
        let back = wire::decode_with(&again, &opts).expect("re-encoded packet must decode");
        let third = wire::encode(&back.packet, &EncodeOptions::default()).expect("decoded packet must encode");
        assert_eq!(third, again);
    }
}

/// Any bytes in any chunking (the first byte picks the chunk size): the stream decoder must never
/// panic, and every packet it pops is non-empty and exactly what `measure` frames.
pub fn wire_stream(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let step = (first as usize % 17) + 1;
    let mut s = StreamDecoder::with_limits(StreamLimits {
        max_packet_bytes: 1 << 20,
        max_buffered_bytes: 2 << 20,
    });
    for chunk in rest.chunks(step) {
        if s.push(chunk).is_err() {
            return;
        }
        while let Ok(Some(p)) = s.next_packet() {
            assert!(!p.is_empty());
            assert_eq!(
                wire::measure(&p).ok(),
                Some(wire::Measure::Complete(p.len())),
                "a popped packet is one whole packet"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// .zt

fn zt_exercise(data: &[u8]) {
    let Ok(r) = Reader::open(data) else { return };
    let objects: Vec<String> = r.objects().map(String::from).collect();
    for o in &objects {
        let _ = r.check_object(o);
        let parts: Vec<String> = r
            .object(o)
            .map(|x| x.parts.keys().cloned().collect())
            .unwrap_or_default();
        for p in &parts {
            let _ = r.view(o, p);
            let _ = r.locate(o, p);
            if r.part(o, p).is_ok_and(|x| x.decoded_size() <= MAX_READ) {
                let _ = r.verify_part(o, p);
            }
        }
        let _ = r.read_csr(o);
        let _ = r.read_coo(o);
        let _ = r.tensor(o);
    }
}

/// The `.zt` v2 validator and every read path of the Reader (view, locate, verify, read_csr/coo,
/// tensor, profile checks). Each input runs twice: as is, and with the footer's manifest hash
/// recomputed, so mutated manifests get past the hash check and reach the CBOR decoder, the
/// schema walk and the blob/layout checks. Where the stored hash is already right the second
/// image is the first, byte for byte, and is not run again.
pub fn zt_open(data: &[u8]) {
    zt_exercise(data);
    let n = data.len();
    if n < 48 {
        return;
    }
    let f = n - 40;
    let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
    let (off, len) = (word(f), word(f + 8));
    if let Some(end) = off.checked_add(len)
        && len > 0
        && end <= f as u64
    {
        let h = tensorlane_core::hash::xxh3_64(&data[off as usize..end as usize]).to_le_bytes();
        if data[f + 16..f + 24] != h {
            let mut fixed = data.to_vec();
            fixed[f + 16..f + 24].copy_from_slice(&h);
            zt_exercise(&fixed);
        }
    }
}

/// Any bytes as a legacy `.zt` (v1.2 / v0.1) file: open, read every component, convert to the v2
/// structure. zstd output is exactly each component's declared length (components declaring more
/// than [`MAX_READ`] are skipped).
pub fn zt_legacy(data: &[u8]) {
    let Ok(r) = LegacyReader::open(data) else { return };
    let mut small = true;
    for o in r.objects() {
        for c in &o.components {
            if c.uncompressed_length.is_some_and(|u| u > MAX_READ) {
                small = false;
                continue;
            }
            if let Ok(b) = r.read(&o.name, &c.role)
                && let Some(u) = c.uncompressed_length.filter(|_| c.encoding != legacy::Encoding::Raw)
            {
                assert_eq!(b.len() as u64, u, "zstd output must be exactly uncompressed_length");
            }
        }
    }
    if small {
        let _ = r.to_v2();
    }
}

/// Any bytes as `zt.zstd-seekable/1` stored bytes. The first 16 input bytes choose
/// `decoded_length` (u32, or the seek table's own total), a range offset and length; the rest is
/// the stored stream. Parsing, range reads and (up to [`MAX_READ`]) full decoding must never
/// panic, and whatever decodes has exactly the requested length and agrees with the full decode.
pub fn zt_seekable(data: &[u8]) {
    if data.len() < 16 {
        return;
    }
    let word = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
    let stored = &data[16..];
    let decoded_length = if word(0) & 1 == 0 {
        u64::from(word(4))
    } else {
        match SeekTable::parse(stored, 0) {
            Ok(t) => t.decoded_length,
            Err(e) => e
                .message
                .rsplit_once("frames add up to ")
                .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
                .unwrap_or(0),
        }
    };
    let Ok(table) = SeekTable::parse(stored, decoded_length) else {
        return;
    };
    let offset = u64::from(word(8)) % (decoded_length + 1);
    let len = (u64::from(word(12)) % (1 << 20)).min(decoded_length - offset);
    let range = seekable::read_range(stored, decoded_length, offset, len);
    if let Ok(r) = &range {
        assert_eq!(r.len() as u64, len);
    }
    if decoded_length <= MAX_READ
        && let Ok(all) = seekable::decode(stored, decoded_length)
    {
        assert_eq!(all.len() as u64, decoded_length);
        let again = SeekTable::parse(stored, decoded_length).expect("parsed once, parses again");
        assert_eq!(table.frames.len(), again.frames.len());
        if let Ok(r) = range {
            assert_eq!(&r[..], &all[offset as usize..(offset + len) as usize]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Foreign model formats

/// Opens `data` as `format` and reads every tensor it lists (up to [`MAX_READ`] each; companion
/// files are stood in for by the input itself), dequantizing ggml blocks.
fn open_and_read(format: Format, data: &[u8]) {
    let Ok(cat) = formats::open_as(format, data) else {
        return;
    };
    let sources: Vec<&[u8]> = cat.sources.iter().map(|_| data).collect();
    for t in &cat.tensors {
        if t.nbytes().is_some_and(|n| n <= MAX_READ)
            && let Ok(bytes) = formats::read(format.name(), t, &sources)
        {
            assert_eq!(Some(bytes.len() as u64), t.nbytes(), "tensor '{}': read size", t.name);
            if let formats::ElementType::Ggml(g) = t.ty {
                let _ = ggml::dequantize(g, &bytes);
            }
        }
    }
}

/// Every foreign-format parser on every input, whatever its magic bytes: detection, then each
/// format in turn ([`open_and_read`]).
pub fn formats_open(data: &[u8]) {
    let _ = formats::detect_source(data);
    let _ = formats::open(data);
    for f in [
        Format::Safetensors,
        Format::SafetensorsIndex,
        Format::Gguf,
        Format::PyTorch,
        Format::Npy,
        Format::Npz,
        Format::Onnx,
        Format::Hdf5,
    ] {
        open_and_read(f, data);
    }
}

/// safetensors (and its index's checks): open and read every tensor.
pub fn format_safetensors(data: &[u8]) {
    open_and_read(Format::Safetensors, data);
    let _ = formats::open_as(Format::SafetensorsIndex, data);
}

/// GGUF: open, read and dequantize every tensor.
pub fn format_gguf(data: &[u8]) {
    open_and_read(Format::Gguf, data);
}

/// PyTorch `.pt` (zip with `data.pkl`, and the legacy pickle stream): open and read every tensor.
pub fn format_pt(data: &[u8]) {
    open_and_read(Format::PyTorch, data);
}

/// NumPy `.npy`: open and read the array.
pub fn format_npy(data: &[u8]) {
    open_and_read(Format::Npy, data);
}

/// NumPy `.npz` (zip of `.npy`, stored or deflated): open and read every array.
pub fn format_npz(data: &[u8]) {
    open_and_read(Format::Npz, data);
}

/// ONNX (protobuf; initializers inline or in external data): open and read every tensor.
pub fn format_onnx(data: &[u8]) {
    open_and_read(Format::Onnx, data);
}

/// HDF5 (superblocks, object headers, B-trees, chunks and filters): open and read every dataset.
pub fn format_hdf5(data: &[u8]) {
    open_and_read(Format::Hdf5, data);
}

/// Tenso packet files as a catalog (`formats::tenso::open`): open, read every tensor and every
/// part with the catalog's checks, run every check; the catalog refuses exactly what the decoder
/// refuses (the first packet must decode, later ones too when they start with the magic), and a
/// dense leaf it reads is the decoder's bytes.
pub fn formats_tenso(data: &[u8]) {
    let opts = DecodeOptions {
        max_decompressed_bytes: MAX_READ,
        ..Default::default()
    };
    // The decoder's verdict on the file, and the dense leaves of a lone packet (the catalog
    // names them `#0` or by key path).
    let mut decoded = Vec::new();
    let mut off = 0;
    let mut accepted = !data.is_empty();
    while accepted && off < data.len() {
        if !decoded.is_empty() && !data[off..].starts_with(&wire::MAGIC) {
            break;
        }
        match wire::decode_with(&data[off..], &opts) {
            Ok(d) => {
                off += d.len;
                decoded.push(d.packet);
            }
            Err(_) => accepted = false,
        }
    }
    let limits = formats::ReadLimits {
        max_tensor_bytes: MAX_READ,
    };
    let cat = match formats::open_as(Format::Tenso, data) {
        Ok(c) => c,
        Err(e) => {
            assert!(!accepted || oversized(&e), "the decoder accepts what open refuses: {e}");
            return;
        }
    };
    let sources = [data];
    let mut refused = false;
    for t in &cat.tensors {
        match &t.storage {
            formats::Storage::Parts(p) => {
                for part in &p.parts {
                    match formats::read_part("tenso", t, &part.name, &sources, &cat.checks, &limits) {
                        Ok(b) => assert_eq!(b.len() as u64, part.len, "tensor '{}' part '{}'", t.name, part.name),
                        Err(e) => refused |= !oversized(&e),
                    }
                }
            }
            _ => match formats::read_limited("tenso", t, &sources, &cat.checks, &limits) {
                Ok(b) => {
                    assert_eq!(Some(b.len() as u64), t.nbytes(), "tensor '{}': read size", t.name);
                    if decoded.len() == 1
                        && let Some(tn) = decoded[0].as_dense()
                    {
                        assert_eq!(&b[..], tn.data(), "tensor '{}': the decoder's bytes", t.name);
                    }
                }
                Err(e) => refused |= !oversized(&e),
            },
        }
    }
    for c in &cat.checks {
        refused |= formats::check_integrity("tenso", c, &sources).is_err();
    }
    if accepted {
        assert!(!refused, "the decoder accepts what reading the catalog refuses");
    } else {
        // What the decoder refuses, open or a read refuses (unless only over the read cap).
        assert!(
            refused || decoded_over_cap(data),
            "the decoder refuses what the catalog reads"
        );
    }
}

/// A refusal for size alone (the fuzz cap on whole reads), not for the bytes.
fn oversized(e: &formats::FormatError) -> bool {
    e.kind == formats::ErrorKind::Limit
}

/// Whether the decoder's refusal of `data` is its decompression cap ([`MAX_READ`]) alone.
fn decoded_over_cap(data: &[u8]) -> bool {
    let mut off = 0;
    let mut first = true;
    while off < data.len() {
        if !first && !data[off..].starts_with(&wire::MAGIC) {
            return false;
        }
        first = false;
        match wire::decode_with(&data[off..], &DecodeOptions::default()) {
            Ok(d) => off += d.len,
            Err(e) => return matches!(e.kind(), wire::ErrorKind::LimitExceeded { .. }),
        }
    }
    true
}

/// The pickle machine alone (what `.pt` files run): any bytes up to `STOP`.
pub fn pickle(data: &[u8]) {
    let _ = formats::pickle::load(data);
}

// ---------------------------------------------------------------------------------------------
// The JavaScript-facing entry points (`tensorlane-bindings`, shared by the wasm build and the addon)

/// Splits `data` into a JSON plan (up to the first NUL) and buffers (the rest, cut at every
/// `0xFF 0x00`), as the plan entry points take them from JavaScript.
fn plan_and_buffers(data: &[u8]) -> Option<(&str, Vec<&[u8]>)> {
    let nul = data.iter().position(|&b| b == 0)?;
    let plan = std::str::from_utf8(&data[..nul]).ok()?;
    let mut bufs = Vec::new();
    let mut rest = &data[nul + 1..];
    while let Some(cut) = rest.windows(2).position(|w| w == [0xFF, 0x00]) {
        bufs.push(&rest[..cut]);
        rest = &rest[cut + 2..];
    }
    bufs.push(rest);
    Some((plan, bufs))
}

/// The packet entry points `decodeRaw`/`encodeRaw`/`dequantizeRaw` take: the first byte's low
/// bit picks decode (option bits from the rest of that byte, then the packet; the descriptor is
/// built as `decodeRaw`'s slow path builds it, and its owned buffers and offsets must lie inside
/// what was decoded) or a plan (`{"value": ..., "options": ...}` then buffers, see
/// [`plan_and_buffers`]) that is encoded, decoded again and dequantized.
pub fn bindings_packets(data: &[u8]) {
    use tensorlane_bindings::packets;
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    if first & 1 == 0 {
        let opts = packets::decode_options(u32::from(first >> 1), MAX_READ as f64);
        if let Ok(d) = wire::decode_with(rest, &opts) {
            let (mut json, mut owned) = (String::new(), Vec::new());
            packets::describe(&mut json, d.packet, rest, 0, &mut owned);
            assert!(!json.is_empty());
        }
    } else if let Some((plan, bufs)) = plan_and_buffers(rest) {
        if let Ok(bytes) = packets::encode_plan(plan, &bufs) {
            wire::decode(&bytes).expect("an encoded plan decodes");
        }
        let _ = packets::dequantize_plan(plan, &bufs);
    }
}

/// `.zt` files as JS opens them since they go through the one `open()`: the input through the
/// byte-range session with the format forced to `.zt` (open, every tensor and every part read,
/// verify; shards registered as missing), and, when it starts with `{`, as a `writeZt` plan whose
/// output must open, read and verify through the same session.
pub fn bindings_zt(data: &[u8]) {
    let _ = zt_session(data);
    if data.first() == Some(&b'{')
        && let Some((plan, bufs)) = plan_and_buffers(data)
        && let Ok(file) = tensorlane_bindings::write::write_plan(plan, &bufs)
    {
        zt_session(&file).expect("a written .zt opens, reads and verifies through the session");
    }
}

/// Runs one session step to its end, answering its needs from `file` (a companion it asks for is
/// registered as missing); `None` when it asked for more than [`MAX_READ`] or for bytes of another
/// file, or did not finish in 64 rounds.
fn settle<T>(
    s: &mut tensorlane_bindings::formats::Session,
    file: &[u8],
    transient: bool,
    mut step: impl FnMut(&mut tensorlane_bindings::formats::Session) -> tensorlane_bindings::formats::Step<T>,
) -> Option<Result<T, formats::FormatError>> {
    use tensorlane_bindings::formats::Step;
    for _ in 0..64 {
        match step(s) {
            Step::Done(v) => return Some(Ok(v)),
            Step::Failed(e) => return Some(Err(e)),
            Step::Need {
                source,
                offset,
                len,
                register,
                ..
            } => {
                if register {
                    s.add_missing(&source, "not in the fuzz input");
                    continue;
                }
                let end = offset
                    .checked_add(len)
                    .filter(|&e| source.is_empty() && len <= MAX_READ && e <= file.len() as u64)?;
                s.add_piece(&source, offset, file[offset as usize..end as usize].to_vec(), transient)
                    .ok()?;
            }
        }
    }
    None
}

/// [`bindings_zt`]'s session over one file: the first step that fails, else `Ok`.
fn zt_session(file: &[u8]) -> Result<(), formats::FormatError> {
    use tensorlane_bindings::formats::Session;
    let Ok(mut s) = Session::new(file.len() as u64, "fuzz.zt", "zt") else {
        return Ok(());
    };
    match settle(&mut s, file, false, |s| s.open()) {
        None => return Ok(()),
        Some(r) => r.map(|_| ())?,
    }
    // The catalog the session opened, to name the parts.
    let cat = formats::open_as(Format::Zt, file)?;
    let limits = formats::ReadLimits {
        max_tensor_bytes: MAX_READ,
    };
    for (i, t) in cat.tensors.iter().enumerate() {
        if let formats::Storage::Parts(p) = &t.storage {
            for part in &p.parts {
                if let Some(r) = settle(&mut s, file, true, |s| s.read_part(i, &part.name, &limits)) {
                    r?;
                }
            }
        } else if let Some(r) = settle(&mut s, file, true, |s| s.read_limited(i, &limits)) {
            r?;
        }
    }
    if let Some(r) = settle(&mut s, file, true, |s| s.verify()) {
        r?;
    }
    Ok(())
}

/// The model-format session JS drives (`FormatSession`: open, then read each tensor), answering
/// every "need" from the input itself, companions registered as the input too. The first byte
/// forces a format (0: detect; see `format_from_name`); steps are bounded.
pub fn bindings_formats(data: &[u8]) {
    use tensorlane_bindings::formats::{Session, Step};
    const NAMES: [&str; 14] = [
        "",
        "safetensors",
        "safetensors-index",
        "gguf",
        "pt",
        "pt-legacy",
        "npy",
        "npz",
        "onnx",
        "hdf5",
        "zt",
        "zt-v1",
        "zt-v0",
        "tenso",
    ];
    let Some((&first, file)) = data.split_first() else {
        return;
    };
    let size = file.len() as u64;
    let Ok(mut s) = Session::new(size, "model-00001-of-00002.gguf", NAMES[first as usize % NAMES.len()]) else {
        return;
    };
    // Answers a need: registers the companion, or adds the asked range from `file`.
    let answer = |s: &mut Session, source: &str, offset: u64, len: u64, register: bool, transient: bool| -> bool {
        if register {
            s.add_source(source, size);
            return true;
        }
        let Some(end) = offset.checked_add(len).filter(|&e| e <= size) else {
            return false;
        };
        s.add_piece(source, offset, file[offset as usize..end as usize].to_vec(), transient)
            .is_ok()
    };
    let mut opened = false;
    for _ in 0..32 {
        match s.open() {
            Step::Done(json) => {
                assert!(json.starts_with('{'));
                opened = true;
                break;
            }
            Step::Need {
                source,
                offset,
                len,
                register,
                ..
            } => {
                if !answer(&mut s, &source, offset, len, register, false) {
                    return;
                }
            }
            Step::Failed(_) => return,
        }
    }
    if !opened {
        return;
    }
    for index in 0..64 {
        for _ in 0..32 {
            match s.read(index) {
                Step::Need {
                    source,
                    offset,
                    len,
                    register,
                    ..
                } => {
                    if len > MAX_READ || !answer(&mut s, &source, offset, len, register, true) {
                        break;
                    }
                }
                Step::Done(_) | Step::Failed(_) => break,
            }
        }
    }
}

/// The statistics passes JS drives (`StatsSummary`, `StatsHistogram`): the first byte picks an
/// element type (a dtype name or a ggml type id), the second the slice size; the rest are the
/// tensor's stored bytes, pushed slice by slice through both passes.
pub fn bindings_stats(data: &[u8]) {
    use tensorlane_bindings::stats::{HistogramPass, SummaryPass};
    const DTYPES: [&str; 12] = [
        "float32",
        "float16",
        "bfloat16",
        "float64",
        "int8",
        "uint8",
        "int64",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
        "float4_e2m1fn",
        "complex64",
    ];
    if data.len() < 2 {
        return;
    }
    let (pick, step, body) = (data[0], usize::from(data[1]) + 1, &data[2..]);
    let (dtype, ggml) = if pick & 0x80 != 0 {
        ("", f64::from(pick & 0x3F))
    } else {
        (DTYPES[pick as usize % DTYPES.len()], -1.0)
    };
    // Elements from the stored size; the pass refuses sizes that do not match.
    let itemsize = match dtype {
        "float64" | "int64" | "complex64" => 8,
        "float32" => 4,
        "float16" | "bfloat16" => 2,
        _ => 1,
    };
    let elements = (body.len() / itemsize) as f64;
    let Ok(mut sum) = SummaryPass::new(dtype, ggml, elements, body.len() as f64) else {
        return;
    };
    for c in body.chunks(step) {
        sum.push(c);
    }
    let summary = sum.summary();
    assert!(summary.starts_with('{'));
    let Ok(mut h) = HistogramPass::new(dtype, ggml, elements, 1.0, -1.0, 1.0, 1 + u32::from(pick & 0x0F)) else {
        return;
    };
    for c in body.chunks(step) {
        h.push(c);
    }
    h.finish().expect("first finish");
    assert!(h.finish().is_err(), "finishing twice is an error");
}
