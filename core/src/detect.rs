//! Which format a file is in, from its first bytes (never from its name).

/// A file format tensorlane can recognise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// Tenso packets (`TNSO`), one or several back to back.
    Tenso,
    /// `.zt` v2 (`\x89ZT2\r\n\x1a\n`).
    Zt,
    /// Legacy `.zt` v1.2 (`ZTEN1000`).
    ZtV1,
    /// Legacy `.zt` v0.1 (`ZTEN0001`).
    ZtV0,
    /// safetensors: a little-endian u64 header length, then a JSON object.
    Safetensors,
    /// A sharded safetensors set's `model.safetensors.index.json` (a JSON object with `weight_map`).
    SafetensorsIndex,
    /// GGUF (`GGUF`).
    Gguf,
    /// A PyTorch zip checkpoint (`torch.save` since 1.6): a zip with `<name>/data.pkl`.
    PyTorch,
    /// A legacy PyTorch checkpoint: pickles back to back, starting with the magic number.
    PyTorchLegacy,
    /// NumPy `.npy` (`\x93NUMPY`).
    Npy,
    /// NumPy `.npz`: a zip of `.npy` members.
    Npz,
    /// ONNX `ModelProto` (protobuf; recognised by its first fields).
    Onnx,
    /// HDF5 (`\x89HDF\r\n\x1a\n`).
    Hdf5,
}

impl Format {
    /// A short lowercase name: `"tenso"`, `"zt"`, `"zt-v1"`, `"zt-v0"`, `"safetensors"`,
    /// `"safetensors-index"`, `"gguf"`, `"pt"`, `"pt-legacy"`, `"npy"`, `"npz"`, `"onnx"`, `"hdf5"`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tenso => "tenso",
            Format::Zt => "zt",
            Format::ZtV1 => "zt-v1",
            Format::ZtV0 => "zt-v0",
            Format::Safetensors => "safetensors",
            Format::SafetensorsIndex => "safetensors-index",
            Format::Gguf => "gguf",
            Format::PyTorch => "pt",
            Format::PyTorchLegacy => "pt-legacy",
            Format::Npy => "npy",
            Format::Npz => "npz",
            Format::Onnx => "onnx",
            Format::Hdf5 => "hdf5",
        }
    }
}

/// The `.zt` v2 magic (PNG style).
pub use crate::zt::format::MAGIC as ZT_MAGIC;

/// How many leading bytes [`detect`] wants to see (fewer work for most formats; a zip needs its
/// first member's name, JSON its first key).
pub const HEAD_LEN: usize = 512;

/// The HDF5 signature. It sits at byte 0, or after a user block at 512, 1024, 2048, ...
pub const HDF5_MAGIC: [u8; 8] = *b"\x89HDF\r\n\x1a\n";

/// The magic number a legacy PyTorch file pickles first (protocol 2, `LONG1` of 10 bytes).
const PT_LEGACY_MAGIC: [u8; 14] = [
    0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
];

/// The same magic number pickled with protocol 0 or 1 (a text `LONG`), as `torch.save(...,
/// pickle_protocol=1)` writes it.
const PT_LEGACY_MAGIC_TEXT: &[u8] = b"L119547037146038801333356L\n.";

/// Recognises a format from the first bytes of a file ([`HEAD_LEN`] are plenty), never from its
/// name.
///
/// A bare pickle stream (protocol 2–5) is taken as a legacy PyTorch file: its reader refuses
/// anything that is not a checkpoint. Zip archives are told apart by their first member: `.npy` members make an `.npz`, a
/// `data.pkl` or `<name>/...` layout with `data.pkl` makes a PyTorch checkpoint. ONNX has no
/// magic: a file is taken as ONNX when it starts with `ir_version` (field 1, a small varint)
/// followed by another `ModelProto` field.
pub fn detect(head: &[u8]) -> Option<Format> {
    if head.starts_with(&ZT_MAGIC) {
        Some(Format::Zt)
    } else if head.starts_with(b"ZTEN1000") {
        Some(Format::ZtV1)
    } else if head.starts_with(b"ZTEN0001") {
        Some(Format::ZtV0)
    } else if head.starts_with(&crate::wire::MAGIC) {
        Some(Format::Tenso)
    } else if head.starts_with(b"GGUF") {
        Some(Format::Gguf)
    } else if head.starts_with(b"\x93NUMPY") {
        Some(Format::Npy)
    } else if head.starts_with(&HDF5_MAGIC) {
        Some(Format::Hdf5)
    } else if head.starts_with(&PT_LEGACY_MAGIC) || head.starts_with(PT_LEGACY_MAGIC_TEXT) || is_pickle(head) {
        Some(Format::PyTorchLegacy)
    } else if head.starts_with(b"PK\x03\x04") {
        detect_zip(head)
    } else if is_safetensors(head) {
        Some(Format::Safetensors)
    } else if is_json_index(head) {
        Some(Format::SafetensorsIndex)
    } else if is_onnx(head) {
        Some(Format::Onnx)
    } else {
        None
    }
}

