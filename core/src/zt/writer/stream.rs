//! Streamed objects, for tensors larger than memory: begin, parts in chunks, end.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;

use crate::hash::Xxh3;

use crate::zt::cbor::Value;

use super::base::{Stream, StreamPart, Writer};
use super::blobs::align_up;
use super::checks::check_shape;
use super::digest::{DigestAlgo, Hasher};
use super::layouts::{PartMeta, validate_layout};
use super::manifest::part_value;
use super::sink::Sink;
use super::spec::{ObjectSpec, PartDecl};
use crate::zt::Error;
use crate::zt::rule::Rule;

impl<S: Sink> Writer<S> {
    /// Starts a streamed object: declares its metadata and every part with its exact byte count,
    /// validated now (names, shape, layout sizes). Then, per part in name order:
    /// [`begin_part`](Self::begin_part), [`write_chunk`](Self::write_chunk)…,
    /// [`end_part`](Self::end_part); finally [`end_object`](Self::end_object).
    pub fn begin_object(&mut self, name: &str, spec: &ObjectSpec, parts: &[PartDecl]) -> crate::zt::Result<()> {
        self.check_object(name, spec).map_err(|e| e.in_object(name))?;
        super::objects::check_some_parts(parts.len()).map_err(|e| e.in_object(name))?;
        let mut order: Vec<&PartDecl> = parts.iter().collect();
        order.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<&str> = order.iter().map(|p| p.name.as_str()).collect();
        let mut sp = Vec::new();
        for (i, p) in order.iter().enumerate() {
            let (dtype, logical) = self
                .check_part(&p.name, p.dtype, p.logical.as_deref(), i, &names)
                .map_err(|e| e.in_object(name))?;
            sp.push(StreamPart {
                decl: (*p).clone(),
                dtype,
                logical,
                start: None,
                written: 0,
                done: None,
            });
        }
        {
            let pm: Vec<PartMeta<'_>> = sp
                .iter()
                .map(|p| PartMeta {
                    name: &p.decl.name,
                    dtype: p.dtype,
                    logical: p.logical.as_deref(),
                    size: p.decl.length,
                })
                .collect();
            validate_layout(spec, check_shape(&spec.shape)?, &pm).map_err(|e| e.in_object(name))?;
        }
        self.stream = Some(Stream {
            name: name.to_string(),
            spec: spec.clone(),
            parts: sp,
            current: None,
            hasher: None,
            dedup_hasher: None,
        });
        Ok(())
    }

    /// Starts streaming the bytes of part `part` (parts go in name order).
    pub fn begin_part(&mut self, part: &str) -> crate::zt::Result<()> {
        let pos = self.sink.position();
        let align = self.align;
        let digest = self.opts.digest;
        let st = self
            .stream
            .as_mut()
            .ok_or_else(|| Error::write(Rule::Usage, "begin_part without begin_object"))?;
        if st.current.is_some() {
            return Err(
                Error::write(Rule::Usage, "the previous part is still open; call end_part first")
                    .in_object(&st.name)
                    .in_part(part),
            );
        }
        let next = st.parts.iter().position(|p| p.done.is_none());
        let Some(i) = next.filter(|&i| st.parts[i].decl.name == part) else {
            let want = next.map(|i| st.parts[i].decl.name.clone());
            return Err(Error::write(
                Rule::Usage,
                format!("parts are streamed in name order; the next one is {want:?}"),
            )
            .in_object(&st.name)
            .in_part(part));
        };
        let target = align_up(pos, align)?;
        st.parts[i].start = Some((pos, target));
        st.current = Some(i);
        st.hasher = Some(Hasher::new(digest));
        st.dedup_hasher = if digest == DigestAlgo::Xxh3 {
            None
        } else {
            Some(Xxh3::new())
        };
        self.pad_to(target)
    }

