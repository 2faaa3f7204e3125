//! What a packet file holds: the engine of `tensorlane inspect`.
//!
//! [`inspect_bytes`] decodes every packet in a buffer (a file may hold several back to back, as
//! tenso's `write_stream` writes them) and describes each tensor: kind, dtype, shape, sizes, header
//! flags, sparse components, quantization metadata, string counts and, on request, the SHA-256 of
//! its C-order little-endian bytes. The [`Report`] serialises to the JSON that `inspect --json`
//! prints:
//!
//! ```json
//! {"format": "tenso", "file": "x.tenso", "bytes": 88, "packets": 1,
//!  "tensors": [{"name": "#0", "kind": "dense", "dtype": "float32", "shape": [2, 3], "nbytes": 24, ...}]}
//! ```
//!
//! Names: bundle entries go by their key path joined with `/`; a root that is not a bundle is
//! `#0`. In a file of several packets every name is prefixed with the packet index (`#1/key`).

use serde::Serialize;
use tensorlane_core::formats::tenso::flag_names;
use tensorlane_core::wire::{self, Packet, flags};

use crate::error::CliError;
use crate::output::{Table, finish, progress, render_table, sha256_hex, shape_str};

/// How to inspect.
#[derive(Clone, Debug, Default)]
pub struct InspectOptions {
    /// Compute the SHA-256 of every tensor's bytes.
    pub hash: bool,
    /// Show a progress bar on stderr while hashing (only drawn when stderr is a terminal and
    /// there is enough to hash to be worth it).
    pub progress: bool,
}

/// Everything `inspect` found in one file.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always `"tenso"` for now (later: every model format).
    pub format: &'static str,
    /// The file name as given.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Number of packets in the file.
    pub packets: usize,
    /// Bytes after the last packet that are not a packet (ignored, as tenso ignores them).
    #[serde(skip_serializing_if = "is_zero")]
    pub trailing_bytes: u64,
    /// Every tensor, in file order.
    pub tensors: Vec<TensorRow>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One tensor (a leaf packet: dense, sparse, quantized or string).
#[derive(Clone, Debug, Serialize)]
pub struct TensorRow {
    /// Key path (`layer0/weight`), `#0` for a non-bundle root, `#i/...` in multi-packet files.
    pub name: String,
    /// `"dense"`, `"sparse"`, `"quantized"` or `"string"`.
    pub kind: &'static str,
    /// NumPy dtype name; the data dtype for sparse, `qint8`.. for quantized, `"string"` for strings.
    pub dtype: String,
    /// Logical shape.
    pub shape: Vec<u64>,
    /// Bytes of tensor data: element bytes (dense), packed bytes (quantized), the three
    /// components (sparse), payload bytes (strings).
    pub nbytes: u64,
    /// SHA-256 of the tensor's C-order little-endian bytes (dense, quantized packed bytes,
    /// string payload), when hashing was requested. Sparse components carry their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Index of the packet in the file.
    pub packet: usize,
    /// Byte offset of this (sub-)packet in the file.
    pub offset: u64,
    /// Bytes this (sub-)packet spans on the wire.
    pub packet_bytes: u64,
    /// Bytes of its body on the wire (the LZ4 frame, when compressed).
    pub body_bytes: u64,
    /// The body is LZ4-compressed.
    pub compressed: bool,
    /// An XXH3 footer protects the body (it was verified).
    pub integrity: bool,
    /// Body alignment relative to the packet start.
    pub alignment: u64,
    /// Header flag names.
    pub flags: Vec<&'static str>,
    /// Kind-specific fields.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
}

