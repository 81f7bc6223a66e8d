//! End-to-end tests of the `hurricane` command on pools of image files.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_hurricane");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_with(args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn hurricane");
    if let Some(data) = stdin {
        child.stdin.take().expect("stdin").write_all(data).expect("write stdin");
    }
    let Output { status, stdout, stderr } = child.wait_with_output().expect("wait");
    let r = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    // Whatever happens, never a panic or a backtrace.
    assert!(
        !r.stderr.contains("panicked") && !r.stderr.contains("stack backtrace") && !r.stderr.contains("internal error"),
        "{args:?}: {}",
        r.stderr
    );
    r
}

fn run(args: &[&str]) -> Run {
    run_with(args, None)
}

/// Runs and expects success.
fn ok(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?} failed: {}{}", r.stdout, r.stderr);
    r.stdout
}

/// Runs and expects a failure with `code`; returns stderr.
fn fails(args: &[&str], code: i32) -> String {
    let r = run(args);
    assert_eq!(r.code, code, "{args:?}: expected exit {code}, got {}: {}{}", r.code, r.stdout, r.stderr);
    r.stderr
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Deterministic bytes that differ at every offset class.
fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Pool {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    work: PathBuf,
}

impl Pool {
    fn new(devices: u32, size: &str) -> Pool {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("pool");
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).expect("work dir");
        let out = ok(&["mkfs", s(&dir), "--devices", &devices.to_string(), "--device-size", size]);
        assert!(out.contains(&format!("{devices} device")), "{out}");
        Pool { _tmp: tmp, dir, work }
    }
    fn p(&self) -> &str {
        s(&self.dir)
    }
    fn local(&self, name: &str, bytes: &[u8]) -> String {
        let p = self.work.join(name);
        std::fs::write(&p, bytes).expect("write local file");
        p.to_str().expect("utf-8").to_string()
    }
    fn get(&self, path: &str) -> Vec<u8> {
        let dest = self.work.join(format!("got-{}", path.replace('/', "_")));
        ok(&["get", self.p(), path, s(&dest)]);
        std::fs::read(&dest).expect("read back")
    }
    fn dev(&self, i: u32) -> PathBuf {
        self.dir.join(format!("dev{i}.img"))
    }
    fn fsck_clean(&self) {
        let out = ok(&["fsck", self.p()]);
        assert!(out.contains("consistent"), "{out}");
    }
}

