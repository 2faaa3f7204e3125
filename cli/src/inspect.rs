//! Tenso files the catalog refuses, explained by the wire decoder ([`explain_tenso`]: its
//! message names the packet, the entry path and the file byte), and [`whole`], which reads a
//! file into memory for it. `inspect` itself describes every file, Tenso included, through the
//! one [`crate::model_tools::inspect`] report.

use tensorlane_core::wire;

use crate::error::CliError;

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
    match crate::identify::open_source(path).and_then(|src| whole(&src, "tenso")) {
        Ok(bytes) => verify_all(&bytes).err().unwrap_or(e),
        Err(_) => e,
    }
}

/// Checks every packet of `data` as tenso decodes them (`wire::verify`: decode's checks, no
/// packet built): the first must decode; after it, bytes that start with the `TNSO` magic must be
/// further packets, anything else ends the file.
fn verify_all(data: &[u8]) -> Result<(), CliError> {
    let opts = crate::limits::decode_options();
    let (mut off, mut packet) = (0usize, 0usize);
    while off < data.len() || packet == 0 {
        let rest = &data[off..];
        if packet > 0 && !rest.starts_with(&wire::MAGIC) {
            break;
        }
        match wire::verify(rest, &opts) {
            Ok(len) if len > 0 => off += len,
            Ok(_) => break,
            Err(error) => {
                return Err(CliError::Tenso {
                    packet,
                    packet_offset: off as u64,
                    error,
                });
            }
        }
        packet += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_reports_path_and_offset() {
        let b = crate::sample::sample_bytes();
        assert!(verify_all(&b).is_ok());
        let mut bad = b.clone();
        let n = bad.len();
        bad[n - 12] ^= 0xff; // inside meta/step's body
        let msg = verify_all(&bad).unwrap_err().to_string();
        assert!(msg.contains("meta/step"), "{msg}");
        assert!(msg.contains("file byte"), "{msg}");
        // A second packet that does not decode is named by its index and offset.
        let mut two = b.clone();
        two.extend_from_slice(&bad);
        let msg = verify_all(&two).unwrap_err().to_string();
        assert!(
            msg.contains("packet #1") && msg.contains(&format!("file byte {}", b.len())),
            "{msg}"
        );
    }
}