/// Kind-specific fields of a [`TensorRow`].
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Detail {
    /// A sparse matrix.
    Sparse {
        /// `"coo"`, `"csr"` or `"csc"`.
        format: &'static str,
        /// Stored values.
        nnz: u64,
        /// The three components, in wire order.
        components: Vec<ComponentInfo>,
    },
    /// A quantized tensor.
    Quantized {
        /// `"per_tensor"`, `"per_channel"`, `"per_group"` or `"unknown"`.
        scheme: &'static str,
        /// The channel axis byte as on the wire.
        axis: u8,
        /// The group size as on the wire.
        group_size: u32,
        /// Number of scales (and zero points).
        num_scales: usize,
        /// The scales, when there are at most 16.
        #[serde(skip_serializing_if = "Option::is_none")]
        scales: Option<Vec<f32>>,
        /// The zero points, when there are at most 16.
        #[serde(skip_serializing_if = "Option::is_none")]
        zero_points: Option<Vec<f32>>,
    },
    /// A string tensor.
    Strings {
        /// Number of strings.
        count: usize,
        /// Whether every string is valid UTF-8.
        utf8: bool,
    },
}

/// One sparse component.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentInfo {
    /// `data`, `row`, `col`, `indices` or `indptr`.
    pub name: &'static str,
    /// NumPy dtype name.
    pub dtype: &'static str,
    /// Its shape (1-D).
    pub shape: Vec<u64>,
    /// Element bytes.
    pub nbytes: u64,
    /// SHA-256 of its bytes, when hashing was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Bytes the component packet spans on the wire.
    pub packet_bytes: u64,
    /// An XXH3 footer protects it.
    pub integrity: bool,
}

/// Little-endian u32 at `at`, if the bytes are there.
fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// A byte range to hash and where its digest goes.
struct Job<'a> {
    tensor: usize,
    component: Option<usize>,
    data: &'a [u8],
}

/// Walks a decoded packet alongside its (already validated) bytes, to recover each sub-packet's
/// wire span and header. Returns `None` only if the bytes do not match the decoded tree, which
/// decoding has ruled out; callers treat that as an internal error.
struct Walker<'a> {
    packet: usize,
    multi: bool,
    infos: Vec<TensorRow>,
    jobs: Vec<Job<'a>>,
}

/// `prefix/key`, or `key` directly under the root (`None`). Keys may be empty.
fn join(prefix: &Option<String>, key: &str) -> Option<String> {
    Some(match prefix {
        None => key.to_string(),
        Some(p) => format!("{p}/{key}"),
    })
}

/// One (sub-)packet being described: its parsed header, its wire bytes, where they start in
/// the file, and the name its tensor gets.
struct Node<'b> {
    h: wire::Header,
    bytes: &'b [u8],
    offset: u64,
    name: String,
    packet: usize,
}

impl Node<'_> {
    /// The body alignment a header flag (or the custom alignment byte at `at`) gives.
    fn align_at(&self, at: usize) -> Option<u64> {
        Some(if self.h.flags & flags::CUST_ALIGN != 0 {
            1u64.checked_shl(*self.bytes.get(at)? as u32)?
        } else if self.h.flags & flags::ALIGNED != 0 {
            64
        } else {
            1
        })
    }

    /// Byte offset just past the header and the shape.
    fn shape_end(&self) -> Option<usize> {
        self.h.len.checked_add(4 * self.h.ndim as usize)
    }

    /// Whether an XXH3 footer protects the body.
    fn integrity(&self) -> bool {
        self.h.flags & flags::INTEGRITY != 0
    }

    /// The fields every kind shares; `detail` is left for the kind to fill in.
    #[allow(clippy::too_many_arguments)]
    fn info(
        &self,
        kind: &'static str,
        dtype: String,
        shape: Vec<u64>,
        nbytes: u64,
        body_bytes: u64,
        compressed: bool,
        alignment: u64,
    ) -> TensorRow {
        TensorRow {
            name: self.name.clone(),
            kind,
            dtype,
            shape,
            nbytes,
            sha256: None,
            packet: self.packet,
            offset: self.offset,
            packet_bytes: self.bytes.len() as u64,
            body_bytes,
            compressed,
            integrity: self.integrity(),
            alignment,
            flags: flag_names(self.h.flags),
            detail: None,
        }
    }
}

