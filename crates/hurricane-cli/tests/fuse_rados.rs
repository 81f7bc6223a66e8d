//! Pools with devices in a Ceph cluster, through a real mount: rados
//! devices mixed with local image files, fio verify on stripe and replicate
//! layouts across both, the data checks of the other mount tests on a pool
//! wholly in the cluster and on "another host" (given only a config file
//! for the cluster and the pool's name), and a mount killed mid-write whose
//! pool another host takes over once the writer's lease expires. Errors
//! from the cluster: an OSD stalled mid-write (EIO naming the object, then
//! writes go on once it is back), a full pool (ENOSPC, then writes go on
//! once it has room), and a writer stalled past its lease, fenced by the
//! host that took the pool over.
//!
//! The cluster is a one-node one started by `scripts/ceph-dev-cluster.sh`
//! in a directory of this test process's own and stopped when the process
//! exits. Needs the Debian packages ceph-mon, ceph-osd, ceph-common and
//! librados-dev (`HURRICANE_CEPH=1 scripts/setup.sh`), FUSE and fio.
#![cfg(feature = "rados")]
// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The RADOS pool the dev cluster makes.
const CEPH_POOL: &str = "hurricane";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ceph-dev-cluster.sh")
}

fn cluster_dir() -> PathBuf {
    std::env::temp_dir().join(format!("hurricane-fuse-rados-test-{}", std::process::id()))
}

extern "C" fn stop_cluster() {
    let _ = Command::new(script()).arg("stop").arg(cluster_dir()).status();
}

/// The config of this process's cluster, started on first use.
fn conf() -> &'static Path {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    CONF.get_or_init(|| {
        let t = Instant::now();
        let out = Command::new(script()).arg("start").arg(cluster_dir()).output().unwrap();
        // SAFETY: registers a function without arguments that only runs a
        // command; the test harness ends the process with `exit`, which
        // runs it after every test.
        unsafe { libc::atexit(stop_cluster) };
        assert!(out.status.success(), "ceph-dev-cluster.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("dev cluster up in {:.1?}", t.elapsed());
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// What `hurricane mkfs --device` takes for a device in the cluster (its
/// object prefix from the pool id, its size from `--device-size`).
fn rados_device() -> String {
    rados_device_on(conf())
}

/// [`rados_device`] in the cluster of the config file `conf`.
fn rados_device_on(conf: &Path) -> String {
    format!("rados:{CEPH_POOL}?conf={}", conf.display())
}

/// A cluster of one test's own, for a test that stalls or fills it (the
/// others share `conf()`, and run beside it): started in a directory of
/// its own, stopped when dropped.
struct OwnCluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl OwnCluster {
    fn start(name: &str) -> OwnCluster {
        let dir = PathBuf::from(format!("{}-{name}", cluster_dir().display()));
        let out = Command::new(script()).arg("start").arg(&dir).output().unwrap();
        let c = OwnCluster { dir, conf: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()) };
        assert!(out.status.success(), "ceph-dev-cluster.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        c
    }

    /// `scripts/ceph-dev-cluster.sh CMD DIR`.
    fn script(&self, cmd: &str) {
        let st = Command::new(script()).arg(cmd).arg(&self.dir).status().unwrap();
        assert!(st.success(), "ceph-dev-cluster.sh {cmd} failed");
    }

    fn ceph(&self, args: &[&str]) -> String {
        let mut a = vec!["-c", s(&self.conf)];
        a.extend(args);
        ok("ceph", &a)
    }

    /// A copy of the cluster's config with `lines` added for clients.
    fn conf_with(&self, lines: &[&str]) -> PathBuf {
        let mut text = fs::read_to_string(&self.conf).unwrap();
        text.push_str("\n[client]\n");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        let p = self.dir.join("client.conf");
        fs::write(&p, text).unwrap();
        p
    }

    /// Whether the RADOS pool of the tests is flagged full.
    fn pool_full(&self) -> bool {
        let detail = self.ceph(&["osd", "pool", "ls", "detail"]);
        let line = detail.lines().find(|l| l.contains(&format!("'{CEPH_POOL}'"))).unwrap_or_else(|| panic!("{detail}"));
        line.split(" flags ")
            .nth(1)
            .and_then(|f| f.split(' ').next())
            .is_some_and(|f| f.split(',').any(|x| x == "full"))
    }

    /// Fills the cluster (`full`) or gives it room again: its full ratio
    /// set below or back above what its OSD holds, then waits until the
    /// pool's full flag says so (the OSD reports its use every few seconds).
    fn set_full(&self, full: bool) {
        let ratios = if full { ["0.0005", "0.0008", "0.001"] } else { ["0.85", "0.90", "0.95"] };
        for (what, r) in ["set-nearfull-ratio", "set-backfillfull-ratio", "set-full-ratio"].iter().zip(ratios) {
            self.ceph(&["osd", what, r]);
        }
        let t = Instant::now();
        while self.pool_full() != full {
            assert!(
                t.elapsed() < Duration::from_secs(90),
                "the pool's full flag is not {full} after {:?}",
                t.elapsed()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("resume").arg(&self.dir).status();
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
    }
}

/// One device of a test pool: an image file in the pool's temporary
/// directory, or a device in the cluster.
#[derive(Clone, Copy)]
enum Dev {
    Local,
    Rados,
}

/// A pool over `devs` (mkfs with `--device` for each, files laid out as
/// `layout` unless said otherwise), with a mount point.
fn pool(devs: &[Dev], size: &str, layout: &str) -> Pool {
    pool_on(conf(), devs, size, layout)
}

/// [`pool`], its devices in the cluster of the config file `conf`.
fn pool_on(conf: &Path, devs: &[Dev], size: &str, layout: &str) -> Pool {
    // SAFETY: umask has no preconditions (every FUSE test sets the same).
    unsafe { libc::umask(0o022) };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pool");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let names: Vec<String> = devs
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Dev::Local => s(&tmp.path().join(format!("img{i}"))).to_string(),
            Dev::Rados => rados_device_on(conf),
        })
        .collect();
    // Each pool's name in the cluster is its own (the tests share one).
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!("t{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let mut args = vec!["mkfs", s(&dir), "--device-size", size, "--layout", layout, "--name", &name];
    for n in &names {
        args.extend(["--device", n.as_str()]);
    }
    hurricane(&args);
    Pool { tmp, dir, mnt }
}

/// Another host: a config file of its own for the cluster (a copy), a
/// mount point, and a directory for the pools it finds by name (its
/// `HURRICANE_POOLS`), empty.
struct OtherHost {
    /// The pool as this host names it: `rados:CEPHPOOL/NAME?conf=ITS_CONF`.
    locator: String,
    /// Where it keeps its pool directories.
    root: PathBuf,
    /// Its directory for the pool, once a command has found the pool.
    dir: PathBuf,
    conf: PathBuf,
    mnt: PathBuf,
}

fn other_host(pool: &Pool, host: &str) -> OtherHost {
    let listed = fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    let name = listed.lines().find_map(|l| l.strip_prefix("name = ")).unwrap_or_else(|| panic!("{listed}"));
    let its_conf = pool.tmp.path().join(format!("{host}-ceph.conf"));
    fs::copy(conf(), &its_conf).unwrap();
    let root = pool.tmp.path().join(format!("{host}-pools"));
    let mnt = pool.tmp.path().join(format!("{host}-mnt"));
    fs::create_dir(&mnt).unwrap();
    OtherHost {
        locator: format!("rados:{CEPH_POOL}/{name}?conf={}", its_conf.display()),
        dir: root.join(CEPH_POOL).join(name),
        root,
        conf: its_conf,
        mnt,
    }
}

impl OtherHost {
    /// `hurricane ARGS` on this host: (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let o = Command::new(BIN)
            .args(args)
            .env("HURRICANE_POOLS", &self.root)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        (o.status.code().unwrap_or(-1), text(o.stdout), text(o.stderr))
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "hurricane {args:?}: {err}");
        out
    }

    /// Mounts the pool found by name, with `opts`.
    fn mount(&self, opts: &[&str]) -> Mounted {
        let mut args = vec!["mount", &self.locator, s(&self.mnt)];
        for o in opts {
            args.extend(["-o", o]);
        }
        self.ok(&args);
        Mounted::attach(&self.mnt)
    }

    fn fsck_clean(&self) {
        let out = self.ok(&["fsck", &self.locator]);
        assert!(out.contains("consistent"), "{out}");
    }
}

