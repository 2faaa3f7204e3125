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

use crate::Error;

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
    /// Creates a new temporary file (readable and writable) in `dest`'s folder.
    pub fn create(dest: impl AsRef<Path>) -> Result<(Pending, File), Error> {
        let dest = dest.as_ref().to_path_buf();
        let temp = temp_name(&dest);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(Error::at(&dest, "create a temporary file for"))?;
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
