//! The CLI on `s3://` URLs against moto's S3 server on 127.0.0.1 (SigV4 checked, fixtures uploaded
//! by boto3): `inspect --json --hash`, `verify` and `stats --json` print for every fixture what
//! they print for the local file; `convert s3://… out.zt` writes the bytes a local convert writes;
//! `convert local s3://…/x.zt` uploads them (multipart) and nothing is visible under a failed one.

use std::process::{Command, Output};

use tensorlane::core::source::ReadAt;
use tensorlane_testkit as common;
use tensorlane_testkit::servers::S3Server;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

fn run(s3: &S3Server, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    for (k, v) in s3.env() {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The exit code, stdout and stderr, with each of `names` (folders, URL prefixes) replaced by `DIR`.
fn seen(o: &Output, names: &[&str]) -> (Option<i32>, String, String) {
    let mut out = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut err = String::from_utf8_lossy(&o.stderr).into_owned();
    for n in names {
        out = out.replace(n, "DIR");
        err = err.replace(n, "DIR");
    }
    (o.status.code(), out, err)
}

#[test]
fn cli_reads_urls_like_paths() {
    let fixtures = common::data("fixtures");
    let Some(s3) = S3Server::start("cli", Some((&fixtures, "fx"))) else {
        return;
    };
    let canon = fixtures.canonicalize().unwrap();
    let rels: Vec<String> = common::files_under(&fixtures)
        .iter()
        .map(|rel| rel.to_str().unwrap().replace('\\', "/"))
        .collect();
    // Four workers: each check is two CLI processes and a few requests, mostly waiting (one after
    // another the files took 33 s of CI).
    let check = |rel: &str| {
        let local = fixtures.join(rel);
        let local = local.to_str().unwrap();
        let url = s3.url(&format!("fx/{rel}"));
        for cmd in [&["inspect", "--json", "--hash"][..], &["verify"], &["stats", "--json"]] {
            let l = run(&s3, &[cmd, &[local]].concat());
            let r = run(&s3, &[cmd, &[url.as_str()]].concat());
            // Files (the one given, companions, shards) are named by where they were found:
            // the folder and the URL prefix become DIR; the rest must be identical.
            let (lc, lo, _) = seen(&l, &[fixtures.to_str().unwrap(), canon.to_str().unwrap()]);
            let (rc, ro, re) = seen(&r, &[&s3.url("fx")]);
            assert_eq!(lc, rc, "{cmd:?} {rel}: exit codes differ; remote stderr: {re}");
            if lc == Some(0) {
                assert_eq!(lo, ro, "{cmd:?} {rel}");
            }
        }
    };
    std::thread::scope(|scope| {
        for part in rels.chunks(rels.len().div_ceil(4).max(1)) {
            let check = &check;
            scope.spawn(move || part.iter().for_each(|rel| check(rel)));
        }
    });
}

#[test]
fn cli_converts_from_and_to_urls() {
    let fixtures = common::data("fixtures");
    let Some(s3) = S3Server::start("conv", Some((&fixtures, "fx"))) else {
        return;
    };
    let dir = common::live_dir("tl-remote-cli");
    for rel in [
        "safetensors/sharded/model.safetensors.index.json",
        "gguf/tiny-llama.gguf",
        "sample.pt",
    ] {
        let local_out = dir.join("local.zt");
        let remote_out = dir.join("remote.zt");
        let l = run(
            &s3,
            &[
                "convert",
                fixtures.join(rel).to_str().unwrap(),
                local_out.to_str().unwrap(),
            ],
        );
        assert!(l.status.success(), "{rel}: {}", String::from_utf8_lossy(&l.stderr));
        let r = run(
            &s3,
            &["convert", &s3.url(&format!("fx/{rel}")), remote_out.to_str().unwrap()],
        );
        assert!(r.status.success(), "{rel}: {}", String::from_utf8_lossy(&r.stderr));
        let want = std::fs::read(&local_out).unwrap();
        assert_eq!(want, std::fs::read(&remote_out).unwrap(), "{rel}: s3 -> .zt");
        // Local -> s3 (a multipart upload with small parts), read back byte for byte.
        let up = s3.url(&format!("out/{}.zt", rel.replace('/', "_")));
        let u = run(
            &s3,
            &[
                "convert",
                fixtures.join(rel).to_str().unwrap(),
                &up,
                "--remote-part-size",
                "5242880",
            ],
        );
        assert!(u.status.success(), "{rel}: {}", String::from_utf8_lossy(&u.stderr));
        let opts = tensorlane::remote::RemoteOptions {
            options: s3.options_via(&s3.endpoint),
            ..Default::default()
        };
        let back = tensorlane::remote::RemoteSource::open(&up, &opts).unwrap();
        assert_eq!(back.read_vec(0, back.size()).unwrap(), want, "{rel}: .zt -> s3");
        let v = run(&s3, &["verify", &up]);
        assert!(v.status.success(), "{rel}: {}", String::from_utf8_lossy(&v.stderr));
    }
    // A conversion that fails uploads nothing.
    let bad = s3.url("out/bad.zt");
    let f = run(
        &s3,
        &[
            "convert",
            fixtures
                .join("safetensors/hostile/truncated.safetensors")
                .to_str()
                .unwrap(),
            &bad,
        ],
    );
    assert!(!f.status.success());
    let i = run(&s3, &["inspect", &bad]);
    assert_eq!(i.status.code(), Some(1), "{}", String::from_utf8_lossy(&i.stderr));
    assert!(String::from_utf8_lossy(&i.stderr).contains("no such object"));
    // Flags reach the store: a wrong key is refused with the server's reason.
    let w = run(
        &s3,
        &[
            "inspect",
            &s3.url("fx/sample.safetensors"),
            "--remote-option",
            "aws_secret_access_key=nope",
        ],
    );
    assert_eq!(w.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("Signature"),
        "{}",
        String::from_utf8_lossy(&w.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