fn fsck_clean(dir: &Path) {
    let out = hurricane(&["fsck", s(dir)]);
    assert!(out.contains("consistent"), "{out}");
}

fn setxattr(p: &Path, name: &str, v: &[u8]) {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of v.len() bytes.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }).unwrap();
}

/// Bytes written to each device of a mount, by device name.
fn written(m: &Mounted) -> Vec<(String, u64)> {
    m.stats().devices.iter().map(|d| (d.name.clone(), d.write_bytes)).collect()
}

fn requirements() -> Option<&'static str> {
    if !have("fio") {
        return Some("fio is not installed");
    }
    None
}

/// A pool of a local image and three devices in the cluster: fio writes
/// and verifies files replicated across the image and a stripe in the
/// cluster, striped over the cluster's devices, and striped across both;
/// the cluster's devices take the writes, and everything reads back after
/// a remount.
#[test]
fn fio_verifies_stripes_and_replicas_across_local_and_rados_devices() {
    require_fuse!();
    if let Some(why) = requirements() {
        eprintln!("SKIPPED {}: {why}", module_path!());
        return;
    }
    let pool = pool(&[Dev::Local, Dev::Rados, Dev::Rados, Dev::Rados], "256M", "stripe(width=2)");
    let listed = fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert_eq!(listed.lines().filter(|l| l.starts_with("device = rados:")).count(), 3, "{listed}");
    let m = pool.mount(&[]);
    // Devices over the network: many requests served at once, by /dev/fuse
    // threads rather than one io_uring queue per CPU.
    let st = m.stats();
    assert!(!st.transport.io_uring && st.threads >= 32, "{} threads, io_uring {}", st.threads, st.transport.io_uring);
    let layouts = [
        ("mirror", "replicate[extent@0,stripe(unit=64K)[extent@1,extent@2]]", "replicate["),
        ("rstripe", "stripe(unit=64K)[extent@1,extent@2,extent@3]", "stripe(unit=64K)["),
        ("mstripe", "stripe(unit=128K)[extent@0,extent@3]", "stripe(unit=128K)["),
    ];
    let before = written(&m);
    let mut files = Vec::new();
    for (dir, spec, shown) in layouts {
        let d = m.path(dir);
        fs::create_dir(&d).unwrap();
        setxattr(&d, "user.hurricane.dir_layout", spec.as_bytes());
        for (rw, bs) in [("randwrite", "4k"), ("write", "1m"), ("randrw", "16k")] {
            let (good, text) = fio_check(&d, rw, bs, "psync", "4m", &[]);
            assert!(good, "{spec}: fio {rw} {bs}:\n{text}");
        }
        let f = d.join("plain");
        let body = data((5 << 20) + 4321, dir.len() as u64);
        fs::write(&f, &body).unwrap();
        assert!(fs::read(&f).unwrap() == body, "{spec}");
        let l = hurricane(&["layout", "get", s(&f)]);
        assert!(l.contains(shown) && l.contains("extent@3") == spec.contains("extent@3"), "{spec}: {l}");
        files.push((format!("{dir}/plain"), body));
    }
    // Every device took its share: the image and each device in the cluster.
    let after = written(&m);
    for ((name, b), (_, a)) in before.iter().zip(&after) {
        assert!(a - b >= 4 << 20, "{name}: only {} bytes written by the test", a - b);
    }
    assert_eq!(after.iter().filter(|(n, _)| n.starts_with("rados:")).count(), 3, "{after:?}");
    m.unmount();
    fsck_clean(&pool.dir);

    let m = pool.mount(&[]);
    for (name, body) in &files {
        assert!(fs::read(m.path(name)).unwrap() == *body, "{name} after a remount");
    }
    m.unmount();
}

