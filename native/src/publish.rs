//! Atomic publication of a file: the one way this crate replaces a file.
//!
//! [`Pending::create`] opens a new temporary file in the destination's folder (same file system,
//! so the rename is atomic); the caller writes it; [`Pending::commit`] fsyncs it, renames it over
//! the destination and fsyncs the folder, so after a crash a reader finds the old file or the new
//! one, never half of one. A [`Pending`] dropped without `commit` removes its temporary file.
//! [`write_file`] does all of it for bytes already in memory.
//!
//! Used by [`crate::zt_write::ZtFile::publish`], [`crate::st_write::SafetensorsFile::publish`]
//! and the CLI's conversions.
//!
//! ```no_run
//! use std::io::Write;
//! use tensorlane::publish::Pending;
//!
//! let (pending, mut file) = Pending::create("out.bin")?;
//! file.write_all(b"hello")?;
//! pending.commit(&file)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Error;

/// The temporary files of every [`Pending`] alive in this process, for [`remove_pending`].
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes the temporary file of every [`Pending`] not yet committed, for a signal handler that
/// is about to end the process (`SIGINT`, `SIGTERM`: destructors do not run then). The
/// [`Pending`]s themselves stay; their later drop finds nothing to remove.
pub fn remove_pending() {
    for temp in live().drain(..) {
        let _ = fs::remove_file(temp);
    }
}

/// Parses `.<name>.<pid>.<8 hex digits>.partial` (this module's temporary names): the pid.
fn partial_pid(file_name: &str) -> Option<u32> {
    let stem = file_name.strip_prefix('.')?.strip_suffix(".partial")?;
    let (rest, nanos) = stem.rsplit_once('.')?;
    let (name, pid) = rest.rsplit_once('.')?;
    if name.is_empty() || nanos.len() != 8 || !nanos.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the temporary files in `dir` that a [`Pending`] of a process that is gone left
/// behind (killed with `SIGKILL`, or a crash): names of this module's form whose pid has no
/// `/proc/<pid>` entry. Linux only (elsewhere there is no cheap way to tell that a process is
/// gone, and nothing is removed); a reused pid keeps its file. Returns the files removed.
pub fn sweep_stale(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    if !cfg!(target_os = "linux") || !Path::new("/proc/self").exists() {
        return removed;
    }
    let Ok(entries) = fs::read_dir(dir) else { return removed };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(partial_pid) else { continue };
        if pid != std::process::id()
            && !Path::new("/proc").join(pid.to_string()).exists()
            && e.file_type().is_ok_and(|t| t.is_file())
            && fs::remove_file(e.path()).is_ok()
        {
            removed.push(e.path());
        }
    }
    removed
}

/// A file being written under a temporary name beside its destination.
#[derive(Debug)]
pub struct Pending {
    dest: PathBuf,
    temp: PathBuf,
    committed: bool,
}

/// `.<name>.<pid>.<nanos>.partial` beside `dest`: hidden, unique per process and call, and
/// recognisable as an unfinished write.
fn temp_name(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    dest.with_file_name(format!(".{name}.{}.{nanos:08x}.partial", std::process::id()))
}

/// The folder `path` lives in (`.` for a bare file name).
fn folder(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

impl Pending {
    /// Creates a new temporary file (readable and writable) in `dest`'s folder, first removing
    /// what processes that are gone left there ([`sweep_stale`]).
    pub fn create(dest: impl AsRef<Path>) -> Result<(Pending, File), Error> {
        let dest = dest.as_ref().to_path_buf();
        sweep_stale(folder(&dest));
        let temp = temp_name(&dest);
        // Listed before it exists: a signal between the file's creation and its listing would
        // otherwise leave it behind ([`remove_pending`] ignores a name with no file yet).
        live().push(temp.clone());
        let file = match OpenOptions::new().read(true).write(true).create_new(true).open(&temp) {
            Ok(f) => f,
            Err(e) => {
                live().retain(|p| p != &temp);
                return Err(Error::at(&dest, "create a temporary file for")(e));
            }
        };
        Ok((
            Pending {
                dest,
                temp,
                committed: false,
            },
            file,
        ))
    }

    /// Where the file will appear.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The temporary file being written.
    pub fn temp(&self) -> &Path {
        &self.temp
    }

    /// Fsyncs `file` (the one [`create`](Self::create) returned, with everything written),
    /// renames it to the destination and fsyncs the folder. Returns the destination.
    pub fn commit(mut self, file: &File) -> Result<PathBuf, Error> {
        file.sync_all().map_err(Error::at(&self.dest, "fsync"))?;
        fs::rename(&self.temp, &self.dest).map_err(Error::at(&self.dest, "rename into place"))?;
        self.committed = true;
        live().retain(|t| t != &self.temp);
        let dir = folder(&self.dest);
        // A folder that cannot be opened (no read permission) cannot be fsynced either; the
        // rename itself has happened.
        if let Ok(d) = File::open(dir) {
            d.sync_all().map_err(Error::at(dir, "fsync the folder"))?;
        }
        Ok(self.dest.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp);
            live().retain(|t| t != &self.temp);
        }
    }
}

/// Writes `bytes` to `dest` atomically (see the module docs).
pub fn write_file(dest: impl AsRef<Path>, bytes: &[u8]) -> Result<(), Error> {
    let (pending, mut file) = Pending::create(dest)?;
    file.write_all(bytes).map_err(Error::at(pending.dest(), "write"))?;
    pending.commit(&file)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names_parse_and_stale_ones_are_swept() {
        assert_eq!(partial_pid(".out.zt.1234.0000abcd.partial"), Some(1234));
        assert_eq!(partial_pid(".a.b.c.77.deadbeef.partial"), Some(77));
        for bad in [
            "out.zt.1234.0000abcd.partial",
            ".out.zt.1234.abcd.partial",
            ".out.zt.x.0000abcd.partial",
            "..1.0000abcd.partial",
            ".out.zt.1234.0000abcd",
        ] {
            assert_eq!(partial_pid(bad), None, "{bad}");
        }
        let d = std::env::temp_dir().join(format!("tl-sweep-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        // pid 2^22 + 1 is above Linux's pid_max limit: never a live process.
        let dead = d.join(".out.zt.4194305.0000abcd.partial");
        let mine = d.join(format!(".out.zt.{}.0000abcd.partial", std::process::id()));
        let other = d.join(".notes.txt");
        for f in [&dead, &mine, &other] {
            fs::write(f, b"x").unwrap();
        }
        let removed = sweep_stale(&d);
        if cfg!(target_os = "linux") {
            assert_eq!(removed, vec![dead.clone()]);
            assert!(!dead.exists());
        }
        assert!(mine.exists() && other.exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn commit_replaces_and_drop_cleans_up() {
        let d = std::env::temp_dir().join(format!("tl-publish-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let p = d.join("x.bin");
        fs::write(&p, b"old").unwrap();
        {
            let (pending, mut f) = Pending::create(&p).unwrap();
            f.write_all(b"half").unwrap();
            assert!(pending.temp().exists());
        }
        assert_eq!(
            fs::read(&p).unwrap(),
            b"old",
            "an uncommitted write leaves the old file"
        );
        write_file(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        let names: Vec<_> = fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["x.bin"], "no temporary file is left behind");
        let e = write_file(d.join("missing/y.bin"), b"").unwrap_err();
        assert!(e.to_string().contains("missing/y.bin"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
