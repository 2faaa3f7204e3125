//! `--max-tensor-bytes`: the one limit on what the tool reads whole into memory, and how model
//! files are opened (with `pread`, so a file truncated while it is read is an error, not SIGBUS).
//!
//! Streaming paths (`inspect --hash`, `stats`, `convert` to safetensors, `verify`) read ranges,
//! deflated zip members and `.zt` zstd-seekable parts (frame by frame) in bounded pieces and are
//! not limited. What must be whole in memory is refused, before anything is allocated, when it is
//! over the limit: a tensor written to `.zt` or dequantized, a `.zt` part read for conversion to
//! `.zt` or Tenso or for `verify --canonical` (or a sparse, `bool` or `f4_e2m1` part for
//! `verify`), a Tenso packet's LZ4 body, and a Tenso packet file that `inspect` decodes from
//! memory. The error names the tensor (or file), its size and the
//! option.
//!
//! The default is the smallest of 4 GiB (the library's default), half the machine's memory and
//! half the address space this process may use (`ulimit -v`), so that a compression bomb is
//! refused with this error rather than aborting the process when an allocation fails.

use std::path::Path;
use std::sync::OnceLock;

use tensorlane::core::formats::{DEFAULT_MAX_TENSOR_BYTES, ReadLimits};
use tensorlane::model::{Model, ModelOptions};

use crate::error::CliError;

static LIMIT: OnceLock<u64> = OnceLock::new();

/// Sets the limit from `--max-tensor-bytes` (the default when `None`). Call once, first.
pub fn set(max_tensor_bytes: Option<u64>) {
    let _ = LIMIT.set(max_tensor_bytes.unwrap_or_else(default_limit));
}

/// The limit in force (the default when [`set`] was not called).
pub fn max_tensor_bytes() -> u64 {
    *LIMIT.get_or_init(default_limit)
}

/// The read limits in force.
pub fn read_limits() -> ReadLimits {
    ReadLimits {
        max_tensor_bytes: max_tensor_bytes(),
    }
}

/// The smallest of 4 GiB, half of `MemTotal` and half of the address-space limit (where known).
pub fn default_limit() -> u64 {
    let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    });
    let address_space = std::fs::read_to_string("/proc/self/limits").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("Max address space"))?;
        line.split_whitespace().nth(3)?.parse::<u64>().ok()
    });
    [mem, address_space]
        .into_iter()
        .flatten()
        .map(|n| n / 2)
        .fold(DEFAULT_MAX_TENSOR_BYTES, u64::min)
}

/// Parses a byte size: a number with an optional IEC (`KiB`, `MiB`, `GiB`, `TiB`) or SI (`kB`,
/// `MB`, `GB`, `TB`) unit, or `B`; `K`/`M`/`G`/`T` alone are IEC.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad_size(s)),
    };
    let v: f64 = num.parse().map_err(|_| bad_size(s))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(bad_size(s));
    }
    Ok(bytes as u64)
}

fn bad_size(s: &str) -> String {
    format!("'{s}' is not a byte size; give a number with an optional unit: 512MiB, 2GiB, 1.5G, 3000000000, 4GB")
}

/// Opens any file the tool reads, in any format, as a [`Model`]: a directory is refused naming
/// the files in it, a file in no format read here says what it looks like, a damaged `.zt` file
/// gets its validator's error ([`crate::identify::identify`]); then it is read with `pread` (a
/// file truncated underneath is an error, not SIGBUS) under the limit in force. Returns the
/// model and the file's size when it was opened (for [`crate::identify::note_if_changed`]).
pub fn open_model(path: &Path) -> Result<(Model, u64), CliError> {
    let src = crate::identify::open_source(path)?;
    crate::identify::identify(path, &src)?;
    let size = tensorlane::core::source::ReadAt::size(&src);
    drop(src);
    let opts = ModelOptions {
        limits: read_limits(),
        mmap: false,
    };
    let model = Model::open_with(path, &opts).map_err(|e| crate::identify::note_if_changed(path, size, e.into()))?;
    Ok((model, size))
}

/// Refuses `bytes` for `what` (a tensor or part that must be whole in memory) over the limit.
pub fn check(format: &'static str, what: &str, bytes: u64) -> Result<(), CliError> {
    Ok(read_limits().check(format, what, bytes)?)
}

/// Refuses a `.zt` part that must be in memory whole when it is over the limit: an encoded part
/// by its `decoded_length`, a raw part by its stored length (files are read with `pread`, not
/// mapped, so a raw part is copied too).
pub fn check_zt_part(
    object: &str,
    part: &tensorlane::core::zt::manifest::Part,
    part_name: &str,
) -> Result<(), CliError> {
    check("zt", &format!("{object}/{part_name}"), part.decoded_size())
}

/// The parts of a `.zt` manifest that `verify` reads whole, checked with
/// [`check_zt_part`]: parts with content rules (`bool`, `f4_e2m1`) and parts of sparse layouts.
/// The others are hashed frame by frame (`Reader::verify_part`) and are not limited.
pub fn check_zt_verify(m: &tensorlane::core::zt::manifest::Manifest) -> Result<(), CliError> {
    for (name, o) in &m.objects {
        for (pn, p) in &o.parts {
            if o.layout != tensorlane::core::zt::layout::DENSE || tensorlane::core::zt::verify::has_content_rules(p) {
                check_zt_part(name, p, pn)?;
            }
        }
    }
    Ok(())
}

/// The wire decoder's options with `max_decompressed_bytes` set to the limit in force.
pub fn decode_options() -> tensorlane::core::wire::DecodeOptions {
    tensorlane::core::wire::DecodeOptions {
        max_decompressed_bytes: max_tensor_bytes().min(isize::MAX as u64),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("3000000000"), Ok(3_000_000_000));
        assert_eq!(parse_size("4GB"), Ok(4_000_000_000));
        assert_eq!(parse_size("64 kib"), Ok(64 << 10));
        assert!(parse_size("lots").unwrap_err().contains("512MiB"));
        assert!(parse_size("-1G").is_err());
        assert!(default_limit() <= DEFAULT_MAX_TENSOR_BYTES && default_limit() > 0);
    }
}