/// A private copy of a real source tree (this crate's sources and tests).
fn source_tree(into: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dst = into.join("src-tree");
    fs::create_dir(&dst).unwrap();
    ok("cp", &["-r", s(&src.join("src")), s(&src.join("tests")), s(&dst)]);
    ok("sh", &["-c", &format!("cd '{}' && : > empty && mkdir -p deep/a/b/c && printf deep > deep/a/b/c/f", s(&dst))]);
    dst
}

fn same_trees(a: &Path, b: &Path) {
    let d = cmd("diff", &["-r", s(a), s(b)]);
    assert!(
        d.status.success(),
        "trees differ:\n{}{}",
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr)
    );
}

/// The data checks of the other mount tests on a pool wholly in the
/// cluster (superblocks, journal and meta-file included): writes and reads
/// across its 4 MiB objects, overwrites, truncates, renames, appends, and
/// a tree copied with cp and compared with diff. After an unmount, the
/// pool mounts from another directory that holds only a copy of pool.conf
/// (another host) with everything intact.
#[test]
fn posix_data_on_a_pool_wholly_in_rados_and_from_another_host() {
    require_fuse!();
    let pool = pool(&[Dev::Rados, Dev::Rados, Dev::Rados], "256M", "stripe(unit=64K,width=3)");
    let listed = fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert!(listed.lines().filter(|l| l.starts_with("device = ")).all(|l| l.contains("rados:")), "{listed}");
    let src = source_tree(pool.tmp.path());
    let m = pool.mount(&[]);
    let p = |r: &str| m.path(r);

    // Write and read back, across object boundaries.
    let big = data((13 << 20) + 777, 1);
    fs::write(p("big"), &big).unwrap();
    assert!(fs::read(p("big")).unwrap() == big);

    // Overwrites in place, some across a 4 MiB boundary.
    let mut model = big.clone();
    let f = OpenOptions::new().write(true).open(p("big")).unwrap();
    for (i, at) in [0usize, 4 << 20, (4 << 20) - 1000, (8 << 20) + 65_000, (13 << 20) + 700].iter().enumerate() {
        let piece = data(3000 + i * 997, 100 + i as u64);
        f.write_all_at(&piece, *at as u64).unwrap();
        let end = at + piece.len();
        if end > model.len() {
            model.resize(end, 0);
        }
        model[*at..end].copy_from_slice(&piece);
    }
    f.sync_all().unwrap();
    drop(f);
    assert!(fs::read(p("big")).unwrap() == model, "overwrites");

    // Truncate down to an odd size, then up: the new part reads as zeros.
    let f = OpenOptions::new().write(true).open(p("big")).unwrap();
    f.set_len((5 << 20) + 3).unwrap();
    model.truncate((5 << 20) + 3);
    assert!(fs::read(p("big")).unwrap() == model, "shrunk");
    f.set_len(9 << 20).unwrap();
    model.resize(9 << 20, 0);
    drop(f);
    assert!(fs::read(p("big")).unwrap() == model, "grown");

    // Rename, within and across directories, over an existing name.
    fs::create_dir_all(p("d1/d2")).unwrap();
    fs::write(p("d1/victim"), b"replaced").unwrap();
    fs::rename(p("big"), p("d1/d2/moved")).unwrap();
    fs::rename(p("d1/d2/moved"), p("d1/victim")).unwrap();
    assert!(!p("big").exists() && !p("d1/d2/moved").exists());
    assert!(fs::read(p("d1/victim")).unwrap() == model, "renamed");

    // Appends, in pieces that do not line up with anything.
    let mut log = Vec::new();
    for i in 0..40u64 {
        let piece = data(10_000 + (i as usize * 7919) % 150_000, 200 + i);
        let mut f = OpenOptions::new().create(true).append(true).open(p("d1/log")).unwrap();
        f.write_all(&piece).unwrap();
        log.extend_from_slice(&piece);
    }
    assert!(fs::read(p("d1/log")).unwrap() == log, "appended");

    // A tree copied in with cp, compared with diff.
    ok("cp", &["-r", s(&src), s(&p("tree"))]);
    same_trees(&src, &p("tree"));
    assert_eq!(ok("cat", &[s(&p("tree/deep/a/b/c/f"))]), "deep");
    m.unmount();
    fsck_clean(&pool.dir);

    // Another host: only the cluster's config and the pool's name.
    let other = other_host(&pool, "other");
    assert!(!other.root.exists());
    let m = other.mount(&[]);
    let p = |r: &str| m.path(r);
    assert!(fs::read(p("d1/victim")).unwrap() == model, "from another host");
    assert!(fs::read(p("d1/log")).unwrap() == log, "from another host");
    same_trees(&src, &p("tree"));
    // Its directory for the pool reaches the cluster through its config.
    let listed = fs::read_to_string(other.dir.join("pool.conf")).unwrap();
    let devices: Vec<&str> = listed.lines().filter(|l| l.starts_with("device = ")).collect();
    assert_eq!(devices.len(), 3, "{listed}");
    let its_conf = format!("conf={}&", fs::canonicalize(&other.conf).unwrap().display());
    assert!(devices.iter().all(|l| l.contains(&its_conf)), "{listed}");
    // It writes too, and the first directory sees that afterwards.
    fs::write(p("from-other"), b"written by the other host").unwrap();
    m.unmount();
    other.fsck_clean();
    // A name the cluster does not know is refused, saying so.
    let (code, _, err) = other.run(&["mount", &other.locator.replacen("/t", "/nobody-t", 1), s(&other.mnt)]);
    assert!(code != 0 && err.contains("no pool named nobody-t"), "{code}: {err}");
    let m = pool.mount(&[]);
    assert_eq!(fs::read(m.path("from-other")).unwrap(), b"written by the other host");
    m.unmount();
}

