//! A restricted pickle machine for PyTorch checkpoints: it *models* what a pickle would build and
//! never executes anything.
//!
//! Python's unpickler imports any `module.name` a pickle names (`GLOBAL`, `STACK_GLOBAL`, `INST`)
//! and calls it (`REDUCE`, `NEWOBJ`, `BUILD`): a checkpoint can run `os.system`. This machine
//! resolves every global against a fixed allow-list ([`Global`]) the moment the opcode is read,
//! before anything else happens, and refuses any other name with [`ErrorKind::Refused`] and the
//! name in the message. Allowed "calls" are modelled: `OrderedDict()` makes a dict, `set(...)` a
//! set, `_codecs.encode(s, 'latin1')` bytes, `torch.Size(t)` a tuple, and the tensor rebuild
//! functions become [`Object::Call`] records that the checkpoint reader interprets.
//!
//! Every resource is bounded: the pickle is a slice already checked against
//! [`super::MAX_HEADER`], the stack, memo and number of values created have fixed limits, every
//! opcode is O(its operands) (containers and strings are shared, never copied), and the value
//! graph is walked later with a depth limit of [`super::MAX_DEPTH`].
//!
//! Supported: every opcode of protocols 0 to 5 except the copyreg extension registry
//! (`EXT1/2/4`, refused: they name globals indirectly) and out-of-band buffers (`NEXT_BUFFER`,
//! `READONLY_BUFFER`, unsupported: checkpoints never use them).

use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use super::{ElementType, ErrorKind, FormatError};
use crate::dtype::DType;
use crate::zt::format::LogicalType;

const FORMAT: &str = "pt";

/// The most values a pickle may push (stack pushes and memo stores): 8 Mi, a few hundred
/// thousand tensors, and a few hundred MiB of memory at most.
pub const MAX_VALUES: usize = 1 << 23;
/// The deepest the stack (values plus marks) may grow: 64 Ki (`torch.save` batches container
/// items by 1000, so real checkpoints stay far below).
pub const MAX_STACK: usize = 1 << 16;
/// The memory the machine may use to model a pickle: this many bytes per byte of pickle, plus
/// [`MEMORY_BASE`]. Every value and object created is charged (its size and its share of the
/// containers that hold it), so memory is bounded in proportion to the input.
pub const MEMORY_PER_BYTE: usize = 32;
/// The memory every pickle may use beyond [`MEMORY_PER_BYTE`] per byte: 16 MiB.
pub const MEMORY_BASE: usize = 16 << 20;
/// The most memo entries a pickle may define.
pub const MAX_MEMO: usize = 1 << 21;

/// A torch element type: its `torch.<name>` dtype, its legacy `torch.<Storage>` class (if it
/// has one) and the catalog element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TorchType {
    /// The dtype's name (`float32`, `bfloat16`, `bool`, ...).
    pub name: &'static str,
    /// The typed storage class (`FloatStorage`, ...), absent for dtypes saved through untyped
    /// storages (`_rebuild_tensor_v3`).
    pub storage: Option<&'static str>,
    /// The element type, or `None` for dtypes this reader does not support (named in errors).
    pub ty: Option<ElementType>,
}

const fn t(name: &'static str, storage: Option<&'static str>, ty: Option<ElementType>) -> TorchType {
    TorchType { name, storage, ty }
}
const fn d(d: DType) -> Option<ElementType> {
    Some(ElementType::Dense(d))
}
const fn l(l: LogicalType) -> Option<ElementType> {
    Some(ElementType::Logical(l))
}

/// Every torch dtype the allow-list knows.
pub const TORCH_TYPES: &[TorchType] = &[
    t("float32", Some("FloatStorage"), d(DType::F32)),
    t("float64", Some("DoubleStorage"), d(DType::F64)),
    t("float16", Some("HalfStorage"), d(DType::F16)),
    t("bfloat16", Some("BFloat16Storage"), d(DType::BF16)),
    t("int64", Some("LongStorage"), d(DType::I64)),
    t("int32", Some("IntStorage"), d(DType::I32)),
    t("int16", Some("ShortStorage"), d(DType::I16)),
    t("int8", Some("CharStorage"), d(DType::I8)),
    t("uint8", Some("ByteStorage"), d(DType::U8)),
    t("bool", Some("BoolStorage"), d(DType::Bool)),
    t("complex64", Some("ComplexFloatStorage"), d(DType::C64)),
    t("complex128", Some("ComplexDoubleStorage"), d(DType::C128)),
    t("uint16", None, d(DType::U16)),
    t("uint32", None, d(DType::U32)),
    t("uint64", None, d(DType::U64)),
    t("float8_e4m3fn", Some("Float8_e4m3fnStorage"), l(LogicalType::F8E4M3Fn)),
    t("float8_e5m2", Some("Float8_e5m2Storage"), l(LogicalType::F8E5M2)),
    t(
        "float8_e4m3fnuz",
        Some("Float8_e4m3fnuzStorage"),
        l(LogicalType::F8E4M3Fnuz),
    ),
    t(
        "float8_e5m2fnuz",
        Some("Float8_e5m2fnuzStorage"),
        l(LogicalType::F8E5M2Fnuz),
    ),
    t("float8_e8m0fnu", Some("Float8_e8m0fnuStorage"), l(LogicalType::F8E8M0)),
    // Known dtypes that are not supported: named clearly when a tensor uses them.
    t("complex32", Some("ComplexHalfStorage"), None),
    t("float4_e2m1fn_x2", None, None),
    t("qint8", Some("QInt8Storage"), None),
    t("quint8", Some("QUInt8Storage"), None),
    t("qint32", Some("QInt32Storage"), None),
    t("quint4x2", Some("QUInt4x2Storage"), None),
    t("quint2x4", Some("QUInt2x4Storage"), None),
];

