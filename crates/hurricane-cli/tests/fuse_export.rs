//! File handles through the mount (name_to_handle_at, open_by_handle_at:
//! what the kernel's NFS server uses): they keep opening their file after
//! the kernel forgets its inodes and after the pool is mounted again, a
//! directory's handle reconnects it to the root through ".." lookups, and
//! the handle of a removed file is stale even when its inode number is
//! given to a new file.
//!
//! The NFS server itself is not tested here: a loopback NFS mount needs
//! the kernel's nfsd, which the test machines' kernels lack (no
//! /proc/fs/nfsd, no modules). The server decodes handles through the
//! same export operations as open_by_handle_at.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::Path;

/// A file handle: `struct file_handle` with room for its bytes.
#[derive(Clone)]
struct Handle {
    words: Vec<u64>,
}

const ROOM: usize = 128;

impl Handle {
    fn of(p: &Path) -> io::Result<Handle> {
        let mut words = vec![0u64; 1 + ROOM / 8];
        let fh = words.as_mut_ptr().cast::<libc::file_handle>();
        let mut mount_id = 0;
        let c = cpath(p);
        // SAFETY: `fh` points at 8 + ROOM bytes, as handle_bytes says.
        unsafe { (*fh).handle_bytes = ROOM as u32 };
        // SAFETY: as above; the path is NUL-terminated.
        check(unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), fh, &mut mount_id, 0) })?;
        Ok(Handle { words })
    }

    fn bytes(&self) -> usize {
        // SAFETY: the header of the handle `of` filled.
        unsafe { (*self.words.as_ptr().cast::<libc::file_handle>()).handle_bytes as usize }
    }

    /// The handle's payload as 32-bit words (FUSE: node id high, low, generation).
    fn payload(&mut self) -> &mut [u32] {
        let n = self.bytes() / 4;
        // SAFETY: the payload follows the 8-byte header, inside `words`.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().add(1).cast::<u32>(), n) }
    }

    fn open(&self, mount: &File, flags: i32) -> io::Result<File> {
        let mut w = self.words.clone();
        let fh = w.as_mut_ptr().cast::<libc::file_handle>();
        // SAFETY: a handle as `of` made it (or altered in its payload).
        let fd = check(unsafe { libc::open_by_handle_at(mount.as_raw_fd(), fh, flags | libc::O_CLOEXEC) })?;
        // SAFETY: a descriptor just opened and owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}

fn read_all(mut f: File) -> Vec<u8> {
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Has the kernel drop every dentry and inode nothing holds (FORGETs for
/// the mount's), checking that the mount has seen forgets (a drop by
/// another test may have come first).
fn forget_inodes(m: &Mounted) {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let forgets = m.stats().ops.get("forget").map_or(0, |o| o.count);
    assert!(forgets > 0, "the kernel forgot none of the mount's inodes");
}

/// Where an open descriptor's path leads (the kernel's view of its dentry).
fn path_of(f: &File) -> String {
    fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap().to_string_lossy().into_owned()
}

fn open_dir(h: &Handle, mount: &File) -> io::Result<File> {
    h.open(mount, libc::O_RDONLY | libc::O_DIRECTORY)
}

#[test]
fn handles_open_after_the_kernel_forgets_and_after_a_remount() {
    require_fuse!();
    if !is_root() {
        eprintln!("SKIP: open_by_handle_at needs CAP_DAC_READ_SEARCH");
        return;
    }
    let pool = Pool::new(1, "64M");
    let m = pool.mount(&[]);
    fs::create_dir_all(m.path("d/e")).unwrap();
    fs::write(m.path("f"), data(10_000, 1)).unwrap();
    fs::write(m.path("d/e/g"), data(5000, 2)).unwrap();
    let names = ["f", "d", "d/e", "d/e/g"];
    let handles: Vec<Handle> = names.iter().map(|n| Handle::of(&m.path(n)).unwrap()).collect();
    let inos: Vec<u64> = names.iter().map(|n| fs::metadata(m.path(n)).unwrap().ino()).collect();
    let check_all = |m: &Mounted, when: &str| {
        let root = File::open(m.path("")).unwrap();
        let f = handles[0].open(&root, libc::O_RDONLY).unwrap_or_else(|e| panic!("{when}: file f: {e}"));
        assert!(read_all(f) == data(10_000, 1), "{when}: f read other data");
        let g = handles[3].open(&root, libc::O_RDONLY).unwrap_or_else(|e| panic!("{when}: file d/e/g: {e}"));
        assert_eq!(g.metadata().unwrap().ino(), inos[3]);
        assert!(read_all(g) == data(5000, 2), "{when}: d/e/g read other data");
        // A directory's handle opens a dentry connected to the root: the
        // kernel looked up ".." of e and of d to find where it lies.
        let e = open_dir(&handles[2], &root).unwrap_or_else(|e| panic!("{when}: directory d/e: {e}"));
        assert_eq!(e.metadata().unwrap().ino(), inos[2]);
        assert_eq!(path_of(&e), s(&m.path("d/e")), "{when}: d/e reconnected elsewhere");
        let listed: Vec<String> = fs::read_dir(format!("/proc/self/fd/{}", e.as_raw_fd()))
            .unwrap()
            .map(|x| x.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(listed, ["g"], "{when}");
        drop(e);
        let d = open_dir(&handles[1], &root).unwrap_or_else(|e| panic!("{when}: directory d: {e}"));
        assert_eq!(path_of(&d), s(&m.path("d")), "{when}");
        // Read-write through a handle.
        let f = handles[0].open(&root, libc::O_RDWR).unwrap_or_else(|e| panic!("{when}: f read-write: {e}"));
        drop(f);
    };
    // Every inode but the root's forgotten: the handles are decoded by
    // lookups of "." (and "..") by inode number.
    forget_inodes(&m);
    check_all(&m, "after the kernel forgot the inodes");
    forget_inodes(&m);
    check_all(&m, "after a second forgetting");
    m.unmount();
    let m = pool.mount(&[]);
    check_all(&m, "after a remount");
    forget_inodes(&m);
    check_all(&m, "after a remount and a forgetting");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn handles_of_removed_files_are_stale_even_when_their_number_is_given_again() {
    require_fuse!();
    if !is_root() {
        eprintln!("SKIP: open_by_handle_at needs CAP_DAC_READ_SEARCH");
        return;
    }
    let pool = Pool::new(1, "64M");
    let m = pool.mount(&[]);
    fs::write(m.path("r"), b"removed").unwrap();
    fs::create_dir(m.path("rd")).unwrap();
    fs::write(m.path("kept"), b"kept").unwrap();
    let (hr, hrd, hk) =
        (Handle::of(&m.path("r")).unwrap(), Handle::of(&m.path("rd")).unwrap(), Handle::of(&m.path("kept")).unwrap());
    fs::remove_file(m.path("r")).unwrap();
    fs::remove_dir(m.path("rd")).unwrap();
    let root = File::open(m.path("")).unwrap();
    assert_eq!(errno(hr.open(&root, libc::O_RDONLY)), libc::ESTALE);
    assert_eq!(errno(open_dir(&hrd, &root)), libc::ESTALE);
    drop(root);
    forget_inodes(&m);
    let root = File::open(m.path("")).unwrap();
    assert_eq!(errno(hr.open(&root, libc::O_RDONLY)), libc::ESTALE);
    assert_eq!(errno(open_dir(&hrd, &root)), libc::ESTALE);
    // Forged handles: the right number with another generation, and a
    // number no inode has.
    let mut wrong_gen = hk.clone();
    assert_eq!(wrong_gen.bytes(), 12, "a FUSE handle is node id and generation");
    wrong_gen.payload()[2] ^= 1;
    assert_eq!(errno(wrong_gen.open(&root, libc::O_RDONLY)), libc::ESTALE);
    let mut nobody = hk.clone();
    nobody.payload()[0] = 0x7fff_0000;
    assert_eq!(errno(nobody.open(&root, libc::O_RDONLY)), libc::ESTALE);
    assert!(read_all(hk.open(&root, libc::O_RDONLY).unwrap()) == b"kept");
    drop(root);
    m.unmount();

    // Files made after the last commit are lost with the mount process,
    // and their inode numbers given to the next files made.
    let m = pool.mount(&["commit_interval=3600"]);
    fs::write(m.path("lost"), b"lost").unwrap();
    fs::create_dir(m.path("lostdir")).unwrap();
    let lost = [m.path("lost"), m.path("lostdir")];
    let old: Vec<(u64, Handle)> =
        lost.iter().map(|p| (fs::metadata(p).unwrap().ino(), Handle::of(p).unwrap())).collect();
    m.kill9();
    let m = pool.mount(&[]);
    assert!(!m.path("lost").exists() && !m.path("lostdir").exists(), "uncommitted files survived the crash");
    fs::write(m.path("new"), b"new").unwrap();
    fs::create_dir(m.path("newdir")).unwrap();
    let new = [m.path("new"), m.path("newdir")];
    for (i, p) in new.iter().enumerate() {
        assert_eq!(fs::metadata(p).unwrap().ino(), old[i].0, "{} did not take the lost number", p.display());
    }
    let hnew: Vec<Handle> = new.iter().map(|p| Handle::of(p).unwrap()).collect();
    for round in ["cached", "forgotten"] {
        if round == "forgotten" {
            forget_inodes(&m);
        }
        let root = File::open(m.path("")).unwrap();
        assert_eq!(errno(old[0].1.open(&root, libc::O_RDONLY)), libc::ESTALE, "{round}: the lost file's handle");
        assert_eq!(errno(open_dir(&old[1].1, &root)), libc::ESTALE, "{round}: the lost directory's handle");
        assert!(read_all(hnew[0].open(&root, libc::O_RDONLY).unwrap()) == b"new", "{round}");
        let d = open_dir(&hnew[1], &root).unwrap();
        assert_eq!(path_of(&d), s(&m.path("newdir")), "{round}");
    }
    m.unmount();
    pool.fsck_clean();
}
