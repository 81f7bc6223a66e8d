//! `hurricane device add` and `hurricane device remove`, offline on pool
//! directories and online through a mount with programs reading and
//! writing meanwhile.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use hurricane_fuse::report::StatusReport;
use std::process::{Command, Stdio};

/// Runs `hurricane ARGS`; returns (exit status, stdout, stderr), never a panic.
fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).env_remove("RUST_LOG").stdin(Stdio::null()).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{args:?}: {err}");
    (o.status.code().unwrap_or(-1), out, err)
}

fn put(pool: &Pool, name: &str, bytes: &[u8], layout: &str) {
    let local = pool.tmp.path().join(format!("local-{name}"));
    std::fs::write(&local, bytes).unwrap();
    hurricane(&["put", s(&pool.dir), s(&local), &format!("/{name}"), "-l", layout]);
}

fn get(pool: &Pool, name: &str) -> Vec<u8> {
    let dest = pool.tmp.path().join(format!("got-{}", name.replace('/', "_")));
    let _ = std::fs::remove_file(&dest);
    hurricane(&["get", s(&pool.dir), &format!("/{name}"), s(&dest)]);
    std::fs::read(&dest).unwrap()
}

fn status(target: &std::path::Path) -> StatusReport {
    let (_, out, _) = run(&["status", "--json", s(target)]);
    StatusReport::from_json(out.as_bytes()).unwrap()
}

fn state(r: &StatusReport, dev: u32) -> String {
    r.devices.iter().find(|d| d.index == dev).map(|d| d.state.clone()).unwrap_or_default()
}