/// Writes files one after another, fsyncs each, and prints its number
/// once the fsync has returned; runs until the mount dies.
const WRITER: &str = r#"
import os, sys
d = sys.argv[1]
i = 0
try:
    while True:
        n = 1000 + (i * 7919) % 300000
        data = bytes((i * 31 + k * 7) % 251 for k in range(n))
        fd = os.open(f"{d}/synced-{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        print(i, n, flush=True)
        # And one file that is never fsync'd.
        with open(f"{d}/unsynced-{i}", "wb") as f:
            f.write(data)
        i += 1
except OSError:
    pass
"#;

fn writer_data(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|k| ((i * 31 + k * 7) % 251) as u8).collect()
}

/// The lease the test mounts hold, in seconds: renewed every third of it.
const LEASE_S: u64 = 4;

/// A mount killed mid-write (its host died): another host's mount is
/// refused with EBUSY naming the dead writer while its lease lives, and
/// accepted once it has expired; it replays the journal, and every file
/// fsync'd before the kill is there, whole. fsck finds the pool clean.
#[test]
fn kill_9_mid_write_then_another_host_takes_over_after_the_lease() {
    require_fuse!();
    let pool = pool(&[Dev::Rados, Dev::Rados], "256M", "stripe(unit=64K,width=2)");
    let lease = format!("lease={LEASE_S}");
    let m = pool.mount(&[&lease, "commit_interval=0.2"]);
    fs::create_dir(m.path("w")).unwrap();
    let mut writer = Command::new(python_bin())
        .args(["-c", WRITER, s(&m.path("w"))])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = writer.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let mut it = line.split(' ').map(|x| x.parse::<usize>().unwrap());
            let _ = tx.send((it.next().unwrap(), it.next().unwrap()));
        }
    });
    // Kill the server once some files are fsync'd, while more are written.
    let mut synced = Vec::new();
    while synced.len() < 8 {
        synced.push(rx.recv_timeout(Duration::from_secs(60)).expect("the writer stopped fsyncing"));
    }
    let dead = m.pid;
    m.kill9();
    let killed = Instant::now();
    let _ = writer.wait();
    reader.join().unwrap();
    synced.extend(rx.try_iter());

    // Another host mounts: refused while the lease lives, naming the dead
    // writer; accepted once it has expired.
    let other = other_host(&pool, "other");
    let mut refusals = 0;
    let m = loop {
        let (code, _, err) = other.run(&["mount", &other.locator, s(&other.mnt), "-o", &lease]);
        if code == 0 {
            break Mounted::attach(&other.mnt);
        }
        assert!(
            err.contains("open for writing elsewhere")
                && err.contains("(EBUSY)")
                && err.contains(&format!("pid {dead}")),
            "refused, but not for the lease of process {dead}: {err}"
        );
        assert!(!is_fuse_mount(&other.mnt));
        refusals += 1;
        assert!(
            killed.elapsed() < Duration::from_secs(LEASE_S * 5),
            "still refused {:?} after the kill",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = killed.elapsed();
    eprintln!("taken over {took:.1?} after the kill, {refusals} mounts refused before");
    assert!(refusals > 0, "the mount was accepted at once, while the dead writer's lease still lived");
    // The lease lived at least two thirds of its duration past the kill
    // (renewed every third of it).
    assert!(took >= Duration::from_secs(LEASE_S) * 2 / 3 - Duration::from_millis(300), "taken over after {took:?}");
    let log = fs::read_to_string(other.dir.join("hurricane-mount.log")).unwrap();
    let opened = log.lines().find(|l| l.contains("opened:")).unwrap_or_else(|| panic!("{log}"));
    let ops: usize = opened
        .split("recovered (")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a recovery: {opened}"));
    assert!(ops > 0, "no journal replayed: {opened}");

    for &(i, n) in &synced {
        let got = fs::read(m.path(&format!("w/synced-{i}"))).unwrap_or_else(|e| panic!("synced-{i} lost: {e}"));
        assert!(got == writer_data(i, n), "synced-{i} damaged");
    }
    // Files never fsync'd are absent, or a prefix of what was written.
    for e in fs::read_dir(m.path("w")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(i) = name.strip_prefix("unsynced-").and_then(|x| x.parse::<usize>().ok()) {
            let got = fs::read(m.path(&format!("w/{name}"))).unwrap();
            let n = 1000 + (i * 7919) % 300000;
            assert!(got.len() <= n && got == writer_data(i, n)[..got.len()], "{name} holds data it was never given");
        }
    }
    // The new writer holds the lease: the first directory is refused now,
    // naming it.
    let (code, _, err) = run(&["mount", s(&pool.dir), s(&pool.mnt)]);
    assert!(code != 0 && err.contains(&format!("pid {}", m.pid)), "{code}: {err}");
    m.unmount();
    other.fsck_clean();
    fsck_clean(&pool.dir);
    let m = pool.mount(&[]);
    let (i, n) = synced[synced.len() - 1];
    assert!(fs::read(m.path(&format!("w/synced-{i}"))).unwrap() == writer_data(i, n));
    m.unmount();
}

/// `device add` of a device in the cluster to a mounted pool of image
/// files: pool.conf names it as mkfs would (its prefix from the pool id and
/// its index, the size of the pool's devices), the mount places files on
/// it, they read back after a remount, and fsck finds the pool clean. The
/// first device in the cluster names the pool there, so another host finds
/// it by name. An offline add of a second one goes the same way.
#[test]
fn device_add_puts_a_rados_device_in_a_pool_of_images() {
    require_fuse!();
    let pool = pool(&[Dev::Local, Dev::Local], "128M", "stripe(width=2)");
    let m = pool.mount(&[]);
    let before = data((3 << 20) + 5, 1);
    fs::write(m.path("before"), &before).unwrap();
    let out = hurricane(&["device", "add", s(&m.mnt), &rados_device()]);
    assert!(out.starts_with("added device 2: rados:"), "{out}");
    let listed = fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    let line = listed.lines().find(|l| l.starts_with("device = rados:")).unwrap_or_else(|| panic!("{listed}"));
    assert!(line.starts_with(&format!("device = rados:{CEPH_POOL}/hurricane.")), "{line}");
    assert!(line.contains(".2?conf=") && line.ends_with(&format!("&size={}", 128 << 20)), "{line}");

    let f = m.path("mirrored");
    fs::File::create(&f).unwrap();
    setxattr(&f, "user.hurricane.layout", b"replicate[extent@0,extent@2]");
    let body = data((5 << 20) + 77, 2);
    fs::write(&f, &body).unwrap();
    assert!(fs::read(&f).unwrap() == body);
    let devs = written(&m);
    assert!(devs[2].0.starts_with("rados:") && devs[2].1 >= 5 << 20, "{devs:?}");
    m.unmount();
    fsck_clean(&pool.dir);
    let m = pool.mount(&[]);
    assert!(fs::read(m.path("mirrored")).unwrap() == body);
    assert!(fs::read(m.path("before")).unwrap() == before);
    m.unmount();
    // The first device in the cluster named the pool there, after its
    // directory: another host finds it by that name.
    let listed = fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert!(listed.contains("\nname = pool\n") && listed.contains("\nrevision = 1\n"), "{listed}");
    let other = other_host(&pool, "other");
    let out = other.ok(&["ls", &other.locator, "/"]);
    assert!(out.contains("mirrored") && out.contains("before"), "{out}");
    let out = hurricane(&["device", "add", s(&pool.dir), &format!("{}&size=64M", rados_device())]);
    assert!(out.starts_with("added device 3: rados:") && out.contains(".3?conf="), "{out}");
    assert!(out.trim_end().ends_with(&format!("&size={}", 64 << 20)), "{out}");
    fsck_clean(&pool.dir);
}

/// The prefix of device `i` in pool.conf.
fn prefix_of(dir: &Path, i: usize) -> String {
    let listed = fs::read_to_string(dir.join("pool.conf")).unwrap();
    let line = listed.lines().filter(|l| l.starts_with("device = ")).nth(i).unwrap_or_else(|| panic!("{listed}"));
    let name = line.strip_prefix(&format!("device = rados:{CEPH_POOL}/")).unwrap_or_else(|| panic!("{line}"));
    name.split('?').next().unwrap().to_string()
}

/// `device replace` with a device in the cluster: a rados device replaced
/// by another offline (copied; the new one's objects named after the slot's
/// next generation, `.2.1`, never the old objects), a local image replaced
/// by a rados device through the mount, and a lost image rebuilt onto a
/// rados device offline (`.1`). Files stay whole through each, and fsck
/// finds the pool clean. A prefix that holds a device is refused.
#[test]
fn device_replace_puts_rados_devices_in_place_of_others() {
    require_fuse!();
    let pool = pool(&[Dev::Local, Dev::Local, Dev::Rados], "64M", "replicate[extent@0,extent@2]");
    let m = pool.mount(&[]);
    let files: Vec<(String, Vec<u8>)> =
        (0..4).map(|i| (format!("f{i}"), data((1 << 20) * i + 4321, i as u64))).collect();
    for (n, d) in &files {
        fs::write(m.path(n), d).unwrap();
    }
    m.unmount();
    let check = |what: &str| {
        let m = pool.mount(&[]);
        for (n, d) in &files {
            assert!(fs::read(m.path(n)).unwrap() == *d, "{n} after {what}");
        }
        m.unmount();
        fsck_clean(&pool.dir);
    };
    let old2 = prefix_of(&pool.dir, 2);
    // The pool's prefix, whose random part may itself start with a digit.
    let base = old2.strip_suffix(".2").unwrap_or_else(|| panic!("{old2}"));

    // A rados device by another, offline: copied.
    let (code, _, err) =
        run(&["device", "replace", s(&pool.dir), "2", &rados_device().replacen("?", &format!("/{old2}?"), 1)]);
    assert!(code != 0 && err.contains("hold a device already"), "{code}: {err}");
    hurricane(&["device", "replace", s(&pool.dir), "2", &rados_device()]);
    assert_eq!(prefix_of(&pool.dir, 2), format!("{old2}.1"));
    check("a rados device replaced by another");

    // A local image by a rados device, through the mount.
    let m = pool.mount(&[]);
    hurricane(&["device", "replace", s(&m.mnt), "0", &rados_device()]);
    m.unmount();
    assert_eq!(prefix_of(&pool.dir, 0), format!("{base}.0"));
    check("an image replaced by a rados device online");

    // A lost image rebuilt onto a rados device, offline.
    fs::remove_file(pool.tmp.path().join("img1")).unwrap();
    hurricane(&["device", "replace", s(&pool.dir), "1", &rados_device()]);
    assert_eq!(prefix_of(&pool.dir, 1), format!("{base}.1"));
    check("a lost image rebuilt onto a rados device");
    let listed = fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert_eq!(listed.lines().filter(|l| l.starts_with("device = rados:")).count(), 3, "{listed}");
}

/// `hurricane mkfs rados:CEPHPOOL/NAME?conf=PATH --device rados:...`: a
/// pool made by name, with no directory given; every command finds it by
/// that name, on the host that made it and on another; the name cannot be
/// taken twice, and the description lives where the first device does.
#[test]
fn a_pool_made_by_name_is_used_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let here = tmp.path().join("pools");
    let name = format!("made-{}", std::process::id());
    let locator = format!("rados:{CEPH_POOL}/{name}?conf={}", conf().display());
    let run = |root: &Path, args: &[&str]| {
        let o = Command::new(BIN).args(args).env("HURRICANE_POOLS", root).stdin(Stdio::null()).output().unwrap();
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        (o.status.code().unwrap_or(-1), text(o.stdout), text(o.stderr))
    };
    let dev = rados_device();
    let mkfs = ["mkfs", &locator, "--device", &dev, "--device", &dev, "--device-size", "64M"];
    let (code, out, err) = run(&here, &mkfs);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("Other hosts open it as rados:{CEPH_POOL}/{name}?conf=")), "{out}");
    assert!(here.join(CEPH_POOL).join(&name).join("pool.conf").is_file());
    let local = tmp.path().join("local-file");
    fs::write(&local, b"put by name").unwrap();
    let (code, _, err) = run(&here, &["put", &locator, s(&local), "/f"]);
    assert_eq!(code, 0, "{err}");

    // Another host: nothing but the name (and the config).
    let there = tmp.path().join("there");
    let (code, out, err) = run(&there, &["cat", &locator, "/f"]);
    assert_eq!((code, out.as_str()), (0, "put by name"), "{err}");
    let (code, out, err) = run(&there, &["df", &locator]);
    assert!(code == 0 && out.contains("rados:"), "{out}{err}");

    // Taken: refused, from any host, and nothing there changes.
    let (code, _, err) = run(&there, &mkfs);
    assert!(code != 0 && err.contains(&format!("a pool named {name} is already")), "{code}: {err}");
    let (code, out, _) = run(&here, &["cat", &locator, "/f"]);
    assert_eq!((code, out.as_str()), (0, "put by name"));
    // The description lives beside the first device: in its RADOS pool.
    let (code, _, err) = run(&here, &["mkfs", &locator.replacen(CEPH_POOL, "elsewhere", 1), "--device", &dev]);
    assert!(code == 2 && err.contains("first device must be in RADOS pool elsewhere"), "{code}: {err}");
    let (code, _, err) = run(&there, &["ls", &format!("rados:{CEPH_POOL}/.bad?conf={}", conf().display())]);
    assert!(code != 0 && err.contains("not a pool name"), "{code}: {err}");
}

