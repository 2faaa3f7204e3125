//! PyTorch checkpoints (`.pt`, `.pth`, `.bin`): the zip format `torch.save` writes since 1.6 and
//! the legacy format before it, read through the restricted pickle machine of [`super::pickle`]:
//! nothing in the file is ever executed, and any global outside the allow-list is refused with
//! its name.
//!
//! - **zip** ([`Format::PyTorch`]): `<prefix>/data.pkl` is the pickle, `<prefix>/byteorder` says
//!   `little` or `big`, and each storage is the stored (uncompressed) member
//!   `<prefix>/data/<key>`; a tensor's bytes are a range of that member.
//! - **legacy** ([`Format::PyTorchLegacy`]): five pickles back to back (magic number, protocol
//!   version 1001, `sys_info`, the object, the list of storage keys), then per storage in key
//!   order an 8-byte element count and its bytes.
//!
//! Persistent ids name storages as `('storage', torch.<X>Storage, key, location, numel[,
//! view])`. Tensors come from `torch._utils._rebuild_tensor{,_v2,_v3}` and `nn.Parameter`s from
//! `_rebuild_parameter{,_with_state}` (kept, with attribute `parameter: true`). A contiguous
//! tensor is a plain byte range of its storage (zero-copy, even at an offset); any other view is
//! the range it spans plus [`View`] strides, checked to stay inside the storage when the file is
//! opened.
//!
//! Names join dict keys and list/tuple indices with `.` (`model.encoder.w`, `extra.0`); a tensor
//! that is the whole pickle is called `tensor`. Values that are not tensors are listed in
//! [`Catalog::skipped`] and, with their values, under the metadata key `non_tensor_values`.
//! Tensor attributes: `torch_dtype`, `stride`, `storage_offset`, `contiguous`, `storage_nbytes`,
//! `storage_key`, `location`, `requires_grad`, `variant` (`zip` or `legacy`), and when they apply
//! `parameter`, `shares_storage_with` (the other tensors on the same storage) and
//! `tensor_metadata`.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::pickle::{self, Global, Object, Pickle, TORCH_TYPES, Value};
use super::zip::{self, Method};
use super::{
    Arrangement, Catalog, ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER, Meta, Storage, TensorInfo, View, bytes_at,
};
use crate::detect::Format;
use crate::source::ReadAt;

const F: &str = "pt";

/// The most nodes of the pickle's value graph that are visited: a graph that shares containers
/// could otherwise expand exponentially when walked as a tree. The walk also stops at twice the
/// pickle's length (plus a little): a pickle without shared containers creates at most one value
/// per byte, so only sharing can go past that.
pub const MAX_VISITS: usize = 1 << 22;

/// The visit budget for a pickle of `len` bytes.
fn visit_budget(len: usize) -> usize {
    len.saturating_mul(2).saturating_add(4096).min(MAX_VISITS)
}

/// The first pickle of a legacy file: `LONG1` 0x1950a86a20f9469cfc6c, little-endian.
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// Opens a PyTorch checkpoint: a zip archive (`PK` at the start) or a legacy file.
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let head = bytes_at(F, src, 0, src.size().min(4))?;
    if head.starts_with(b"PK") {
        open_zip(src)
    } else {
        open_legacy(src)
    }
}

fn error(kind: ErrorKind, msg: impl Into<String>) -> FormatError {
    FormatError::new(F, kind, msg)
}

/// Moves a pickle error's offset (relative to the pickle) to the file.
fn shift(mut e: FormatError, base: Option<u64>) -> FormatError {
    e.offset = match (e.offset, base) {
        (Some(o), Some(b)) => o.checked_add(b),
        _ => None,
    };
    e
}

/// Where a storage's bytes are in the file.
#[derive(Clone, Copy, Debug)]
struct Located {
    offset: u64,
    nbytes: u64,
}