#[test]
fn offline_add_then_remove_keeps_every_file() {
    let pool = Pool::new(3, "32M");
    let files = [
        ("m", data(1 << 20, 1), "replicate(copies=2)[extent@1,extent@2]"),
        ("p", data(900_000, 2), "parity(data=2,parity=1)"),
        ("x", data(300_000, 3), "extent@2"),
        ("s", data(2 << 20, 4), "stripe(unit=64K,width=3)"),
    ];
    for (n, d, l) in &files {
        put(&pool, n, d, l);
    }
    // A new image file, made at the size of the largest device.
    let new = pool.tmp.path().join("new3.img");
    let out = hurricane(&["device", "add", s(&pool.dir), s(&new)]);
    assert!(out.contains("added device 3"), "{out}");
    assert_eq!(std::fs::metadata(&new).unwrap().len(), 32 << 20);
    assert!(std::fs::read_to_string(pool.dir.join("pool.conf")).unwrap().contains("new3.img"));
    let r = status(&pool.dir);
    assert_eq!(r.devices.len(), 4);
    assert_eq!(state(&r, 3), "online");
    // Adding it again, or a device of the pool, is refused.
    let (code, _, err) = run(&["device", "add", s(&pool.dir), s(&new)]);
    assert_eq!(code, 1);
    assert!(err.contains("already a device"), "{err}");
    let (code, _, err) = run(&["device", "add", s(&pool.dir), s(&pool.tmp.path().join("tiny.img")), "--size", "64K"]);
    assert_eq!(code, 1);
    assert!(err.contains("too small"), "{err}");
    assert!(!pool.tmp.path().join("tiny.img").exists(), "a refused image is not left behind");

    // Device 2 goes: everything on it moves, to the new device among others.
    let (code, out, err) = run(&["device", "remove", "--json", s(&pool.dir), "2"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["device"], 2);
    assert!(v["files_moved"].as_u64().unwrap() >= 3, "{v}");
    let r = status(&pool.dir);
    assert_eq!(state(&r, 2), "removed");
    assert!(r.healthy(), "{r:?}");
    for (n, _, _) in &files {
        let l = hurricane(&["layout", "get", s(&pool.dir), &format!("/{n}")]);
        assert!(!l.contains("@2"), "{n}: {l}");
    }
    // Its image is no longer needed.
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    for (n, d, _) in &files {
        assert!(get(&pool, n) == *d, "{n}");
    }
    pool.fsck_clean();
    let (code, out, _) = run(&["fsck", "--data", s(&pool.dir)]);
    assert_eq!(code, 0, "{out}");
    // Device 0 (the journal, a meta-data copy) can go as well, once nothing
    // needs four devices: the 2+1 parity file spans all three left.
    let (code, _, err) = run(&["device", "remove", s(&pool.dir), "0"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot be emptied: /p"), "{err}");
    assert_eq!(state(&status(&pool.dir), 0), "online", "a refused removal changes nothing");
    hurricane(&["rm", s(&pool.dir), "/p"]);
    let (code, out, err) = run(&["device", "remove", s(&pool.dir), "0"]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::remove_file(pool.dir.join("dev0.img")).unwrap();
    for (n, d, _) in files.iter().filter(|f| f.0 != "p") {
        assert!(get(&pool, n) == *d, "{n} without device 0");
    }
    assert!(status(&pool.dir).healthy());
    pool.fsck_clean();
    // Refusals name what is wrong: with two devices left, a journal copy
    // has nowhere to go.
    let (code, _, err) = run(&["device", "remove", s(&pool.dir), "1"]);
    assert_eq!(code, 1);
    assert!(err.contains("journal") || err.contains("meta-data") || err.contains("no device"), "{err}");
    let (code, _, err) = run(&["device", "remove", s(&pool.dir), "2"]);
    assert_eq!(code, 1);
    assert!(err.contains("already removed"), "{err}");
    let (code, _, err) = run(&["device", "remove", s(&pool.dir), "9"]);
    assert_eq!(code, 1);
    assert!(err.contains("device 9"), "{err}");
    let (code, _, err) = run(&["put", s(&pool.dir), s(&pool.tmp.path().join("local-x")), "/y", "-l", "extent@2"]);
    assert_eq!(code, 1);
    assert!(err.contains("device 2 is removed"), "{err}");
}

#[test]
fn online_add_and_remove_while_files_are_in_use() {
    require_fuse!();
    let pool = Pool::new(3, "48M");
    let mnt = pool.mount(&[]);
    let m = data(3 << 20, 11);
    std::fs::write(mnt.path("plain"), b"").unwrap();
    hurricane(&["layout", "set", s(&mnt.path("plain")), "extent@2"]);
    std::fs::write(mnt.path("plain"), data(500_000, 12)).unwrap();
    std::fs::create_dir(mnt.path("d")).unwrap();
    hurricane(&["layout", "set", s(&mnt.path("d")), "replicate(copies=2)[extent@1,extent@2]"]);
    std::fs::write(mnt.path("d/m"), &m).unwrap();

    let new = pool.tmp.path().join("new3.img");
    let out = hurricane(&["device", "add", s(&mnt.mnt), s(&new), "--size", "48M"]);
    assert!(out.contains("added device 3"), "{out}");
    assert_eq!(status(&mnt.mnt).devices.len(), 4);
    // A file placed on the new device through the mount.
    std::fs::write(mnt.path("on3"), b"").unwrap();
    hurricane(&["layout", "set", s(&mnt.path("on3")), "extent@3"]);
    std::fs::write(mnt.path("on3"), data(200_000, 13)).unwrap();

    // Remove device 2 while a reader and a writer keep going.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n == 0 {
                assert!(std::fs::read(mnt.path("d/m")).unwrap() == m, "read during the removal");
                n += 1;
            }
            n
        });
        let writer = sc.spawn(|| {
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || k == 0 {
                std::fs::write(mnt.path("w"), data(100_000, 100 + k)).unwrap();
                k += 1;
            }
            k - 1
        });
        let out = hurricane(&["device", "remove", s(&mnt.mnt), "2"]);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        let last = writer.join().unwrap();
        assert_eq!(std::fs::read(mnt.path("w")).unwrap(), data(100_000, 100 + last));
        out
    });
    assert!(out.contains("removed device 2"), "{out}");
    let r = status(&mnt.mnt);
    assert_eq!(state(&r, 2), "removed");
    assert!(r.healthy(), "{r:?}");
    let l = hurricane(&["layout", "get", s(&mnt.path("d/m"))]);
    assert!(!l.contains("@2"), "{l}");
    assert_eq!(std::fs::read(mnt.path("plain")).unwrap(), data(500_000, 12));
    // The directory's default layout moved off device 2 as well.
    let l = hurricane(&["layout", "get", s(&mnt.path("d"))]);
    assert!(l.contains("replicate") && !l.contains("@2"), "{l}");
    std::fs::write(mnt.path("d/new"), b"x").unwrap();
    mnt.unmount();
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    assert!(std::fs::read_to_string(pool.dir.join("pool.conf")).unwrap().contains("new3.img"));
    assert_eq!(get(&pool, "d/m"), m);
    assert_eq!(get(&pool, "on3"), data(200_000, 13));
    pool.fsck_clean();
}
