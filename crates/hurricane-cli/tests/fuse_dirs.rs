//! Directory listings through a mount: a listing read while names are
//! renamed away and back ends and lists every lasting name once, a
//! telldir position stays valid across changes, and the listings the
//! kernel caches are dropped when the directory changes and are served
//! only to callers who may read the directory.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// A directory stream (opendir(3)), read with readdir(3), telldir(3) and
/// seekdir(3).
struct Stream(*mut libc::DIR);

impl Stream {
    fn open(p: &Path) -> Stream {
        // SAFETY: a valid C string; the stream is closed on drop.
        let d = unsafe { libc::opendir(cpath(p).as_ptr()) };
        assert!(!d.is_null(), "opendir {}: {}", p.display(), std::io::Error::last_os_error());
        Stream(d)
    }

    /// The next name, or None at the end.
    fn next(&mut self) -> Option<String> {
        // SAFETY: an open stream; the entry is copied before the next call.
        unsafe {
            *libc::__errno_location() = 0;
            let e = libc::readdir64(self.0);
            if e.is_null() {
                assert_eq!(*libc::__errno_location(), 0, "readdir: {}", std::io::Error::last_os_error());
                return None;
            }
            Some(CStr::from_ptr((*e).d_name.as_ptr()).to_string_lossy().into_owned())
        }
    }

    /// Up to `n` names (all that are left for `usize::MAX`).
    fn take(&mut self, n: usize) -> Vec<String> {
        let mut v = Vec::new();
        while v.len() < n {
            match self.next() {
                Some(name) => v.push(name),
                None => break,
            }
        }
        v
    }

    fn tell(&self) -> libc::c_long {
        // SAFETY: an open stream.
        unsafe { libc::telldir(self.0) }
    }

    fn seek(&mut self, pos: libc::c_long) {
        // SAFETY: an open stream and a position it gave.
        unsafe { libc::seekdir(self.0, pos) }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: opened by opendir, closed once.
        unsafe { libc::closedir(self.0) };
    }
}

fn counts(names: &[String]) -> BTreeMap<&str, usize> {
    let mut c = BTreeMap::new();
    for n in names {
        *c.entry(n.as_str()).or_default() += 1;
    }
    c
}

fn touch(p: &Path) {
    std::fs::File::create(p).unwrap();
}

fn sorted(p: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn op_count(m: &Mounted, op: &str) -> u64 {
    m.stats().ops.get(op).map_or(0, |o| o.count)
}

#[test]
fn a_listing_ends_while_names_are_renamed_away_and_back() {
    require_fuse!();
    let pool = Pool::new(2, "512M");
    let m = pool.mount(&[]);
    let (d, away) = (m.path("d"), m.path("away"));
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&away).unwrap();
    let (stable, moving) = (3000, 2000);
    for i in 0..stable {
        touch(&d.join(format!("s{i}")));
    }
    for i in 0..moving {
        touch(&d.join(format!("m{i}")));
    }
    let total = stable + moving + 2;
    // Renames away and back, and over lasting names, until the listings
    // are done.
    let stop = Arc::new(AtomicBool::new(false));
    let renames = Arc::new(AtomicUsize::new(0));
    let storm = {
        let (stop, renames, d, away) = (stop.clone(), renames.clone(), d.clone(), away.clone());
        std::thread::spawn(move || {
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("m{}", k % moving);
                std::fs::rename(d.join(&name), away.join(&name)).unwrap();
                std::fs::rename(away.join(&name), d.join(&name)).unwrap();
                if k.is_multiple_of(50) {
                    touch(&d.join("over"));
                    std::fs::rename(d.join("over"), d.join(format!("s{}", k % stable))).unwrap();
                }
                k += 1;
                renames.store(k, Ordering::Relaxed);
            }
        })
    };
    for round in 0..3 {
        let before = renames.load(Ordering::Relaxed);
        let mut s = Stream::open(&d);
        let mut seen = Vec::new();
        // Read slowly enough that many renames land within one listing.
        while let Some(n) = s.next() {
            seen.push(n);
            assert!(seen.len() <= 3 * total, "round {round}: the listing does not end ({} entries)", seen.len());
            if seen.len().is_multiple_of(500) {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let during = renames.load(Ordering::Relaxed) - before;
        assert!(during > 100, "round {round}: only {during} renames during the listing");
        let c = counts(&seen);
        for i in 0..stable {
            let name = format!("s{i}");
            assert_eq!(c.get(name.as_str()), Some(&1), "round {round}: {name} is there throughout");
        }
        for (name, n) in &c {
            assert_eq!(*n, 1, "round {round}: {name} listed {n} times");
        }
    }
    stop.store(true, Ordering::Relaxed);
    storm.join().unwrap();
    // Quiet again: every name once.
    let all = sorted(&d);
    assert_eq!(all.len(), stable + moving);
    m.unmount();
}

#[test]
fn a_telldir_position_stays_valid_across_changes() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..800 {
        touch(&d.join(format!("e{i:03}")));
    }
    let mut s = Stream::open(&d);
    let first = s.take(300);
    let pos = s.tell();
    let rest = s.take(usize::MAX);
    assert_eq!(first.len() + rest.len(), 802);
    // Changes through the mount: names on both sides of the position
    // removed, new ones made, one renamed over a name still to come.
    let mut gone = BTreeSet::new();
    for n in rest.iter().step_by(5).chain(first.iter().skip(2).step_by(9)) {
        std::fs::remove_file(d.join(n)).unwrap();
        gone.insert(n.clone());
    }
    for i in 0..200 {
        touch(&d.join(format!("late{i}")));
    }
    let target = rest.iter().find(|n| !gone.contains(*n)).unwrap();
    std::fs::rename(d.join("late0"), d.join(target)).unwrap();
    // seekdir back: the names of the rest still there come again, once
    // each and in the same order; a removed or new name may or may not
    // (POSIX leaves it open), and nothing else does.
    s.seek(pos);
    let again = s.take(usize::MAX);
    let lasting: Vec<&String> = rest.iter().filter(|n| !gone.contains(*n)).collect();
    let got: Vec<&String> = again.iter().filter(|n| lasting.contains(n)).collect();
    assert_eq!(got, lasting);
    for n in &again {
        assert!(rest.contains(n) || n.starts_with("late"), "{n} was never there");
    }
    assert_eq!(counts(&again).len(), again.len(), "a name listed twice: {again:?}");
    drop(s);
    // A new listing (and a rewound one) shows the directory as it is.
    let want = {
        let mut w: Vec<String> = first.iter().chain(&rest).filter(|n| !gone.contains(*n)).cloned().collect();
        w.extend((1..200).map(|i| format!("late{i}")));
        w.sort();
        w
    };
    let mut s = Stream::open(&d);
    let mut now = s.take(usize::MAX);
    now.retain(|n| n != "." && n != "..");
    now.sort();
    assert_eq!(now, want.iter().filter(|n| *n != ".." && *n != ".").cloned().collect::<Vec<_>>());
    touch(&d.join("after-rewind"));
    s.seek(0);
    let rewound = s.take(usize::MAX);
    assert!(rewound.contains(&"after-rewind".to_string()), "rewinddir shows the directory as it is now");
    drop(s);
    m.unmount();
}