    /// Streams the next bytes of the open part.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> crate::zt::Result<()> {
        let st = self
            .stream
            .as_mut()
            .ok_or_else(|| Error::write(Rule::Usage, "write_chunk without begin_object"))?;
        let i = st
            .current
            .ok_or_else(|| Error::write(Rule::Usage, "write_chunk without begin_part").in_object(&st.name))?;
        let p = &mut st.parts[i];
        let end = p.written + chunk.len() as u64;
        if end > p.decl.length {
            return Err(Error::write(
                Rule::Usage,
                format!("{end} bytes written into a part declared as {}", p.decl.length),
            )
            .in_object(&st.name)
            .in_part(&p.decl.name));
        }
        p.written = end;
        if let Some(h) = st.hasher.as_mut() {
            h.update(chunk);
        }
        if let Some(h) = st.dedup_hasher.as_mut() {
            h.update(chunk);
        }
        self.sink.write_all(chunk)
    }

    /// Ends the open part: checks its length, finalises its digest, and shares an earlier
    /// byte-identical blob when there is one (taking the streamed copy back with
    /// [`Sink::truncate`]).
    pub fn end_part(&mut self) -> crate::zt::Result<()> {
        let st = self
            .stream
            .as_mut()
            .ok_or_else(|| Error::write(Rule::Usage, "end_part without begin_object"))?;
        let i = st
            .current
            .ok_or_else(|| Error::write(Rule::Usage, "end_part without begin_part").in_object(&st.name))?;
        let (oname, pname) = (st.name.clone(), st.parts[i].decl.name.clone());
        let p = &st.parts[i];
        if p.written != p.decl.length {
            return Err(Error::write(
                Rule::Usage,
                format!("{} of {} declared bytes written", p.written, p.decl.length),
            )
            .in_object(&oname)
            .in_part(&pname));
        }
        let (before, offset) = p.start.expect("begun");
        let len = p.written;
        let mut h = st.hasher.take().expect("begun");
        let key64 = h
            .finish_u64()
            .unwrap_or_else(|| st.dedup_hasher.take().map_or(0, |x| x.digest()));
        let digest = h.finish();
        st.current = None;
        let key = (key64, len);
        let mut placed = offset;
        if let Some(cands) = self.dedup.get(&key).cloned() {
            for c in cands {
                if self
                    .ranges_equal(c, offset, len)
                    .map_err(|e| e.in_object(&oname).in_part(&pname))?
                {
                    match self.sink.truncate(before) {
                        Ok(()) => placed = c,
                        Err(e) if self.opts.canonical => {
                            return Err(Error::write(Rule::Canonical, format!("this part duplicates an earlier blob and canonical form requires sharing, but the sink cannot take the copy back: {}", e.message)).in_object(&oname).in_part(&pname));
                        }
                        Err(_) => {}
                    }
                    break;
                }
            }
        }
        if placed == offset {
            self.dedup.entry(key).or_default().push(offset);
        }
        let st = self.stream.as_mut().expect("open");
        st.parts[i].done = Some((placed, digest));
        Ok(())
    }

    /// Ends the streamed object and adds it to the manifest.
    pub fn end_object(&mut self) -> crate::zt::Result<()> {
        let st = self
            .stream
            .as_ref()
            .ok_or_else(|| Error::write(Rule::Usage, "end_object without begin_object"))?;
        if let Some(p) = st.parts.iter().find(|p| p.done.is_none()) {
            return Err(Error::write(Rule::Usage, "this part has not been streamed yet")
                .in_object(&st.name)
                .in_part(&p.decl.name));
        }
        let st = self.stream.take().expect("open");
        let parts = st
            .parts
            .iter()
            .map(|p| {
                let (off, d) = p.done.as_ref().expect("done");
                (
                    Value::Text(Cow::Owned(p.decl.name.clone())),
                    part_value(p.dtype, p.logical.as_deref(), *off, p.decl.length, None, Some(d)),
                )
            })
            .collect();
        self.commit(&st.name, &st.spec, parts);
        Ok(())
    }

    // ---- finishing ----
}