fn open_zip<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let archive = zip::open(F, src)?;
    let pkl = archive
        .members
        .iter()
        .find(|m| m.name == "data.pkl" || (m.name.ends_with("/data.pkl") && m.name.matches('/').count() == 1))
        .or_else(|| archive.members.iter().find(|m| m.name.ends_with("/data.pkl")))
        .ok_or_else(|| {
            error(
                ErrorKind::Syntax,
                "the zip archive has no data.pkl member: not a PyTorch checkpoint",
            )
        })?;
    let prefix = &pkl.name[..pkl.name.len() - "data.pkl".len()];
    let bytes = member_bytes(src, pkl, MAX_HEADER)?;
    let base = (pkl.method == Method::Stored).then_some(pkl.data_offset);
    let p = pickle::load(&bytes).map_err(|e| shift(e, base))?;

    let mut cat = Catalog::new(Format::PyTorch);
    cat.metadata.push(("variant".into(), Meta::Str("zip".into())));
    let big_endian = match archive.get(&alloc::format!("{prefix}byteorder")) {
        None => false,
        Some(m) => match &*member_bytes(src, m, 16)? {
            b"little" => false,
            b"big" => true,
            other => {
                return Err(error(
                    ErrorKind::Syntax,
                    alloc::format!(
                        "the byteorder member says {:?}; expected 'little' or 'big'",
                        String::from_utf8_lossy(other)
                    ),
                )
                .at(m.data_offset));
            }
        },
    };
    cat.metadata.push((
        "byteorder".into(),
        Meta::Str(if big_endian { "big" } else { "little" }.into()),
    ));
    if let Some(m) = archive.get(&alloc::format!("{prefix}version")) {
        let v = member_bytes(src, m, 64)?;
        cat.metadata.push((
            "archive_version".into(),
            Meta::Str(String::from_utf8_lossy(&v).trim().into()),
        ));
    }
    cat.metadata
        .push(("pickle_protocol".into(), Meta::Int(p.protocol.into())));

    let walk = Walk::run(&p)?;
    let mut located = BTreeMap::new();
    for (key, decl) in &walk.storages {
        let name = alloc::format!("{prefix}data/{key}");
        let m = archive.get(&name).ok_or_else(|| {
            error(
                ErrorKind::Truncated,
                alloc::format!("the pickle uses storage '{key}', but the archive has no member '{name}'"),
            )
        })?;
        if m.method != Method::Stored {
            return Err(error(
                ErrorKind::Unsupported,
                alloc::format!(
                    "storage member '{name}' is deflated; torch.save stores storages uncompressed, and this reader \
                     maps them in place. Re-save the checkpoint with torch.save"
                ),
            )
            .at(m.data_offset));
        }
        if m.size < decl.nbytes {
            return Err(error(
                ErrorKind::SizeMismatch,
                alloc::format!(
                    "storage '{key}' declares {} bytes, but member '{name}' has {}",
                    decl.nbytes,
                    m.size
                ),
            )
            .at(m.data_offset));
        }
        cat.checks.push(super::Check {
            source: 0,
            offset: m.data_offset,
            len: m.size,
            digest: super::Digest::Crc32(m.crc32),
            what: alloc::format!("zip member '{name}'"),
            decoded: None,
        });
        located.insert(
            key.clone(),
            Located {
                offset: m.data_offset,
                nbytes: decl.nbytes,
            },
        );
    }
    walk.finish(&mut cat, &located, big_endian, "zip")?;
    Ok(cat)
}

/// A member's bytes (inflated when deflated), refused when over `limit`.
fn member_bytes<'s, S: ReadAt + ?Sized>(
    src: &'s S,
    m: &zip::Member,
    limit: u64,
) -> Result<alloc::borrow::Cow<'s, [u8]>, FormatError> {
    if m.size > limit {
        return Err(error(
            ErrorKind::HeaderTooLarge,
            alloc::format!("member '{}' has {} bytes, over the {limit}-byte limit", m.name, m.size),
        )
        .at(m.data_offset));
    }
    let raw = bytes_at(F, src, m.data_offset, m.compressed)?;
    match m.method {
        Method::Stored => {
            let got = crc32fast::hash(&raw);
            if got != m.crc32 {
                return Err(error(
                    ErrorKind::Checksum,
                    alloc::format!(
                        "member '{}': CRC-32 mismatch: the archive declares 0x{:08x}, its bytes have 0x{got:08x} (the \
                         archive is corrupt)",
                        m.name,
                        m.crc32
                    ),
                )
                .at(m.data_offset));
            }
            Ok(raw)
        }
        Method::Deflate => zip::inflate(&raw, m.size, Some(m.crc32))
            .map(alloc::borrow::Cow::Owned)
            .map_err(|msg| error(ErrorKind::Syntax, alloc::format!("member '{}': {msg}", m.name)).at(m.data_offset)),
    }
}