#[test]
fn put_get_round_trip_with_layouts() {
    let pool = Pool::new(4, "64M");
    let cases: [(&str, usize, &str); 10] = [
        ("extent@0", 1_000_003, "checksum[extent@0]"),
        ("stripe(unit=64K,width=3)", 3_333_333, "stripe(unit=64K)["),
        ("regions(size=1M,width=3)", 2_500_000, "regions(size=1M)["),
        ("replicate(copies=2)[stripe(width=2),stripe(width=2)]", 1_234_567, "replicate["),
        ("inline", 100, "inline"),
        ("stripe(unit=4K,width=4)", 0, "stripe(unit=4K)["),
        ("compress(algo=lz4,chunk=16K)[extent@1]", 700_001, "compress(algo=lz4,chunk=16K)[checksum[extent@1]]"),
        ("table(map=0-64K:1;64K-1M:0;1M-:1)[extent@0,extent@2]", 1_500_000, "table(map=0-64K:1;64K-1M:0;1M-:1)["),
        ("write-mostly(unit=64K,width=3)", 2_000_001, "write-mostly(unit=64K)["),
        ("log(segment=256K)@3", 1_700_001, "checksum[log(segment=256K)@3]"),
    ];
    for (i, (spec, size, shown)) in cases.iter().enumerate() {
        let bytes = data(*size, i as u64);
        let local = pool.local(&format!("in{i}"), &bytes);
        let path = format!("/f{i}");
        ok(&["put", pool.p(), &local, &path, "--layout", spec]);
        assert_eq!(pool.get(&path), bytes, "{spec}");
        let got = ok(&["layout", "get", pool.p(), &path]);
        assert!(got.trim().starts_with(shown), "{spec}: layout get said {got}");
        let st = ok(&["stat", pool.p(), &path]);
        assert!(st.contains(&format!("Size: {size}")), "{st}");
        assert!(st.contains(&format!("Layout: {}", got.trim())), "{st}");
    }
    // Overwriting keeps the file's layout unless told otherwise.
    let again = data(200_000, 99);
    ok(&["put", pool.p(), &pool.local("again", &again), "/f1"]);
    assert_eq!(pool.get("/f1"), again);
    assert!(ok(&["layout", "get", pool.p(), "/f1"]).starts_with("stripe(unit=64K)["));
    // Standard input in, standard output out.
    let r = run_with(&["put", pool.p(), "-", "/from-stdin"], Some(b"piped bytes\n"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ok(&["cat", pool.p(), "/from-stdin"]), "piped bytes\n");
    assert_eq!(ok(&["get", pool.p(), "/from-stdin", "-"]), "piped bytes\n");
    pool.fsck_clean();
}

#[test]
fn layout_get_prints_a_form_that_set_accepts() {
    let pool = Pool::new(4, "32M");
    for (i, spec) in [
        "stripe(unit=64K,width=3)",
        "regions(size=1M,width=2)",
        "replicate(copies=2)[stripe(width=2),stripe(width=2)]",
        "extent@3",
    ]
    .iter()
    .enumerate()
    {
        let a = format!("/a{i}");
        let b = format!("/b{i}");
        ok(&["put", pool.p(), &pool.local("x", b"x"), &a, "--layout", spec]);
        let canon = ok(&["layout", "get", pool.p(), &a]).trim().to_string();
        // On a new (empty) file: set creates it with that layout.
        let set = ok(&["layout", "set", pool.p(), &b, &canon]);
        assert_eq!(set.trim(), canon);
        assert_eq!(ok(&["layout", "get", pool.p(), &b]).trim(), canon);
        // And on an existing empty file.
        ok(&["put", pool.p(), &pool.local("empty", b""), "/empty"]);
        ok(&["layout", "set", pool.p(), "/empty", &canon]);
        assert_eq!(ok(&["layout", "get", pool.p(), "/empty"]).trim(), canon);
        ok(&["rm", pool.p(), "/empty"]);
        // Writing through it works.
        ok(&["put", pool.p(), &pool.local("y", &data(300_000, 7)), &b]);
        assert_eq!(pool.get(&b), data(300_000, 7));
    }
    // A file that holds data keeps its layout...
    let e = fails(&["layout", "set", pool.p(), "/a0", "extent@0"], 1);
    assert!(e.contains("already holds data"), "{e}");
    // ...but for the read policy of its replicate nodes, which changes in place.
    let canon = ok(&["layout", "get", pool.p(), "/a2"]).trim().to_string();
    let primary = canon.replacen("replicate[", "replicate(read=primary)[", 1);
    assert_ne!(primary, canon);
    assert_eq!(ok(&["layout", "set", pool.p(), "/a2", &primary]).trim(), primary);
    assert_eq!(ok(&["layout", "get", pool.p(), "/a2"]).trim(), primary);
    assert_eq!(pool.get("/a2"), b"x");
    pool.fsck_clean();
}

#[test]
fn directory_default_layout_is_inherited() {
    let pool = Pool::new(4, "32M");
    ok(&["mkdir", pool.p(), "/dd"]);
    let set = ok(&["layout", "set", pool.p(), "/dd", "regions(size=1M,width=3)"]);
    assert!(set.contains("regions(size=1M"), "{set}");
    let bytes = data(2_200_000, 3);
    ok(&["put", pool.p(), &pool.local("in", &bytes), "/dd/"]);
    let l = ok(&["layout", "get", pool.p(), "/dd/in"]);
    assert!(l.starts_with("regions(size=1M)["), "{l}");
    assert_eq!(l.matches("extent@").count(), 3, "{l}");
    assert_eq!(pool.get("/dd/in"), bytes);
    // New subdirectories take the default too, and an explicit layout wins.
    ok(&["mkdir", pool.p(), "/dd/sub"]);
    ok(&["put", pool.p(), &pool.local("in2", b"hello"), "/dd/sub/h"]);
    assert!(ok(&["layout", "get", pool.p(), "/dd/sub/h"]).starts_with("regions(size=1M)["));
    ok(&["put", pool.p(), &pool.local("in3", b"hello"), "/dd/i", "--layout", "inline"]);
    assert_eq!(ok(&["layout", "get", pool.p(), "/dd/i"]).trim(), "inline");
    let st = ok(&["stat", pool.p(), "/dd"]);
    assert!(st.contains("Layout: regions(size=1M,width=3) (default for new files)"), "{st}");
    pool.fsck_clean();
}

#[test]
fn namespace_commands() {
    let pool = Pool::new(2, "32M");
    ok(&["mkdir", pool.p(), "/a/b/c", "-p"]);
    ok(&["mkdir", pool.p(), "/a/b/c", "-p"]);
    let e = fails(&["mkdir", pool.p(), "/a"], 1);
    assert!(e.contains("exists"), "{e}");
    let e = fails(&["mkdir", pool.p(), "/x/y"], 1);
    assert!(e.contains("no such file"), "{e}");
    ok(&["put", pool.p(), &pool.local("one", b"one\n"), "/a/one"]);
    ok(&["put", pool.p(), &pool.local("two", &data(70_000, 2)), "/a/b/two"]);
    let ls = ok(&["ls", pool.p(), "/a"]);
    assert_eq!(ls, "b/\none\n");
    let ll = ok(&["ls", pool.p(), "/a", "-l"]);
    assert!(ll.lines().any(|l| l.starts_with("drwxr-xr-x") && l.contains(" b")), "{ll}");
    assert!(ll.lines().any(|l| l.starts_with("-rw-") && l.contains(" 4 ") && l.contains("one")), "{ll}");
    assert_eq!(ok(&["ls", pool.p()]), "a/\n");
    assert_eq!(ok(&["cat", pool.p(), "/a/one", "/a/one"]), "one\none\n");
    let st = ok(&["stat", pool.p(), "/a/b"]);
    assert!(st.contains("Type: directory") && st.contains("Links: 3"), "{st}");
    // mv: rename, and into an existing directory.
    ok(&["mv", pool.p(), "/a/one", "/a/uno"]);
    ok(&["mv", pool.p(), "/a/uno", "/a/b/c"]);
    assert_eq!(ok(&["cat", pool.p(), "/a/b/c/uno"]), "one\n");
    let e = fails(&["mv", pool.p(), "/a", "/a/b/c/inside"], 1);
    assert!(e.contains("beneath itself") || e.contains("invalid"), "{e}");
    // rm: files, refusing directories without -r, recursive.
    let e = fails(&["rm", pool.p(), "/a/b"], 1);
    assert!(e.contains("is a directory"), "{e}");
    ok(&["rm", pool.p(), "/a/b/two"]);
    ok(&["rm", pool.p(), "-r", "/a"]);
    assert_eq!(ok(&["ls", pool.p()]), "");
    let e = fails(&["cat", pool.p(), "/a/one"], 1);
    assert!(e.starts_with("hurricane: ") && e.contains("/a/one") && e.lines().count() == 1, "{e}");
    ok(&["rm", pool.p(), "-f", "/nothing"]);
    pool.fsck_clean();
}

#[test]
fn recursive_put_and_get() {
    let pool = Pool::new(3, "32M");
    let src = pool.work.join("tree");
    std::fs::create_dir_all(src.join("x/y")).expect("mkdir");
    std::fs::write(src.join("top"), data(10_000, 1)).expect("write");
    std::fs::write(src.join("x/mid"), data(1_500_000, 2)).expect("write");
    std::fs::write(src.join("x/y/deep"), b"deep").expect("write");
    std::os::unix::fs::symlink("../top", src.join("x/link")).expect("symlink");
    let e = fails(&["put", pool.p(), s(&src), "/t"], 1);
    assert!(e.contains("use -r"), "{e}");
    ok(&["put", pool.p(), "-r", s(&src), "/t"]);
    assert_eq!(ok(&["ls", pool.p(), "/t/x"]), "link\nmid\ny/\n");
    let back = pool.work.join("back");
    ok(&["get", pool.p(), "-r", "/t", s(&back)]);
    assert_eq!(std::fs::read(back.join("x/mid")).expect("read"), data(1_500_000, 2));
    assert_eq!(std::fs::read(back.join("x/y/deep")).expect("read"), b"deep");
    assert_eq!(std::fs::read_link(back.join("x/link")).expect("link"), PathBuf::from("../top"));
    pool.fsck_clean();
}

#[test]
fn df_reports_every_device_and_totals() {
    let pool = Pool::new(3, "32M");
    ok(&["put", pool.p(), &pool.local("f", &data(3_000_000, 5)), "/f", "--layout", "extent@2"]);
    let df = ok(&["df", pool.p()]);
    let lines: Vec<&str> = df.lines().collect();
    assert!(lines[0].contains("size") && lines[0].contains("use%") && lines[0].contains("reads"), "{df}");
    for i in 0..3 {
        assert!(lines.iter().any(|l| l.contains(&format!("dev{i}.img"))), "{df}");
    }
    let total = lines.iter().find(|l| l.trim_start().starts_with("all")).expect("totals row");
    assert!(total.contains(&(3 * 32 * 1024 * 1024u64).to_string()), "{total}");
    // Device 2 holds the 3 MB file.
    let d2: Vec<&str> = lines.iter().find(|l| l.contains("dev2.img")).expect("dev2").split_whitespace().collect();
    let used: u64 = d2[3].parse().expect("used bytes");
    assert!(used >= 3_000_000, "{df}");
    let h = ok(&["df", "-h", pool.p()]);
    assert!(h.contains("MiB"), "{h}");
    assert!(ok(&["df", "--help"]).contains("human"));
}

#[test]
fn bad_layout_specs_are_refused_clearly() {
    let pool = Pool::new(3, "32M");
    let f = pool.local("f", b"data");
    for (spec, says) in [
        ("stripe(unit=64K,width=3", "column"),
        ("bogus", "unknown block type"),
        ("stripe(unit=64K,width=9)", "9 distinct devices"),
        ("extent@7", "device 7"),
        ("stripe(unit=abc,width=2)", "unit"),
    ] {
        let e = fails(&["put", pool.p(), &f, "/f", "--layout", spec], 1);
        assert!(e.starts_with("hurricane: ") && e.contains(says), "{spec}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        let e = fails(&["layout", "set", pool.p(), "/", spec], 1);
        assert!(e.contains(says), "{spec}: {e}");
    }
    // Nothing was left behind.
    assert_eq!(ok(&["ls", pool.p()]), "");
    let e =
        fails(&["mkfs", s(&pool.work.join("p2")), "--devices", "2", "--device-size", "16M", "--layout", "stripe(("], 1);
    assert!(e.contains("layout"), "{e}");
    pool.fsck_clean();
}

/// A table's map read from a local file (`map=@FILE`): comments and blank
/// lines skipped, the ranges joined into the inline form.
#[test]
fn table_maps_come_from_files() {
    let pool = Pool::new(3, "32M");
    let map = pool.local("map", b"# bytes 0-64K on device 2, the rest on device 0\n0-64K:1\n\n64K-:0  # the rest\n");
    let bytes = data(300_000, 9);
    let f = pool.local("f", &bytes);
    let spec = format!("table(map=@{map})[extent@0,extent@2]");
    ok(&["put", pool.p(), &f, "/t", "--layout", &spec]);
    assert_eq!(pool.get("/t"), bytes);
    let got = ok(&["layout", "get", pool.p(), "/t"]);
    assert!(got.starts_with("table(map=0-64K:1;64K-:0)["), "{got}");
    // Files that are missing, empty or hold something else are refused by name.
    let empty = pool.local("empty", b"# nothing\n");
    let junk = pool.local("junk", b"0-64K:1;64K-:0\n");
    for (m, says) in [
        ("/no/such/map", "No such file"),
        (empty.as_str(), "holds no ranges"),
        (junk.as_str(), "not a START-END:CHILD line"),
    ] {
        let e = fails(&["put", pool.p(), &f, "/u", "--layout", &format!("table(map=@{m})[extent@0,extent@2]")], 2);
        assert!(e.contains(says), "{m}: {e}");
        let e = fails(&["layout", "set", pool.p(), "/u", &format!("table(map=@{m})[extent@0,extent@2]")], 1);
        assert!(e.contains(says), "{m}: {e}");
    }
    pool.fsck_clean();
}

#[test]
fn usage_errors_exit_2() {
    fails(&["frobnicate"], 2);
    fails(&["put"], 2);
    fails(&["mkfs", "/tmp/x", "--devices", "2", "--device-size", "12Q"], 2);
    fails(&["mkfs", "/tmp/x", "--devices", "2", "--device", "/tmp/y"], 2);
    fails(&["layout", "set", "onlyone"], 2);
}

#[test]
fn fsck_is_clean_on_fresh_and_used_pools() {
    let pool = Pool::new(3, "32M");
    pool.fsck_clean();
    for i in 0..20 {
        ok(&["put", pool.p(), &pool.local("f", &data(i * 37_000, i as u64)), &format!("/f{i}")]);
    }
    ok(&["mkdir", pool.p(), "-p", "/d/e/f"]);
    ok(&["mv", pool.p(), "/f3", "/d/e/f/g"]);
    ok(&["rm", pool.p(), "/f4", "/f5"]);
    let out = ok(&["fsck", pool.p()]);
    assert!(out.contains("consistent") && out.contains("18 files"), "{out}");
}

#[test]
fn corrupt_superblocks() {
    let pool = Pool::new(3, "32M");
    let bytes = data(500_000, 11);
    ok(&["put", pool.p(), &pool.local("f", &bytes), "/f"]);
    // One slot on one device: the other copies still open the pool.
    overwrite(&pool.dev(0), 0, 4096);
    assert_eq!(pool.get("/f"), bytes);
    pool.fsck_clean();
    // Every copy on every device: refused, naming a device.
    for i in 0..3 {
        overwrite(&pool.dev(i), 0, 8192);
    }
    let e = fails(&["ls", pool.p()], 1);
    assert!(e.contains("dev0.img") && e.contains("superblock"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let e = fails(&["fsck", pool.p()], 1);
    assert!(e.contains("dev0.img"), "{e}");
}

fn overwrite(p: &Path, off: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(p).expect("open image");
    f.write_all_at(&data(len, off + 1), off).expect("overwrite");
}

#[test]
fn truncated_and_missing_devices_are_named() {
    let pool = Pool::new(3, "32M");
    ok(&["put", pool.p(), &pool.local("f", b"x"), "/f"]);
    let img = pool.dev(1);
    let f = std::fs::OpenOptions::new().write(true).open(&img).expect("open");
    f.set_len(16 << 20).expect("truncate");
    drop(f);
    let e = fails(&["cat", pool.p(), "/f"], 1);
    assert!(e.contains("dev1.img") && e.contains("truncated"), "{e}");
    let e = fails(&["fsck", pool.p()], 1);
    assert!(e.contains("dev1.img"), "{e}");

    // A missing device: the pool opens degraded, saying which device is
    // missing; what needs it fails naming it (tests/degraded.rs has more).
    let pool = Pool::new(3, "32M");
    ok(&["put", pool.p(), &pool.local("f", b"x"), "/f", "--layout", "extent@2"]);
    std::fs::remove_file(pool.dev(2)).expect("remove");
    let r = run(&["ls", pool.p()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("dev2.img") && r.stderr.contains("missing"), "{}", r.stderr);
    let e = fails(&["cat", pool.p(), "/f"], 1);
    assert!(e.contains("dev2.img") && e.contains("missing"), "{e}");
    let e = fails(&["put", pool.p(), &pool.local("g", b"y"), "/g", "--layout", "extent@2"], 1);
    assert!(e.contains("dev2.img"), "{e}");
}

#[test]
fn full_pool_keeps_what_was_there() {
    let pool = Pool::new(3, "16M");
    let keep = data(2_000_000, 21);
    ok(&["put", pool.p(), &pool.local("keep", &keep), "/keep"]);
    ok(&["put", pool.p(), &pool.local("small", b"small"), "/small", "--layout", "inline"]);
    let big = pool.local("big", &data(60 << 20, 22));
    let e = fails(&["put", pool.p(), &big, "/big"], 1);
    assert!(e.contains("no space"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(ok(&["ls", pool.p()]), "keep\nsmall\n");
    assert_eq!(pool.get("/keep"), keep);
    assert_eq!(pool.get("/small"), b"small");
    pool.fsck_clean();
    // The space came back: a file that fits still goes in.
    let fits = data(8 << 20, 23);
    ok(&["put", pool.p(), &pool.local("fits", &fits), "/fits"]);
    assert_eq!(pool.get("/fits"), fits);
    pool.fsck_clean();
}

#[test]
fn fsck_repairs_damage_and_a_second_run_is_clean() {
    use hurricane::fsck::{inject, Damage};
    let pool = Pool::new(3, "32M");
    ok(&["mkdir", pool.p(), "-p", "/a/b"]);
    let bytes = data(400_000, 31);
    ok(&["put", pool.p(), &pool.local("f", &bytes), "/a/b/f"]);
    ok(&["put", pool.p(), &pool.local("g", b"gee"), "/a/g"]);
    {
        let fs = hurricane::Fs::open_dir(&pool.dir, hurricane::Options::default()).expect("open");
        inject(&fs, &Damage::DropEntry { path: "/a/b".into() }).expect("drop entry");
        inject(&fs, &Damage::SetNlink { path: "/a/g".into(), nlink: 5 }).expect("nlink");
        inject(&fs, &Damage::Dangling { dir: "/a".into(), name: "ghost".into() }).expect("dangling");
        fs.close().expect("close");
    }
    let r = run(&["fsck", pool.p()]);
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("not reachable"), "{}", r.stdout);
    assert!(r.stdout.contains("/a/g: link count is 5, should be 1"), "{}", r.stdout);
    assert!(r.stdout.contains("/a/ghost"), "{}", r.stdout);
    assert!(r.stderr.contains("--repair"), "{}", r.stderr);
    let r = run(&["fsck", pool.p(), "--repair"]);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("repaired: ") && r.stdout.contains("lost+found"), "{}", r.stdout);
    assert!(!r.stdout.contains("not repaired"), "{}", r.stdout);
    pool.fsck_clean();
    let lf = ok(&["ls", pool.p(), "/lost+found"]);
    let name = lf.lines().next().expect("one entry").trim_end_matches('/').to_string();
    assert_eq!(pool.get(&format!("/lost+found/{name}/f")), bytes);
    assert_eq!(ok(&["cat", pool.p(), "/a/g"]), "gee");
    assert!(ok(&["stat", pool.p(), "/a/g"]).contains("Links: 1"));
}

#[test]
fn mkfs_on_given_devices() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pool = tmp.path().join("pool");
    let d0 = tmp.path().join("disk-a");
    let d1 = tmp.path().join("disk-b");
    let out = ok(&[
        "mkfs",
        s(&pool),
        "--device",
        s(&d0),
        "--device",
        s(&d1),
        "--device-size",
        "24M",
        "--layout",
        "extent@1",
        "--journal-size",
        "4M",
    ]);
    assert!(
        out.contains("2 devices") && out.contains("disk-a") && out.contains("extent@1") && out.contains("4.0 MiB"),
        "{out}"
    );
    assert_eq!(std::fs::metadata(&d1).expect("made").len(), 24 << 20);
    let e = fails(&["mkfs", s(&pool), "--device", s(&d0)], 1);
    assert!(e.contains("--force"), "{e}");
    ok(&["put", s(&pool), s(&d0.with_file_name("pool/pool.conf")), "/conf"]);
    assert_eq!(ok(&["layout", "get", s(&pool), "/conf"]).trim(), "checksum[extent@1]");
    // A simulated disk model is recorded with the pool and kept by reopening.
    let p3 = tmp.path().join("p3");
    let out = ok(&["mkfs", s(&p3), "--devices", "1", "--device-size", "16M", "--sim", "hdd:rpm=5400"]);
    assert!(out.contains("simulated disk"), "{out}");
    assert!(std::fs::read_to_string(p3.join("pool.conf")).expect("conf").contains("sim = hdd"));
    ok(&["put", s(&p3), s(&d0.with_file_name("pool/pool.conf")), "/c"]);
    let e = fails(&["mkfs", s(&tmp.path().join("p4")), "--devices", "1", "--device-size", "16M", "--sim", "ssd"], 1);
    assert!(e.contains("ssd"), "{e}");
    let e = fails(&["mkfs", s(&tmp.path().join("p2")), "--device", s(&tmp.path().join("nothing"))], 1);
    assert!(e.contains("nothing"), "{e}");
}

/// `mkfs --devices` makes its images new: a file or link at `devN.img`
/// is refused by name (nothing written through the link), unless
/// `--force` asks to replace it, which removes the link, not its target.
#[test]
fn mkfs_devices_overwrites_no_image_without_force() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pool = tmp.path().join("pool");
    let target = tmp.path().join("target");
    std::fs::write(&target, b"kept\n").expect("write");
    std::fs::create_dir(&pool).expect("mkdir");
    std::os::unix::fs::symlink(&target, pool.join("dev1.img")).expect("symlink");
    let e = fails(&["mkfs", s(&pool), "--devices", "2", "--device-size", "16M"], 1);
    assert!(e.contains("dev1.img") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read(&target).expect("target"), b"kept\n");
    assert!(!pool.join("dev0.img").exists() && !pool.join("pool.conf").exists());
    ok(&["mkfs", s(&pool), "--devices", "2", "--device-size", "16M", "--force"]);
    assert_eq!(std::fs::read(&target).expect("target"), b"kept\n");
    assert!(std::fs::symlink_metadata(pool.join("dev1.img")).expect("made").is_file());
    ok(&["put", s(&pool), s(&target), "/t"]);
    // An existing pool is replaced with --force, its images made anew.
    let e = fails(&["mkfs", s(&pool), "--devices", "2", "--device-size", "16M"], 1);
    assert!(e.contains("--force"), "{e}");
    ok(&["mkfs", s(&pool), "--devices", "2", "--device-size", "32M", "--force"]);
    assert_eq!(std::fs::metadata(pool.join("dev0.img")).expect("dev0").len(), 32 << 20);
    assert_eq!(ok(&["ls", s(&pool), "/"]).trim(), "");
}

#[test]
fn a_pool_in_use_is_refused() {
    let pool = Pool::new(2, "16M");
    // What a mount holds while it serves the pool.
    let lock = std::fs::File::open(&pool.dir).expect("open");
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on an open descriptor.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    let e = fails(&["ls", pool.p()], 1);
    assert!(e.contains("in use"), "{e}");
    drop(lock);
    ok(&["ls", pool.p()]);
}

/// Unmounts on drop, so a failing test leaves no mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new(BIN).arg("umount").arg(&self.0).output();
        let _ = Command::new("fusermount3").arg("-uz").arg(&self.0).output();
    }
}

#[test]
fn layout_on_a_mounted_pool_through_xattrs() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: no /dev/fuse");
        return;
    }
    let pool = Pool::new(3, "32M");
    let mnt = pool.work.join("mnt");
    std::fs::create_dir(&mnt).expect("mountpoint");
    let r = run(&["mount", pool.p(), s(&mnt)]);
    if r.code != 0 {
        eprintln!("skipped: cannot mount here: {}", r.stderr);
        return;
    }
    let _m = Mounted(mnt.clone());
    std::fs::File::create(mnt.join("e")).expect("create");
    let e = s(&mnt).to_string() + "/e";
    assert!(ok(&["layout", "get", &e]).starts_with("stripe"));
    assert_eq!(
        ok(&["layout", "set", &e, "stripe(unit=64K,width=2)"]).trim().split('[').next(),
        Some("stripe(unit=64K)")
    );
    let err = fails(&["layout", "set", &e, "stripe(unit=64K,width=9)"], 1);
    assert!(err.contains("9 distinct devices"), "{err}");
    let err = fails(&["layout", "set", &e, "stripe((("], 1);
    assert!(err.contains("column"), "{err}");
    let d = mnt.join("d");
    std::fs::create_dir(&d).expect("mkdir");
    let r = run(&["layout", "get", s(&d)]);
    assert_eq!(r.code, 0);
    assert!(r.stderr.contains("no default layout"), "{}", r.stderr);
    ok(&["layout", "set", s(&d), "extent@1"]);
    assert_eq!(ok(&["layout", "get", s(&d)]).trim(), "extent@1");
    std::fs::write(d.join("x"), b"hi").expect("write");
    // The directory's default as given; the file's with the pool's checksums.
    assert_eq!(ok(&["layout", "get", &(s(&d).to_string() + "/x")]).trim(), "checksum[extent@1]");
    let err = fails(&["layout", "set", &(s(&d).to_string() + "/x"), "extent@0"], 1);
    assert!(err.contains("already holds data"), "{err}");
    // The read policy of a replicated file changes in place through the mount.
    let r = mnt.join("r");
    std::fs::File::create(&r).expect("create");
    ok(&["layout", "set", s(&r), "replicate(read=primary)[extent@1,extent@2]"]);
    std::fs::write(&r, data(100_000, 3)).expect("write");
    let rr = "replicate(read=round-robin)[extent@1,extent@2]";
    // Printed as stored, with the pool's checksum blocks.
    let stored = "replicate(read=round-robin)[checksum[extent@1],checksum[extent@2]]";
    assert_eq!(ok(&["layout", "set", s(&r), rr]).trim(), stored);
    assert_eq!(ok(&["layout", "get", s(&r)]).trim(), stored);
    assert_eq!(std::fs::read(&r).expect("read"), data(100_000, 3));
    // The mount holds the pool: pool commands wait their turn.
    let err = fails(&["ls", pool.p()], 1);
    assert!(err.contains("in use"), "{err}");
    ok(&["umount", s(&mnt)]);
    assert_eq!(ok(&["layout", "get", pool.p(), "/d/x"]).trim(), "checksum[extent@1]");
    pool.fsck_clean();
}