/// Writes `body` to `path` and fsyncs it, in a thread of its own: the first
/// error, or a test failure if neither came within `limit` (a hang).
fn write_and_fsync(path: PathBuf, body: Vec<u8>, limit: Duration) -> std::io::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let shown = path.display().to_string();
    std::thread::spawn(move || {
        let r = (|| {
            let mut f = fs::File::create(&path)?;
            f.write_all(&body)?;
            f.sync_all()
        })();
        let _ = tx.send(r);
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{shown}: neither written nor failed within {limit:?}"))
}

/// [`write_and_fsync`] until it succeeds (a cluster back from a stall takes
/// a moment to take writes again), for at most `limit`.
fn write_and_fsync_soon(pool: &Pool, path: &Path, body: &[u8], limit: Duration) {
    let t = Instant::now();
    loop {
        match write_and_fsync(path.to_path_buf(), body.to_vec(), limit) {
            Ok(()) => return,
            Err(e) if t.elapsed() < limit => {
                eprintln!("{}: {e}; trying again", path.display());
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => {
                panic!("{}: still failing {:?} after: {e}; the log:\n{}", path.display(), t.elapsed(), pool.log())
            }
        }
    }
}

/// Reads `path`, trying again for a while on EIO: an OSD just back from a
/// stall may at first take longer than a short operation timeout to answer
/// (on a loaded test machine).
fn read_soon(pool: &Pool, path: &Path) -> Vec<u8> {
    let t = Instant::now();
    loop {
        match fs::read(path) {
            Ok(b) => return b,
            Err(e) if e.raw_os_error() == Some(libc::EIO) && t.elapsed() < Duration::from_secs(30) => {
                eprintln!("{}: {e}; trying again", path.display());
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("{}: {e}; the log:\n{}", path.display(), pool.log()),
        }
    }
}

/// The two pools the error tests run on: journal and meta-data on local
/// images with file data striped over devices in the cluster, and one
/// wholly in the cluster.
const ERROR_POOLS: [(&str, &[Dev], &str); 2] = [
    (
        "local journal and meta-data",
        &[Dev::Local, Dev::Local, Dev::Rados, Dev::Rados],
        "stripe(unit=64K)[extent@2,extent@3]",
    ),
    ("wholly in the cluster", &[Dev::Rados, Dev::Rados], "stripe(unit=64K,width=2)"),
];

/// The OSD stops mid-write (SIGSTOP; a memstore OSD restarted would come
/// back empty) while the mount's clients have a 3 s operation timeout
/// (`rados_osd_op_timeout` in the config pool.conf names): a write fails
/// with EIO after one timeout, not one per piece of it and not a hang, and
/// the mount's log names the object and says it timed out; an fsync whose
/// journal record cannot reach the cluster fails with EIO too. Once the
/// OSD goes on (SIGCONT) writes and fsyncs work again in the same mount,
/// the change the failed commit held goes out with the next one;
/// everything fsync'd before is intact, after a remount too, and fsck
/// finds the pool clean.
/// On a pool with local journal and meta-data and on one wholly in the
/// cluster. The mounts hold a 60 s lease, longer than the stall: a writer
/// that cannot renew its lease for its whole duration refuses writes until
/// it takes the lease back (tests/rados.rs covers that).
#[test]
fn an_osd_stalled_mid_write_fails_writes_with_eio_then_they_go_on() {
    require_fuse!();
    let cluster = OwnCluster::start("stall");
    let conf = cluster.conf_with(&["rados_osd_op_timeout = 3"]);
    for (what, devs, layout) in ERROR_POOLS {
        let pool = pool_on(&conf, devs, "256M", layout);
        let m = pool.mount(&["lease=60"]);
        let mut kept = Vec::new();
        for i in 0..3 {
            let (name, body) = (format!("before-{i}"), data((3 << 20) + i * 1000, i as u64));
            write_and_fsync(m.path(&name), body.clone(), Duration::from_secs(60)).unwrap();
            kept.push((name, body));
        }

        cluster.script("pause");
        let t = Instant::now();
        let r = write_and_fsync(m.path("during"), data(1 << 20, 9), Duration::from_secs(120));
        let took = t.elapsed();
        // A change of meta-data only (held in memory), then an fsync of its
        // directory: its journal record cannot be written where the
        // journal is in the cluster.
        fs::create_dir(m.path("dir-during")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let root = m.path("");
        std::thread::spawn(move || {
            let _ = tx.send(fs::File::open(&root).and_then(|d| d.sync_all()));
        });
        let synced = rx.recv_timeout(Duration::from_secs(120)).expect("an fsync to a stalled OSD hangs");
        cluster.script("resume");
        eprintln!("{what}: fsync of the root directory while stalled: {synced:?}");
        if devs.iter().all(|d| matches!(d, Dev::Rados)) {
            let e = synced.expect_err("a journal record written to a stalled OSD");
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}");
        }
        let e = r.expect_err("a write and fsync to a stalled OSD succeeded");
        eprintln!("{what}: failed after {took:.1?}: {e}");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}");
        // A few timeouts, not one per piece of the write.
        assert!(took < Duration::from_secs(20), "{what}: took {took:?} to fail");
        let log = pool.log();
        let line = log.lines().find(|l| l.contains("of object hurricane.") && l.contains("timed out"));
        let line = line.unwrap_or_else(|| panic!("{what}: no timeout of an object in the log:\n{log}"));
        assert!(line.contains("rados_osd_op_timeout") && line.contains("does not answer"), "{what}: {line}");
        assert!(!log.contains("panicked"), "{what}: {log}");

        // Back: the same mount writes again, and kept everything.
        let after = data((2 << 20) + 17, 10);
        write_and_fsync_soon(&pool, &m.path("after"), &after, Duration::from_secs(60));
        kept.push(("after".into(), after));
        for (name, body) in &kept {
            assert!(read_soon(&pool, &m.path(name)) == *body, "{what}: {name}");
        }
        // The change the failed commit held went out with a later one.
        fs::File::open(m.path("")).unwrap().sync_all().unwrap();
        m.unmount();
        fsck_clean(&pool.dir);
        let m = pool.mount(&[]);
        for (name, body) in &kept {
            assert!(fs::read(m.path(name)).unwrap() == *body, "{what}: {name} after a remount");
        }
        assert!(m.path("dir-during").is_dir(), "{what}: the directory made during the stall");
        m.unmount();
    }
}

/// The OSD stalls for longer than the mount's lease (3 s, with a 1 s
/// operation timeout): the mount counts the lease lost and refuses writes
/// (EROFS) or fails them (EIO) while the cluster does not answer; once it
/// answers, the mount takes the lease back (no other host held the pool)
/// and the same mount writes again, keeping everything, and says so in its
/// log.
#[test]
fn a_mount_whose_lease_lapsed_in_a_stall_writes_again_when_the_cluster_answers() {
    require_fuse!();
    let cluster = OwnCluster::start("lapse");
    let conf = cluster.conf_with(&["rados_osd_op_timeout = 1"]);
    let pool = pool_on(&conf, &[Dev::Rados, Dev::Rados], "256M", "stripe(unit=64K,width=2)");
    let m = pool.mount(&["lease=3"]);
    let before = data((1 << 20) + 5, 1);
    write_and_fsync(m.path("before"), before.clone(), Duration::from_secs(60)).unwrap();

    cluster.script("pause");
    let t = Instant::now();
    while !pool.log().contains("writes are refused until it is taken back") && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let lapsed = pool.log().contains("writes are refused until it is taken back");
    let during = fs::write(m.path("during"), b"x");
    cluster.script("resume");
    assert!(lapsed, "no lapsed lease in the log:\n{}", pool.log());
    let e = during.expect_err("a write while the lease was lost");
    assert!(matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EIO)), "{e}");

    let t = Instant::now();
    while !pool.log().contains("the lease is back") && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(pool.log().contains("the lease is back"), "the lease was not taken back:\n{}", pool.log());
    let after = data((2 << 20) + 3, 2);
    write_and_fsync_soon(&pool, &m.path("after"), &after, Duration::from_secs(60));
    assert!(read_soon(&pool, &m.path("before")) == before);
    assert!(read_soon(&pool, &m.path("after")) == after);
    m.unmount();
    fsck_clean(&pool.dir);
    let m = pool.mount(&[]);
    assert!(fs::read(m.path("after")).unwrap() == after, "after a remount");
    m.unmount();
}

