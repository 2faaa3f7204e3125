//! Deterministic CBOR (RFC 8949 §4.2.1 "Core Deterministic Encoding"), as `.zt` v2 manifests use it.
//!
//! Hand-written (no crate) because determinism must be structural: every rule is enforced while
//! decoding, with the rule tag the `.zt` spec assigns (`CborSyntax`, `CborDeterminism`,
//! `CborDuplicateKey`, `CborDepth`) and the byte offset. Declared lengths are checked against the
//! bytes remaining before anything is allocated. [`Mode::Lenient`] reads the plain (not
//! deterministic) CBOR of legacy v1 manifests with the same bounds.
//!
//! The encoder mirrors the decoder: shortest heads, map entries sorted by encoded key bytes,
//! duplicate keys refused, floats in shortest exact form, NaN as `f9 7e00`.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use super::Error;
use super::rule::Rule;

/// A CBOR data item. Text and byte strings borrow from the input.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    /// Major type 0.
    Uint(u64),
    /// Major type 1: the value is `-1 - n`.
    Neg(u64),
    /// Major type 2.
    Bytes(Cow<'a, [u8]>),
    /// Major type 3 (valid UTF-8).
    Text(Cow<'a, str>),
    /// Major type 4.
    Array(Vec<Value<'a>>),
    /// Major type 5, entries in the order they appear (sorted, when decoded strictly).
    Map(Vec<(Value<'a>, Value<'a>)>),
    /// `false` / `true`.
    Bool(bool),
    /// `null`.
    Null,
    /// A float (f16, f32 or f64 on the wire).
    Float(f64),
}

impl<'a> Value<'a> {
    /// A text value.
    pub fn text(s: impl Into<Cow<'a, str>>) -> Self {
        Value::Text(s.into())
    }

    /// The string, if this is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an unsigned integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Uint(n) => Some(*n),
            _ => None,
        }
    }

    /// The entries, if this is a map.
    pub fn as_map(&self) -> Option<&[(Value<'a>, Value<'a>)]> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The items, if this is an array.
    pub fn as_array(&self) -> Option<&[Value<'a>]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Looks up a text key in a map.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_text() == Some(key))
            .map(|(_, v)| v)
    }

    /// Detaches from the input buffer.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Uint(n) => Value::Uint(n),
            Value::Neg(n) => Value::Neg(n),
            Value::Bytes(b) => Value::Bytes(Cow::Owned(b.into_owned())),
            Value::Text(s) => Value::Text(Cow::Owned(s.into_owned())),
            Value::Array(a) => Value::Array(a.into_iter().map(Value::into_owned).collect()),
            Value::Map(m) => Value::Map(m.into_iter().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()),
            Value::Bool(b) => Value::Bool(b),
            Value::Null => Value::Null,
            Value::Float(f) => Value::Float(f),
        }
    }
}

/// How strictly to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every deterministic-encoding rule enforced (`.zt` v2 manifests).
    Deterministic,
    /// Plain CBOR with definite or indefinite lengths and any head width (legacy v1 manifests);
    /// bounds, depth and UTF-8 are still checked, tags are skipped.
    Lenient,
}

/// The depth limit of `.zt` manifests: a value at depth 32 is fine, 33 is refused.
pub const MAX_DEPTH: usize = 32;

/// Decodes exactly one CBOR item filling `bytes`.
pub fn decode(bytes: &[u8], mode: Mode) -> Result<Value<'_>, Error> {
    let mut d = Decoder { b: bytes, pos: 0, mode };
    let v = d.item(0)?;
    if d.pos != bytes.len() {
        return Err(d.err(
            Rule::CborSyntax,
            alloc::format!("{} trailing bytes after the root item", bytes.len() - d.pos),
        ));
    }
    Ok(v)
}

struct Decoder<'a> {
    b: &'a [u8],
    pos: usize,
    mode: Mode,
}

enum Len {
    Definite(u64),
    Indefinite,
}

impl<'a> Decoder<'a> {
    fn err(&self, rule: Rule, message: impl Into<String>) -> Error {
        Error::new(rule, message).at(self.pos as u64)
    }

    fn strict(&self) -> bool {
        self.mode == Mode::Deterministic
    }

