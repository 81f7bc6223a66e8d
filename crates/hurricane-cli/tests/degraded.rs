//! Degraded pools through the CLI and a mount: `hurricane status`, `df`,
//! reads with a device image deleted (before opening and while mounted),
//! and faults injected through pool.conf.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use hurricane_fuse::report::StatusReport;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hurricane");

/// Runs `hurricane`; (exit code, stdout, stderr). Never a panic.
fn hc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).env_remove("RUST_LOG").output().expect("spawn hurricane");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(!e.contains("panicked") && !e.contains("internal error"), "{args:?}: {e}");
    (out.status.code().unwrap_or(-1), o, e)
}

fn status(target: &Path) -> (i32, String, StatusReport) {
    let (code, text, err) = hc(&["status", s(target)]);
    let (jcode, json, _) = hc(&["status", "--json", s(target)]);
    assert_eq!(code, jcode, "{text}{err}");
    let rep = StatusReport::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}: {json}{err}"));
    (code, text, rep)
}

fn put(pool: &Path, name: &str, bytes: &[u8], layout: &str) {
    let local = pool.parent().unwrap().join(format!("local-{}", name.trim_start_matches('/')));
    std::fs::write(&local, bytes).unwrap();
    let (code, o, e) = hc(&["put", s(pool), s(&local), name, "--layout", layout]);
    assert_eq!(code, 0, "{o}{e}");
}

fn get(pool: &Path, name: &str) -> Result<Vec<u8>, String> {
    let dest = pool.parent().unwrap().join(format!("got-{}", name.trim_start_matches('/').replace('/', "-")));
    let _ = std::fs::remove_file(&dest);
    match hc(&["get", s(pool), name, s(&dest)]) {
        (0, _, _) => Ok(std::fs::read(&dest).unwrap()),
        (_, o, e) => Err(format!("{o}{e}")),
    }
}

fn add_line(pool: &Path, line: &str) {
    let f = pool.join("pool.conf");
    let mut text = std::fs::read_to_string(&f).unwrap();
    text.push_str(line);
    text.push('\n');
    std::fs::write(&f, text).unwrap();
}

fn drop_line(pool: &Path, prefix: &str) {
    let f = pool.join("pool.conf");
    let text: String = std::fs::read_to_string(&f)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(prefix))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&f, text).unwrap();
}

#[test]
fn status_and_df_with_a_deleted_image() {
    let pool = Pool::new(3, "64M");
    let dir = pool.dir.clone();
    put(&dir, "/r", &data(700_000, 1), "replicate[extent@1,extent@2]");
    put(&dir, "/on2", &data(90_000, 2), "extent@2");
    put(&dir, "/on0", &data(50_000, 3), "extent@0");
    let (code, text, rep) = status(&dir);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("healthy") && text.contains("3 healthy, 0 degraded, 0 lost"), "{text}");
    assert_eq!(rep.devices.len(), 3);
    assert!(rep.devices.iter().all(|d| d.state == "online" && d.used > 0), "{rep:?}");

    std::fs::remove_file(dir.join("dev2.img")).unwrap();
    let (code, text, rep) = status(&dir);
    assert_eq!(code, 1, "degraded: {text}");
    // (The replicated file counts as degraded once replicate reports its
    // own health; until then as lost. Either way not healthy.)
    assert!(text.contains("1 healthy, 1 degraded, 1 lost") || text.contains("1 healthy, 0 degraded, 2 lost"), "{text}");
    assert!(text.contains("lost files:\n  /on2"), "{text}");
    assert_eq!(rep.devices[2].state, "missing");
    assert!(rep.devices[2].name.ends_with("dev2.img"));
    assert_eq!((rep.devices[0].state.as_str(), rep.devices[1].state.as_str()), ("online", "online"));
    assert!(rep.health.lost_paths.contains(&"/on2".to_string()), "{rep:?}");
    assert!(!rep.health.lost_paths.contains(&"/on0".to_string()), "{rep:?}");
    assert!(!rep.health.degraded_paths.contains(&"/on0".to_string()), "{rep:?}");
    // Reads: the replicated file whole, the file on device 2 an error naming it.
    assert_eq!(get(&dir, "/r").unwrap(), data(700_000, 1));
    assert_eq!(get(&dir, "/on0").unwrap(), data(50_000, 3));
    let e = get(&dir, "/on2").unwrap_err();
    assert!(e.contains("device 2") && e.contains("dev2.img") && e.contains("missing"), "{e}");
    // df shows the state; ls and new files on the devices there work.
    let (code, df, e) = hc(&["df", s(&dir)]);
    assert_eq!(code, 0, "{e}");
    let row2 = df.lines().find(|l| l.trim_start().starts_with("2 ")).unwrap_or_else(|| panic!("{df}"));
    assert!(row2.contains("missing"), "{df}");
    assert!(df.lines().any(|l| l.trim_start().starts_with("all ") && l.contains("1 down")), "{df}");
    let (code, ls, e) = hc(&["ls", s(&dir), "/"]);
    assert_eq!(code, 0, "{e}");
    assert!(ls.contains("on2") && ls.contains("r"), "{ls}");
    put(&dir, "/new", &data(10_000, 4), "extent@0");
    assert_eq!(get(&dir, "/new").unwrap(), data(10_000, 4));
    // The meta-data is consistent: a missing device is no fsck problem.
    let (code, out, e) = hc(&["fsck", s(&dir)]);
    assert_eq!(code, 0, "{out}{e}");
    assert!(out.contains("consistent"), "{out}");
    let (code, _, rep) = status(&dir);
    assert_eq!((code, rep.health.healthy), (1, 2));
}

