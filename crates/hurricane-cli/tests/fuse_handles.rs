//! Open-file handles through the mount when the handle id counter wraps:
//! each descriptor keeps reading its own file, and closing one leaves the
//! others' opens in place.

mod fuse_util;

use fuse_util::*;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// The id counter starts just below where the handle ids of the mount
/// before this fix wrapped (22 bits), and just below the 60-bit wrap of
/// today's ids; either way, every open gets an id no live open holds.
#[test]
fn handle_ids_never_reach_another_file() {
    require_fuse!();
    for first in [(1u64 << 22) - 2, (u64::MAX >> 4) - 2] {
        let pool = Pool::new(2, "64M");
        let names = ["a", "b", "c", "d", "e"];
        let m = pool.mount(&[]);
        for (i, n) in names.iter().enumerate() {
            fs::write(m.path(n), data(8192, i as u64)).unwrap();
        }
        m.unmount();
        // This test binary runs this one test, so no other thread reads the
        // environment; the mount started here inherits the variable.
        std::env::set_var("HURRICANE_TEST_FIRST_HANDLE", first.to_string());
        let m = pool.mount(&[]);
        std::env::remove_var("HURRICANE_TEST_FIRST_HANDLE");
        // A fresh mount holds no pages: the first read of each file reaches
        // the mount with that descriptor's handle.
        let files: Vec<File> = names.iter().map(|n| File::open(m.path(n)).unwrap()).collect();
        let read = |f: &File| {
            let mut b = vec![0u8; 8192];
            f.read_exact_at(&mut b, 0).map(|()| b)
        };
        for (i, f) in files.iter().enumerate() {
            assert!(read(f).unwrap() == data(8192, i as u64), "first {first}: file {} read another's data", names[i]);
        }
        // Closing one releases only its own open: an unlinked file whose
        // open was wrongly dropped would be freed and unreadable.
        for n in &names[1..] {
            fs::remove_file(m.path(n)).unwrap();
        }
        let mut files = files.into_iter();
        drop(files.next());
        for (i, f) in files.enumerate() {
            let i = i + 1;
            // Drop the kernel's pages so the read reaches the mount again.
            // SAFETY: an open descriptor; advice only.
            assert_eq!(unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
            assert!(read(&f).unwrap() == data(8192, i as u64), "first {first}: file {} after a close", names[i]);
        }
        m.unmount();
        pool.fsck_clean();
    }
}