#[test]
fn cached_listings_follow_every_change() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    let (d, other) = (m.path("d"), m.path("other"));
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&other).unwrap();
    for i in 0..300 {
        touch(&d.join(format!("f{i}")));
    }
    let mut want: BTreeSet<String> = (0..300).map(|i| format!("f{i}")).collect();
    let check = |want: &BTreeSet<String>, what: &str| {
        let got: BTreeSet<String> = sorted(&d).into_iter().collect();
        assert_eq!(&got, want, "after {what}");
    };
    check(&want, "the creates");
    // An unchanged directory is listed again from the kernel's cache: its
    // opens reach the mount, its reads do not.
    let reads = |m: &Mounted| op_count(m, "readdir") + op_count(m, "readdirplus");
    let (r0, o0) = (reads(&m), op_count(&m, "opendir"));
    for _ in 0..3 {
        check(&want, "nothing");
    }
    assert_eq!(reads(&m), r0, "the listing is cached");
    assert_eq!(op_count(&m, "opendir"), o0 + 3, "every open reaches the mount");
    // Each kind of change is seen by the next listing.
    touch(&d.join("new"));
    want.insert("new".into());
    check(&want, "a create");
    assert!(reads(&m) > r0);
    std::fs::remove_file(d.join("f7")).unwrap();
    want.remove("f7");
    check(&want, "an unlink");
    touch(&other.join("incoming"));
    std::fs::rename(other.join("incoming"), d.join("incoming")).unwrap();
    want.insert("incoming".into());
    check(&want, "a rename in");
    std::fs::rename(d.join("f8"), other.join("f8")).unwrap();
    want.remove("f8");
    check(&want, "a rename out");
    std::fs::rename(d.join("f9"), d.join("g9")).unwrap();
    want.remove("f9");
    want.insert("g9".into());
    check(&want, "a rename within");
    std::fs::hard_link(other.join("f8"), d.join("link")).unwrap();
    want.insert("link".into());
    check(&want, "a link");
    std::fs::create_dir(d.join("sub")).unwrap();
    want.insert("sub".into());
    check(&want, "a mkdir");
    std::os::unix::fs::symlink("f1", d.join("sym")).unwrap();
    want.insert("sym".into());
    check(&want, "a symlink");
    std::fs::remove_dir(d.join("sub")).unwrap();
    want.remove("sub");
    check(&want, "an rmdir");
    // An exchange keeps both names.
    let c = cpath(&d.join("f1"));
    let c2 = cpath(&other.join("f8"));
    // SAFETY: valid C strings.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_FDCWD,
            c2.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    check(&want, "an exchange");
    // After a remount, the same.
    m.unmount();
    let m = pool.mount(&[]);
    let got: BTreeSet<String> = sorted(&m.path("d")).into_iter().collect();
    assert_eq!(got, want);
    m.unmount();
}

#[test]
fn a_cached_listing_is_served_only_to_those_who_may_read_it() {
    require_fuse!();
    if !is_root() {
        eprintln!("SKIPPED: needs root to act as another user");
        return;
    }
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&["allow_other"]);
    let d = m.path("private");
    std::fs::create_dir(&d).unwrap();
    for i in 0..50 {
        touch(&d.join(format!("secret{i}")));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Root's listing fills the kernel's cache.
    assert_eq!(sorted(&d).len(), 50);
    assert_eq!(sorted(&d).len(), 50);
    let script =
        "import os, sys\ntry:\n    print(len(os.listdir(sys.argv[1])))\nexcept PermissionError:\n    print('EACCES')\n";
    let nobody = Some((65534, 65534, &[][..]));
    let (ok, out) = python(script, &[s(&d)], nobody);
    assert!(ok && out.trim() == "EACCES", "another user listed a 0700 directory: {out}");
    // Once the directory is readable, the listing is theirs too.
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, out) = python(script, &[s(&d)], nobody);
    assert!(ok && out.trim() == "50", "{out}");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (ok, out) = python(script, &[s(&d)], nobody);
    assert!(ok && out.trim() == "EACCES", "{out}");
    m.unmount();
}
