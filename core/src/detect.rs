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
}