#[test]
fn faults_from_pool_conf() {
    let pool = Pool::new(3, "64M");
    let dir = pool.dir.clone();
    put(&dir, "/on1", &data(40_000, 5), "extent@1");
    put(&dir, "/r", &data(40_000, 6), "replicate(read=primary)[extent@1,extent@0]");
    // Every block past the superblocks fails to read (the journal mirror and
    // the meta-file copy there are read from device 0).
    add_line(&dir, "fault = 1 read-error=2-16383");
    let e = get(&dir, "/on1").unwrap_err();
    assert!(e.contains("dev1.img") && e.contains("fault injection"), "{e}");
    // The replicated file reads from its other copy.
    assert_eq!(get(&dir, "/r").unwrap(), data(40_000, 6));
    drop_line(&dir, "fault");
    assert_eq!(get(&dir, "/on1").unwrap(), data(40_000, 5));
    // A device gone from the start: the pool opens degraded.
    add_line(&dir, "fault = 2 missing");
    let (code, text, rep) = status(&dir);
    assert_eq!(code, 1, "{text}");
    assert_eq!(rep.devices[2].state, "missing");
    drop_line(&dir, "fault");
    // A device whose superblocks cannot be read: faulted, the pool opens.
    add_line(&dir, "fault = 2 read-error=0-1");
    let (code, text, rep) = status(&dir);
    assert_eq!(code, 1, "{text}");
    assert_eq!(rep.devices[2].state, "faulted", "{text}");
    assert_eq!(get(&dir, "/r").unwrap(), data(40_000, 6));
    drop_line(&dir, "fault");
    // Bad lines are clear errors naming the file and line.
    for (line, want) in [
        ("fault = 1 explode", "unknown fault"),
        ("fault = 1", "expected `fault = DEV SPEC`"),
        ("fault = x missing", "not a device number"),
        ("fault = 7 missing", "fault on device 7"),
        ("fault = 0 flip-rate=2", "rate from 0 to 1"),
    ] {
        add_line(&dir, line);
        let (code, _, e) = hc(&["ls", s(&dir), "/"]);
        assert_eq!(code, 1, "{line}");
        assert!(e.contains(want) && e.contains("pool.conf"), "{line}: {e}");
        drop_line(&dir, "fault");
    }
    let (code, text, _) = status(&dir);
    assert_eq!(code, 0, "{text}");
}

/// Drops the kernel's cached pages of a file on the mount, so the next
/// read reaches the pool.
fn uncache(p: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(p).unwrap();
    // SAFETY: a valid descriptor; the advice changes no memory of ours.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
}

