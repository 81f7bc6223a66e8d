//! `hurricane scrub` and `hurricane device replace`, offline on pool
//! directories and online through a mount.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use hurricane_fuse::control::ScrubSummary;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn summary(json: &str) -> ScrubSummary {
    let line = json.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON in {json}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

const MIRROR: &str = "replicate(copies=2)[extent@1,extent@2]";
/// A mirror whose reads go to the copy on device 2 first: what reads back
/// after device 1 is rebuilt does not depend on the rebuild's own copy.
const MIRROR_2_FIRST: &str = "replicate(copies=2,read=primary)[extent@2,extent@1]";

#[test]
fn scrub_of_a_healthy_pool_repairs_nothing() {
    let pool = Pool::new(3, "32M");
    pool.put("m", &data(3 << 20, 1), MIRROR);
    pool.put("s", &data(1 << 20, 2), "stripe(unit=64K,width=3)");
    let out = hurricane(&["scrub", s(&pool.dir)]);
    assert!(out.contains("2 files") && out.contains("0 repaired") && out.contains("0 unrecoverable"), "{out}");
    let sm = summary(&hurricane(&["scrub", "--json", "--no-repair", s(&pool.dir)]));
    assert!(sm.complete && sm.lost.is_empty() && sm.repaired_blocks == 0);
    assert!(sm.checked_blocks >= (4 << 20) / 4096);
    assert!(!pool.dir.join("scrub.pos").exists());
    pool.fsck_clean();
}

#[test]
fn scrub_repairs_flipped_bytes_in_a_copy_and_names_files_it_cannot_repair() {
    let pool = Pool::new(3, "32M");
    let m = data(1 << 20, 3);
    let p = data(64 << 10, 4);
    pool.put("m", &m, MIRROR);
    pool.put("p", &p, "extent@0");
    // One byte of each file's first block, in one copy, on the images.
    for (dev, block) in [(1, &m[..4096]), (0, &p[..4096])] {
        let img = pool.dir.join(format!("dev{dev}.img"));
        let mut bytes = std::fs::read(&img).unwrap();
        let at = bytes.chunks(4096).position(|c| c == block).unwrap() * 4096;
        bytes[at + 10] ^= 0xff;
        std::fs::write(&img, bytes).unwrap();
    }
    let (code, out, _) = run(&["scrub", s(&pool.dir)]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("unrecoverable: /p (bytes 0+4096)"), "{out}");
    assert!(!out.contains("/m"), "{out}");
    assert_eq!(pool.get("m"), m);
    let (code, out, _) = run(&["scrub", s(&pool.dir)]);
    assert_eq!(code, 4);
    assert!(out.contains("0 repaired"), "{out}");
}

#[test]
fn replacing_a_readable_device_copies_it() {
    let pool = Pool::new(3, "32M");
    let (m, b) = (data(2 << 20, 5), data(700_000, 6));
    pool.put("m", &m, MIRROR);
    pool.put("b", &b, "extent@1");
    let new = pool.tmp.path().join("new1.img");
    let out = hurricane(&["device", "replace", s(&pool.dir), s(&pool.dir.join("dev1.img")), s(&new)]);
    assert!(out.contains("copied"), "{out}");
    assert_eq!(std::fs::metadata(&new).unwrap().len(), 32 << 20, "made with the old device's size");
    let conf = std::fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert!(conf.contains("new1.img") && !conf.contains("dev1.img"), "{conf}");
    // The old image is no longer needed.
    std::fs::remove_file(pool.dir.join("dev1.img")).unwrap();
    assert_eq!(pool.get("m"), m);
    assert_eq!(pool.get("b"), b);
    pool.fsck_clean();
    // Refusals name what is wrong.
    let (code, _, err) = run(&["device", "replace", s(&pool.dir), "7", s(&pool.tmp.path().join("x.img"))]);
    assert_eq!(code, 1);
    assert!(err.contains("device 7"), "{err}");
    let (code, _, err) = run(&["device", "replace", s(&pool.dir), "0", s(&new)]);
    assert_eq!(code, 1);
    assert!(err.contains("already a device"), "{err}");
    let small = pool.tmp.path().join("small.img");
    std::fs::write(&small, vec![0u8; 1 << 20]).unwrap();
    let (code, _, err) = run(&["device", "replace", s(&pool.dir), "0", s(&small)]);
    assert_eq!(code, 1);
    assert!(err.contains("smaller"), "{err}");
    assert_eq!(pool.get("b"), b);
}

