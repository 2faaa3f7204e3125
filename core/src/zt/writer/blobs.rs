//! Blobs: padding, placement, byte-identical sharing and data-shard blobs.

use alloc::format;
use alloc::string::String;
use alloc::vec;

use crate::hash::xxh3_64;

use super::base::Writer;
use super::digest::Hasher;
use super::sink::Sink;
use super::spec::BlobRef;
use crate::zt::Error;
use crate::zt::rule::Rule;

/// Chunk size for padding and read-back comparisons.
const CHUNK: usize = 1 << 20;

impl<S: Sink> Writer<S> {
    pub(super) fn pad_to(&mut self, target: u64) -> crate::zt::Result<()> {
        let zeros = [0u8; 4096];
        let mut gap = target - self.sink.position();
        while gap > 0 {
            let n = gap.min(zeros.len() as u64) as usize;
            self.sink.write_all(&zeros[..n])?;
            gap -= n as u64;
        }
        Ok(())
    }

    /// Does the blob at `offset` hold exactly `data`?
    fn blob_equals(&mut self, offset: u64, data: &[u8]) -> crate::zt::Result<bool> {
        let mut buf = vec![0u8; data.len().min(CHUNK)];
        let mut at = 0usize;
        while at < data.len() {
            let n = (data.len() - at).min(CHUNK);
            self.sink
                .read_back(offset + at as u64, &mut buf[..n])
                .map_err(|e| self.no_confirm(e))?;
            if buf[..n] != data[at..at + n] {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    }

    /// Do two written ranges hold the same bytes?
    pub(super) fn ranges_equal(&mut self, a: u64, b: u64, len: u64) -> crate::zt::Result<bool> {
        let n0 = (len as usize).min(CHUNK);
        let (mut x, mut y) = (vec![0u8; n0], vec![0u8; n0]);
        let mut at = 0u64;
        while at < len {
            let n = ((len - at) as usize).min(CHUNK);
            self.sink
                .read_back(a + at, &mut x[..n])
                .map_err(|e| self.no_confirm(e))?;
            self.sink
                .read_back(b + at, &mut y[..n])
                .map_err(|e| self.no_confirm(e))?;
            if x[..n] != y[..n] {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    fn no_confirm(&self, e: Error) -> Error {
        Error::write(
            Rule::Io,
            format!(
                "cannot confirm that two parts are byte-identical before sharing a blob: {}",
                e.message
            ),
        )
    }

    /// Writes `data` as a new blob, or shares an earlier byte-identical one. Returns the offset and
    /// the part digest.
    pub(super) fn write_or_share(&mut self, data: &[u8]) -> crate::zt::Result<(u64, String)> {
        let (key64, digest) = match self.prehashed.take() {
            Some((at, len, h)) if at == data.as_ptr() as usize && len == data.len() => (h, format!("xxh3:{h:016x}")),
            _ => {
                let mut h = Hasher::new(self.opts.digest);
                h.update(data);
                let key64 = h.finish_u64().unwrap_or_else(|| xxh3_64(data));
                (key64, h.finish())
            }
        };
        let key = (key64, data.len() as u64);
        if let Some(cands) = self.dedup.get(&key).cloned() {
            for off in cands {
                if self.blob_equals(off, data)? {
                    return Ok((off, digest));
                }
            }
        }
        let target = align_up(self.sink.position(), self.align)?;
        self.pad_to(target)?;
        self.sink.write_all(data)?;
        self.dedup.entry(key).or_default().push(target);
        Ok((target, digest))
    }

    /// Writes `data` as its own blob (no sharing, no manifest entry) and returns where it is, for
    /// building data shards (§12; finish with [`Writer::finish_data_shard`]) or parts that other
    /// manifests reference. Non-canonical only.
    pub fn put_blob(&mut self, data: &[u8]) -> crate::zt::Result<BlobRef> {
        if self.opts.canonical {
            return Err(Error::write(
                Rule::Canonical,
                "canonical form has no unreferenced blobs (§10 rule 1); use Options::non_canonical()",
            ));
        }
        if self.stream.is_some() {
            return Err(Error::write(
                Rule::Usage,
                "a streamed object is open; finish it with end_object first",
            ));
        }
        let target = align_up(self.sink.position(), self.align)?;
        self.pad_to(target)?;
        self.sink.write_all(data)?;
        Ok(BlobRef {
            offset: target,
            length: data.len() as u64,
            digest: self.opts.digest.digest(data),
        })
    }

    // ---- streaming ----
}

pub(super) fn align_up(v: u64, align: u64) -> crate::zt::Result<u64> {
    v.checked_add(align - 1)
        .map(|x| x & !(align - 1))
        .ok_or_else(|| Error::write(Rule::Io, "file offset overflows u64"))
}