fn detect_zip(head: &[u8]) -> Option<Format> {
    let n = usize::from(u16::from_le_bytes([*head.get(26)?, *head.get(27)?]));
    let name = head.get(30..30 + n)?;
    if name.ends_with(b".npy") {
        Some(Format::Npz)
    } else if name.ends_with(b"data.pkl") || name.ends_with(b".format_version") || name.ends_with(b"byteorder") {
        Some(Format::PyTorch)
    } else {
        None
    }
}

/// A bare pickle (protocol 2–5: `PROTO n` then an opcode that starts a value). Legacy PyTorch
/// files start with the magic number; anything else that is a pickle goes to the same reader,
/// which refuses what is not a checkpoint (and never runs it).
fn is_pickle(head: &[u8]) -> bool {
    matches!(head, [0x80, 2..=5, op, ..] if b"}]()\x95\x8acX".contains(op))
}

fn is_safetensors(head: &[u8]) -> bool {
    let Some(len) = head.get(..8) else { return false };
    let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    // The header is a JSON object (`{`), possibly after spaces the writer may have put there.
    len >= 2 && head[8..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn is_json_index(head: &[u8]) -> bool {
    head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && head
            .windows(12)
            .any(|w| w == b"\"weight_map\"" || w == b"\"metadata\": ")
}

fn is_onnx(head: &[u8]) -> bool {
    // Field 1 (ir_version), wire type 0: tag 0x08, then a varint 1..=127 in one byte.
    if head.len() < 4 || head[0] != 0x08 || !(1..=0x7f).contains(&head[1]) {
        return false;
    }
    // Then one of ModelProto's fields: producer_name (2), producer_version (3), domain (4),
    // model_version (5), doc_string (6), graph (7), opset_import (8), metadata_props (14),
    // training_info (20), functions (25), configuration (26).
    matches!(
        head[2],
        0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42 | 0x72 | 0xa2 | 0xca | 0xd2
    )
}

/// What a file is taken as by every front end (the CLI, the Node addon and the wasm build): one
/// rule, so that the same file gets the same answer everywhere ([`identify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identified {
    /// Read it as this format: its content says so, or its content matches nothing and its name
    /// does (a damaged file of that format, whose reader then says what is wrong).
    Format(Format),
    /// Not a file this tool reads ([`Unrecognised::message`] says what it looks like instead).
    Unrecognised(Unrecognised),
}

/// What a file that is in no format read here looks like ([`identify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unrecognised {
    /// The file has no bytes.
    Empty,
    /// Printable text (UTF-8, no control bytes besides tab and line ends) that is no JSON index.
    Text,
    /// ONNX external data (`*.onnx.data`, `*.onnx_data`, `*.data` next to a model): raw tensor
    /// bytes with no header, readable only through the `.onnx` that names them.
    OnnxExternalData,
    /// Bytes with no known signature (a raw dump, a `.bin` that is neither a zip nor a pickle).
    RawData,
}

/// The formats read, for messages.
pub const KNOWN_FORMATS: &str = "safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5, .zt and Tenso";

