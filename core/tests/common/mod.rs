//! Shared by the integration tests: where the reference data lives.

use std::path::PathBuf;

/// The shared reference folder (`../shared` beside the repository), once `needed` (a path
/// inside it) exists. `None` (skip, with a message) when it is missing locally; a failure when
/// `CI=true`, where a missing folder is never a silent skip.
pub fn shared(needed: &str) -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared"));
    if p.join(needed).exists() {
        return Some(p);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "shared reference data missing at {} (CI=true: a missing folder is a failure)",
            p.join(needed).display()
        );
    }
    eprintln!("skipping: {} not found", p.join(needed).display());
    None
}