#[test]
fn image_deleted_while_mounted() {
    require_fuse!();
    let pool = Pool::new(3, "128M");
    // No data cache in the server: reads reach the devices. Other users
    // may use the mount: the status they read names no files.
    let m = pool.mount(&["cache=0,allow_other"]);
    let files = [("r", "replicate[extent@1,extent@2]", 1), ("p2", "replicate(read=primary)[extent@2,extent@1]", 2)];
    for (name, layout, seed) in files {
        let p = m.path(name);
        std::fs::File::create(&p).unwrap();
        rustix::fs::setxattr(&p, "user.hurricane.layout", layout.as_bytes(), rustix::fs::XattrFlags::empty()).unwrap();
        std::fs::write(&p, data(3_000_000, seed)).unwrap();
    }
    std::fs::write(m.path("on2"), b"").unwrap();
    rustix::fs::setxattr(m.path("on2"), "user.hurricane.layout", b"extent@2", rustix::fs::XattrFlags::empty()).unwrap();
    std::fs::write(m.path("on2"), data(100_000, 3)).unwrap();
    std::fs::File::open(m.path("r")).unwrap().sync_all().unwrap();
    let (code, text, _) = status(&m.mnt);
    assert_eq!(code, 0, "{text}");

    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    // Status asks every device whether it is still there.
    let (code, text, rep) = status(&m.mnt);
    assert_eq!(code, 1, "{text}");
    assert_eq!(rep.devices[2].state, "missing", "{text}");
    for (name, _, seed) in files {
        uncache(&m.path(name));
        assert!(std::fs::read(m.path(name)).unwrap() == data(3_000_000, seed), "{name} after dev2.img went");
    }
    uncache(&m.path("on2"));
    let e = std::fs::read(m.path("on2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let (code, text, rep) = status(&m.mnt);
    assert_eq!(code, 1, "{text}");
    assert_eq!(rep.devices[2].state, "missing", "{text}");
    assert!(rep.mountpoint.ends_with("mnt"), "{rep:?}");
    assert_eq!(rep.health.degraded + rep.health.lost, 3, "{text}");
    assert!(text.contains("/on2"), "{text}");
    if is_root() && have("setpriv") {
        // Another user reads the same counts, without the paths of files
        // in directories they may not be able to read.
        let read = "import json, os, sys\nh = json.loads(os.getxattr(sys.argv[1], 'user.hurricane.status'))['health']\nprint(h['lost'] + h['degraded'], len(h['lost_paths']) + len(h['degraded_paths']))";
        let (ok, out) = python(read, &[s(&m.mnt)], Some((65534, 65534, &[])));
        assert!(ok, "{out}");
        assert_eq!(out.trim(), "3 0", "{out}");
    }
    let (_, stats, _) = hc(&["stats", s(&m.mnt)]);
    assert!(stats.contains("missing"), "{stats}");
    // The mount goes on: new files commit, and it unmounts cleanly.
    std::fs::File::create(m.path("after")).unwrap();
    rustix::fs::setxattr(m.path("after"), "user.hurricane.layout", b"extent@0", rustix::fs::XattrFlags::empty())
        .unwrap();
    std::fs::write(m.path("after"), b"written degraded").unwrap();
    std::fs::File::open(m.path("after")).unwrap().sync_all().unwrap();
    m.unmount();
    let (code, text, rep) = status(&pool.dir);
    assert_eq!(code, 1, "{text}");
    assert_eq!(rep.devices[2].state, "missing");
    assert_eq!(get(&pool.dir, "/after").unwrap(), b"written degraded");
    // It mounts again with the device still missing.
    let m = pool.mount(&["cache=0"]);
    assert!(std::fs::read(m.path("r")).unwrap() == data(3_000_000, 1));
    assert_eq!(std::fs::read(m.path("on2")).unwrap_err().raw_os_error(), Some(libc::EIO));
    let (code, text, rep) = status(&m.mnt);
    assert_eq!((code, rep.devices[2].state.as_str()), (1, "missing"), "{text}");
    m.unmount();
}

/// Small files' writes held for a group write when their device goes:
/// the rest of the pool goes on committing, and only those files fail
/// (their fsync once, their reads), naming the device.
#[test]
fn a_device_deleted_while_it_holds_small_file_writes_fails_only_their_files() {
    require_fuse!();
    let pool = Pool::new(3, "64M");
    // No commit but the ones asked for, so the writes are still held when
    // the image goes.
    let m = pool.mount(&["cache=0", "commit_interval=600"]);
    m.dir_with_layout("small", "colocate@2");
    m.dir_with_layout("other", "extent@0");
    std::fs::File::open(m.path("small")).unwrap().sync_all().unwrap();
    for i in 0..8u64 {
        std::fs::write(m.path(&format!("small/f{i}")), data(5000, i)).unwrap();
    }
    // Two blocks a file, all held.
    let g = m.stats().groups;
    assert_eq!((g.held_blocks, g.dirty_blocks), (16, 16), "{g:?}");
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    let (_, text, rep) = status(&m.mnt);
    assert_eq!(rep.devices[2].state, "missing", "{text}");
    // An unrelated file commits.
    std::fs::write(m.path("other/x"), data(20_000, 9)).unwrap();
    std::fs::File::open(m.path("other/x")).unwrap().sync_all().unwrap();
    // Each small file's fsync reports the loss, once; reads fail.
    let e = std::fs::File::open(m.path("small/f0")).unwrap().sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    std::fs::File::open(m.path("small/f0")).unwrap().sync_all().unwrap();
    uncache(&m.path("small/f1"));
    assert_eq!(std::fs::read(m.path("small/f1")).unwrap_err().raw_os_error(), Some(libc::EIO));
    let log = pool.log();
    assert!(log.contains("held small-file writes lost") && log.contains("dev2.img"), "{log}");
    // New files still commit, and the mount unmounts cleanly.
    std::fs::write(m.path("other/y"), b"after the loss").unwrap();
    std::fs::File::open(m.path("other/y")).unwrap().sync_all().unwrap();
    m.unmount();
    assert_eq!(get(&pool.dir, "/other/x").unwrap(), data(20_000, 9));
    assert_eq!(get(&pool.dir, "/other/y").unwrap(), b"after the loss");
    let e = get(&pool.dir, "/small/f2").unwrap_err();
    assert!(e.contains("device 2") && e.contains("missing"), "{e}");
}

/// fio job arguments writing (or, with `verify_only`, only checking) a
/// verified file in `dir`.
fn fio_args(dir: &Path, verify_only: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "--name=v",
        "--rw=randwrite",
        "--bs=4k",
        "--size=16m",
        "--ioengine=psync",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--verify_state_save=0",
        // Slow enough that the device goes away while it writes.
        "--rate=8m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(format!("--directory={}", s(dir)));
    if verify_only {
        a.push("--verify_only=1".into());
    }
    a
}

fn fio_ok(out: std::process::Output, what: &str) {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("verify: bad"), "{what}:\n{text}");
}

/// The issue's case: fio writes and verifies a replicated and a parity file
/// through the mount while one device image is deleted under it. Both runs
/// finish without a verify error; the device is then replaced offline,
/// scrub finds nothing lost, and with another device gone the files still
/// verify, so the rebuilt device holds what it should.
#[test]
fn fio_verifies_through_a_device_deleted_mid_run_and_a_replacement() {
    require_fuse!();
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed");
        return;
    }
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&["cache=0"]);
    let dirs = [("r", "replicate[extent@1,extent@2]"), ("p", "parity(data=2,parity=1)[extent@0,extent@1,extent@2]")];
    for (d, layout) in dirs {
        m.dir_with_layout(d, layout);
    }
    let runs: Vec<_> = dirs
        .iter()
        .map(|(d, _)| {
            Command::new("fio")
                .args(fio_args(&m.path(d), false))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn fio")
        })
        .collect();
    // About a third of the way into the writes (16 MiB at 8 MiB/s each).
    std::thread::sleep(std::time::Duration::from_millis(700));
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    for ((d, _), run) in dirs.iter().zip(runs) {
        fio_ok(run.wait_with_output().unwrap(), &format!("fio in {d} with dev2.img deleted"));
    }
    let (code, text, rep) = status(&m.mnt);
    assert_eq!((code, rep.devices[2].state.as_str()), (1, "missing"), "{text}");
    assert_eq!(rep.health.lost, 0, "{text}");
    assert_eq!(rep.health.degraded, 2, "{text}");
    m.unmount();

    // A new image takes device 2's place and is rebuilt from redundancy.
    let new2 = pool.dir.join("new2.img");
    let (code, o, e) = hc(&["device", "replace", s(&pool.dir), "2", s(&new2)]);
    assert_eq!(code, 0, "{o}{e}");
    let (code, o, e) = hc(&["scrub", s(&pool.dir)]);
    assert_eq!(code, 0, "{o}{e}");
    let (code, text, _) = status(&pool.dir);
    assert_eq!(code, 0, "{text}");
    // With device 1 gone too, every byte must come from device 0 and the
    // rebuilt device 2.
    std::fs::remove_file(pool.dir.join("dev1.img")).unwrap();
    let m = pool.mount(&["cache=0"]);
    for (d, _) in dirs {
        let out = Command::new("fio").args(fio_args(&m.path(d), true)).output().expect("fio");
        fio_ok(out, &format!("fio verify-only in {d} after the replacement, dev1.img gone"));
    }
    m.unmount();
}