/// The cluster fills up (its OSD past its full ratio, so the RADOS pool is
/// flagged full, as one over its quota is): writes fail with ENOSPC at
/// once rather than wait for room, the mount's log names the object and
/// says the pool is full; once there is room again the same mount writes
/// again, everything fsync'd before is intact, and fsck finds the pool
/// clean. (Pool quotas need a manager daemon to count what a pool holds,
/// which the dev cluster does not run; a pool over its quota fails the
/// same way, with EDQUOT from the cluster.)
#[test]
fn a_full_pool_fails_writes_with_enospc_then_they_go_on() {
    require_fuse!();
    let cluster = OwnCluster::start("full");
    for (what, devs, layout) in ERROR_POOLS {
        let pool = pool_on(&cluster.conf, devs, "256M", layout);
        let m = pool.mount(&[]);
        let mut kept = Vec::new();
        for i in 0..3 {
            let (name, body) = (format!("before-{i}"), data((3 << 20) + i * 1000, i as u64));
            write_and_fsync(m.path(&name), body.clone(), Duration::from_secs(60)).unwrap();
            kept.push((name, body));
        }

        cluster.set_full(true);
        let t = Instant::now();
        let r = write_and_fsync(m.path("during"), data(5 << 20, 9), Duration::from_secs(60));
        let took = t.elapsed();
        let e = r.expect_err("a write and fsync to a full pool succeeded");
        eprintln!("{what}: failed after {took:.1?}: {e}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{what}: {e}");
        assert!(took < Duration::from_secs(20), "{what}: took {took:?} to fail");
        let log = pool.log();
        let line = log.lines().find(|l| l.contains("is full")).unwrap_or_else(|| panic!("{what}: {log}"));
        assert!(line.contains("of object hurricane.") && line.contains("RADOS pool"), "{what}: {line}");
        // Reads go on.
        assert!(fs::read(m.path("before-0")).unwrap() == kept[0].1, "{what}");

        cluster.set_full(false);
        let after = data((2 << 20) + 17, 10);
        write_and_fsync_soon(&pool, &m.path("after"), &after, Duration::from_secs(60));
        kept.push(("after".into(), after));
        for (name, body) in &kept {
            assert!(fs::read(m.path(name)).unwrap() == *body, "{what}: {name}");
        }
        m.unmount();
        fsck_clean(&pool.dir);
        let m = pool.mount(&[]);
        for (name, body) in &kept {
            assert!(fs::read(m.path(name)).unwrap() == *body, "{what}: {name} after a remount");
        }
        m.unmount();
    }
}

