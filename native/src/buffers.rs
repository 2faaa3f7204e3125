//! Large output buffers: `Vec<u8>`s that Linux backs with transparent huge pages.
//!
//! Writing a fresh 64 MiB `Vec` takes one page fault per 4 KiB page (16,384 of them), and on this
//! project's machines those faults, not the copy, are most of the time of an encode or of a
//! decode and copy (measured in BENCHMARKS.md, "tensorlane vs tenso 0.24"). NumPy avoids them by asking the
//! kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on arrays of 4 MiB and more, which
//! the default `transparent_hugepage=madvise` setting honours: 2 MiB per fault. [`with_capacity`]
//! does the same for buffers of [`HUGE_PAGE_THRESHOLD`] bytes or more, before the first byte is
//! written; the `Vec` is an ordinary one (the global allocator frees it). Elsewhere, and below
//! the threshold, it is `Vec::with_capacity`.
//!
//! The fastest path of all needs no new memory: encode into a buffer you keep
//! ([`tensorlane_core::wire::encode_into`] after `clear()`), or decode to a view
//! ([`tensorlane_core::wire::decode`]) and copy only what must outlive the input.

/// Buffers of at least this many bytes (4 MiB, NumPy's threshold) are given huge pages.
pub const HUGE_PAGE_THRESHOLD: usize = 4 << 20;

/// An empty `Vec` with room for `capacity` bytes; from [`HUGE_PAGE_THRESHOLD`] bytes on Linux,
/// with the kernel asked for transparent huge pages on it (a hint: if the kernel says no, the
/// buffer is an ordinary one).
pub fn with_capacity(capacity: usize) -> Vec<u8> {
    let v = Vec::with_capacity(capacity);
    if capacity >= HUGE_PAGE_THRESHOLD {
        advise_huge(&v);
    }
    v
}

/// A copy of `bytes` in a buffer from [`with_capacity`].
pub fn copy_of(bytes: &[u8]) -> Vec<u8> {
    let mut v = with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}

#[cfg(target_os = "linux")]
fn advise_huge(v: &Vec<u8>) {
    const HUGE: usize = 2 << 20;
    let p = v.as_ptr() as usize;
    // Only the whole 2 MiB extents inside the allocation: madvise needs a page-aligned start, and
    // a huge page is only ever placed on an aligned 2 MiB extent anyway.
    let start = p.next_multiple_of(HUGE);
    let end = (p + v.capacity()) & !(HUGE - 1);
    if end > start {
        // SAFETY: [start, end) lies inside the allocation `v` owns (its capacity, not yet
        // written), and MADV_HUGEPAGE only changes how the kernel backs those pages: it neither
        // reads, writes, frees nor remaps them. A failure (a kernel without THP) leaves the
        // buffer as it was, so the result is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_: &Vec<u8>) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_ordinary_vecs_of_the_asked_capacity() {
        for n in [0, 1, 4095, HUGE_PAGE_THRESHOLD - 1, HUGE_PAGE_THRESHOLD, 9 << 20] {
            let v = with_capacity(n);
            assert!(v.capacity() >= n && v.is_empty());
        }
        let src: Vec<u8> = (0..HUGE_PAGE_THRESHOLD + 1).map(|i| (i * 7 + i / 4096) as u8).collect();
        let c = copy_of(&src);
        assert_eq!(c, src);
        let mut grown = c;
        grown.extend_from_slice(b"more");
        assert_eq!(&grown[src.len()..], b"more");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_buffer_is_marked_for_huge_pages_where_the_kernel_offers_them() {
        let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        let v = with_capacity(16 << 20);
        let (lo, hi) = (v.as_ptr() as usize, v.as_ptr() as usize + v.capacity());
        // The mapping that holds the buffer's aligned interior carries the `hg` (MADV_HUGEPAGE) flag.
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut flagged = false;
        let mut cur: Option<(usize, usize)> = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                cur = Some((a, b));
            } else if let Some(flags) = line.strip_prefix("VmFlags:")
                && let Some((a, b)) = cur
                && a >= lo
                && b <= hi
                && flags.split_whitespace().any(|f| f == "hg")
            {
                flagged = true;
            }
        }
        if enabled.contains("[never]") || enabled.is_empty() {
            return;
        }
        assert!(
            flagged,
            "no mapping inside [{lo:#x}, {hi:#x}) has the hg flag; THP: {enabled}"
        );
    }
}