/// A global on the allow-list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    /// `collections.OrderedDict`.
    OrderedDict,
    /// `builtins.set` (`__builtin__.set` in protocol 2).
    Set,
    /// `builtins.frozenset`.
    FrozenSet,
    /// `builtins.bytes` (protocol 2 writes `bytes()` for `b''`).
    Bytes,
    /// `_codecs.encode` (protocol 2 writes `bytes` as `encode(str, 'latin1')`).
    CodecsEncode,
    /// `torch.Size`.
    TorchSize,
    /// `torch._utils._rebuild_tensor(storage, offset, size, stride)`.
    RebuildTensor,
    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])`.
    RebuildTensorV3,
    /// `torch._utils._rebuild_parameter(data, requires_grad, hooks)`.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state(data, requires_grad, hooks, state)`.
    RebuildParameterWithState,
    /// `torch.<X>Storage`: a typed storage class (index into [`TORCH_TYPES`]).
    Storage(usize),
    /// `torch.UntypedStorage`: bytes.
    UntypedStorage,
    /// `torch.<dtype>` (index into [`TORCH_TYPES`]).
    Dtype(usize),
}

impl Global {
    /// Resolves `module.name` against the allow-list.
    pub fn resolve(module: &str, name: &str) -> Option<Global> {
        Some(match (module, name) {
            ("collections", "OrderedDict") => Global::OrderedDict,
            ("builtins" | "__builtin__", "set") => Global::Set,
            ("builtins" | "__builtin__", "frozenset") => Global::FrozenSet,
            ("builtins" | "__builtin__", "bytes") => Global::Bytes,
            ("_codecs", "encode") => Global::CodecsEncode,
            ("torch", "Size") => Global::TorchSize,
            ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
            ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor_v3") => Global::RebuildTensorV3,
            ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
            ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
            ("torch" | "torch.storage", "UntypedStorage") => Global::UntypedStorage,
            ("torch", n) => {
                if let Some(i) = TORCH_TYPES.iter().position(|t| t.storage == Some(n)) {
                    Global::Storage(i)
                } else {
                    Global::Dtype(TORCH_TYPES.iter().position(|t| t.name == n)?)
                }
            }
            _ => return None,
        })
    }

    /// The `module.name` the global stands for.
    pub fn name(self) -> String {
        let s: &str = match self {
            Global::OrderedDict => "collections.OrderedDict",
            Global::Set => "builtins.set",
            Global::FrozenSet => "builtins.frozenset",
            Global::Bytes => "builtins.bytes",
            Global::CodecsEncode => "_codecs.encode",
            Global::TorchSize => "torch.Size",
            Global::RebuildTensor => "torch._utils._rebuild_tensor",
            Global::RebuildTensorV2 => "torch._utils._rebuild_tensor_v2",
            Global::RebuildTensorV3 => "torch._utils._rebuild_tensor_v3",
            Global::RebuildParameter => "torch._utils._rebuild_parameter",
            Global::RebuildParameterWithState => "torch._utils._rebuild_parameter_with_state",
            Global::UntypedStorage => "torch.UntypedStorage",
            Global::Storage(i) => return alloc::format!("torch.{}", TORCH_TYPES[i].storage.unwrap_or("?")),
            Global::Dtype(i) => return alloc::format!("torch.{}", TORCH_TYPES[i].name),
        };
        s.into()
    }
}

/// A value on the machine's stack, in its memo or in a container.
///
/// Cloning is O(1): strings and bytes are shared, containers live in [`Pickle::objects`].
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits 64 bits.
    Int(i64),
    /// A larger integer: little-endian two's complement bytes, as `LONG1`/`LONG4` store it.
    Long(Rc<[u8]>),
    /// A float.
    Float(f64),
    /// A string.
    Str(Rc<str>),
    /// Bytes (also protocol-1 strings that are not UTF-8, and bytearrays).
    Bytes(Rc<[u8]>),
    /// An allowed global, not called.
    Global(Global),
    /// A container or modelled object: an index into [`Pickle::objects`].
    Obj(usize),
}

/// A dict (plain or `OrderedDict`) in insertion order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dict {
    /// Whether it came from `collections.OrderedDict`.
    pub ordered: bool,
    /// Entries in insertion order (a repeated key keeps its first position, as in Python).
    pub entries: Vec<(Value, Value)>,
    /// What `BUILD` gave it (a state dict's `_metadata`), if anything.
    pub state: Option<Value>,
    index: BTreeMap<Key, usize>,
}

/// The hashable scalar keys, for replacing a repeated key in O(log n).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    None,
    Int(i64),
    Long(Rc<[u8]>),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
}

impl Dict {
    fn insert(&mut self, k: Value, v: Value) {
        let key = match &k {
            Value::None => Some(Key::None),
            Value::Bool(b) => Some(Key::Int(i64::from(*b))),
            Value::Int(i) => Some(Key::Int(*i)),
            Value::Long(b) => Some(Key::Long(b.clone())),
            Value::Str(s) => Some(Key::Str(s.clone())),
            Value::Bytes(b) => Some(Key::Bytes(b.clone())),
            _ => None,
        };
        match key {
            Some(key) => match self.index.get(&key) {
                Some(&i) => self.entries[i].1 = v,
                None => {
                    self.index.insert(key, self.entries.len());
                    self.entries.push((k, v));
                }
            },
            None => self.entries.push((k, v)),
        }
    }
}

/// A container or a modelled object.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A tuple.
    Tuple(Vec<Value>),
    /// A list.
    List(Vec<Value>),
    /// A dict or `OrderedDict`.
    Dict(Dict),
    /// A set or frozenset, in insertion order.
    Set(Vec<Value>),
    /// A call of an allowed function that this machine does not evaluate (the tensor and
    /// parameter rebuilds): the function, its arguments, and what `BUILD` gave the result.
    Call {
        /// The function.
        func: Global,
        /// Its positional arguments.
        args: Vec<Value>,
        /// State given by `BUILD`, if any.
        state: Option<Value>,
    },
    /// A persistent id (`BINPERSID`): in a checkpoint, a reference to a storage.
    PersistentId(Value),
}