#[test]
fn layout_types_lists_every_type_and_parameter_from_the_registry() {
    let listed = ok(&["layout", "types"]);
    let help = ok(&["layout", "--help"]);
    assert!(help.contains(&listed), "the help carries the same list:\n{help}");
    for t in hurricane::blocks::TYPES {
        // The type's section: its line and the indented lines after it.
        let section: Vec<&str> = listed
            .lines()
            .skip_while(|l| !l.starts_with(t.name))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || l.starts_with(' '))
            .map(|(_, l)| l)
            .collect();
        assert!(!section.is_empty(), "{} missing:\n{listed}", t.name);
        assert!(section.iter().any(|l| l.contains(t.doc)), "{}: doc missing", t.name);
        for p in t.params {
            let line = section.iter().find(|l| l.trim_start().starts_with(&format!("{}=", p.key)));
            let line = line.unwrap_or_else(|| panic!("{}.{} missing:\n{listed}", t.name, p.key));
            assert!(line.contains(p.doc), "{line}");
            if let Some(d) = p.default {
                assert!(line.contains(&format!("default {d}")), "{line}");
            }
        }
    }
    assert!(listed.contains("max=SIZE (4K..1T, default 128M): longest single extent"), "{listed}");
    assert!(listed.contains("read=least-loaded|nearest|primary|round-robin (default least-loaded)"), "{listed}");
}

