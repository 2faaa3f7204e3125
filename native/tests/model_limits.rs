//! `Model` on a compression bomb: a 2.9 MB `.npz` whose deflated member declares
//! `uint8[3_000_000_000]` (built here by `tensorlane_testkit::bombs`). A whole read over
//! `ModelOptions::limits` is refused before anything is allocated, naming the tensor, the size
//! and the option; streaming reads hand out bounded pieces; opened with `mmap: false` the same
//! holds over `pread`.

use tensorlane::model::{Model, ModelOptions};
use tensorlane_core::formats::{ErrorKind, ReadLimits};
use tensorlane_testkit::bombs;

#[test]
fn a_whole_read_over_the_limit_is_refused_and_streaming_is_bounded() {
    let dir = std::env::temp_dir().join(format!("tl-model-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bomb.npz");
    bombs::npz_bomb(&p, 3_000_000_000);
    for mmap in [true, false] {
        let opts = ModelOptions {
            limits: ReadLimits {
                max_tensor_bytes: 1 << 30,
            },
            mmap,
        };
        let m = Model::open_with(&p, &opts).unwrap();
        let t = &m.catalog().tensors[0];
        match m.read(t) {
            Err(tensorlane::Error::Format(e)) => {
                assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Limit, Some("bomb")), "{e}");
                assert!(
                    e.message.contains("3000000128 bytes") && e.message.contains("max_tensor_bytes"),
                    "{e}"
                );
            }
            other => panic!("expected the limit's error, got {:?}", other.map(|b| b.len())),
        }
        // Streaming: the first 64 MiB in pieces of at most 1 MiB, then stop (the sink's error
        // comes back as is).
        let mut seen = 0u64;
        let r = m.read_chunks(t, 1 << 20, &mut |p| {
            assert!(p.len() <= 1 << 20 && p.iter().all(|&x| x == 0));
            seen += p.len() as u64;
            if seen >= 64 << 20 {
                return Err(tensorlane_core::formats::FormatError::new(
                    "test",
                    ErrorKind::Limit,
                    "enough",
                ));
            }
            Ok(())
        });
        match r {
            Err(tensorlane::Error::Format(e)) => assert_eq!(e.message, "enough"),
            other => panic!("{other:?}"),
        }
        assert_eq!(seen, 64 << 20);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
