//! URLs in the CLI (`s3://`, `gs://`, `az://`, `http(s)://`: [`tensorlane::remote`]): the flags
//! that configure them and `convert` output written to a URL with a multipart upload (companion
//! files and `.zt` shards beside a remote root are resolved by [`tensorlane::model::Model`]).

use std::path::Path;

use tensorlane::remote::RemoteOptions;

use crate::error::CliError;

/// Flags for remote paths (every subcommand; the environment of each store applies first:
/// `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
/// `AWS_ALLOW_HTTP`, `GOOGLE_*`, `AZURE_*`).
#[derive(clap::Args, Debug, Default)]
pub struct RemoteArgs {
    /// A store option for URL paths, KEY=VALUE with object_store's config keys (aws_endpoint_url,
    /// aws_region, aws_access_key_id, allow_http, timeout, ...); repeatable; wins over the
    /// environment.
    #[arg(long = "remote-option", value_name = "KEY=VALUE", global = true)]
    pub remote_option: Vec<String>,
    /// Ranged GETs in flight when reading a URL (default 16, or TENSORLANE_REMOTE_CONCURRENCY).
    #[arg(long, value_name = "N", global = true)]
    pub remote_concurrency: Option<usize>,
    /// Bytes per ranged GET and per uploaded part (default 8 MiB, or TENSORLANE_REMOTE_PART_SIZE).
    #[arg(long, value_name = "BYTES", global = true)]
    pub remote_part_size: Option<u64>,
}

impl RemoteArgs {
    /// Makes these flags the options of every URL this process opens.
    pub fn apply(&self) -> Result<(), CliError> {
        let mut o = RemoteOptions::from_env().map_err(|e| CliError::Refused(e.to_string()))?;
        if let Some(n) = self.remote_concurrency {
            o.concurrency = n;
        }
        if let Some(n) = self.remote_part_size {
            o.part_size = n;
        }
        for kv in &self.remote_option {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| CliError::Refused(format!("--remote-option {kv:?}: write KEY=VALUE")))?;
            o.options.push((k.trim().to_string(), v.to_string()));
        }
        tensorlane::remote::set_default_options(o).map_err(|e| CliError::Refused(format!("remote options: {e}")))
    }
}

/// Whether `path` is a URL rather than a local path.
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(tensorlane::remote::is_url)
}

/// Runs `convert` into a local file beside the temporary folder, then uploads it to `url` as a
/// multipart upload, which no reader sees until it completes (a failed one is aborted). The local
/// file is removed either way.
pub fn convert_to_url<T>(url: &Path, convert: impl FnOnce(&Path) -> Result<T, CliError>) -> Result<T, CliError> {
    let name = url
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("tensorlane-upload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| CliError::Io(format!("cannot create {}: {e}", dir.display())))?;
    let local = dir.join(if name.is_empty() { "out".into() } else { name });
    let result = convert(&local).and_then(|c| {
        let opts = tensorlane::remote::default_options().map_err(|e| CliError::Refused(e.to_string()))?;
        tensorlane::remote::upload_file(&local, url.to_str().unwrap_or_default(), &opts)
            .map_err(|e| CliError::Io(format!("cannot upload to {}: {e}", url.display())))?;
        Ok(c)
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}
