//! `remote_read URL [--list]`: opens a model at URL (any format; `s3://` configured from the
//! environment) and reads every tensor through `Model::for_each_tensor`, printing one JSON line:
//! tensors, bytes, seconds, MB/s and the requests and bytes on the wire. With `--list`, only opens
//! it (what listing a remote model costs). Used by scripts/bench_remote.py.

use std::time::Instant;

use tensorlane::model::Model;

fn main() -> Result<(), tensorlane::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().expect("usage: remote_read URL [--list]");
    let list = args.iter().any(|a| a == "--list");
    let start = Instant::now();
    let m = Model::open(url)?;
    let opened = start.elapsed().as_secs_f64();
    let (mut n, mut bytes, mut check) = (0u64, 0u64, 0u64);
    if !list {
        let all: Vec<_> = m.catalog().tensors.iter().collect();
        m.for_each_tensor(&all, |_, b| {
            n += 1;
            bytes += b.len() as u64;
            // Touch the bytes, as a consumer would.
            check = check.wrapping_add(b.iter().step_by(4096).map(|&x| x as u64).sum::<u64>());
            Ok(())
        })?;
    }
    let secs = start.elapsed().as_secs_f64();
    let c = m.remote_counters();
    println!(
        "{{\"tensors\": {n}, \"bytes\": {bytes}, \"open_s\": {opened:.4}, \"seconds\": {secs:.4}, \"mb_s\": {:.1}, \
         \"requests\": {}, \"wire_bytes\": {}, \"check\": {check}}}",
        bytes as f64 / secs / 1e6,
        c.map_or(0, |c| c.requests()),
        c.map_or(0, |c| c.bytes())
    );
    Ok(())
}