/// The result of running a pickle.
#[derive(Clone, Debug, PartialEq)]
pub struct Pickle {
    /// The value `STOP` returned.
    pub root: Value,
    /// Every container and modelled object, indexed by [`Value::Obj`].
    pub objects: Vec<Object>,
    /// The protocol `PROTO` declared (0 or 1 when there is none).
    pub protocol: u8,
    /// Bytes consumed, up to and including `STOP`.
    pub len: usize,
}

impl Pickle {
    /// The object behind `v`, when it is one.
    pub fn object(&self, v: &Value) -> Option<&Object> {
        match v {
            Value::Obj(i) => self.objects.get(*i),
            _ => None,
        }
    }
}

/// The longest decimal integer a text `INT`/`LONG` opcode may have beyond 64 bits (protocol 1
/// writes the legacy magic number this way); the conversion is quadratic in the digits.
const MAX_TEXT_DIGITS: usize = 64;

/// A decimal integer as minimal little-endian two's complement bytes, as `LONG1` stores it.
fn big_decimal(s: &str) -> Option<Vec<u8>> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if digits.is_empty() || digits.len() > MAX_TEXT_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Magnitude, little-endian, by repeated multiply-add.
    let mut mag: Vec<u8> = Vec::new();
    for d in digits.bytes() {
        let mut carry = u32::from(d - b'0');
        for b in mag.iter_mut() {
            let v = u32::from(*b) * 10 + carry;
            *b = v as u8;
            carry = v >> 8;
        }
        if carry > 0 {
            mag.push(carry as u8);
        }
    }
    if neg {
        // Two's complement: invert and add one.
        let mut carry = 1u16;
        for b in mag.iter_mut() {
            let v = u16::from(!*b) + carry;
            *b = v as u8;
            carry = v >> 8;
        }
        if mag.last().is_none_or(|&b| b & 0x80 == 0) {
            mag.push(0xff);
        }
    } else if mag.last().is_some_and(|&b| b & 0x80 != 0) {
        mag.push(0);
    }
    Some(mag)
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    op_at: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: BTreeMap<u64, Value>,
    objects: Vec<Object>,
    created: usize,
    /// Bytes charged so far (values, objects), against `budget`.
    charged: usize,
    budget: usize,
    protocol: u8,
}

fn err(kind: ErrorKind, at: usize, msg: String) -> FormatError {
    FormatError::new(FORMAT, kind, msg).at(at as u64)
}

/// Runs the pickle at the start of `data` up to its `STOP` opcode. Offsets in errors are
/// relative to `data`.
pub fn load(data: &[u8]) -> Result<Pickle, FormatError> {
    let mut m = Machine {
        data,
        pos: 0,
        op_at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: BTreeMap::new(),
        objects: Vec::new(),
        created: 0,
        charged: 0,
        budget: MEMORY_BASE.saturating_add(data.len().saturating_mul(MEMORY_PER_BYTE)),
        protocol: 0,
    };
    let root = m.run()?;
    Ok(Pickle {
        root,
        objects: m.objects,
        protocol: m.protocol,
        len: m.pos,
    })
}

impl<'a> Machine<'a> {
    fn fail(&self, kind: ErrorKind, msg: impl Into<String>) -> FormatError {
        err(kind, self.op_at, msg.into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let data = self.data;
        match self.pos.checked_add(n).and_then(|end| data.get(self.pos..end)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.fail(
                ErrorKind::Truncated,
                alloc::format!(
                    "the pickle ends inside an opcode that needs {n} more bytes ({} left)",
                    data.len().saturating_sub(self.pos)
                ),
            )),
        }
    }

