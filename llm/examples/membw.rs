//! Measures the machine's memory read bandwidth, the floor a decode step that reads every
//! weight once cannot beat (scripts/bench_vs_llama.sh divides the weight bytes per token by it):
//!
//! ```text
//! cargo run --release -p tensorlane-llm --example membw -- THREADS [MIB]
//! ```
//!
//! Fills a buffer of MIB mebibytes (default 1024: far larger than any cache), then reads all of
//! it, split between THREADS threads, seven times; prints one JSON line with the best pass's
//! rate in GB/s (10^9 bytes per second).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 2 && a.len() != 3 {
        return Err("usage: membw THREADS [MIB]".into());
    }
    let threads: usize = a[1].parse()?;
    let mib: usize = a.get(2).map_or(Ok(1024), |v| v.parse())?;
    if threads == 0 || mib == 0 {
        return Err("THREADS and MIB must be at least 1".into());
    }
    let words = mib << 17; // u64 words
    let buf: Vec<u64> = (0..words as u64).collect();
    let mut best = f64::INFINITY;
    let mut check = 0u64;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        let part = words.div_ceil(threads);
        let sums: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = buf
                .chunks(part)
                .map(|c| {
                    s.spawn(move || {
                        // eight independent lanes, so the loop waits on memory, not on one chain
                        let mut acc = [0u64; 8];
                        for w in c.chunks_exact(8) {
                            for (a, &v) in acc.iter_mut().zip(w) {
                                *a ^= v;
                            }
                        }
                        acc.iter().fold(0, |x, &y| x ^ y)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0)).collect()
        });
        best = best.min(t.elapsed().as_secs_f64());
        check ^= sums.iter().fold(0, |x, &y| x ^ y);
    }
    println!(
        "{{\"threads\": {threads}, \"bytes\": {}, \"read_gb_per_s\": {:.2}, \"check\": {check}}}",
        words * 8,
        (words * 8) as f64 / best / 1e9
    );
    Ok(())
}