impl<'a> Walker<'a> {
    /// Describes packet `p` (whose wire bytes are `bytes`, starting at file `offset`) and, for a
    /// bundle, every entry below it.
    fn visit(&mut self, p: &'a Packet<'a>, bytes: &[u8], offset: u64, name: Option<String>) -> Option<()> {
        if let Packet::Bundle(b) = p {
            return self.bundle(b, bytes, offset, &name);
        }
        let node = Node {
            h: wire::parse_header(bytes).ok()?,
            bytes,
            offset,
            name: match &name {
                None => format!("#{}", self.packet),
                Some(n) if self.multi => format!("#{}/{n}", self.packet),
                Some(n) => n.clone(),
            },
            packet: self.packet,
        };
        let (info, jobs) = match p {
            Packet::Bundle(_) => return None,
            Packet::Sparse(s) => sparse(&node, s)?,
            Packet::Dense(t) => dense(&node, t)?,
            Packet::Quantized(q) => quantized(&node, q)?,
            Packet::Strings(s) => strings(&node, s),
        };
        let idx = self.infos.len();
        self.infos.push(info);
        self.jobs.extend(jobs.into_iter().map(|(component, data)| Job {
            tensor: idx,
            component,
            data,
        }));
        Some(())
    }

    /// Walks a bundle's length-prefixed entries.
    fn bundle(&mut self, b: &'a wire::Bundle<'a>, bytes: &[u8], offset: u64, name: &Option<String>) -> Option<()> {
        let h = wire::parse_header(bytes).ok()?;
        let mut pos = h.len;
        for (key, value) in &b.entries {
            let kl = u32_at(bytes, pos)?;
            let vpos = pos.checked_add(4)?.checked_add(kl)?;
            let vl = u32_at(bytes, vpos)?;
            let start = vpos + 4;
            let end = start.checked_add(vl)?;
            let sub = bytes.get(start..end)?;
            self.visit(value, sub, offset + start as u64, join(name, key))?;
            pos = end;
        }
        Some(())
    }
}

/// What to hash for one tensor: `(component index, bytes)`.
type Jobs<'a> = Vec<(Option<usize>, &'a [u8])>;

/// A sparse matrix: its three component packets, each with its own header.
fn sparse<'a>(node: &Node<'_>, s: &'a wire::Sparse<'a>) -> Option<(TensorRow, Jobs<'a>)> {
    let mut pos = node.shape_end()?;
    let mut comps = Vec::with_capacity(3);
    let mut jobs = Vec::with_capacity(3);
    for (ci, (t, cname)) in s.components.iter().zip(s.format.component_names()).enumerate() {
        let l = u32_at(node.bytes, pos)?;
        let sub = node.bytes.get(pos + 4..(pos + 4).checked_add(l)?)?;
        let ch = wire::parse_header(sub).ok()?;
        comps.push(ComponentInfo {
            name: cname,
            dtype: t.dtype().name(),
            shape: t.shape().to_vec(),
            nbytes: t.nbytes() as u64,
            sha256: None,
            packet_bytes: sub.len() as u64,
            integrity: ch.flags & flags::INTEGRITY != 0,
        });
        jobs.push((Some(ci), t.data()));
        pos = pos + 4 + l;
    }
    let nbytes = s.components.iter().map(|t| t.nbytes() as u64).sum();
    let mut info = node.info(
        "sparse",
        s.components[0].dtype().name().to_string(),
        s.shape.clone(),
        nbytes,
        nbytes,
        false,
        1,
    );
    info.integrity = comps.iter().all(|c| c.integrity);
    info.detail = Some(Detail::Sparse {
        format: s.format.name(),
        nnz: s.components[0].numel(),
        components: comps,
    });
    Some((info, jobs))
}