/// `df --output=size,used,avail` of a path, in bytes: the pool's size,
/// what is not free (`f_blocks - f_bfree`) and what a new file of the
/// default layout can take (`f_bavail`).
fn df_fields(p: &Path) -> (u64, u64, u64) {
    let o = Command::new("df").args(["-B1", "--output=size,used,avail"]).arg(p).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let v: Vec<u64> =
        text.lines().nth(1).map(|l| l.split_whitespace().filter_map(|f| f.parse().ok()).collect()).unwrap_or_default();
    assert_eq!(v.len(), 3, "{text}");
    (v[0], v[1], v[2])
}

/// The free column of `hurricane df`'s "all" row and the space it says a
/// new file of the default layout can take ("available to it"), in bytes.
fn hurricane_df_free(pool: &Path) -> (u64, u64, String) {
    let (code, out, e) = hc(&["df", s(pool)]);
    assert_eq!(code, 0, "{e}");
    let all = out.lines().find(|l| l.trim_start().starts_with("all ")).unwrap_or_else(|| panic!("{out}"));
    // all, "N devices", size, used, free, ...
    let free = all.split_whitespace().nth(5).and_then(|f| f.parse().ok()).unwrap_or_else(|| panic!("{out}"));
    let avail = out
        .split("available to it: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    (free, avail, out)
}

#[test]
fn df_on_a_mount_leaves_out_a_missing_devices_space() {
    require_fuse!();
    let pool = Pool::new(3, "64M");
    let (_, _, before) = status(&pool.dir);
    let free2 = before.devices[2].size - before.devices[2].used;
    let m = pool.mount(&["cache=0"]);
    let (size, used, healthy) = df_fields(&m.mnt);
    let healthy_free = size - used;
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    // Status asks every device whether it is still there.
    let (_, text, rep) = status(&m.mnt);
    assert_eq!(rep.devices[2].state, "missing", "{text}");
    let (size, used, degraded) = df_fields(&m.mnt);
    let degraded_free = size - used;
    assert!(degraded < healthy, "{degraded} >= {healthy}");
    // What goes of the free space is about the missing device's (its size
    // less what is used, less the superblock area the allocator never
    // offers); a new file, striped over every device, device 2 among them,
    // can take still less.
    assert!(healthy_free - degraded_free > free2 / 2, "{healthy_free} - {degraded_free} vs {free2}");
    assert!(degraded <= degraded_free, "{degraded} > {degraded_free}");
    m.unmount();
    // Offline, `hurricane df` counts the same and says why.
    let (free, avail, out) = hurricane_df_free(&pool.dir);
    assert_eq!(free, degraded_free, "{out}");
    assert_eq!(avail, degraded, "{out}");
    assert!(out.contains("free counts only devices that take new data: not device 2 (missing)"), "{out}");
}