#[test]
fn replacing_a_deleted_image_rebuilds_and_lists_what_had_no_copy() {
    let pool = Pool::new(3, "32M");
    let m = data(1 << 20, 7);
    pool.put("m", &m, MIRROR);
    pool.put("plain", &data(100_000, 8), "extent@1");
    pool.put("other", &data(100_000, 9), "extent@2");
    std::fs::remove_file(pool.dir.join("dev1.img")).unwrap();
    let new = pool.tmp.path().join("new1.img");
    let (code, out, err) = run(&["device", "replace", s(&pool.dir), "1", s(&new)]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("rebuilt") && out.contains("unrecoverable: /plain (bytes 0+100000)"), "{out}");
    assert!(!out.contains("/other") && !out.contains("/m "), "{out}");
    assert!(err.contains("1 files have unrecoverable data"), "{err}");
    assert_eq!(pool.get("other"), data(100_000, 9));
    // Nothing left to resume; the pool is whole.
    assert!(hurricane(&["device", "replace", "--resume", s(&pool.dir)]).contains("no replacement to resume"));
    pool.fsck_clean();
}

#[test]
fn a_replaced_device_holds_a_full_copy() {
    let pool = Pool::new(3, "32M");
    let m = data(3 << 20, 10);
    pool.put("m", &m, MIRROR);
    std::fs::remove_file(pool.dir.join("dev1.img")).unwrap();
    let new = pool.tmp.path().join("new1.img");
    hurricane(&["device", "replace", s(&pool.dir), "1", s(&new)]);
    // The other copy gone: everything comes from the rebuilt device.
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    assert_eq!(pool.get("m"), m);
}