    fn byte(&mut self) -> Result<u8, FormatError> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, n: usize) -> Result<u64, FormatError> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    /// A length operand: checked against the bytes that are left before anything is allocated.
    fn len(&mut self, n: usize) -> Result<usize, FormatError> {
        let v = self.uint(n)?;
        let left = (self.data.len() - self.pos) as u64;
        if v > left {
            return Err(self.fail(
                ErrorKind::Truncated,
                alloc::format!("an opcode declares {v} bytes but only {left} are left in the pickle"),
            ));
        }
        Ok(v as usize)
    }

    /// A text line (protocol 0 operands), without its `\n`.
    fn line(&mut self) -> Result<&'a [u8], FormatError> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let n = rest.iter().position(|&b| b == b'\n').ok_or_else(|| {
            self.fail(
                ErrorKind::Truncated,
                "the pickle ends inside a text operand (no newline)",
            )
        })?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    fn text(&mut self) -> Result<&'a str, FormatError> {
        let l = self.line()?;
        core::str::from_utf8(l).map_err(|_| self.fail(ErrorKind::Syntax, "a text operand is not UTF-8"))
    }

    fn push(&mut self, v: Value) -> Result<(), FormatError> {
        self.count()?;
        if self.stack.len() + self.marks.len() >= MAX_STACK {
            return Err(self.fail(
                ErrorKind::Limit,
                alloc::format!("the pickle stack grows past {MAX_STACK} entries"),
            ));
        }
        self.stack.push(v);
        Ok(())
    }

    /// Charges `bytes` of modelled memory; refuses past the budget.
    fn charge(&mut self, bytes: usize) -> Result<(), FormatError> {
        self.charged = self.charged.saturating_add(bytes);
        if self.charged > self.budget {
            return Err(self.fail(
                ErrorKind::Limit,
                alloc::format!(
                    "modelling the pickle would take more than {} bytes of memory ({MEMORY_PER_BYTE} per pickle byte \
                     plus {MEMORY_BASE}): it is not a checkpoint torch.save writes",
                    self.budget
                ),
            ));
        }
        Ok(())
    }

    fn count(&mut self) -> Result<(), FormatError> {
        // A value on the stack, in the memo, then in a container with its dict index entry.
        self.charge(3 * core::mem::size_of::<Value>())?;
        self.created += 1;
        if self.created > MAX_VALUES {
            return Err(self.fail(
                ErrorKind::Limit,
                alloc::format!("the pickle creates more than {MAX_VALUES} values"),
            ));
        }
        Ok(())
    }

    fn object(&self, v: &Value) -> Option<&Object> {
        match v {
            Value::Obj(i) => self.objects.get(*i),
            _ => None,
        }
    }

    fn new_obj(&mut self, o: Object) -> Result<Value, FormatError> {
        // The object and the `objects` vector's growth (it doubles).
        self.charge(2 * core::mem::size_of::<Object>())?;
        self.objects.push(o);
        Ok(Value::Obj(self.objects.len() - 1))
    }

    fn pop(&mut self) -> Result<Value, FormatError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.fail(ErrorKind::Syntax, "an opcode pops from an empty stack"));
        }
        Ok(self.stack.pop().unwrap_or(Value::None))
    }

    fn top(&mut self) -> Result<&mut Value, FormatError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.fail(ErrorKind::Syntax, "an opcode needs a value on an empty stack"));
        }
        let at = self.op_at;
        self.stack
            .last_mut()
            .ok_or_else(|| err(ErrorKind::Syntax, at, "empty stack".into()))
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, FormatError> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.fail(ErrorKind::Syntax, "an opcode needs a MARK that was never pushed"))?;
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    fn memo_put(&mut self, i: u64) -> Result<(), FormatError> {
        let v = self.top()?.clone();
        self.count()?;
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&i) {
            return Err(self.fail(
                ErrorKind::Limit,
                alloc::format!("the pickle memoizes more than {MAX_MEMO} values"),
            ));
        }
        self.memo.insert(i, v);
        Ok(())
    }

    fn memo_get(&mut self, i: u64) -> Result<(), FormatError> {
        let v = self.memo.get(&i).cloned().ok_or_else(|| {
            self.fail(
                ErrorKind::Syntax,
                alloc::format!("memo entry {i} is read before it is written"),
            )
        })?;
        self.push(v)
    }

    fn global(&mut self, module: &str, name: &str) -> Result<Value, FormatError> {
        match Global::resolve(module, name) {
            Some(g) => Ok(Value::Global(g)),
            None => Err(self.fail(
                ErrorKind::Refused,
                alloc::format!(
                    "the pickle imports `{module}.{name}`, which is not on the allow-list of a tensor checkpoint \
                     (tensor rebuilds, storages, dtypes, OrderedDict); nothing was executed. Load the file with \
                     torch.load(weights_only=True) only if you trust it"
                ),
            )),
        }
    }

    fn string(&mut self, b: &[u8]) -> Result<Value, FormatError> {
        let s = core::str::from_utf8(b).map_err(|_| self.fail(ErrorKind::Syntax, "a unicode string is not UTF-8"))?;
        Ok(Value::Str(Rc::from(s)))
    }

    /// Protocol-1 byte strings (`BINSTRING`): text when UTF-8, else bytes.
    fn py2_string(b: &[u8]) -> Value {
        match core::str::from_utf8(b) {
            Ok(s) => Value::Str(Rc::from(s)),
            Err(_) => Value::Bytes(Rc::from(b)),
        }
    }

    fn int_text(&self, s: &str) -> Result<Value, FormatError> {
        let s = s.trim_end_matches('L');
        match s {
            "00" => return Ok(Value::Bool(false)),
            "01" => return Ok(Value::Bool(true)),
            _ => {}
        }
        if let Ok(i) = s.parse::<i64>() {
            return Ok(Value::Int(i));
        }
        big_decimal(s).map(|b| Value::Long(Rc::from(b))).ok_or_else(|| {
            self.fail(
                ErrorKind::Unsupported,
                alloc::format!("text integer '{s}' is not an integer of at most {MAX_TEXT_DIGITS} digits"),
            )
        })
    }

    /// Protocol-0 quoted strings: only the plain forms (no escapes) that text pickles of tensor
    /// names use.
    fn quoted(&self, s: &str) -> Result<Value, FormatError> {
        let inner = s
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
            .or_else(|| s.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
            .ok_or_else(|| self.fail(ErrorKind::Syntax, "a STRING operand is not quoted"))?;
        if inner.contains('\\') {
            return Err(self.fail(
                ErrorKind::Unsupported,
                "escaped protocol-0 strings are not supported; save with pickle protocol 2 or later",
            ));
        }
        Ok(Value::Str(Rc::from(inner)))
    }

    fn long(&self, b: &[u8]) -> Value {
        if b.len() <= 8 {
            let neg = b.last().is_some_and(|&x| x & 0x80 != 0);
            let mut a = [if neg { 0xff } else { 0 }; 8];
            a[..b.len()].copy_from_slice(b);
            Value::Int(i64::from_le_bytes(a))
        } else {
            Value::Long(Rc::from(b))
        }
    }

    /// The items of a tuple, list or set, copied: the copy is counted against [`MAX_VALUES`], so
    /// passing one large memoized tuple to many calls cannot cost quadratic time.
    fn items(&mut self, v: &Value) -> Result<Vec<Value>, FormatError> {
        let items = match v {
            Value::Obj(i) => match self.objects.get(*i) {
                Some(Object::Tuple(x) | Object::List(x) | Object::Set(x)) => x.clone(),
                _ => return Err(self.fail(ErrorKind::Unsupported, "expected a tuple or list of arguments")),
            },
            _ => return Err(self.fail(ErrorKind::Syntax, "expected a tuple of arguments")),
        };
        self.created = self.created.saturating_add(items.len());
        self.count()?;
        Ok(items)
    }

    /// Models `func(*args)` for an allowed callable.
    fn call(&mut self, func: Value, args: Value) -> Result<Value, FormatError> {
        let Value::Global(g) = func else {
            return Err(self.fail(
                ErrorKind::Syntax,
                "REDUCE/NEWOBJ needs a global to call, and finds another value",
            ));
        };
        let args = self.items(&args)?;
        let unsupported = |m: &Self, what: &str| {
            m.fail(
                ErrorKind::Unsupported,
                alloc::format!("{}({what}) is not a form tensor checkpoints use", g.name()),
            )
        };
        match g {
            Global::OrderedDict => {
                if !args.is_empty() {
                    return Err(unsupported(self, "with arguments"));
                }
                self.new_obj(Object::Dict(Dict {
                    ordered: true,
                    ..Dict::default()
                }))
            }
            Global::Set | Global::FrozenSet => {
                let items = match args.as_slice() {
                    [] => Vec::new(),
                    [x] => self.items(x)?,
                    _ => return Err(unsupported(self, "several arguments")),
                };
                self.new_obj(Object::Set(items))
            }
            Global::Bytes => match args.as_slice() {
                [] => Ok(Value::Bytes(Rc::from(&[][..]))),
                _ => Err(unsupported(self, "with arguments")),
            },
            Global::CodecsEncode => match args.as_slice() {
                [Value::Str(s), Value::Str(enc)] if matches!(&**enc, "latin1" | "latin-1" | "iso-8859-1") => {
                    let mut out = Vec::with_capacity(s.len());
                    for c in s.chars() {
                        let c = u8::try_from(u32::from(c)).map_err(|_| {
                            self.fail(ErrorKind::Syntax, "a latin1-encoded string has a character over 255")
                        })?;
                        out.push(c);
                    }
                    Ok(Value::Bytes(Rc::from(out)))
                }
                _ => Err(unsupported(self, "other than (str, 'latin1')")),
            },
            Global::TorchSize => match args.as_slice() {
                [x] => {
                    let items = self.items(x)?;
                    self.new_obj(Object::Tuple(items))
                }
                _ => Err(unsupported(self, "without one tuple")),
            },
            Global::RebuildTensor
            | Global::RebuildTensorV2
            | Global::RebuildTensorV3
            | Global::RebuildParameter
            | Global::RebuildParameterWithState => self.new_obj(Object::Call {
                func: g,
                args,
                state: None,
            }),
            Global::Storage(_) | Global::UntypedStorage | Global::Dtype(_) => Err(self.fail(
                ErrorKind::Unsupported,
                alloc::format!("{} is a type; tensor checkpoints never call it", g.name()),
            )),
        }
    }

    fn with_obj<R>(
        &mut self,
        target: &Value,
        what: &str,
        f: impl FnOnce(&mut Object) -> Option<R>,
    ) -> Result<R, FormatError> {
        let at = self.op_at;
        let bad = || {
            err(
                ErrorKind::Syntax,
                at,
                alloc::format!("{what} applies to a value that does not support it"),
            )
        };
        match target {
            Value::Obj(i) => self.objects.get_mut(*i).and_then(f).ok_or_else(bad),
            _ => Err(bad()),
        }
    }

    fn set_items(&mut self, target: &Value, items: Vec<Value>) -> Result<(), FormatError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.fail(ErrorKind::Syntax, "SETITEMS has an odd number of values"));
        }
        self.with_obj(target, "SETITEM(S)", |o| match o {
            Object::Dict(d) => {
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.insert(k, v);
                }
                Some(())
            }
            _ => None,
        })
    }

    fn run(&mut self) -> Result<Value, FormatError> {
        loop {
            self.op_at = self.pos;
            let op = self.byte()?;
            // STOP
            if op == b'.' {
                return self.pop();
            }
            let known = self.stack_op(op)?
                || self.scalar_op(op)?
                || self.container_op(op)?
                || self.memo_op(op)?
                || self.object_op(op)?;
            if !known {
                return Err(self.fail(
                    ErrorKind::Syntax,
                    alloc::format!("byte 0x{op:02x} is not a pickle opcode"),
                ));
            }
        }
    }

    /// PROTO, FRAME and the stack opcodes (MARK, POP, POP_MARK, DUP).
    /// `Ok(false)` when `op` is not one of them.
    fn stack_op(&mut self, op: u8) -> Result<bool, FormatError> {
        match op {
            // PROTO
            0x80 => {
                let p = self.byte()?;
                if p > 5 {
                    return Err(self.fail(
                        ErrorKind::UnsupportedVersion,
                        alloc::format!("pickle protocol {p} is newer than 5, the latest this reader knows"),
                    ));
                }
                self.protocol = p;
            }
            // FRAME: a length prefix for buffering; the opcodes follow as usual.
            0x95 => {
                self.take(8)?;
            }
            // MARK
            b'(' => {
                if self.stack.len() + self.marks.len() >= MAX_STACK {
                    return Err(self.fail(
                        ErrorKind::Limit,
                        alloc::format!("the pickle stack grows past {MAX_STACK} entries"),
                    ));
                }
                self.marks.push(self.stack.len());
            }
            // POP
            b'0' => {
                if self.marks.last() == Some(&self.stack.len()) {
                    self.marks.pop();
                } else {
                    self.pop()?;
                }
            }
            // POP_MARK
            b'1' => {
                self.pop_mark()?;
            }
            // DUP
            b'2' => {
                let v = self.top()?.clone();
                self.push(v)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The scalar opcodes: None, booleans, integers, floats, strings and bytes.
    /// `Ok(false)` when `op` is not one of them.
    fn scalar_op(&mut self, op: u8) -> Result<bool, FormatError> {
        match op {
            // NONE, NEWTRUE, NEWFALSE
            b'N' => self.push(Value::None)?,
            0x88 => self.push(Value::Bool(true))?,
            0x89 => self.push(Value::Bool(false))?,
            // BININT, BININT1, BININT2
            b'J' => {
                let v = self.uint(4)? as u32 as i32;
                self.push(Value::Int(i64::from(v)))?
            }
            b'K' => {
                let v = self.uint(1)?;
                self.push(Value::Int(v as i64))?
            }
            b'M' => {
                let v = self.uint(2)?;
                self.push(Value::Int(v as i64))?
            }
            // LONG1, LONG4
            0x8a | 0x8b => {
                let n = self.len(if op == 0x8a { 1 } else { 4 })?;
                let b = self.take(n)?;
                let v = self.long(b);
                self.push(v)?
            }
            // INT, LONG (text)
            b'I' | b'L' => {
                let s = self.text()?;
                let v = self.int_text(s)?;
                self.push(v)?
            }
            // BINFLOAT (big-endian), FLOAT (text)
            b'G' => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                self.push(Value::Float(f64::from_be_bytes(a)))?
            }
            b'F' => {
                let s = self.text()?;
                let v = s
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| self.fail(ErrorKind::Syntax, alloc::format!("'{s}' is not a float")))?;
                self.push(Value::Float(v))?
            }
            // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
            0x8c | b'X' | 0x8d => {
                let n = self.len(match op {
                    0x8c => 1,
                    b'X' => 4,
                    _ => 8,
                })?;
                let b = self.take(n)?;
                let v = self.string(b)?;
                self.push(v)?
            }
            // UNICODE (text, raw-unicode-escape: plain text only)
            b'V' => {
                let s = self.text()?;
                if s.contains('\\') {
                    return Err(self.fail(
                        ErrorKind::Unsupported,
                        "escaped protocol-0 unicode strings are not supported",
                    ));
                }
                self.push(Value::Str(Rc::from(s)))?
            }
            // SHORT_BINSTRING, BINSTRING
            b'U' | b'T' => {
                let n = self.len(if op == b'U' { 1 } else { 4 })?;
                let b = self.take(n)?;
                self.push(Self::py2_string(b))?
            }
            // STRING (text)
            b'S' => {
                let s = self.text()?;
                let v = self.quoted(s)?;
                self.push(v)?
            }
            // SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8
            b'C' | b'B' | 0x8e | 0x96 => {
                let n = self.len(match op {
                    b'C' => 1,
                    b'B' => 4,
                    _ => 8,
                })?;
                let b = self.take(n)?;
                self.push(Value::Bytes(Rc::from(b)))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The container opcodes: tuples, lists, dicts and sets, built and filled.
    /// `Ok(false)` when `op` is not one of them.
    fn container_op(&mut self, op: u8) -> Result<bool, FormatError> {
        match op {
            // EMPTY_TUPLE, TUPLE1..3, TUPLE
            b')' => {
                let v = self.new_obj(Object::Tuple(Vec::new()))?;
                self.push(v)?
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + n {
                    return Err(self.fail(ErrorKind::Syntax, "TUPLEn pops more values than the stack has"));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                let v = self.new_obj(Object::Tuple(items))?;
                self.push(v)?
            }
            b't' => {
                let items = self.pop_mark()?;
                let v = self.new_obj(Object::Tuple(items))?;
                self.push(v)?
            }
            // EMPTY_LIST, LIST
            b']' => {
                let v = self.new_obj(Object::List(Vec::new()))?;
                self.push(v)?
            }
            b'l' => {
                let items = self.pop_mark()?;
                let v = self.new_obj(Object::List(items))?;
                self.push(v)?
            }
            // EMPTY_DICT, DICT
            b'}' => {
                let v = self.new_obj(Object::Dict(Dict::default()))?;
                self.push(v)?
            }
            b'd' => {
                let items = self.pop_mark()?;
                let v = self.new_obj(Object::Dict(Dict::default()))?;
                self.set_items(&v, items)?;
                self.push(v)?
            }
            // EMPTY_SET, FROZENSET
            0x8f => {
                let v = self.new_obj(Object::Set(Vec::new()))?;
                self.push(v)?
            }
            0x91 => {
                let items = self.pop_mark()?;
                let v = self.new_obj(Object::Set(items))?;
                self.push(v)?
            }
            // APPEND, APPENDS, ADDITEMS
            b'a' => {
                let v = self.pop()?;
                let target = self.top()?.clone();
                self.with_obj(&target, "APPEND", |o| match o {
                    Object::List(l) => {
                        l.push(v);
                        Some(())
                    }
                    _ => None,
                })?
            }
            b'e' | 0x90 => {
                let items = self.pop_mark()?;
                let target = self.top()?.clone();
                self.with_obj(&target, "APPENDS/ADDITEMS", |o| match (o, op) {
                    (Object::List(l), b'e') | (Object::Set(l), 0x90) => {
                        l.extend(items);
                        Some(())
                    }
                    _ => None,
                })?
            }
            // SETITEM, SETITEMS
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                let target = self.top()?.clone();
                self.set_items(&target, alloc::vec![k, v])?
            }
            b'u' => {
                let items = self.pop_mark()?;
                let target = self.top()?.clone();
                self.set_items(&target, items)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The memo opcodes (PUT, GET and their binary forms, MEMOIZE).
    /// `Ok(false)` when `op` is not one of them.
    fn memo_op(&mut self, op: u8) -> Result<bool, FormatError> {
        match op {
            // BINPUT, LONG_BINPUT, PUT, MEMOIZE
            b'q' => {
                let i = self.uint(1)?;
                self.memo_put(i)?
            }
            b'r' => {
                let i = self.uint(4)?;
                self.memo_put(i)?
            }
            b'p' => {
                let s = self.text()?;
                let i = s
                    .parse::<u64>()
                    .map_err(|_| self.fail(ErrorKind::Syntax, "PUT needs a decimal index"))?;
                self.memo_put(i)?
            }
            0x94 => {
                let i = self.memo.len() as u64;
                self.memo_put(i)?
            }
            // BINGET, LONG_BINGET, GET
            b'h' => {
                let i = self.uint(1)?;
                self.memo_get(i)?
            }
            b'j' => {
                let i = self.uint(4)?;
                self.memo_get(i)?
            }
            b'g' => {
                let s = self.text()?;
                let i = s
                    .parse::<u64>()
                    .map_err(|_| self.fail(ErrorKind::Syntax, "GET needs a decimal index"))?;
                self.memo_get(i)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The object opcodes: globals, instances, reduce, build, persistent ids, extensions and
    /// out-of-band buffers (refused). `Ok(false)` when `op` is not one of them.
    fn object_op(&mut self, op: u8) -> Result<bool, FormatError> {
        match op {
            // GLOBAL, STACK_GLOBAL: resolved against the allow-list before anything else.
            b'c' => {
                let module = self.text()?;
                let name = self.text()?;
                let v = self.global(module, name)?;
                self.push(v)?
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                let (Value::Str(module), Value::Str(name)) = (module, name) else {
                    return Err(self.fail(ErrorKind::Syntax, "STACK_GLOBAL needs two strings"));
                };
                let v = self.global(&module, &name)?;
                self.push(v)?
            }
            // INST (text global + marked args), OBJ (marked class + args)
            b'i' => {
                let module = self.text()?;
                let name = self.text()?;
                let g = self.global(module, name)?;
                let args = self.pop_mark()?;
                let args = self.new_obj(Object::Tuple(args))?;
                let v = self.call(g, args)?;
                self.push(v)?
            }
            b'o' => {
                let mut items = self.pop_mark()?;
                if items.is_empty() {
                    return Err(self.fail(ErrorKind::Syntax, "OBJ needs a class"));
                }
                let cls = items.remove(0);
                let args = self.new_obj(Object::Tuple(items))?;
                let v = self.call(cls, args)?;
                self.push(v)?
            }
            // REDUCE, NEWOBJ
            b'R' | 0x81 => {
                let args = self.pop()?;
                let func = self.pop()?;
                let v = self.call(func, args)?;
                self.push(v)?
            }
            // NEWOBJ_EX: keyword arguments must be empty.
            0x92 => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let cls = self.pop()?;
                if !matches!(self.object(&kwargs), Some(Object::Dict(d)) if d.entries.is_empty()) {
                    return Err(self.fail(ErrorKind::Unsupported, "NEWOBJ_EX with keyword arguments"));
                }
                let v = self.call(cls, args)?;
                self.push(v)?
            }
            // BUILD: the state is recorded, never applied by running code.
            b'b' => {
                let state = self.pop()?;
                let target = self.top()?.clone();
                self.with_obj(&target, "BUILD", |o| match o {
                    Object::Dict(Dict { state: s, .. }) | Object::Call { state: s, .. } => {
                        *s = Some(state);
                        Some(())
                    }
                    _ => None,
                })?
            }
            // BINPERSID, PERSID
            b'Q' => {
                let pid = self.pop()?;
                let v = self.new_obj(Object::PersistentId(pid))?;
                self.push(v)?
            }
            b'P' => {
                let s = self.text()?;
                let pid = Value::Str(Rc::from(s));
                let v = self.new_obj(Object::PersistentId(pid))?;
                self.push(v)?
            }
            // EXT1, EXT2, EXT4: globals named through the copyreg registry.
            0x82..=0x84 => {
                let code = self.uint(1 << (op - 0x82))?;
                return Err(self.fail(
                    ErrorKind::Refused,
                    alloc::format!(
                        "the pickle names a global through copyreg extension code {code}; refused, as any global \
                         outside the allow-list"
                    ),
                ));
            }
            // NEXT_BUFFER, READONLY_BUFFER
            0x97 | 0x98 => {
                return Err(self.fail(
                    ErrorKind::Unsupported,
                    "out-of-band pickle buffers (protocol 5) are not used by checkpoints",
                ));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(b: &[u8]) -> Result<Pickle, FormatError> {
        load(b)
    }

    #[test]
    fn scalars_and_containers() {
        // {'a': [1, 2.5, 'x'], 'b': (True, None)} in protocol 2.
        let mut p = alloc::vec![
            0x80, 2, b'}', b'q', 0, b'(', b'X', 1, 0, 0, 0, b'a', b']', b'(', b'K', 1, b'G'
        ];
        p.extend_from_slice(&2.5f64.to_be_bytes());
        p.extend_from_slice(&[
            0x8c, 1, b'x', b'e', b'X', 1, 0, 0, 0, b'b', 0x88, b'N', 0x86, b'u', b'.',
        ]);
        let r = run(&p).unwrap();
        assert_eq!(r.protocol, 2);
        assert_eq!(r.len, p.len());
        let Some(Object::Dict(d)) = r.object(&r.root) else {
            panic!()
        };
        assert_eq!(d.entries.len(), 2);
        let Some(Object::List(l)) = r.object(&d.entries[0].1) else {
            panic!()
        };
        assert_eq!(l, &[Value::Int(1), Value::Float(2.5), Value::Str("x".into())]);
    }

    #[test]
    fn repeated_keys_replace_in_place() {
        let p = [
            b'}', b'(', b'K', 1, b'K', 2, b'K', 3, b'K', 4, b'K', 1, b'K', 5, b'u', b'.',
        ];
        let r = run(&p).unwrap();
        let Some(Object::Dict(d)) = r.object(&r.root) else {
            panic!()
        };
        assert_eq!(
            d.entries,
            [(Value::Int(1), Value::Int(5)), (Value::Int(3), Value::Int(4))]
        );
    }

    #[test]
    fn refuses_unlisted_globals_by_name() {
        for (m, n) in [
            ("os", "system"),
            ("builtins", "eval"),
            ("builtins", "exec"),
            ("builtins", "getattr"),
            ("subprocess", "Popen"),
            ("posix", "system"),
            ("nt", "system"),
            ("torch", "load"),
            ("torch._utils", "_rebuild_qtensor"),
        ] {
            let mut p = alloc::vec![b'c'];
            p.extend_from_slice(alloc::format!("{m}\n{n}\n").as_bytes());
            p.extend_from_slice(b")R.");
            let e = run(&p).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Refused, "{m}.{n}");
            assert!(e.message.contains(&alloc::format!("`{m}.{n}`")), "{}", e.message);
            assert_eq!(e.offset, Some(0));
            // STACK_GLOBAL (protocol 4) too.
            let mut p = alloc::vec![0x80, 4, 0x8c, m.len() as u8];
            p.extend_from_slice(m.as_bytes());
            p.extend_from_slice(&[0x8c, n.len() as u8]);
            p.extend_from_slice(n.as_bytes());
            p.extend_from_slice(&[0x93, b'.']);
            assert_eq!(run(&p).unwrap_err().kind, ErrorKind::Refused);
        }
    }

    #[test]
    fn models_allowed_calls() {
        // _codecs.encode('\xe9a', 'latin1') -> b'\xe9a'
        let mut p = alloc::vec![b'c'];
        p.extend_from_slice(b"_codecs\nencode\n");
        p.extend_from_slice(&[b'X', 3, 0, 0, 0, 0xc3, 0xa9, b'a', b'X', 6, 0, 0, 0]);
        p.extend_from_slice(b"latin1");
        p.extend_from_slice(&[0x86, b'R', b'.']);
        assert_eq!(run(&p).unwrap().root, Value::Bytes(Rc::from(&[0xe9u8, b'a'][..])));
        // set([1, 2])
        let mut p = alloc::vec![b'c'];
        p.extend_from_slice(b"__builtin__\nset\n]");
        p.extend_from_slice(&[b'(', b'K', 1, b'K', 2, b'e', 0x85, b'R', b'.']);
        let r = run(&p).unwrap();
        assert_eq!(
            r.object(&r.root),
            Some(&Object::Set(alloc::vec![Value::Int(1), Value::Int(2)]))
        );
    }

    #[test]
    fn longs_and_text_opcodes() {
        let r = run(&[0x8a, 2, 0xff, 0x7f, b'.']).unwrap();
        assert_eq!(r.root, Value::Int(0x7fff));
        let r = run(&[0x8a, 1, 0xff, b'.']).unwrap();
        assert_eq!(r.root, Value::Int(-1));
        let r = run(&[0x8a, 0, b'.']).unwrap();
        assert_eq!(r.root, Value::Int(0));
        let r = run(b"L119547037146038801333356L\n.").unwrap();
        assert_eq!(
            r.root,
            Value::Long(Rc::from(
                &[0x6cu8, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19][..]
            ))
        );
        assert_eq!(
            big_decimal("-9223372036854775809").unwrap(),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff]
        );
        assert_eq!(
            big_decimal("18446744073709551615").unwrap(),
            [0xff; 8].iter().copied().chain([0]).collect::<Vec<_>>()
        );
        assert!(big_decimal(&"9".repeat(65)).is_none());
        let r = run(b"(I7\nI01\nF0.5\nS'ab'\nVcd\nL12L\nlp0\ng0\n0.").unwrap();
        let Some(Object::List(l)) = r.object(&r.root) else {
            panic!()
        };
        assert_eq!(
            l,
            &[
                Value::Int(7),
                Value::Bool(true),
                Value::Float(0.5),
                Value::Str("ab".into()),
                Value::Str("cd".into()),
                Value::Int(12)
            ]
        );
    }

    #[test]
    fn memory_is_bounded_by_the_input() {
        // 1 Mi empty dicts, each popped at once: the stack stays empty, but a million objects
        // would be modelled; the budget (32 bytes per pickle byte + 16 MiB) refuses first.
        let mut p = alloc::vec![0x80, 2];
        for _ in 0..1 << 20 {
            p.extend_from_slice(b"}0");
        }
        p.extend_from_slice(b"N.");
        let e = load(&p).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Limit, "{e}");
        assert!(e.message.contains("per pickle byte"), "{e}");
        // The same count of plain values (no objects) fits.
        let mut q = alloc::vec![0x80, 2];
        for _ in 0..1 << 18 {
            q.extend_from_slice(b"N0");
        }
        q.extend_from_slice(b"N.");
        assert!(load(&q).is_ok());
    }

    #[test]
    fn bounded() {
        // BINUNICODE8 claiming 2^60 bytes: refused before allocating.
        let mut p = alloc::vec![0x80, 4, 0x8d];
        p.extend_from_slice(&(1u64 << 60).to_le_bytes());
        p.extend_from_slice(b"abc.");
        assert_eq!(run(&p).unwrap_err().kind, ErrorKind::Truncated);
        // A memo index of 2^32-1 is just a key; reading an unset one is an error.
        let p = [b'N', b'r', 0xff, 0xff, 0xff, 0xff, b'j', 0xfe, 0xff, 0xff, 0xff, b'.'];
        assert_eq!(run(&p).unwrap_err().kind, ErrorKind::Syntax);
        let p = [
            b'N', b'r', 0xff, 0xff, 0xff, 0xff, b'0', b'j', 0xff, 0xff, 0xff, 0xff, b'.',
        ];
        assert_eq!(run(&p).unwrap().root, Value::None);
        // A million MARKs: the stack limit stops them.
        let p = alloc::vec![b'('; MAX_STACK + 10];
        assert_eq!(run(&p).unwrap_err().kind, ErrorKind::Limit);
        // Truncated, empty, bad opcode, extension registry, out-of-band buffers.
        assert_eq!(run(&[0x80, 2, b'K']).unwrap_err().kind, ErrorKind::Truncated);
        assert_eq!(run(&[]).unwrap_err().kind, ErrorKind::Truncated);
        assert_eq!(run(b".").unwrap_err().kind, ErrorKind::Syntax);
        assert_eq!(run(&[0xff]).unwrap_err().kind, ErrorKind::Syntax);
        assert_eq!(run(&[0x82, 1, b'.']).unwrap_err().kind, ErrorKind::Refused);
        assert_eq!(run(&[0x97, b'.']).unwrap_err().kind, ErrorKind::Unsupported);
        assert_eq!(
            run(&[0x80, 6, b'N', b'.']).unwrap_err().kind,
            ErrorKind::UnsupportedVersion
        );
    }

    #[test]
    fn self_reference_does_not_loop() {
        // l = []; l.append(l): the graph has a cycle; the machine itself never walks it.
        let r = run(&[b']', b'q', 0, b'h', 0, b'a', b'.']).unwrap();
        let Some(Object::List(l)) = r.object(&r.root) else {
            panic!()
        };
        assert_eq!(l, &[Value::Obj(0)]);
    }
}