/// A writer stalls (SIGSTOP) past its lease; another host takes the pool
/// over once the lease has expired, and blocklists the stalled writer's
/// client address before it replays the journal. When the stalled writer
/// goes on (SIGCONT), its writes through a file it held open and to new
/// files fail; the new host's data is intact, none of the old writer's
/// late writes reach the pool, and fsck finds it clean.
#[test]
fn a_writer_stalled_past_its_lease_is_fenced_by_the_host_that_takes_over() {
    require_fuse!();
    let pool = pool(&[Dev::Rados, Dev::Rados], "256M", "stripe(unit=64K,width=2)");
    let lease = format!("lease={LEASE_S}");
    let m = pool.mount(&[&lease]);
    let mut kept = Vec::new();
    for i in 0..3 {
        let (name, body) = (format!("before-{i}"), data((1 << 20) + i * 1000, i as u64));
        write_and_fsync(m.path(&name), body.clone(), Duration::from_secs(60)).unwrap();
        kept.push((name, body));
    }
    let held = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(m.path("held")).unwrap();
    held.write_all_at(b"before the stall", 0).unwrap();
    held.sync_all().unwrap();
    kept.push(("held".into(), b"before the stall".to_vec()));

    let old = m.pid;
    // SAFETY: signalling the mount this test started.
    unsafe { libc::kill(old as i32, libc::SIGSTOP) };
    let stopped = Instant::now();
    let other = other_host(&pool, "other");
    let new = loop {
        let (code, _, err) = other.run(&["mount", &other.locator, s(&other.mnt), "-o", &lease]);
        if code == 0 {
            break Mounted::attach(&other.mnt);
        }
        assert!(err.contains("open for writing elsewhere") && err.contains(&format!("pid {old}")), "{err}");
        assert!(stopped.elapsed() < Duration::from_secs(LEASE_S * 5), "still refused {:?} after", stopped.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = fs::read_to_string(other.dir.join("hurricane-mount.log")).unwrap();
    assert!(log.contains("did not release the pool: blocklisting it"), "{log}");
    for (name, body) in &kept {
        assert!(fs::read(new.path(name)).unwrap() == *body, "{name} on the new host");
    }
    let fresh = data((2 << 20) + 5, 20);
    write_and_fsync(new.path("new-host"), fresh.clone(), Duration::from_secs(60)).unwrap();
    kept.push(("new-host".into(), fresh));

    // The old writer goes on: everything it tries fails.
    // SAFETY: as above.
    unsafe { libc::kill(old as i32, libc::SIGCONT) };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = held.write_all_at(b"written late!!!!", 0).and_then(|_| held.sync_all());
        let _ = tx.send(r);
    });
    let r = rx.recv_timeout(Duration::from_secs(60)).expect("the old writer's write hangs");
    let e = r.expect_err("the fenced writer wrote through its open file");
    eprintln!("the fenced writer's write through its open file: {e}");
    let e = write_and_fsync(m.path("late"), data(1 << 20, 30), Duration::from_secs(60))
        .expect_err("the fenced writer wrote a new file");
    eprintln!("the fenced writer's new file: {e}");
    // Its renewal thread notices on its own schedule (a loaded machine
    // may run the failed writes first).
    let waited = Instant::now();
    let mut old_log = pool.log();
    while !old_log.contains("the lease could not be renewed") && waited.elapsed() < Duration::from_secs(LEASE_S * 4) {
        std::thread::sleep(Duration::from_millis(200));
        old_log = pool.log();
    }
    assert!(old_log.contains("the lease could not be renewed"), "{old_log}");
    for l in old_log.lines().filter(|l| l.contains("lease") || l.contains("blocklisted")).take(6) {
        eprintln!("the fenced writer's log: {l}");
    }
    let (code, _, err) = run(&["umount", s(&m.mnt)]);
    eprintln!("umount of the fenced writer: {code}: {err}");
    drop(m);

    // The new host's data is intact, and nothing of the old writer's late.
    for (name, body) in &kept {
        assert!(fs::read(new.path(name)).unwrap() == *body, "{name} after the old writer went on");
    }
    assert!(!new.path("late").exists(), "the fenced writer's file reached the pool");
    new.unmount();
    other.fsck_clean();
    let m = other.mount(&[]);
    for (name, body) in &kept {
        assert!(fs::read(m.path(name)).unwrap() == *body, "{name} after a remount");
    }
    m.unmount();
}