/// Runs the next pickle of a legacy file at `*pos`, reading a window of the file that grows
/// only while the pickle needs more (so listing a large file reads little of it).
fn next_pickle<S: ReadAt + ?Sized>(src: &S, pos: &mut u64, what: &str) -> Result<Pickle, FormatError> {
    let left = src.size().saturating_sub(*pos);
    let cap = left.min(MAX_HEADER);
    let mut window = cap.min(64 << 10);
    loop {
        let bytes = bytes_at(F, src, *pos, window)?;
        match pickle::load(&bytes) {
            Ok(p) => {
                *pos += p.len as u64;
                return Ok(p);
            }
            Err(e) if e.kind == ErrorKind::Truncated && window < cap => window = cap.min(window.saturating_mul(4)),
            Err(e) if e.kind == ErrorKind::Truncated && cap < left => {
                return Err(error(
                    ErrorKind::HeaderTooLarge,
                    alloc::format!("the {what} pickle is longer than the {MAX_HEADER}-byte limit"),
                )
                .at(*pos));
            }
            Err(e) => {
                let mut e = shift(e, Some(*pos));
                e.message = alloc::format!("{what} pickle: {}", e.message);
                return Err(e);
            }
        }
    }
}

fn open_legacy<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let mut pos = 0u64;
    let magic = next_pickle(src, &mut pos, "first")?;
    if !matches!(&magic.root, Value::Long(b) if **b == LEGACY_MAGIC) {
        return Err(error(
            ErrorKind::Syntax,
            "the first pickle is not the legacy PyTorch magic number: not a PyTorch checkpoint (a zip checkpoint \
             starts with 'PK')",
        )
        .at(0));
    }
    let at = pos;
    let version = next_pickle(src, &mut pos, "protocol version")?;
    if version.root != Value::Int(1001) {
        return Err(error(
            ErrorKind::UnsupportedVersion,
            alloc::format!("legacy protocol version {:?}; only 1001 is known", version.root),
        )
        .at(at));
    }
    let sys = next_pickle(src, &mut pos, "sys_info")?;
    let sys_info = to_meta(&sys, &sys.root, 0, &mut visit_budget(sys.len))?;
    let big_endian = match &sys_info {
        Meta::Map(m) => m.iter().any(|(k, v)| k == "little_endian" && *v == Meta::Bool(false)),
        _ => false,
    };
    let main = next_pickle(src, &mut pos, "main")?;
    let keys_at = pos;
    let keys = next_pickle(src, &mut pos, "storage key list")?;
    let keys: Vec<String> = match keys.object(&keys.root) {
        Some(Object::List(items) | Object::Tuple(items)) => items
            .iter()
            .map(|k| key_string(k).ok_or_else(|| error(ErrorKind::Syntax, "a storage key is not a string").at(keys_at)))
            .collect::<Result<_, _>>()?,
        _ => return Err(error(ErrorKind::Syntax, "the storage key list is not a list").at(keys_at)),
    };

    let mut cat = Catalog::new(Format::PyTorchLegacy);
    cat.metadata.push(("variant".into(), Meta::Str("legacy".into())));
    cat.metadata.push((
        "byteorder".into(),
        Meta::Str(if big_endian { "big" } else { "little" }.into()),
    ));
    cat.metadata
        .push(("pickle_protocol".into(), Meta::Int(main.protocol.into())));
    cat.metadata.push(("protocol_version".into(), Meta::Int(1001)));
    cat.metadata.push(("sys_info".into(), sys_info));

    let walk = Walk::run(&main)?;
    // The storages follow in key order, each an 8-byte element count and its bytes.
    let mut located = BTreeMap::new();
    for key in &keys {
        let decl = walk.storages.get(key).ok_or_else(|| {
            error(
                ErrorKind::Syntax,
                alloc::format!("storage '{key}' is in the key list but no tensor uses it, so its size is unknown"),
            )
            .at(pos)
        })?;
        let n = bytes_at(F, src, pos, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&n);
        let count = if big_endian {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        };
        if count != decl.numel {
            return Err(error(
                ErrorKind::SizeMismatch,
                alloc::format!(
                    "storage '{key}' is stored with {count} elements, but the pickle declares {}",
                    decl.numel
                ),
            )
            .at(pos));
        }
        let data = pos + 8;
        let end = data
            .checked_add(decl.nbytes)
            .filter(|&e| e <= src.size())
            .ok_or_else(|| {
                error(
                    ErrorKind::Truncated,
                    alloc::format!(
                        "storage '{key}' needs {} bytes at {data}, past the end of the {}-byte file",
                        decl.nbytes,
                        src.size()
                    ),
                )
                .at(pos)
            })?;
        if located
            .insert(
                key.clone(),
                Located {
                    offset: data,
                    nbytes: decl.nbytes,
                },
            )
            .is_some()
        {
            return Err(error(ErrorKind::Duplicate, alloc::format!("storage '{key}' is listed twice")).at(keys_at));
        }
        pos = end;
    }
    if let Some(key) = walk.storages.keys().find(|k| !located.contains_key(*k)) {
        return Err(error(
            ErrorKind::Truncated,
            alloc::format!("the pickle uses storage '{key}', but the file does not store it"),
        ));
    }
    walk.finish(&mut cat, &located, big_endian, "legacy")?;
    Ok(cat)
}