/// Where `needle` starts in image file `img`.
fn find_in_image(img: &Path, needle: &[u8]) -> u64 {
    let bytes = std::fs::read(img).expect("read image");
    bytes.windows(needle.len()).position(|w| w == needle).expect("data in the image") as u64
}

#[test]
fn damaged_data_is_an_error_naming_the_device_never_garbage() {
    let pool = Pool::new(3, "32M");
    let bytes = data(1_000_000, 41);
    ok(&["put", pool.p(), &pool.local("f", &bytes), "/f", "--layout", "extent@1"]);
    ok(&["put", pool.p(), &pool.local("r", &bytes), "/r", "--layout", "replicate[extent@1,extent@2]"]);
    assert_eq!(ok(&["layout", "get", pool.p(), "/f"]).trim(), "checksum[extent@1]");
    assert_eq!(ok(&["layout", "get", pool.p(), "/r"]).trim(), "replicate[checksum[extent@1],checksum[extent@2]]");
    // Bytes of the file overwritten inside dev1.img: file block 2 of /f and
    // of /r's first copy.
    let at = find_in_image(&pool.dev(1), &bytes[..4096]);
    overwrite(&pool.dev(1), at + 2 * 4096 + 100, 50);
    let r_on_1 = {
        let img = std::fs::read(pool.dev(1)).expect("read image");
        let skip = (at + 4096) as usize;
        skip as u64 + img[skip..].windows(4096).position(|w| w == &bytes[..4096]).expect("second copy") as u64
    };
    overwrite(&pool.dev(1), r_on_1 + 2 * 4096 + 100, 50);
    let e = fails(&["get", pool.p(), "/f", s(&pool.work.join("out"))], 1);
    assert!(e.contains("checksum") && e.contains("device 1") && e.contains("dev1.img"), "{e}");
    assert!(e.contains("file block 2"), "{e}");
    let e = fails(&["cat", pool.p(), "/f"], 1);
    assert!(e.contains("dev1.img"), "{e}");
    // The redundant file is served from its good copy.
    assert_eq!(pool.get("/r"), bytes);
    // Meta-data is fine; the data check finds the damaged file and range.
    pool.fsck_clean();
    let r = run(&["fsck", pool.p(), "--data"]);
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("damaged: /f: bytes 8192..12288"), "{}", r.stdout);
    assert!(!r.stdout.contains("damaged: /r"), "{}", r.stdout);
    assert!(r.stdout.contains("checksum errors: device 1"), "{}", r.stdout);
    assert!(!r.stdout.contains("checksum errors: device 2"), "{}", r.stdout);
    assert!(r.stderr.contains("1 files with damaged data"), "{}", r.stderr);
    // Rewriting the file makes it whole, and the data check clean.
    ok(&["put", pool.p(), &pool.local("f2", &bytes), "/f"]);
    assert_eq!(pool.get("/f"), bytes);
    ok(&["rm", pool.p(), "/r"]);
    let out = ok(&["fsck", pool.p(), "--data"]);
    assert!(out.contains("data of 1 files read") && !out.contains("damaged"), "{out}");
}