    fn byte(&mut self) -> Result<u8, Error> {
        let b = *self
            .b
            .get(self.pos)
            .ok_or_else(|| self.err(Rule::CborSyntax, "unexpected end of input"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let rest = (self.b.len() - self.pos) as u64;
        if n > rest {
            return Err(self.err(
                Rule::CborSyntax,
                alloc::format!("declared length {n} exceeds the {rest} bytes remaining"),
            ));
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    /// Reads a head's argument; returns (major, argument or indefinite).
    fn head(&mut self) -> Result<(u8, u8, Len), Error> {
        let start = self.pos;
        let ib = self.byte()?;
        let (major, ai) = (ib >> 5, ib & 0x1f);
        let arg = match ai {
            0..=23 => ai as u64,
            24..=27 => {
                let n = 1usize << (ai - 24);
                let s = self.take(n as u64)?;
                let v = s.iter().fold(0u64, |a, &x| (a << 8) | x as u64);
                let min = match ai {
                    24 => 24,
                    25 => 0x100,
                    26 => 0x1_0000,
                    _ => 0x1_0000_0000,
                };
                // Float heads (major 7, ai 25..27) carry bits, not a length: shortness is a float rule.
                if self.strict() && major != 7 && v < min {
                    self.pos = start;
                    return Err(self.err(
                        Rule::CborDeterminism,
                        alloc::format!("argument {v} is not in its shortest head form"),
                    ));
                }
                v
            }
            31 if (2..=5).contains(&major) && !self.strict() => return Ok((major, ai, Len::Indefinite)),
            31 => {
                self.pos = start;
                return Err(self.err(Rule::CborSyntax, "indefinite-length items are forbidden"));
            }
            _ => {
                self.pos = start;
                return Err(self.err(Rule::CborSyntax, alloc::format!("reserved additional information {ai}")));
            }
        };
        Ok((major, ai, Len::Definite(arg)))
    }

    fn item(&mut self, depth: usize) -> Result<Value<'a>, Error> {
        if depth > MAX_DEPTH {
            return Err(self.err(
                Rule::CborDepth,
                alloc::format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        let start = self.pos;
        let (major, ai, len) = self.head()?;
        match (major, len) {
            (0, Len::Definite(n)) => Ok(Value::Uint(n)),
            (1, Len::Definite(n)) => Ok(Value::Neg(n)),
            (2, Len::Definite(n)) => Ok(Value::Bytes(Cow::Borrowed(self.take(n)?))),
            (3, Len::Definite(n)) => {
                let s = self.take(n)?;
                core::str::from_utf8(s)
                    .map(|s| Value::Text(Cow::Borrowed(s)))
                    .map_err(|_| Error::new(Rule::CborSyntax, "text string is not valid UTF-8").at(start as u64))
            }
            (2 | 3, Len::Indefinite) => self.indefinite_string(major, start, depth),
            (4, len) => self.array(len, start, depth),
            (5, len) => self.map(len, start, depth),
            (6, Len::Definite(_)) if !self.strict() => self.item(depth),
            (6, _) => Err(Error::new(Rule::CborSyntax, "tags are forbidden").at(start as u64)),
            (7, Len::Definite(arg)) => self.simple(ai, arg, start),
            _ => Err(Error::new(Rule::CborSyntax, "malformed item").at(start as u64)),
        }
    }

    /// An indefinite-length byte (`major` 2) or text (3) string: its chunks, joined.
    fn indefinite_string(&mut self, major: u8, start: usize, depth: usize) -> Result<Value<'a>, Error> {
        let mut buf = Vec::new();
        loop {
            if self.b.get(self.pos) == Some(&0xff) {
                self.pos += 1;
                break;
            }
            match self.item(depth + 1)? {
                Value::Bytes(b) if major == 2 => buf.extend_from_slice(&b),
                Value::Text(t) if major == 3 => buf.extend_from_slice(t.as_bytes()),
                _ => return Err(self.err(Rule::CborSyntax, "chunk of the wrong type in an indefinite string")),
            }
        }
        if major == 2 {
            Ok(Value::Bytes(Cow::Owned(buf)))
        } else {
            String::from_utf8(buf)
                .map(|s| Value::Text(Cow::Owned(s)))
                .map_err(|_| Error::new(Rule::CborSyntax, "text string is not valid UTF-8").at(start as u64))
        }
    }

    /// An array (definite or, when lenient, indefinite), its items decoded one level deeper.
    fn array(&mut self, len: Len, start: usize, depth: usize) -> Result<Value<'a>, Error> {
        let mut items = Vec::new();
        match len {
            Len::Definite(n) => {
                // Every item takes at least one byte: a count past the input is a lie.
                if n > (self.b.len() - self.pos) as u64 {
                    return Err(Error::new(
                        Rule::CborSyntax,
                        alloc::format!("array of {n} items cannot fit the remaining bytes"),
                    )
                    .at(start as u64));
                }
                items.reserve(n as usize);
                for _ in 0..n {
                    items.push(self.item(depth + 1)?);
                }
            }
            Len::Indefinite => loop {
                if self.b.get(self.pos) == Some(&0xff) {
                    self.pos += 1;
                    break;
                }
                items.push(self.item(depth + 1)?);
            },
        }
        Ok(Value::Array(items))
    }

    /// A map: keys sorted by their encoded bytes and never repeated (when strict), or merely
    /// never repeated (lenient).
    fn map(&mut self, len: Len, start: usize, depth: usize) -> Result<Value<'a>, Error> {
        let mut entries: Vec<(Value<'a>, Value<'a>)> = Vec::new();
        let mut prev_key: Option<&'a [u8]> = None;
        let mut count = 0u64;
        let n = match len {
            Len::Definite(n) => {
                if n > ((self.b.len() - self.pos) / 2) as u64 {
                    return Err(Error::new(
                        Rule::CborSyntax,
                        alloc::format!("map of {n} entries cannot fit the remaining bytes"),
                    )
                    .at(start as u64));
                }
                entries.reserve(n as usize);
                Some(n)
            }
            Len::Indefinite => None,
        };
        loop {
            match n {
                Some(n) if count == n => break,
                None if self.b.get(self.pos) == Some(&0xff) => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            let key_start = self.pos;
            let k = self.item(depth + 1)?;
            let key_bytes = &self.b[key_start..self.pos];
            if self.strict() {
                if let Some(p) = prev_key {
                    match p.cmp(key_bytes) {
                        core::cmp::Ordering::Less => {}
                        core::cmp::Ordering::Equal => {
                            return Err(Error::new(Rule::CborDuplicateKey, "map key repeats the previous key")
                                .at(key_start as u64));
                        }
                        core::cmp::Ordering::Greater => {
                            return Err(Error::new(
                                Rule::CborDeterminism,
                                "map keys are not sorted by their encoded bytes",
                            )
                            .at(key_start as u64));
                        }
                    }
                }
            } else if entries.iter().any(|(e, _)| *e == k) {
                return Err(Error::new(Rule::CborDuplicateKey, "map key repeats").at(key_start as u64));
            }
            prev_key = Some(key_bytes);
            let v = self.item(depth + 1)?;
            entries.push((k, v));
            count += 1;
        }
        Ok(Value::Map(entries))
    }

    /// A simple value or float (major type 7, additional information `ai`, argument `arg`):
    /// floats must be in their shortest exact form when strict.
    fn simple(&self, ai: u8, arg: u64, start: usize) -> Result<Value<'a>, Error> {
        match ai {
            20 => Ok(Value::Bool(false)),
            21 => Ok(Value::Bool(true)),
            22 => Ok(Value::Null),
            25 => {
                let h = half::f16::from_bits(arg as u16);
                if self.strict() && h.is_nan() && arg != 0x7e00 {
                    return Err(Error::new(Rule::CborDeterminism, "NaN must be encoded as f9 7e00").at(start as u64));
                }
                Ok(Value::Float(h.to_f64()))
            }
            26 => {
                let f = f32::from_bits(arg as u32);
                if self.strict() && (f.is_nan() || half::f16::from_f32(f).to_f32() == f) {
                    return Err(
                        Error::new(Rule::CborDeterminism, "float32 that has a shorter exact form").at(start as u64),
                    );
                }
                Ok(Value::Float(f as f64))
            }
            27 => {
                let f = f64::from_bits(arg);
                if self.strict() && (f.is_nan() || (f as f32) as f64 == f) {
                    return Err(
                        Error::new(Rule::CborDeterminism, "float64 that has a shorter exact form").at(start as u64),
                    );
                }
                Ok(Value::Float(f))
            }
            _ => {
                Err(Error::new(Rule::CborSyntax, alloc::format!("simple value {arg} is not allowed")).at(start as u64))
            }
        }
    }
}

fn put_head(out: &mut Vec<u8>, major: u8, arg: u64) {
    let m = major << 5;
    if arg < 24 {
        out.push(m | arg as u8);
    } else if arg <= 0xff {
        out.extend_from_slice(&[m | 24, arg as u8]);
    } else if arg <= 0xffff {
        out.push(m | 25);
        out.extend_from_slice(&(arg as u16).to_be_bytes());
    } else if arg <= 0xffff_ffff {
        out.push(m | 26);
        out.extend_from_slice(&(arg as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&arg.to_be_bytes());
    }
}

/// Encodes `v` in Core Deterministic Encoding, appending to `out`.
pub fn encode_into(v: &Value<'_>, out: &mut Vec<u8>) -> Result<(), Error> {
    match v {
        Value::Uint(n) => put_head(out, 0, *n),
        Value::Neg(n) => put_head(out, 1, *n),
        Value::Bytes(b) => {
            put_head(out, 2, b.len() as u64);
            out.extend_from_slice(b);
        }
        Value::Text(s) => {
            put_head(out, 3, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Array(a) => {
            put_head(out, 4, a.len() as u64);
            for x in a {
                encode_into(x, out)?;
            }
        }
        Value::Map(m) => {
            let mut enc: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(m.len());
            for (k, val) in m {
                let (mut kb, mut vb) = (Vec::new(), Vec::new());
                encode_into(k, &mut kb)?;
                encode_into(val, &mut vb)?;
                enc.push((kb, vb));
            }
            enc.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(w) = enc.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(Error::write(
                    Rule::CborDuplicateKey,
                    alloc::format!(
                        "cannot encode deterministic CBOR: duplicate map key (encoded {:02x?})",
                        w[0].0
                    ),
                ));
            }
            put_head(out, 5, enc.len() as u64);
            for (k, val) in enc {
                out.extend_from_slice(&k);
                out.extend_from_slice(&val);
            }
        }
        Value::Bool(false) => out.push(0xf4),
        Value::Bool(true) => out.push(0xf5),
        Value::Null => out.push(0xf6),
        Value::Float(f) => {
            let f = *f;
            if f.is_nan() {
                out.extend_from_slice(&[0xf9, 0x7e, 0x00]);
            } else if half::f16::from_f64(f).to_f64() == f {
                out.push(0xf9);
                out.extend_from_slice(&half::f16::from_f64(f).to_bits().to_be_bytes());
            } else if (f as f32) as f64 == f {
                out.push(0xfa);
                out.extend_from_slice(&(f as f32).to_bits().to_be_bytes());
            } else {
                out.push(0xfb);
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
        }
    }
    Ok(())
}

/// Encodes `v` in Core Deterministic Encoding.
pub fn encode(v: &Value<'_>) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    encode_into(v, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn rule(b: &[u8]) -> Rule {
        decode(b, Mode::Deterministic).unwrap_err().rule
    }

    #[test]
    fn determinism_rules() {
        assert_eq!(rule(&[0x18, 0x05]), Rule::CborDeterminism); // non-shortest
        assert_eq!(rule(&[0x9f, 0xff]), Rule::CborSyntax); // indefinite
        assert_eq!(rule(&[0xc1, 0x00]), Rule::CborSyntax); // tag
        assert_eq!(rule(&[0xf7]), Rule::CborSyntax); // undefined
        assert_eq!(rule(&[0x00, 0x00]), Rule::CborSyntax); // trailing
        assert_eq!(rule(&[0xa2, 0x61, 0x62, 0x00, 0x61, 0x61, 0x00]), Rule::CborDeterminism); // unsorted
        assert_eq!(
            rule(&[0xa2, 0x61, 0x61, 0x00, 0x61, 0x61, 0x00]),
            Rule::CborDuplicateKey
        );
        assert_eq!(rule(&[0xfa, 0x3f, 0x80, 0, 0]), Rule::CborDeterminism); // 1.0 fits f16
        assert_eq!(rule(&[0xf9, 0x7e, 0x01]), Rule::CborDeterminism); // NaN payload
        assert_eq!(rule(&[0x5a, 0xff, 0xff, 0xff, 0xff]), Rule::CborSyntax); // length past end
        assert_eq!(rule(&[0x62, 0xff, 0xfe]), Rule::CborSyntax); // bad UTF-8
        let mut deep = vec![0x81u8; 33];
        deep.push(0x00);
        assert_eq!(rule(&deep), Rule::CborDepth);
        let mut ok = vec![0x81u8; 32];
        ok.push(0x00);
        decode(&ok, Mode::Deterministic).unwrap();
    }

    #[test]
    fn canonical_round_trip() {
        let v = Value::Map(vec![
            (Value::text("tied"), Value::Uint(1)),
            (
                Value::text("a.bias"),
                Value::Array(vec![
                    Value::Float(1.5),
                    Value::Float(f64::NAN),
                    Value::Neg(0),
                    Value::Float(0.1),
                ]),
            ),
            (
                Value::text("b"),
                Value::Map(vec![
                    (Value::text("x"), Value::Bool(true)),
                    (Value::text("n"), Value::Null),
                ]),
            ),
        ]);
        let b = encode(&v).unwrap();
        let back = decode(&b, Mode::Deterministic).unwrap();
        assert_eq!(encode(&back).unwrap(), b);
        // Shorter keys sort first.
        assert_eq!(back.as_map().unwrap()[0].0.as_text(), Some("b"));
        assert!(
            encode(&Value::Map(vec![
                (Value::Uint(1), Value::Null),
                (Value::Uint(1), Value::Null)
            ]))
            .is_err()
        );
    }

    #[test]
    fn lenient_reads_plain_cbor() {
        // Indefinite map with a non-shortest head and unsorted keys.
        let b = [0xbf, 0x61, 0x62, 0x18, 0x01, 0x61, 0x61, 0x02, 0xff];
        let v = decode(&b, Mode::Lenient).unwrap();
        assert_eq!(v.get("b").and_then(Value::as_u64), Some(1));
    }
}
