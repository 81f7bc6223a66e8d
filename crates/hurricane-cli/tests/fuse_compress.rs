//! `compress` files through a real mount: compressible data takes less
//! space and reads back after unaligned overwrites, truncates and a
//! remount; fio verifies them under random and sequential writes; the
//! mount's statistics count what was stored.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;

fn setxattr(p: &std::path::Path, name: &str, v: &[u8]) {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of v.len() bytes.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }).unwrap();
}

/// Log-like text: compresses several times over.
fn text(n: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = seed;
    while v.len() < n {
        i = i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.extend_from_slice(format!("GET /files/{}/index.html 200\n", (i >> 58) & 0x1f).as_bytes());
    }
    v.truncate(n);
    v
}

#[test]
fn compressed_files_read_back_take_less_space_and_survive_a_remount() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    let mut model = std::collections::BTreeMap::new();
    for (dir, spec) in [("z", "compress(algo=zstd)[stripe(width=2)]"), ("l", "compress(algo=lz4,chunk=16K)")] {
        let d = m.path(dir);
        std::fs::create_dir(&d).unwrap();
        setxattr(&d, "user.hurricane.dir_layout", spec.as_bytes());
        let path = d.join("log");
        let mut want = text(3 << 20, dir.len() as u64);
        std::fs::write(&path, &want).unwrap();
        assert!(std::fs::read(&path).unwrap() == want, "{spec}");
        let used = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(used * 2 < want.len() as u64, "{spec}: {} bytes of text take {used}", want.len());
        // Unaligned overwrites inside chunks and across them, random bytes
        // among the text, then a truncate into a chunk and an extension.
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for (off, bytes) in [(5_000u64, data(3_000, 1)), (65_530, b"across".to_vec()), (1 << 20, data(200_000, 2))] {
            f.seek(SeekFrom::Start(off)).unwrap();
            f.write_all(&bytes).unwrap();
            want[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
        }
        f.set_len(2_000_001).unwrap();
        want.truncate(2_000_001);
        f.set_len(2_100_000).unwrap();
        want.resize(2_100_000, 0);
        drop(f);
        assert!(std::fs::read(&path).unwrap() == want, "{spec}: after overwrites and truncates");
        let layout = ok("getfattr", &["--only-values", "-n", "user.hurricane.layout", s(&path)]);
        assert!(layout.starts_with("compress"), "{layout}");
        model.insert(path, want);
    }
    let z = stats_json(&m.mnt).compress;
    assert!(z.chunks_compressed > 0 && z.chunks_raw > 0 && z.ratio > 2.0, "{z:?}");
    assert!(hurricane(&["stats", s(&m.mnt)]).contains("compress: "));
    m.unmount();
    pool.fsck_clean();
    let m = pool.mount(&[]);
    for (path, want) in &model {
        assert!(std::fs::read(path).unwrap() == *want, "{} after a remount", path.display());
    }
    m.unmount();
}

#[test]
fn fio_verifies_compressed_files() {
    require_fuse!();
    if !have("fio") {
        eprintln!("SKIPPED fio_verifies_compressed_files: fio is not installed");
        return;
    }
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    let d = m.path("c");
    std::fs::create_dir(&d).unwrap();
    setxattr(&d, "user.hurricane.dir_layout", b"compress(chunk=32K)[extent@1]");
    for (rw, bs) in [("randwrite", "4k"), ("write", "1m"), ("randwrite", "6k")] {
        let (good, text) =
            fio_check(&d, rw, bs, "psync", "8m", &["--buffer_compress_percentage=60", "--refill_buffers"]);
        assert!(good, "fio {rw} {bs}:\n{text}");
    }
    m.unmount();
    pool.fsck_clean();
}