#[test]
fn mkfs_checksum_off_keeps_layouts_as_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("pool");
    let out = ok(&["mkfs", s(&dir), "--devices", "2", "--device-size", "16M", "--checksum", "off"]);
    assert!(!out.contains("checksum"), "{out}");
    let local = tmp.path().join("in");
    std::fs::write(&local, data(100_000, 3)).expect("write");
    ok(&["put", s(&dir), s(&local), "/f", "--layout", "extent@1"]);
    assert_eq!(ok(&["layout", "get", s(&dir), "/f"]).trim(), "extent@1");
    let out = ok(&["fsck", s(&dir), "--data"]);
    assert!(out.contains("1 of 1 files keep no checksums"), "{out}");
    // On by default, and said so.
    let dir2 = tmp.path().join("pool2");
    let out = ok(&["mkfs", s(&dir2), "--devices", "2", "--device-size", "16M"]);
    assert!(out.contains("with a checksum of every block"), "{out}");
    ok(&["put", s(&dir2), s(&local), "/f", "--layout", "stripe[extent@0,extent@1]"]);
    assert_eq!(ok(&["layout", "get", s(&dir2), "/f"]).trim(), "stripe[checksum[extent@0],checksum[extent@1]]");
    fails(&["mkfs", s(&tmp.path().join("p3")), "--devices", "1", "--device-size", "16M", "--checksum", "maybe"], 2);
}

/// The image files `mkfs --devices` makes are their owner's alone: each
/// holds every file's data, whatever the files' own modes say.
#[test]
fn image_files_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let pool = tmp.path().join("pool");
    ok(&["mkfs", s(&pool), "--devices", "2", "--device-size", "64M"]);
    for i in 0..2 {
        let mode = std::fs::metadata(pool.join(format!("dev{i}.img"))).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "dev{i}.img has mode {mode:o}");
    }
}