/// A dense tensor; a compressed body's wire size comes from the packet's span.
fn dense<'a>(node: &Node<'_>, t: &'a tensorlane_core::Tensor<'a>) -> Option<(TensorRow, Jobs<'a>)> {
    let compressed = node.h.flags & flags::COMPRESSION != 0;
    let shape_end = node.shape_end()?;
    let alignment = node.align_at(shape_end)?;
    let body_bytes = if compressed {
        let footer = if node.integrity() { 8 } else { 0 };
        let head = shape_end + usize::from(node.h.flags & flags::CUST_ALIGN != 0);
        let head = (head as u64).checked_next_multiple_of(alignment)?;
        (node.bytes.len() as u64).checked_sub(head + footer)?
    } else {
        t.nbytes() as u64
    };
    let info = node.info(
        "dense",
        t.dtype().name().to_string(),
        t.shape().to_vec(),
        t.nbytes() as u64,
        body_bytes,
        compressed,
        alignment,
    );
    Some((info, vec![(None, t.data())]))
}

/// A quantized tensor: its scheme, and the scales and zero points when there are few.
fn quantized<'a>(node: &Node<'_>, q: &'a wire::Quantized<'a>) -> Option<(TensorRow, Jobs<'a>)> {
    let meta_end = node.shape_end()?.checked_add(10)?.checked_add(8 * q.scales.len())?;
    let alignment = node.align_at(meta_end)?;
    let n = q.data.len() as u64;
    let mut info = node.info(
        "quantized",
        q.qdtype.name().to_string(),
        q.shape.clone(),
        n,
        n,
        false,
        alignment,
    );
    let small = q.scales.len() <= 16;
    info.detail = Some(Detail::Quantized {
        scheme: q.scheme.name(),
        axis: q.axis,
        group_size: q.group_size,
        num_scales: q.scales.len(),
        scales: small.then(|| q.scales.clone()),
        zero_points: small.then(|| q.zero_points.clone()),
    });
    Some((info, vec![(None, &q.data[..])]))
}

/// A string tensor: its count and whether every string is UTF-8.
fn strings<'a>(node: &Node<'_>, s: &'a wire::Strings<'a>) -> (TensorRow, Jobs<'a>) {
    let count = s.len();
    let payload = s.payload().len() as u64;
    let alignment = if node.h.flags & flags::ALIGNED != 0 { 64 } else { 1 };
    let body = 8 * (count as u64 + 1) + payload;
    let mut info = node.info(
        "string",
        "string".into(),
        vec![count as u64],
        payload,
        body,
        false,
        alignment,
    );
    let utf8 = (0..count).all(|i| matches!(s.get_str(i), Some(Ok(_))));
    info.detail = Some(Detail::Strings { count, utf8 });
    (info, vec![(None, s.payload())])
}

/// Inspects every packet in `data` (the contents of `file`).
///
/// The first packet must decode. After it, bytes that start with the `TNSO` magic must be further
/// packets; anything else is reported as [`Report::trailing_bytes`] (tenso ignores bytes after a
/// packet too). Integrity footers are verified.
pub fn inspect_bytes(data: &[u8], file: &str, opts: &InspectOptions) -> Result<Report, CliError> {
    let dopts = crate::limits::decode_options();
    // Frame first, so names can tell a one-packet file from a stream.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut off = 0usize;
    let mut trailing = 0u64;
    let mut decoded = Vec::new();
    while off < data.len() || spans.is_empty() {
        let rest = &data[off..];
        if !spans.is_empty() && !rest.starts_with(&wire::MAGIC) {
            trailing = rest.len() as u64;
            break;
        }
        match wire::decode_with(rest, &dopts) {
            Ok(d) if d.len > 0 => {
                spans.push((off, d.len));
                off += d.len;
                decoded.push(d.packet);
            }
            Ok(_) => break,
            Err(error) => {
                return Err(CliError::Tenso {
                    packet: spans.len(),
                    packet_offset: off as u64,
                    error,
                });
            }
        }
    }
    let multi = spans.len() > 1;
    let mut tensors = Vec::new();
    let mut jobs = Vec::new();
    for (i, (p, &(start, len))) in decoded.iter().zip(&spans).enumerate() {
        let mut w = Walker {
            packet: i,
            multi,
            infos: Vec::new(),
            jobs: Vec::new(),
        };
        if w.visit(p, &data[start..start + len], start as u64, None).is_none() {
            // Decoding succeeded, so this cannot happen; report rather than panic.
            return Err(CliError::Tenso {
                packet: i,
                packet_offset: start as u64,
                error: wire::decode(&[]).expect_err("an empty buffer never decodes"),
            });
        }
        for mut j in w.jobs {
            j.tensor += tensors.len();
            jobs.push(j);
        }
        tensors.extend(w.infos);
    }
    if opts.hash {
        let total: u64 = jobs.iter().map(|j| j.data.len() as u64).sum();
        let bar = if opts.progress {
            progress(total, "hashing")
        } else {
            None
        };
        for j in &jobs {
            let digest = sha256_hex(j.data, bar.as_ref());
            let t = &mut tensors[j.tensor];
            match (j.component, &mut t.detail) {
                (Some(c), Some(Detail::Sparse { components, .. })) => components[c].sha256 = Some(digest),
                _ => t.sha256 = Some(digest),
            }
        }
        finish(bar);
    }
    Ok(Report {
        format: "tenso",
        file: file.to_string(),
        bytes: data.len() as u64,
        packets: spans.len(),
        trailing_bytes: trailing,
        tensors,
    })
}