/// A storage reference of one persistent id: key, location and (legacy) view as (offset, size)
/// in elements.
type StorageUse = (String, String, Option<(u64, u64)>);

/// A storage as its persistent id declares it.
#[derive(Clone, Debug, PartialEq)]
struct StorageDecl {
    /// Element type index into [`TORCH_TYPES`], or `None` for an untyped (byte) storage.
    ty: Option<usize>,
    numel: u64,
    nbytes: u64,
}

/// A tensor found in the pickle, before its storage is located.
struct Pending {
    name: String,
    key: String,
    location: String,
    /// A legacy storage view: (offset, size) in elements of the root storage.
    view: Option<(u64, u64)>,
    dtype: usize,
    offset: u64,
    shape: Vec<u64>,
    stride: Vec<u64>,
    requires_grad: bool,
    parameter: bool,
    metadata: Option<Meta>,
}

struct Walk<'p> {
    p: &'p Pickle,
    /// Visits left (see [`MAX_VISITS`]).
    visits: usize,
    tensors: Vec<Pending>,
    storages: BTreeMap<String, StorageDecl>,
    values: Vec<(String, Meta)>,
    skipped: Vec<(String, String)>,
    states: Vec<(String, Meta)>,
}

fn join(path: &str, part: &str) -> String {
    if path.is_empty() {
        part.into()
    } else {
        alloc::format!("{path}.{part}")
    }
}

fn key_string(k: &Value) -> Option<String> {
    match k {
        Value::Str(s) => Some(s.to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.into()),
        _ => None,
    }
}

fn uint(v: &Value, what: &str) -> Result<u64, FormatError> {
    match v {
        Value::Int(i) => {
            u64::try_from(*i).map_err(|_| error(ErrorKind::Syntax, alloc::format!("{what} is negative ({i})")))
        }
        Value::Long(_) => Err(error(
            ErrorKind::Overflow,
            alloc::format!("{what} does not fit 64 bits"),
        )),
        _ => Err(error(ErrorKind::Syntax, alloc::format!("{what} is not an integer"))),
    }
}

fn ty_name(i: usize) -> &'static str {
    TORCH_TYPES.get(i).map_or("?", |t| t.name)
}

fn itemsize(i: usize) -> Result<u64, FormatError> {
    TORCH_TYPES
        .get(i)
        .and_then(|t| t.ty)
        .and_then(|t| t.itemsize())
        .map(|s| s as u64)
        .ok_or_else(|| {
            error(
                ErrorKind::Unsupported,
                alloc::format!("torch dtype {} is not supported by this reader", ty_name(i)),
            )
        })
}