impl Unrecognised {
    /// A short lowercase name: `"empty"`, `"text"`, `"onnx-external-data"`, `"raw-data"`.
    pub fn name(self) -> &'static str {
        match self {
            Unrecognised::Empty => "empty",
            Unrecognised::Text => "text",
            Unrecognised::OnnxExternalData => "onnx-external-data",
            Unrecognised::RawData => "raw-data",
        }
    }

    /// The sentence every front end prints: what the file looks like and what to do.
    pub fn message(self) -> &'static str {
        match self {
            Unrecognised::Empty => {
                "the file is empty (0 bytes): not a model file this tool reads (safetensors, GGUF, PyTorch, \
                 NumPy, ONNX, HDF5, .zt and Tenso)"
            }
            Unrecognised::Text => {
                "not a model file this tool reads: it is plain text (the formats read are safetensors, GGUF, \
                 PyTorch, NumPy, ONNX, HDF5, .zt and Tenso)"
            }
            Unrecognised::OnnxExternalData => {
                "not a model file this tool reads; it looks like raw data (ONNX external data) — open the .onnx \
                 that references it"
            }
            Unrecognised::RawData => {
                "not a model file this tool reads; it looks like raw data: its first bytes match no known format \
                 (safetensors, GGUF, PyTorch zip or pickle, NumPy, ONNX, HDF5, .zt, Tenso) — if it is a \
                 model's external data, open the model file that references it"
            }
        }
    }
}

/// The format a file's name suggests (`.safetensors`, `model.safetensors.index.json`, `.gguf`,
/// `.pt`/`.pth`/`.bin`/`.ckpt`, `.npy`, `.npz`, `.onnx`, `.h5`/`.hdf5`, `.zt`, `.tenso`), matched
/// case-insensitively on the last path component. Only [`identify`] uses it, and only when the
/// content matches no format.
pub fn format_from_name(name: &str) -> Option<Format> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name).to_ascii_lowercase();
    if base.ends_with(".safetensors.index.json") {
        return Some(Format::SafetensorsIndex);
    }
    let (_, ext) = base.rsplit_once('.')?;
    Some(match ext {
        "safetensors" => Format::Safetensors,
        "gguf" => Format::Gguf,
        "pt" | "pth" | "bin" | "ckpt" => Format::PyTorch,
        "npy" => Format::Npy,
        "npz" => Format::Npz,
        "onnx" => Format::Onnx,
        "h5" | "hdf5" => Format::Hdf5,
        "zt" => Format::Zt,
        "tenso" => Format::Tenso,
        _ => return None,
    })
}

/// Printable text: valid UTF-8 (a character cut at the end of `head` allowed) with no control
/// bytes besides tab, CR and LF.
fn is_text(head: &[u8]) -> bool {
    let valid = match core::str::from_utf8(head) {
        Ok(_) => head.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return false,
    };
    valid > 0
        && head[..valid]
            .iter()
            .all(|&b| b >= 0x20 && b != 0x7f || b"\t\r\n".contains(&b))
}

/// Bytes that differ from `magic` in at most `slack` places (a magic with a flipped byte).
fn near(head: &[u8], magic: &[u8], slack: usize) -> bool {
    head.len() >= magic.len() && head.iter().zip(magic).filter(|(a, b)| a != b).count() <= slack
}

