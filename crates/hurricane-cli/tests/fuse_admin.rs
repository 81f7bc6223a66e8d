//! The mount as an administrator uses it: its type in the mount table,
//! /etc/fstab lines and `mount -t fuse.hurricane` through mount(8)'s
//! helpers, remounts read-only and back, unmounts that leave the pool free
//! at once, and free space that `fallocate` can take whole.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs;
use std::path::Path;
use std::time::Duration;

/// The type findmnt gives the mount at `mnt`.
fn fstype(mnt: &Path) -> String {
    ok("findmnt", &["-n", "-o", "FSTYPE", s(mnt)]).trim().to_string()
}

/// `/proc/mounts` and findmnt name the file system `fuse.hurricane`, the
/// type mount(8) finds the helper by.
#[test]
fn the_mount_type_is_fuse_hurricane() {
    require_fuse!();
    let pool = Pool::new(2, "64M");
    let m = pool.mount(&[]);
    assert_eq!(fstype(&m.mnt), "fuse.hurricane");
    let line = fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(s(&m.mnt)))
        .map(str::to_string)
        .unwrap();
    assert!(line.starts_with(&format!("{} {} fuse.hurricane ", s(&pool.dir), s(&m.mnt))), "{line}");
    m.unmount();
}

/// Runs a shell script in a mount namespace of its own where mount(8)
/// finds the helper (`/sbin/mount.fuse.hurricane`, a link to the binary
/// under test) in a directory mounted over /sbin's; returns (success,
/// output).
fn in_namespace_with_helpers(tmp: &Path, script: &str) -> (bool, String) {
    let helpers = tmp.join("helpers");
    fs::create_dir_all(&helpers).unwrap();
    let _ = fs::remove_file(helpers.join("mount.fuse.hurricane"));
    std::os::unix::fs::symlink(BIN, helpers.join("mount.fuse.hurricane")).unwrap();
    let sbin = fs::canonicalize("/sbin").unwrap();
    let full = format!("set -eu\nmount --bind {} {}\n{script}", s(&helpers), s(&sbin));
    let out = cmd("unshare", &["--mount", "--propagation", "private", "sh", "-c", &full]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Whether mount(8) and unshare(1) are here to run the helper tests.
fn can_run_mount8() -> bool {
    if !is_root() || !have("unshare") || !have("findmnt") {
        eprintln!("SKIPPED: needs root, unshare(1) and findmnt(8)");
        return false;
    }
    true
}

/// An /etc/fstab line (in a file of its own, `mount -T`) mounts the pool
/// through `mount.fuse.hurricane`, with the generic options mount(8) and
/// systemd use accepted; `mount -o remount,ro` makes it read-only (writes
/// fail with EROFS) and `remount,rw` writable again; a check that locks
/// the pool right after `umount` waits for the server to close it rather
/// than finding it in use, 20 times over; `mount -t fuse.hurricane` works
/// too, and a pool mounted `ro` is not remounted read-write.
#[test]
fn fstab_remount_and_umount_through_mount8() {
    require_fuse!();
    if !can_run_mount8() {
        return;
    }
    let pool = Pool::new(2, "64M");
    let fstab = pool.tmp.path().join("fstab");
    fs::write(
        &fstab,
        format!(
            "{} {} fuse.hurricane defaults,allow_other,noauto,nofail,_netdev,x-systemd.requires=network.target 0 0\n",
            s(&pool.dir),
            s(&pool.mnt)
        ),
    )
    .unwrap();
    let script = format!(
        r#"
P={pool}; M={mnt}; T={fstab}; B={bin}
trap 'umount -l "$M" 2>/dev/null || true' EXIT
mount -T "$T" "$M"
echo "type: $(findmnt -n -o FSTYPE "$M")"
echo one > "$M/one"
mount -T "$T" -o remount,ro "$M"
echo "options: $(findmnt -n -o OPTIONS "$M" | cut -d, -f1)"
if echo two > "$M/two" 2>/dev/null; then echo "wrote while read-only"; else echo "read-only write refused"; fi
mount -T "$T" -o remount,rw "$M"
echo three > "$M/three"
echo "read back: $(cat "$M/one" "$M/three" | tr '\n' ' ')"
umount "$M"
"$B" fsck "$P"
i=0
while [ $i -lt 20 ]; do
    mount -T "$T" "$M"
    echo $i > "$M/n$i"
    umount "$M"
    "$B" fsck "$P" > /dev/null || {{ echo "fsck after umount $i failed"; exit 1; }}
    i=$((i + 1))
done
echo "loop done"
mount -t fuse.hurricane -o ro "$P" "$M"
echo "type -t: $(findmnt -n -o FSTYPE "$M") $(findmnt -n -o OPTIONS "$M" | cut -d, -f1)"
if mount -o remount,rw "$M" 2>/dev/null; then echo "ro pool remounted rw"; else echo "ro pool stays read-only"; fi
umount "$M"
"#,
        pool = s(&pool.dir),
        mnt = s(&pool.mnt),
        fstab = s(&fstab),
        bin = BIN
    );
    let (good, out) = in_namespace_with_helpers(pool.tmp.path(), &script);
    assert!(good, "{out}\n{}", pool.log());
    for want in [
        "type: fuse.hurricane",
        "options: ro",
        "read-only write refused",
        "read back: one three ",
        "consistent",
        "loop done",
        "type -t: fuse.hurricane ro",
        "ro pool stays read-only",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!is_fuse_mount(&pool.mnt));
    pool.fsck_clean();
    assert_eq!(pool.get("n19"), b"19\n");
}

/// A read-only remount the server was not told of (mount(8) without
/// helpers, `-i`): the server follows the mount table, writes a
/// checkpoint and stops writing, so a crash while read-only replays
/// nothing; remounted read-write it takes changes again.
#[test]
fn remount_read_only_checkpoints_and_stops_writing() {
    require_fuse!();
    if !can_run_mount8() {
        return;
    }
    let pool = Pool::new(2, "64M");
    let m = pool.mount(&[]);
    for i in 0..50 {
        fs::write(m.path(&format!("f{i}")), data(5000, i)).unwrap();
    }
    ok("mount", &["-i", "-o", "remount,ro", s(&m.mnt)]);
    let waited = std::time::Instant::now();
    while m.stats().writable && waited.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = m.stats();
    assert!(!st.writable, "the server still writes after a read-only remount");
    assert_eq!(errno(fs::write(m.path("new"), b"x")), libc::EROFS);
    let writes = |st: &hurricane_fuse::StatsReport| st.devices.iter().map(|d| d.writes).sum::<u64>();
    let before = writes(&st);
    // Longer than the commit interval: nothing is written meanwhile.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(writes(&m.stats()), before, "devices written while read-only");
    ok("mount", &["-i", "-o", "remount,rw", s(&m.mnt)]);
    let waited = std::time::Instant::now();
    while !m.stats().writable && waited.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    fs::write(m.path("after"), b"after").unwrap();
    ok("mount", &["-i", "-o", "remount,ro", s(&m.mnt)]);
    let waited = std::time::Instant::now();
    while m.stats().writable && waited.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // A crash while read-only: the next open replays no journal op.
    m.kill9();
    let m = pool.mount(&[]);
    let log = pool.log();
    let opened = log.lines().rev().find(|l| l.contains("opened:")).unwrap();
    assert!(opened.contains("(0 journal ops replayed"), "{opened}");
    assert_eq!(fs::read(m.path("after")).unwrap(), b"after");
    assert_eq!(fs::read(m.path("f49")).unwrap(), data(5000, 49));
    m.unmount();
    pool.fsck_clean();
}

/// `umount` without the helper returns before the server has closed the
/// pool; the next mount waits for it rather than failing "in use".
#[test]
fn mount_right_after_a_plain_umount_waits_for_the_pool() {
    require_fuse!();
    if !can_run_mount8() {
        return;
    }
    let pool = Pool::new(2, "64M");
    for i in 0..20 {
        let m = pool.mount(&[]);
        fs::write(m.path(&format!("f{i}")), data(100_000, i)).unwrap();
        ok("umount", &["-i", s(&m.mnt)]);
        m.forget();
    }
    let m = pool.mount(&[]);
    assert_eq!(fs::read(m.path("f19")).unwrap(), data(100_000, 19));
    // A pool that is mounted is refused at once, naming where.
    let other = pool.tmp.path().join("other");
    fs::create_dir(&other).unwrap();
    let (code, _, err) = run(&["mount", s(&pool.dir), s(&other)]);
    assert!(code != 0 && err.contains(&format!("mounted on {}", s(&m.mnt))), "{err}");
    m.unmount();
}

/// statvfs of `p`: (blocks available, blocks free, block size).
fn statvfs(p: &Path) -> (u64, u64, u64) {
    // SAFETY: plain data, filled by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a struct to fill.
    check(unsafe { libc::statvfs(cpath(p).as_ptr(), &mut st) }).unwrap();
    (st.f_bavail, st.f_bfree, st.f_frsize)
}

/// What statfs offers as available a file can take: `fallocate` of all of
/// it but 512 KiB succeeds on the default layout (a stripe over every
/// device with checksums; the journal and the meta-data on three of the
/// four devices), on a replicated and on a parity pool; and `df`
/// shows the space of a removed file again right after `rm; sync`.
#[test]
fn fallocate_takes_the_space_statfs_offers() {
    require_fuse!();
    // Layouts over every device of their pool: one file can take it all.
    for (devices, layout) in [("4", None), ("2", Some("replicate(copies=2)")), ("3", Some("parity(data=2,parity=1)"))] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pool");
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let mut args = vec!["mkfs", s(&dir), "--devices", devices, "--device-size", "256M"];
        if let Some(l) = layout {
            args.extend(["--layout", l]);
        }
        hurricane(&args);
        let m = Mounted::new(&dir, &mnt, &[]);
        let (avail, free, bsize) = statvfs(&mnt);
        assert!(avail <= free && avail * bsize > 64 << 20, "{layout:?}: {avail} of {free}");
        let want = avail * bsize - (512 << 10);
        let f = fs::File::create(m.path("big")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a descriptor of an open file.
        let r = check(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, want as i64) });
        assert!(r.is_ok(), "{layout:?}: fallocate of {want} bytes ({avail} blocks offered): {r:?}");
        drop(f);
        let (full, _, _) = statvfs(&mnt);
        assert!(full * bsize < 64 << 20, "{layout:?}: {full} blocks still offered after the fallocate");
        fs::remove_file(m.path("big")).unwrap();
        // SAFETY: no preconditions.
        unsafe { libc::sync() };
        let (back, _, _) = statvfs(&mnt);
        assert!(back * bsize + (4 << 20) >= avail * bsize, "{layout:?}: {back} blocks free after rm, {avail} before");
        m.unmount();
    }
}
