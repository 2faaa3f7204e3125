//! Servers the remote-source tests start on 127.0.0.1: moto's S3 server (SigV4 checked) from the
//! venv of `tests/python/setup_s3_venv.sh`, and Debian's nginx. Each waits a bounded time for its
//! port and is killed when dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The address a `tensorlane serve` child (stdout piped) prints as its first line
/// (`http://HOST:PORT/...`), waited for at most 60 s; an unspecified host (`0.0.0.0`, `[::]`)
/// becomes 127.0.0.1. Kills the child and panics naming `what` when no URL comes.
pub fn served_addr(child: &mut Child, what: &str) -> SocketAddr {
    use std::io::{BufRead, BufReader};
    let out = child.stdout.take().expect("the child's stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
        let _ = child.kill();
        panic!("{what} printed no URL within 60 s");
    };
    let url = line.trim();
    let host = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("{what}: unexpected first line {url:?}"));
    let mut addr: SocketAddr = host.parse().unwrap_or_else(|e| panic!("{what}: {host:?}: {e}"));
    if addr.ip().is_unspecified() {
        addr.set_ip([127, 0, 0, 1].into());
    }
    addr
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits up to `limit` for 127.0.0.1:`port` to accept; `false` when it never did (or `child`
/// exited).
pub fn wait_port(port: u16, child: &mut Child, limit: Duration) -> bool {
    let start = Instant::now();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while start.elapsed() < limit {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A moto S3 server with a bucket, an IAM access key that every request must sign with (SigV4),
/// and the files uploaded by boto3.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The port.
    pub port: u16,
    /// The bucket.
    pub bucket: String,
    /// The access key id.
    pub key_id: String,
    /// Its secret.
    pub secret: String,
    /// The venv's python (boto3 is there).
    pub python: PathBuf,
}

impl S3Server {
    /// Starts moto on a free port, creates the key and `bucket`, uploads every file under `dir`
    /// (when given) to `prefix/<path under dir>`. `None` (a skip) only where python3 is missing
    /// outside CI; any other failure panics.
    pub fn start(bucket: &str, upload: Option<(&Path, &str)>) -> Option<S3Server> {
        let python = crate::venv_python("setup_s3_venv.sh", "remote S3")?.to_path_buf();
        let moto = python.parent().unwrap().join("moto_server");
        let port = free_port();
        let mut child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "3")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", moto.display()));
        if !wait_port(port, &mut child, Duration::from_secs(60)) {
            let _ = child.kill();
            panic!("moto_server did not listen on 127.0.0.1:{port} within 60 s");
        }
        let endpoint = format!("http://127.0.0.1:{port}");
        let script = crate::root().join("tests/python/s3_setup.py");
        let mut args = vec![
            script.to_str().unwrap().to_string(),
            endpoint.clone(),
            bucket.to_string(),
        ];
        if let Some((dir, prefix)) = upload {
            args.push(dir.to_str().unwrap().to_string());
            args.push(prefix.to_string());
        }
        let out = Command::new(&python).args(&args).output().unwrap();
        if !out.status.success() {
            let _ = child.kill();
            panic!("s3_setup.py failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let creds: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        Some(S3Server {
            child,
            endpoint,
            port,
            bucket: bucket.to_string(),
            key_id: creds["key_id"].as_str().unwrap().to_string(),
            secret: creds["secret"].as_str().unwrap().to_string(),
            python,
        })
    }

    /// `s3://bucket/key`.
    pub fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// object_store options that reach this server with its key, through `endpoint` (this
    /// server's, or a proxy's in front of it).
    pub fn options_via(&self, endpoint: &str) -> Vec<(String, String)> {
        [
            ("aws_endpoint_url", endpoint),
            ("aws_access_key_id", &self.key_id),
            ("aws_secret_access_key", &self.secret),
            ("aws_region", "us-east-1"),
            ("allow_http", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// The environment a child process (the CLI) needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's nginx serving `root` on 127.0.0.1 (a temporary config and prefix).
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Nginx {
    /// Starts nginx over `root`. `None` (a skip) when nginx is not installed outside CI.
    pub fn start(root: &Path) -> Option<Nginx> {
        let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        let Some(bin) = bin else {
            assert!(
                !crate::in_ci(),
                "nginx is missing (scripts/setup.sh installs nginx-light)"
            );
            eprintln!("SKIPPED: nginx is not installed (scripts/setup.sh installs nginx-light)");
            return None;
        };
        let port = free_port();
        let dir = crate::live_dir(&format!("nginx-{port}"));
        let root = root.canonicalize().unwrap();
        let conf = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n \
             fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n \
             server {{ listen 127.0.0.1:{port}; root {root}; }}\n}}\n",
            d = dir.display(),
            root = root.display()
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let mut child = Command::new(bin)
            .args([
                "-p",
                dir.to_str().unwrap(),
                "-c",
                dir.join("nginx.conf").to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if !wait_port(port, &mut child, Duration::from_secs(20)) {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            panic!("nginx did not listen on 127.0.0.1:{port} within 20 s: {log}");
        }
        Some(Nginx {
            child,
            dir,
            base: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