/// Whether `stride` is the C-order stride of `shape` (as `torch.Tensor.is_contiguous`: size-1
/// dimensions may have any stride, an empty tensor is contiguous).
fn is_contiguous(shape: &[u64], stride: &[u64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1u64;
    for (&d, &s) in shape.iter().zip(stride).rev() {
        if d != 1 {
            if s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
    }
    true
}

impl<'p> Walk<'p> {
    fn run(p: &'p Pickle) -> Result<Walk<'p>, FormatError> {
        let mut w = Walk {
            p,
            visits: visit_budget(p.len),
            tensors: Vec::new(),
            storages: BTreeMap::new(),
            values: Vec::new(),
            skipped: Vec::new(),
            states: Vec::new(),
        };
        w.walk(&p.root, "", 0)?;
        Ok(w)
    }

    fn visit(&mut self, depth: usize) -> Result<(), FormatError> {
        if self.visits == 0 {
            return Err(error(
                ErrorKind::Limit,
                "the pickle's containers are shared so often that walking them expands past the visit limit",
            ));
        }
        self.visits -= 1;
        if depth > MAX_DEPTH {
            return Err(error(
                ErrorKind::Limit,
                alloc::format!("containers nest deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn walk(&mut self, v: &Value, path: &str, depth: usize) -> Result<(), FormatError> {
        self.visit(depth)?;
        let p = self.p;
        let Some(obj) = p.object(v) else {
            return self.leaf(v, path, depth);
        };
        match obj {
            Object::Dict(d) => {
                if let Some(s) = &d.state {
                    let m = to_meta(p, s, depth, &mut self.visits)?;
                    self.states.push((path.into(), m));
                }
                for (k, x) in &d.entries {
                    match key_string(k) {
                        Some(k) => self.walk(x, &join(path, &k), depth + 1)?,
                        None => self.skipped.push((
                            join(path, "?"),
                            "a dict entry whose key is not a string or an integer".into(),
                        )),
                    }
                }
            }
            Object::List(items) | Object::Tuple(items) => {
                for (i, x) in items.iter().enumerate() {
                    self.walk(x, &join(path, &i.to_string()), depth + 1)?;
                }
            }
            Object::Call { func, args, .. } => {
                let name = if path.is_empty() { "tensor" } else { path };
                self.tensor(name, *func, args, depth)?;
            }
            Object::PersistentId(pid) => {
                self.storage(pid)?;
                self.skipped
                    .push((path.into(), "a storage on its own, not viewed by a tensor".into()));
            }
            Object::Set(_) => self.leaf(v, path, depth)?,
        }
        Ok(())
    }

    fn leaf(&mut self, v: &Value, path: &str, depth: usize) -> Result<(), FormatError> {
        let m = to_meta(self.p, v, depth, &mut self.visits)?;
        let kind = match v {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::Long(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Global(_) => "type",
            Value::Obj(_) => "set",
        };
        let path = if path.is_empty() { "value" } else { path };
        self.skipped.push((
            path.into(),
            alloc::format!("not a tensor ({kind}); its value is in the metadata under non_tensor_values"),
        ));
        self.values.push((path.into(), m));
        Ok(())
    }

    /// Registers the storage a persistent id names; returns its key, location and legacy view.
    fn storage(&mut self, pid: &Value) -> Result<StorageUse, FormatError> {
        let p = self.p;
        let bad = |m: &str| {
            error(
                ErrorKind::Syntax,
                alloc::format!("a persistent id is not ('storage', type, key, location, numel): {m}"),
            )
        };
        let Some(Object::Tuple(t)) = p.object(pid) else {
            return Err(bad("not a tuple"));
        };
        let [tag, ty, key, location, numel, rest @ ..] = t.as_slice() else {
            return Err(bad("too few fields"));
        };
        if !matches!(tag, Value::Str(s) if &**s == "storage") {
            return Err(error(
                ErrorKind::Unsupported,
                "a persistent id that is not a storage (whole-module pickles are not tensor checkpoints)",
            ));
        }
        let ty = match ty {
            Value::Global(Global::Storage(i)) => Some(*i),
            Value::Global(Global::UntypedStorage) => None,
            _ => return Err(bad("the type is not a torch storage class")),
        };
        let key = key_string(key).ok_or_else(|| bad("the key is not a string"))?;
        let location = match location {
            Value::Str(s) => s.to_string(),
            _ => return Err(bad("the location is not a string")),
        };
        let numel = uint(numel, "a storage's element count")?;
        let view = match rest {
            [] | [Value::None] => None,
            [v] => {
                let Some(Object::Tuple(vt)) = p.object(v) else {
                    return Err(bad("the view metadata is not a tuple"));
                };
                let [_view_key, offset, size] = vt.as_slice() else {
                    return Err(bad("the view metadata is not (key, offset, size)"));
                };
                Some((
                    uint(offset, "a storage view's offset")?,
                    uint(size, "a storage view's size")?,
                ))
            }
            _ => return Err(bad("too many fields")),
        };
        let item = match ty {
            Some(i) => itemsize(i)?,
            None => 1,
        };
        let nbytes = numel.checked_mul(item).ok_or_else(|| {
            error(
                ErrorKind::Overflow,
                alloc::format!("storage '{key}' of {numel} elements overflows 64 bits"),
            )
        })?;
        let decl = StorageDecl { ty, numel, nbytes };
        match self.storages.get(&key) {
            Some(old) if *old != decl => {
                return Err(error(
                    ErrorKind::Unsupported,
                    alloc::format!("storage '{key}' is declared with two different types or sizes"),
                ));
            }
            Some(_) => {}
            None => {
                self.storages.insert(key.clone(), decl);
            }
        }
        Ok((key, location, view))
    }

    fn tensor(&mut self, name: &str, func: Global, args: &[Value], depth: usize) -> Result<(), FormatError> {
        let p = self.p;
        let t_err = |kind, m: String| error(kind, m).tensor(name);
        let (data, parameter, requires_grad) = match func {
            Global::RebuildParameter | Global::RebuildParameterWithState => {
                let [data, rg, ..] = args else {
                    return Err(t_err(
                        ErrorKind::Syntax,
                        alloc::format!("{} needs (data, requires_grad, hooks)", func.name()),
                    ));
                };
                let Some(Object::Call { func: f, args: a, .. }) = p.object(data) else {
                    return Err(t_err(
                        ErrorKind::Syntax,
                        "a Parameter whose data is not a tensor".into(),
                    ));
                };
                if matches!(f, Global::RebuildParameter | Global::RebuildParameterWithState) {
                    return Err(t_err(ErrorKind::Syntax, "a Parameter of a Parameter".into()));
                }
                ((*f, a.as_slice()), true, matches!(rg, Value::Bool(true)))
            }
            _ => ((func, args), false, false),
        };
        let (func, args) = data;
        let n = args.len();
        let ok = match func {
            Global::RebuildTensor => n == 4,
            Global::RebuildTensorV2 => n == 6 || n == 7,
            Global::RebuildTensorV3 => n == 7 || n == 8,
            _ => false,
        };
        if !ok {
            return Err(t_err(
                ErrorKind::Syntax,
                alloc::format!(
                    "{} with {n} arguments is not a tensor rebuild this reader knows",
                    func.name()
                ),
            ));
        }
        let Some(Object::PersistentId(pid)) = p.object(&args[0]) else {
            return Err(t_err(
                ErrorKind::Syntax,
                "a tensor whose storage is not a persistent id".into(),
            ));
        };
        let (key, location, view) = self.storage(pid).map_err(|e| e.tensor(name))?;
        let storage_ty = self.storages.get(&key).and_then(|d| d.ty);
        let dtype = match (func, storage_ty) {
            (Global::RebuildTensorV3, _) => match &args[6] {
                Value::Global(Global::Dtype(i) | Global::Storage(i)) => *i,
                _ => {
                    return Err(t_err(
                        ErrorKind::Syntax,
                        "_rebuild_tensor_v3's dtype is not a torch dtype".into(),
                    ));
                }
            },
            (_, Some(i)) => i,
            (_, None) => {
                return Err(t_err(
                    ErrorKind::Syntax,
                    "a tensor on an untyped storage without a dtype (only _rebuild_tensor_v3 gives one)".into(),
                ));
            }
        };
        let offset = uint(&args[1], "storage_offset").map_err(|e| e.tensor(name))?;
        let dims = |v: &Value, what: &str| -> Result<Vec<u64>, FormatError> {
            match p.object(v) {
                Some(Object::Tuple(x) | Object::List(x)) => x.iter().map(|d| uint(d, what)).collect(),
                _ => Err(error(ErrorKind::Syntax, alloc::format!("the {what} is not a tuple"))),
            }
            .map_err(|e| e.tensor(name))
        };
        let shape = dims(&args[2], "size")?;
        let stride = dims(&args[3], "stride")?;
        if shape.len() != stride.len() {
            return Err(t_err(
                ErrorKind::Syntax,
                alloc::format!("{} sizes but {} strides", shape.len(), stride.len()),
            ));
        }
        if shape.len() > MAX_DEPTH {
            return Err(t_err(
                ErrorKind::Limit,
                alloc::format!("{} dimensions, over the limit of {MAX_DEPTH}", shape.len()),
            ));
        }
        let requires_grad = if parameter {
            requires_grad
        } else {
            matches!(args.get(4), Some(Value::Bool(true)))
        };
        let meta_arg = match func {
            Global::RebuildTensorV2 => args.get(6),
            Global::RebuildTensorV3 => args.get(7),
            _ => None,
        };
        let metadata = match meta_arg {
            None | Some(Value::None) => None,
            Some(v) => match to_meta(p, v, depth, &mut self.visits)? {
                Meta::Map(m) if m.is_empty() => None,
                m => Some(m),
            },
        };
        self.tensors.push(Pending {
            name: name.into(),
            key,
            location,
            view,
            dtype,
            offset,
            shape,
            stride,
            requires_grad,
            parameter,
            metadata,
        });
        Ok(())
    }

    /// Places every tensor over its located storage and fills the catalog.
    fn finish(
        self,
        cat: &mut Catalog,
        located: &BTreeMap<String, Located>,
        big_endian: bool,
        variant: &str,
    ) -> Result<(), FormatError> {
        let mut names = BTreeSet::new();
        let mut by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for t in &self.tensors {
            if !names.insert(t.name.as_str()) {
                return Err(
                    error(ErrorKind::Duplicate, "two entries of the pickle join to the same name")
                        .tensor(t.name.clone()),
                );
            }
            by_key.entry(&t.key).or_default().push(&t.name);
        }
        for t in &self.tensors {
            let info = place(t, located, big_endian).map_err(|e| e.tensor(t.name.clone()))?;
            let mut info = info;
            let a = &mut info.attributes;
            a.push(("variant".into(), Meta::Str(variant.into())));
            let shared: Vec<Meta> = by_key
                .get(t.key.as_str())
                .into_iter()
                .flatten()
                .filter(|n| **n != t.name)
                .map(|n| Meta::Str((*n).into()))
                .collect();
            if !shared.is_empty() {
                a.push(("shares_storage_with".into(), Meta::List(shared)));
            }
            if t.parameter {
                a.push(("parameter".into(), Meta::Bool(true)));
            }
            if let Some(m) = &t.metadata {
                a.push(("tensor_metadata".into(), m.clone()));
            }
            cat.tensors.push(info);
        }
        cat.skipped.extend(self.skipped);
        if !self.values.is_empty() {
            cat.metadata.push(("non_tensor_values".into(), Meta::Map(self.values)));
        }
        if !self.states.is_empty() {
            cat.metadata.push(("container_state".into(), Meta::Map(self.states)));
        }
        Ok(())
    }
}

/// One tensor's storage range and arrangement, checked against its storage.
fn place(t: &Pending, located: &BTreeMap<String, Located>, big_endian: bool) -> Result<TensorInfo, FormatError> {
    let loc = located.get(&t.key).ok_or_else(|| {
        error(
            ErrorKind::Truncated,
            alloc::format!("storage '{}' is not in the file", t.key),
        )
    })?;
    let ty = TORCH_TYPES.get(t.dtype).and_then(|x| x.ty).ok_or_else(|| {
        error(
            ErrorKind::Unsupported,
            alloc::format!("torch dtype {} is not supported by this reader", ty_name(t.dtype)),
        )
    })?;
    let item = itemsize(t.dtype)?;
    let overflow = || error(ErrorKind::Overflow, "the tensor's extent overflows 64 bits");
    // The part of the storage this tensor may use (a legacy storage view narrows it).
    let (region_start, region_len) = match t.view {
        None => (0, loc.nbytes),
        Some((o, n)) => {
            let start = o.checked_mul(item).ok_or_else(overflow)?;
            let len = n.checked_mul(item).ok_or_else(overflow)?;
            if start.checked_add(len).is_none_or(|e| e > loc.nbytes) {
                return Err(error(
                    ErrorKind::OutOfBounds,
                    alloc::format!(
                        "storage view [{o}, +{n}) runs past storage '{}' ({} bytes)",
                        t.key,
                        loc.nbytes
                    ),
                ));
            }
            (start, len)
        }
    };
    let numel = crate::tensor::numel(&t.shape).ok_or_else(overflow)?;
    let nbytes = numel.checked_mul(item).ok_or_else(overflow)?;
    let contiguous = is_contiguous(&t.shape, &t.stride);
    let base = loc.offset + region_start;
    let (storage, view) = if numel == 0 {
        (
            Storage::Range {
                source: 0,
                offset: base,
                len: 0,
            },
            None,
        )
    } else {
        let start = t.offset.checked_mul(item).ok_or_else(overflow)?;
        let v = View {
            offset: t.offset,
            strides: t.stride.clone(),
        };
        let end = if contiguous {
            start.checked_add(nbytes)
        } else {
            super::view_extent(&t.shape, &v, item)
        }
        .ok_or_else(overflow)?;
        if end > region_len {
            return Err(error(
                ErrorKind::OutOfBounds,
                alloc::format!(
                    "the view (offset {}, shape {:?}, stride {:?}) needs {end} bytes of storage '{}', which has {}",
                    t.offset,
                    t.shape,
                    t.stride,
                    t.key,
                    region_len
                ),
            ));
        }
        let range = Storage::Range {
            source: 0,
            offset: base + start,
            len: end - start,
        };
        let view = (!contiguous).then(|| View {
            offset: 0,
            strides: t.stride.clone(),
        });
        (range, view)
    };
    let ints = |v: &[u64]| Meta::List(v.iter().map(|&x| Meta::UInt(x)).collect());
    Ok(TensorInfo {
        name: t.name.clone(),
        ty,
        shape: t.shape.clone(),
        storage,
        arrangement: Arrangement { big_endian, view },
        attributes: alloc::vec![
            ("torch_dtype".into(), Meta::Str(ty_name(t.dtype).into())),
            ("stride".into(), ints(&t.stride)),
            ("storage_offset".into(), Meta::UInt(t.offset)),
            ("contiguous".into(), Meta::Bool(contiguous)),
            ("storage_nbytes".into(), Meta::UInt(region_len)),
            ("storage_key".into(), Meta::Str(t.key.clone())),
            ("location".into(), Meta::Str(t.location.clone())),
            ("requires_grad".into(), Meta::Bool(t.requires_grad)),
        ],
    })
}

/// A pickled value as metadata, bounded in depth and in the nodes visited (`visits` left,
/// shared with the walk).
fn to_meta(p: &Pickle, v: &Value, depth: usize, visits: &mut usize) -> Result<Meta, FormatError> {
    if *visits == 0 || depth > MAX_DEPTH {
        return Err(error(
            ErrorKind::Limit,
            alloc::format!("a value nests deeper than {MAX_DEPTH} levels or expands past the visit limit"),
        ));
    }
    *visits -= 1;
    Ok(match v {
        Value::None => Meta::Null,
        Value::Bool(b) => Meta::Bool(*b),
        Value::Int(i) => Meta::Int(*i),
        Value::Long(b) => match b.len() {
            0..=16 => {
                let neg = b.last().is_some_and(|&x| x & 0x80 != 0);
                let mut a = [if neg { 0xff } else { 0 }; 16];
                a[..b.len()].copy_from_slice(b);
                Meta::Str(i128::from_le_bytes(a).to_string())
            }
            _ => Meta::Bytes(b.to_vec()),
        },
        Value::Float(f) => Meta::Float(*f),
        Value::Str(s) => Meta::Str(s.to_string()),
        Value::Bytes(b) => Meta::Bytes(b.to_vec()),
        Value::Global(g) => Meta::Str(g.name()),
        Value::Obj(_) => match p.object(v) {
            Some(Object::Tuple(x) | Object::List(x) | Object::Set(x)) => Meta::List(
                x.iter()
                    .map(|i| to_meta(p, i, depth + 1, visits))
                    .collect::<Result<_, _>>()?,
            ),
            Some(Object::Dict(d)) => Meta::Map(
                d.entries
                    .iter()
                    .map(|(k, x)| {
                        Ok((
                            key_string(k).unwrap_or_else(|| "?".into()),
                            to_meta(p, x, depth + 1, visits)?,
                        ))
                    })
                    .collect::<Result<_, FormatError>>()?,
            ),
            Some(Object::Call { .. }) => Meta::Str("<tensor>".into()),
            Some(Object::PersistentId(_)) | None => Meta::Str("<storage>".into()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_follows_torch() {
        assert!(is_contiguous(&[2, 3], &[3, 1]));
        assert!(!is_contiguous(&[3, 2], &[1, 3]));
        assert!(is_contiguous(&[3, 0], &[1, 1]));
        assert!(is_contiguous(&[1, 4], &[99, 1]));
        assert!(is_contiguous(&[], &[]));
        assert!(!is_contiguous(&[8], &[3]));
    }
}