#[test]
fn an_interrupted_replacement_resumes() {
    let pool = Pool::new(3, "64M");
    let m = data(12 << 20, 11);
    pool.put("m", &m, MIRROR_2_FIRST);
    std::fs::remove_file(pool.dir.join("dev1.img")).unwrap();
    let new = pool.tmp.path().join("new1.img");
    // Slow enough to be cut: 1 MiB/s over 12 MiB.
    let mut child = Command::new(BIN)
        .args(["device", "replace", "--rate", "1M", s(&pool.dir), "1", s(&new)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let conf = pool.dir.join("pool.conf");
    let t = Instant::now();
    while !std::fs::read_to_string(&conf).unwrap().contains("new1.img") {
        assert!(t.elapsed() < Duration::from_secs(60), "the replacement never switched pool.conf");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Cut once the resilver has kept a position.
    while !pool.dir.join("scrub.pos").exists() {
        assert!(t.elapsed() < Duration::from_secs(60), "the resilver never saved its position");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success(), "killed before it finished");
    let out = hurricane(&["device", "replace", "--resume", s(&pool.dir)]);
    assert!(out.contains("rebuilt devices: [1]"), "{out}");
    assert!(out.contains("(resumed)"), "the resilver went on from its saved position: {out}");
    assert!(hurricane(&["device", "replace", "--resume", s(&pool.dir)]).contains("no replacement to resume"));
    assert_eq!(pool.get("m"), m);
    pool.fsck_clean();
}

#[test]
fn usage_errors() {
    let pool = Pool::new(2, "16M");
    let (code, _, err) = run(&["device", "replace", s(&pool.dir), "1"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["device", "replace", "--resume", s(&pool.dir), "1", "x"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["scrub", s(&pool.tmp.path().join("nowhere"))]);
    assert_eq!(code, 1);
    assert!(err.contains("not a pool directory nor the root of a Hurricane mount") || err.contains("nowhere"), "{err}");
}

fn mounted_scrub_and_replace(pool: &Pool) {
    let mnt = pool.mount(&[]);
    let m = data(2 << 20, 12);
    let plain = data(300_000, 13);
    std::fs::create_dir(mnt.path("d")).unwrap();
    hurricane(&["layout", "set", s(&mnt.path("d")), MIRROR_2_FIRST]);
    std::fs::write(mnt.path("d/m"), &m).unwrap();
    std::fs::File::create(mnt.path("plain")).unwrap();
    hurricane(&["layout", "set", s(&mnt.path("plain")), "extent@1"]);
    std::fs::write(mnt.path("plain"), &plain).unwrap();

    let out = hurricane(&["scrub", s(&mnt.mnt)]);
    assert!(out.contains("2 files") && out.contains("0 unrecoverable"), "{out}");
    let sm = summary(&hurricane(&["scrub", "--json", s(&mnt.mnt)]));
    assert!(sm.complete && sm.lost.is_empty());

    // A copy replacement while mounted: reads and writes go on.
    let new = pool.tmp.path().join("new1.img");
    let out = hurricane(&["device", "replace", s(&mnt.mnt), "1", s(&new)]);
    assert!(out.contains("copied"), "{out}");
    assert!(std::fs::read_to_string(pool.dir.join("pool.conf")).unwrap().contains("new1.img"));
    assert_eq!(std::fs::read(mnt.path("d/m")).unwrap(), m);
    std::fs::write(mnt.path("after"), b"written after the replacement").unwrap();

    // A rebuild replacement: what had no copy is listed.
    let new2 = pool.tmp.path().join("new2.img");
    let (code, out, err) = run(&["device", "replace", "--rebuild", s(&mnt.mnt), s(&new), s(&new2)]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("unrecoverable: /plain (bytes 0+300000)"), "{out}");
    assert_eq!(std::fs::read(mnt.path("d/m")).unwrap(), m);
    mnt.unmount();
    let conf = std::fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert!(conf.contains("new2.img") && !conf.contains("new1.img"), "{conf}");
    assert_eq!(pool.get("after"), b"written after the replacement");
    pool.fsck_clean();
}

#[test]
fn scrub_and_replace_through_the_mount() {
    require_fuse!();
    let pool = Pool::new(3, "32M");
    mounted_scrub_and_replace(&pool);
}

#[test]
fn the_control_attribute_refuses_garbage() {
    require_fuse!();
    let pool = Pool::new(2, "16M");
    let mnt = pool.mount(&[]);
    let root = cpath(&mnt.mnt);
    let name = std::ffi::CString::new("user.hurricane.control").unwrap();
    let set = |v: &[u8]| {
        // SAFETY: valid C strings and a buffer of the given length.
        unsafe { libc::setxattr(root.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0) }
    };
    assert_eq!(set(b"scrub"), -1);
    assert_eq!(set(br#"{"op":"format"}"#), -1);
    assert_eq!(set(br#"{"op":"scrub","repair":true,"rate":null,"resume":false,"more":1}"#), -1);
    // Well formed but naming no device: the job fails, saying why.
    assert_eq!(set(br#"{"op":"replace","old":"9","new":"/nonexistent/x","rebuild":false,"rate":null}"#), 0);
    let t = Instant::now();
    loop {
        let raw = hurricane_fuse::mountinfo::get_xattr(&mnt.mnt, "user.hurricane.control").unwrap();
        let st = hurricane_fuse::control::Status::from_json(&raw).unwrap();
        if st.state == hurricane_fuse::control::JobState::Failed {
            assert!(st.error.as_deref().unwrap_or("").contains("device 9"), "{st:?}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _, err) = run(&["scrub", s(Path::new(&mnt.mnt))]);
    assert_eq!(code, 0, "{err}");
    mnt.unmount();
}

/// A small seeded generator (xorshift), so the flips are reproducible.
struct Xs(u64);

impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_bit_flips_on_every_device_are_repaired_or_listed_by_path() {
    const LAYOUTS: &[(&str, &str, u64)] = &[
        ("rep2", "replicate(copies=2)", 1),
        ("rep3", "replicate(copies=3)", 2),
        ("par31", "parity(data=3,parity=1)", 1),
        ("par22", "parity(data=2,parity=2)", 2),
        ("par43", "parity(data=4,parity=3)", 3),
        ("ext", "extent", 0),
        ("stripe", "stripe(unit=64K,width=3)", 0),
    ];
    let pool = Pool::new(8, "32M");
    let mut rng = Xs(0x9e37_79b9_7f4a_7c15);
    let mut files = Vec::new();
    for (name, spec, tol) in LAYOUTS {
        for i in 0..3 {
            let len = 1 + rng.below(300_000) as usize;
            let file = format!("{name}-{i}");
            let bytes = data(len, rng.next());
            pool.put(&file, &bytes, spec);
            files.push((file, bytes, *tol));
        }
    }
    // Where each file's blocks are, from the engine.
    let fs = hurricane::Fs::open_dir(&pool.dir, hurricane::Options::default()).unwrap();
    let extents: Vec<Vec<(u32, u64, u64)>> =
        files.iter().map(|(f, _, _)| fs.device_extents_of(&format!("/{f}")).unwrap()).collect();
    fs.close().unwrap();
    drop(fs);
    let mut images: Vec<Vec<u8>> =
        (0..8).map(|d| std::fs::read(pool.dir.join(format!("dev{d}.img"))).unwrap()).collect();
    let mut damaged = std::collections::BTreeSet::new();
    let mut hit = std::collections::BTreeSet::new();
    for ((file, bytes, tol), ext) in files.iter().zip(&extents) {
        let mut devs: Vec<u32> =
            ext.iter().map(|e| e.0).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        if *tol == 0 {
            assert_eq!(ext.iter().map(|e| e.2).sum::<u64>(), (bytes.len() as u64).div_ceil(4096), "{file}");
            if rng.below(2) == 0 {
                continue;
            }
        }
        // Shuffled, devices without a flip yet first.
        for i in (1..devs.len()).rev() {
            devs.swap(i, rng.below(i as u64 + 1) as usize);
        }
        devs.sort_by_key(|d| hit.contains(d));
        let bad = if *tol == 0 { 1 } else { 1 + rng.below(*tol) as usize };
        for &d in devs.iter().take(bad) {
            let blocks: Vec<u64> = ext.iter().filter(|e| e.0 == d).flat_map(|&(_, s, l)| s..s + l).collect();
            for _ in 0..1 + rng.below(3) {
                let b = blocks[rng.below(blocks.len() as u64) as usize];
                let bit = rng.below(4096 * 8) as usize;
                images[d as usize][b as usize * 4096 + bit / 8] ^= 1 << (bit % 8);
            }
            hit.insert(d);
            if *tol == 0 {
                damaged.insert(format!("/{file}"));
            }
        }
    }
    assert_eq!(hit.len(), 8, "every device gets flips: {hit:?}");
    for (d, img) in images.iter().enumerate() {
        std::fs::write(pool.dir.join(format!("dev{d}.img")), img).unwrap();
    }
    drop(images);

    let (code, out, _) = run(&["scrub", "--json", s(&pool.dir)]);
    assert_eq!(code, 4, "{out}");
    let sm = summary(&out);
    assert!(sm.complete && sm.repaired_blocks >= 1, "{out}");
    let lost: std::collections::BTreeSet<String> = sm.lost.iter().flat_map(|l| l.paths.clone()).collect();
    assert_eq!(lost, damaged);
    let again = summary(&run(&["scrub", "--json", s(&pool.dir)]).1);
    assert_eq!(again.repaired_blocks, 0);
    assert_eq!(again.lost.len(), damaged.len());
    for (file, bytes, _) in &files {
        if damaged.contains(&format!("/{file}")) {
            let dest = pool.tmp.path().join(format!("got-{file}"));
            let (code, _, err) = run(&["get", s(&pool.dir), &format!("/{file}"), s(&dest)]);
            assert_ne!(code, 0, "{file} read back despite a flipped block");
            assert!(err.contains("checksum") || err.contains("I/O"), "{file}: {err}");
        } else {
            assert!(pool.get(file) == *bytes, "{file} reads back different bytes");
        }
    }
}