impl Table for Report {
    fn to_table(&self) -> String {
        let mut out = String::new();
        let plural = if self.packets == 1 { "" } else { "s" };
        out.push_str(&format!(
            "{}: {} file, {}, {} packet{plural}, {} tensor{}\n",
            self.file,
            self.format,
            crate::output::size(self.bytes),
            self.packets,
            self.tensors.len(),
            if self.tensors.len() == 1 { "" } else { "s" }
        ));
        if self.trailing_bytes > 0 {
            out.push_str(&format!(
                "note: {} trailing bytes after the last packet (ignored)\n",
                self.trailing_bytes
            ));
        }
        if self.tensors.is_empty() {
            out.push_str("(no tensors)\n");
            return out;
        }
        let hashed = self.tensors.iter().any(|t| t.sha256.is_some() || matches!(&t.detail, Some(Detail::Sparse { components, .. }) if components.iter().any(|c| c.sha256.is_some())));
        let mut rows: Vec<Vec<String>> = vec![
            ["NAME", "KIND", "DTYPE", "SHAPE", "NBYTES", "WIRE", "BODY", "FLAGS"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ];
        if hashed {
            rows[0].push("SHA256".into());
        }
        for t in &self.tensors {
            let mut flags = t.flags.join("|");
            if t.alignment > 1 && !t.flags.contains(&"ALIGNED") {
                flags.push_str(&format!(" align={}", t.alignment));
            }
            let mut r = vec![
                t.name.clone(),
                t.kind.to_string(),
                t.dtype.clone(),
                shape_str(&t.shape),
                t.nbytes.to_string(),
                t.packet_bytes.to_string(),
                t.body_bytes.to_string(),
                if flags.is_empty() { "-".into() } else { flags },
            ];
            if hashed {
                r.push(t.sha256.clone().unwrap_or_default());
            }
            rows.push(r);
            match &t.detail {
                Some(Detail::Sparse {
                    format,
                    nnz,
                    components,
                }) => {
                    for c in components {
                        let mut r = vec![
                            format!("  .{}", c.name),
                            format!("{format} nnz={nnz}"),
                            c.dtype.to_string(),
                            shape_str(&c.shape),
                            c.nbytes.to_string(),
                            c.packet_bytes.to_string(),
                            c.nbytes.to_string(),
                            if c.integrity { "INTEGRITY".into() } else { String::new() },
                        ];
                        if hashed {
                            r.push(c.sha256.clone().unwrap_or_default());
                        }
                        rows.push(r);
                    }
                }
                Some(Detail::Quantized {
                    scheme,
                    axis,
                    group_size,
                    num_scales,
                    scales,
                    zero_points,
                }) => {
                    let mut s = format!(
                        "  {scheme}, {num_scales} scale{}",
                        if *num_scales == 1 { "" } else { "s" }
                    );
                    match *scheme {
                        "per_channel" => s.push_str(&format!(", axis {axis}")),
                        "per_group" => s.push_str(&format!(", group size {group_size}")),
                        _ => {}
                    }
                    if let (Some(sc), Some(zp)) = (scales, zero_points)
                        && sc.len() <= 4
                    {
                        s.push_str(&format!(", scales {sc:?}, zero points {zp:?}"));
                    }
                    rows.push(vec![s]);
                }
                Some(Detail::Strings { count, utf8 }) => {
                    rows.push(vec![format!(
                        "  {count} string{}{}",
                        if *count == 1 { "" } else { "s" },
                        if *utf8 { ", UTF-8" } else { ", not all UTF-8" }
                    )]);
                }
                None => {}
            }
        }
        out.push_str(&render_table(&rows, &[4, 5, 6]));
        out
    }
}

/// The whole file's bytes, read into memory, for the readers that need one slice (a Tenso packet
/// file): refused over `--max-tensor-bytes` ([`crate::limits`]) before anything is allocated, and
/// an error, not SIGBUS, when the file is truncated while it is read
/// ([`crate::identify::truncated`]).
pub fn whole(src: &tensorlane::source::Source, format: &'static str) -> Result<Vec<u8>, CliError> {
    let size = tensorlane::core::source::ReadAt::size(src);
    let limit = crate::limits::max_tensor_bytes();
    if size > limit {
        return Err(CliError::Format(tensorlane::core::formats::FormatError::new(
            format,
            tensorlane::core::formats::ErrorKind::Limit,
            format!(
                "the file is decoded from memory, so it is read whole: {size} bytes ({}), over the {limit} bytes \
                 ({}) allowed by --max-tensor-bytes; raise the limit if the machine has the memory",
                tensorlane::core::formats::iec(size),
                tensorlane::core::formats::iec(limit)
            ),
        )));
    }
    tensorlane::source::read_whole(src).map_err(|e| crate::identify::truncated(src, e))
}

/// `e` (from reading the Tenso file `path` through the catalog), explained by the wire decoder
/// where it refuses the file too: its message names the packet, the entry path and the file byte,
/// as `inspect` says it. Any other error is given back as it is.
pub fn explain_tenso(path: &std::path::Path, e: CliError) -> CliError {
    let CliError::Format(f) = &e else { return e };
    if f.format != "tenso" || matches!(f.kind, tensorlane_core::formats::ErrorKind::Io) {
        return e;
    }
    let name = path.display().to_string();
    match crate::identify::open_source(path).and_then(|src| whole(&src, "tenso")) {
        Ok(bytes) => match inspect_bytes(&bytes, &name, &InspectOptions::default()) {
            Err(wire) => wire,
            Ok(_) => e,
        },
        Err(_) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_report() {
        let b = crate::sample::sample_bytes();
        let r = inspect_bytes(
            &b,
            "s",
            &InspectOptions {
                hash: true,
                progress: false,
            },
        )
        .unwrap();
        let names: Vec<_> = r.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["weight", "bias", "weight_q", "adjacency", "labels", "meta/step"]
        );
        assert!(r.tensors.iter().filter(|t| t.kind != "sparse").all(|t| t.integrity));
        let table = r.to_table();
        assert!(table.contains("meta/step"), "{table}");
        // Two packets back to back are a stream: names get the packet prefix.
        let mut two = b.clone();
        two.extend_from_slice(&b);
        let r = inspect_bytes(&two, "s", &InspectOptions::default()).unwrap();
        assert_eq!(r.packets, 2);
        assert_eq!(r.tensors[6].name, "#1/weight");
        assert_eq!(r.tensors[6].offset, b.len() as u64 + r.tensors[0].offset);
    }

    #[test]
    fn corrupt_reports_path_and_offset() {
        let mut b = crate::sample::sample_bytes();
        let n = b.len();
        b[n - 12] ^= 0xff; // inside meta/step's body
        let e = inspect_bytes(&b, "s", &InspectOptions::default()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("meta/step"), "{msg}");
        assert!(msg.contains("file byte"), "{msg}");
    }
}