/// How every front end decides what a file is: `head` is its first bytes ([`HEAD_LEN`]; all of
/// them when shorter), `content` the format found from its content ([`detect`], or the formats
/// layer's `detect_source`, which also finds HDF5 after a user block), `name` its file name
/// (may be empty).
///
/// 1. The content's format, when there is one.
/// 2. An empty file is [`Unrecognised::Empty`]; ONNX external data (`.onnx.data`, `.onnx_data`,
///    `.data`) is [`Unrecognised::OnnxExternalData`].
/// 3. A magic of Tenso or `.zt` v2 with one byte (Tenso) or two bytes (`.zt`) damaged: that
///    format, whose reader explains its magic.
/// 4. Text is [`Unrecognised::Text`] (unless the name says it is a safetensors index, which is
///    JSON: its reader says what is missing).
/// 5. The format the name suggests ([`format_from_name`]), so that a damaged file is explained
///    by its own reader; but a `.bin` that is neither a zip nor a pickle is raw data.
/// 6. Otherwise [`Unrecognised::RawData`].
pub fn identify(head: &[u8], content: Option<Format>, name: &str) -> Identified {
    if let Some(f) = content {
        return Identified::Format(f);
    }
    if head.is_empty() {
        return Identified::Unrecognised(Unrecognised::Empty);
    }
    let lower = name.rsplit(['/', '\\']).next().unwrap_or(name).to_ascii_lowercase();
    if lower.ends_with(".onnx.data") || lower.ends_with(".onnx_data") || lower.ends_with(".data") {
        return Identified::Unrecognised(Unrecognised::OnnxExternalData);
    }
    if near(head, &crate::wire::MAGIC, 1) {
        return Identified::Format(Format::Tenso);
    }
    if near(head, &ZT_MAGIC, 2) {
        return Identified::Format(Format::Zt);
    }
    let hint = format_from_name(&lower);
    if is_text(head) {
        return match hint {
            Some(Format::SafetensorsIndex) => Identified::Format(Format::SafetensorsIndex),
            _ => Identified::Unrecognised(Unrecognised::Text),
        };
    }
    match hint {
        Some(Format::PyTorch) if lower.ends_with(".bin") && !(head.starts_with(b"PK") || head[0] == 0x80) => {
            Identified::Unrecognised(Unrecognised::RawData)
        }
        Some(f) => Identified::Format(f),
        None => Identified::Unrecognised(Unrecognised::RawData),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics() {
        assert_eq!(detect(b"\x89ZT2\r\n\x1a\n...."), Some(Format::Zt));
        assert_eq!(detect(b"ZTEN1000"), Some(Format::ZtV1));
        assert_eq!(detect(b"ZTEN0001xx"), Some(Format::ZtV0));
        assert_eq!(detect(b"TNSO\x04"), Some(Format::Tenso));
        assert_eq!(detect(b"PK\x03\x04"), None);
        assert_eq!(detect(b"GGUF\x03\0\0\0"), Some(Format::Gguf));
        assert_eq!(
            detect(b"L119547037146038801333356L\n.K\x01."),
            Some(Format::PyTorchLegacy)
        );
        assert_eq!(detect(b"\x93NUMPY\x01\0"), Some(Format::Npy));
        assert_eq!(detect(b"\x89HDF\r\n\x1a\n\0"), Some(Format::Hdf5));
        assert_eq!(detect(b"\x10\0\0\0\0\0\0\0{\"a\":{}}"), Some(Format::Safetensors));
        assert_eq!(
            detect(b"{\n  \"metadata\": {}, \"weight_map\": {}}"),
            Some(Format::SafetensorsIndex)
        );
        assert_eq!(detect(b"\x08\x08\x12\x04test"), Some(Format::Onnx));
        let mut zip = b"PK\x03\x04".to_vec();
        zip.resize(26, 0);
        zip.extend_from_slice(&5u16.to_le_bytes());
        zip.extend_from_slice(&[0, 0]);
        zip.extend_from_slice(b"a.npy");
        assert_eq!(detect(&zip), Some(Format::Npz));
        assert_eq!(detect(b""), None);
    }

    #[test]
    fn identify_rule() {
        use Unrecognised::*;
        let id = |head: &[u8], name: &str| identify(head, detect(head), name);
        assert_eq!(id(b"TNSO\x04", "x.bin"), Identified::Format(Format::Tenso));
        assert_eq!(id(b"", "x.safetensors"), Identified::Unrecognised(Empty));
        assert_eq!(id(b"hello world\n", "notes.pt"), Identified::Unrecognised(Text));
        assert_eq!(id(b"hello world\n", "notes"), Identified::Unrecognised(Text));
        assert_eq!(
            id(b"{\"weight\": 1}", "model.safetensors.index.json"),
            Identified::Format(Format::SafetensorsIndex)
        );
        assert_eq!(
            id(b"\xdc\x6d\x6d\xbd", "m.onnx.data"),
            Identified::Unrecognised(OnnxExternalData)
        );
        assert_eq!(id(b"\xfc\x01\x02\x03", "w.bin"), Identified::Unrecognised(RawData));
        assert_eq!(id(b"\xfc\x01\x02\x03", "w.pt"), Identified::Format(Format::PyTorch));
        assert_eq!(id(b"PK\x05\x06", "w.bin"), Identified::Format(Format::PyTorch));
        assert_eq!(id(b"\xfc\x01\x02\x03", "w"), Identified::Unrecognised(RawData));
        assert_eq!(id(b"TNSX\x04\x01", "x"), Identified::Format(Format::Tenso));
        assert_eq!(id(b"\x89ZT3\r\n\x1a\x0b", "x"), Identified::Format(Format::Zt));
        assert_eq!(id(b"\x01\x02\x03\x04", "x.gguf"), Identified::Format(Format::Gguf));
        assert_eq!(format_from_name("dir/A.SafeTensors"), Some(Format::Safetensors));
        assert_eq!(format_from_name("noext"), None);
    }
}
