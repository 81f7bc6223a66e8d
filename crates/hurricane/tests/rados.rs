//! The `rados` device kind against a real one-node Ceph cluster, started by
//! `scripts/ceph-dev-cluster.sh` in a directory of this test process's own
//! and stopped when the process exits. Needs the Debian packages ceph-mon,
//! ceph-osd, ceph-common and librados-dev (`HURRICANE_CEPH=1
//! scripts/setup.sh`).
#![cfg(feature = "rados")]
// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::rados::{object_prefix, CHUNK};
use hurricane::device::{Device, MemDevice, RadosCluster, RadosDevice, RadosOptions};
use hurricane::{Error, FormatOptions, Fs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const POOL: &str = "hurricane";
const MB: u64 = 1 << 20;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ceph-dev-cluster.sh")
}

fn cluster_dir() -> PathBuf {
    std::env::temp_dir().join(format!("hurricane-rados-test-{}", std::process::id()))
}

extern "C" {
    /// glibc's `atexit` that is handed the exit status.
    fn on_exit(f: extern "C" fn(libc::c_int, *mut libc::c_void), arg: *mut libc::c_void) -> libc::c_int;
}

/// Stops this process's cluster when the test harness exits, then ends the
/// process at once with the harness's status. The connection every test's
/// devices share is never shut down, so librados's threads still run while
/// the process exits; left to the rest of `exit`, they met librados's static
/// objects being destroyed and the process died of SIGSEGV after every
/// test had passed (one run in four).
extern "C" fn stop_cluster(status: libc::c_int, _: *mut libc::c_void) {
    let _ = std::process::Command::new(script()).arg("stop").arg(cluster_dir()).status();
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: ends the process; nothing after this handler is wanted.
    unsafe { libc::_exit(status) };
}

/// The config of this process's cluster, started on first use.
fn conf() -> &'static Path {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    CONF.get_or_init(|| {
        let t = std::time::Instant::now();
        let out = std::process::Command::new(script()).arg("start").arg(cluster_dir()).output().unwrap();
        // SAFETY: registers a function that runs a command and ends the
        // process; the test harness ends the process with `exit`, which
        // runs it after every test.
        unsafe { on_exit(stop_cluster, std::ptr::null_mut()) };
        assert!(out.status.success(), "ceph-dev-cluster.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("dev cluster up in {:.1?}", t.elapsed());
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// One connection for the whole process, as a pool would share it.
fn cluster() -> Arc<RadosCluster> {
    static CLUSTER: OnceLock<Arc<RadosCluster>> = OnceLock::new();
    CLUSTER.get_or_init(|| RadosCluster::connect(conf(), &RadosOptions::default()).unwrap()).clone()
}

/// A prefix no other test (or earlier run) has written under.
fn fresh_prefix(what: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&std::process::id().to_be_bytes());
    id[4..8].copy_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    format!("{}.{what}", object_prefix(&id, 0))
}

fn device(what: &str, size: u64) -> RadosDevice {
    RadosDevice::open(cluster(), POOL, &fresh_prefix(what), size).unwrap()
}

#[test]
fn object_names_follow_the_pool_id_and_device_index() {
    let id: [u8; 16] = core::array::from_fn(|i| i as u8 * 17);
    assert_eq!(object_prefix(&id, 3), "hurricane.00112233445566778899aabbccddeeff.3");
    let d = RadosDevice::open(cluster(), POOL, &object_prefix(&id, 3), 64 * MB).unwrap();
    assert_eq!(d.object_name(0x12), "hurricane.00112233445566778899aabbccddeeff.3.0000000000000012");
    assert_eq!(d.name(), "rados:hurricane/hurricane.00112233445566778899aabbccddeeff.3");
    assert_eq!(d.size(), 64 * MB);
}

#[test]
fn reads_writes_and_overwrites_across_chunk_boundaries() {
    let d = device("rw", 3 * CHUNK);
    // Never written: zeros.
    let mut buf = vec![0xffu8; 8192];
    d.read_at(&mut buf, CHUNK - 4096).unwrap();
    assert!(buf.iter().all(|&b| b == 0));

    // A write across the first boundary, then one that spans a whole chunk.
    let a = pattern(1, 64 * 1024);
    d.write_at(&a, CHUNK - 32 * 1024).unwrap();
    let b = pattern(2, (CHUNK + 8192) as usize);
    d.write_at(&b, 2 * CHUNK - 4096).unwrap_err(); // past the end: 3 chunks hold less
    let b = pattern(2, (CHUNK + 4096) as usize);
    d.write_at(&b, 2 * CHUNK - 4096).unwrap();
    d.flush().unwrap();

    let mut got = vec![0u8; a.len()];
    d.read_at(&mut got, CHUNK - 32 * 1024).unwrap();
    assert!(got == a);
    let mut got = vec![0u8; b.len()];
    d.read_at(&mut got, 2 * CHUNK - 4096).unwrap();
    assert!(got == b);

    // Overwrite a block in the middle of the first write, across nothing.
    let c = pattern(3, 4096);
    d.write_at(&c, CHUNK).unwrap();
    let mut got = vec![0u8; a.len()];
    d.read_at(&mut got, CHUNK - 32 * 1024).unwrap();
    let mut want = a.clone();
    want[32 * 1024..36 * 1024].copy_from_slice(&c);
    assert!(got == want);

    // An object written only up to some offset reads zeros past it, and a
    // read spanning all three chunks sees everything together.
    let mut all = vec![0xaau8; (3 * CHUNK) as usize];
    d.read_at(&mut all, 0).unwrap();
    let mut model = vec![0u8; (3 * CHUNK) as usize];
    let at = (CHUNK - 32 * 1024) as usize;
    model[at..at + want.len()].copy_from_slice(&want);
    let at = (2 * CHUNK - 4096) as usize;
    model[at..at + b.len()].copy_from_slice(&b);
    assert!(all == model);

    // A new handle on the same objects (another connection) sees the same.
    let other = RadosDevice::connect(conf(), POOL, d.object_name(0).rsplit_once('.').unwrap().0, 3 * CHUNK).unwrap();
    let mut again = vec![0u8; all.len()];
    other.read_at(&mut again, 0).unwrap();
    assert!(again == model);
}

#[test]
fn discard_removes_whole_chunks_only() {
    let d = device("discard", 4 * CHUNK);
    let data = pattern(4, (4 * CHUNK) as usize);
    d.write_at(&data, 0).unwrap();
    // Covers chunk 1 whole and parts of chunks 0 and 2.
    d.discard(CHUNK / 2, 2 * CHUNK).unwrap();
    let mut got = vec![0u8; data.len()];
    d.read_at(&mut got, 0).unwrap();
    let c = CHUNK as usize;
    assert!(got[..c] == data[..c]);
    assert!(got[c..2 * c].iter().all(|&b| b == 0));
    assert!(got[2 * c..] == data[2 * c..]);
}

/// Zeroing sends no zeros: whole chunks lose their objects, parts of
/// chunks are zeroed in place; the rest stays, and never-written chunks
/// stay absent.
#[test]
fn zero_range_zeroes_parts_and_removes_whole_chunks() {
    let d = device("zero", 5 * CHUNK);
    let data = pattern(7, (3 * CHUNK) as usize);
    d.write_at(&data, 0).unwrap();
    // Part of chunk 0, all of chunk 1, part of chunk 2; then a range over
    // chunk 3 (part) and 4 (whole), never written.
    let (at, len) = (CHUNK - 8192, CHUNK + 8192 + 12288);
    assert!(d.zero_range(at, len).unwrap());
    assert!(d.zero_range(3 * CHUNK + 4096, 2 * CHUNK - 4096).unwrap());
    let mut got = vec![0xffu8; (5 * CHUNK) as usize];
    d.read_at(&mut got, 0).unwrap();
    let mut model = vec![0u8; got.len()];
    model[..data.len()].copy_from_slice(&data);
    model[at as usize..(at + len) as usize].fill(0);
    assert!(got == model);
    let objects = std::process::Command::new("rados")
        .args(["-c", &conf().display().to_string(), "-p", POOL, "ls"])
        .output()
        .unwrap();
    let objects = String::from_utf8_lossy(&objects.stdout);
    let have = |chunk| objects.lines().any(|o| o == d.object_name(chunk));
    assert!(have(0) && !have(1) && have(2), "chunk 1 removed, 0 and 2 kept: {objects}");
    assert!(!have(4), "zeroing created an object never written");
    let e = d.zero_range(4 * CHUNK, 2 * CHUNK).unwrap_err();
    assert!(e.to_string().contains("past the end"), "{e}");
}

#[test]
fn many_threads_keep_many_operations_in_flight() {
    let d = Arc::new(device("threads", 8 * CHUNK));
    let per = 64usize;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let d = d.clone();
            s.spawn(move || {
                for i in 0..per as u64 {
                    // Interleaved blocks: every chunk sees every thread.
                    let blk = i * 8 + t;
                    d.write_at(&pattern(blk, 4096), blk * 4096 * 16).unwrap();
                }
            });
        }
    });
    d.flush().unwrap();
    for blk in 0..8 * per as u64 {
        let mut got = vec![0u8; 4096];
        d.read_at(&mut got, blk * 4096 * 16).unwrap();
        assert!(got == pattern(blk, 4096), "block {blk}");
    }
}

#[test]
fn errors_name_the_pool_and_the_cluster() {
    let e = RadosDevice::open(cluster(), "no-such-pool", "x", MB).err().unwrap();
    assert!(matches!(e, Error::Device(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("no-such-pool") && msg.contains(&conf().display().to_string()), "{msg}");

    let e = RadosCluster::connect(Path::new("/nonexistent/ceph.conf"), &RadosOptions::default()).err().unwrap();
    assert!(e.to_string().contains("/nonexistent/ceph.conf"), "{e}");

    let d = device("bounds", MB);
    let e = d.read_at(&mut [0u8; 4096], MB).unwrap_err();
    assert!(e.to_string().contains("past the end"), "{e}");
}

#[test]
fn a_cluster_that_does_not_answer_times_out() {
    // A config naming a monitor nobody listens on.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("ceph.conf");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(
        &conf,
        format!(
            "[global]\nmon_host = v2:127.0.0.1:{port}\nauth_client_required = none\nlog_file = {}\n",
            dir.path().join("client.log").display()
        ),
    )
    .unwrap();
    let opts = RadosOptions { connect_timeout: Duration::from_secs(2), ..RadosOptions::default() };
    let t = std::time::Instant::now();
    let e = RadosCluster::connect(&conf, &opts).err().unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?}", t.elapsed());
    assert!(e.to_string().contains("cannot connect"), "{e}");
}

/// A pool of a local memory device (journal, half the meta-file) and two
/// rados devices: files striped over the two, replicated across memory and
/// the cluster; closed, reopened through new connections, read back.
#[test]
fn a_pool_mixing_memory_and_rados_devices_formats_opens_and_round_trips() {
    let size = 64 * MB;
    let mem = Arc::new(MemDevice::new("mem0", size));
    let p1 = fresh_prefix("pool1");
    let p2 = fresh_prefix("pool2");
    let devs = |mem: &Arc<MemDevice>| -> Vec<Arc<dyn Device>> {
        vec![
            mem.clone(),
            Arc::new(RadosDevice::open(cluster(), POOL, &p1, size).unwrap()),
            Arc::new(RadosDevice::open(cluster(), POOL, &p2, size).unwrap()),
        ]
    };
    let opts = FormatOptions { default_layout: Some("stripe(width=2)".into()), ..FormatOptions::default() };
    Fs::format(devs(&mem), &opts).unwrap();

    let files: Vec<(&str, Option<&str>, Vec<u8>)> = vec![
        ("/striped", Some("stripe(unit=64K)[extent@1,extent@2]"), pattern(10, 9 * MB as usize + 12345)),
        ("/mirrored", Some("replicate[extent@0,extent@2]"), pattern(11, 3 * MB as usize + 7)),
        ("/default", None, pattern(12, 5 * MB as usize)),
        ("/small", None, pattern(13, 100)),
    ];
    {
        let fs = Fs::open(devs(&mem), quiet()).unwrap();
        for (p, l, data) in &files {
            fs.write_file(p, data, *l).unwrap();
        }
        let l = fs.layout_of("/striped").unwrap();
        assert!(l.contains("stripe(unit=64K)[") && l.contains("extent@1") && l.contains("extent@2"), "{l}");
        fs.close().unwrap();
    }
    // Through a connection of its own, as another process would.
    let other = RadosCluster::connect(conf(), &RadosOptions::default()).unwrap();
    let devs2: Vec<Arc<dyn Device>> = vec![
        mem.clone(),
        Arc::new(RadosDevice::open(other.clone(), POOL, &p1, size).unwrap()),
        Arc::new(RadosDevice::open(other, POOL, &p2, size).unwrap()),
    ];
    let fs = Fs::open(devs2, quiet()).unwrap();
    for (p, _, data) in &files {
        assert!(fs.read_file(p).unwrap() == *data, "{p} differs after reopening");
    }
    check_clean(&fs, "pool over memory and rados devices");
    fs.close().unwrap();
}

/// A cluster of one test's own, stopped when the test ends (passing or not).
struct OwnCluster(PathBuf);

impl OwnCluster {
    fn start(what: &str) -> (OwnCluster, PathBuf) {
        Self::start_with(what, false)
    }

    /// With a manager (`CEPH_DEV_MGR=1`): the monitor learns what pools
    /// hold, and enforces their quotas, only from one.
    fn start_with_manager(what: &str) -> (OwnCluster, PathBuf) {
        Self::start_with(what, true)
    }

    fn start_with(what: &str, manager: bool) -> (OwnCluster, PathBuf) {
        let dir = std::env::temp_dir().join(format!("hurricane-rados-test-{}-{what}", std::process::id()));
        let guard = OwnCluster(dir.clone());
        let out = std::process::Command::new(script())
            .arg("start")
            .arg(&dir)
            .env("CEPH_DEV_MGR", if manager { "1" } else { "0" })
            .output()
            .unwrap();
        assert!(out.status.success(), "ceph-dev-cluster.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        (guard, PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
    }

    /// `ceph-dev-cluster.sh pause|resume`: the OSD stopped where it
    /// stands, or let go on.
    fn osd(&self, cmd: &str) {
        let ok = std::process::Command::new(script()).arg(cmd).arg(&self.0).status().unwrap();
        assert!(ok.success(), "ceph-dev-cluster.sh {cmd}");
    }

    fn kill_osd(&self) {
        let pid = std::fs::read_to_string(self.0.join("run/osd.0.pid")).unwrap();
        let ok = std::process::Command::new("kill").arg("-KILL").arg(pid.trim()).status().unwrap();
        assert!(ok.success());
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(script()).arg("stop").arg(&self.0).status();
    }
}

/// With its OSD gone, requests fail after the operation timeout with an
/// I/O error that names the device, the object and the cause; none hangs.
#[test]
fn an_osd_down_is_an_error_naming_the_object() {
    let (own, conf) = OwnCluster::start("osd-down");
    let opts = RadosOptions { op_timeout: Duration::from_secs(3), ..RadosOptions::default() };
    let cluster = RadosCluster::connect(&conf, &opts).unwrap();
    let d = RadosDevice::open(cluster, POOL, "down", 2 * CHUNK).unwrap();
    d.write_at(&pattern(5, 8192), CHUNK - 4096).unwrap();
    own.kill_osd();

    let t = std::time::Instant::now();
    let e = d.write_at(&pattern(6, 4096), CHUNK + 4096).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("rados:hurricane/down") && msg.contains("down.0000000000000001"), "{msg}");
    assert!(msg.contains("timed out"), "{msg}");

    let e = d.read_at(&mut [0u8; 4096], 0).unwrap_err();
    assert!(e.to_string().contains("read of object down.0000000000000000"), "{e}");
}

/// `ceph -c CONF ARGS...`, which must succeed: its output.
fn ceph(conf: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("ceph").arg("-c").arg(conf).args(args).output().unwrap();
    assert!(out.status.success(), "ceph {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the pool's flags (`ceph osd pool ls detail`) hold `flag`,
/// or not, as asked.
fn wait_for_pool_flag(conf: &Path, flag: &str, want: bool) {
    let t = std::time::Instant::now();
    loop {
        let dump = ceph(conf, &["osd", "pool", "ls", "detail"]);
        let line = dump.lines().find(|l| l.contains(&format!("'{POOL}'"))).unwrap_or_default().to_string();
        let has = line.split_whitespace().any(|w| w.split(',').any(|f| f == flag));
        if has == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the pool's flags {} {flag} after 60 s: {line}",
            if want { "lack" } else { "still hold" }
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The cluster's full ratios (`ceph osd set-*-ratio`), then waits until
/// the pool's flags say it is full, or not, as asked.
fn set_full_ratios(conf: &Path, full: &str, backfill: &str, near: &str, want_full: bool) {
    // Each ratio must stay below the next: lower the full one last, raise it first.
    let order: [(&str, &str); 3] = if want_full {
        [("set-nearfull-ratio", near), ("set-backfillfull-ratio", backfill), ("set-full-ratio", full)]
    } else {
        [("set-full-ratio", full), ("set-backfillfull-ratio", backfill), ("set-nearfull-ratio", near)]
    };
    for (cmd, ratio) in order {
        ceph(conf, &["osd", cmd, ratio]);
    }
    wait_for_pool_flag(conf, "full", want_full);
}

/// A cluster that has no room for the pool (`no_room` makes it so, `room`
/// undoes it) refuses writes at once, with an error that names the object
/// and the cause (`cause`, a word of the message), rather than making them
/// wait for room; the error is transient, so the device is not faulted and
/// the pool loses nothing: what was committed before reads back, a sync
/// meanwhile fails and keeps what it could not write, and once the cluster
/// has room again the same open pool writes it, and the pool opens again
/// clean with every file.
fn without_room_nothing_is_lost(conf: &Path, cause: &str, no_room: impl Fn(), room: impl Fn()) {
    let conf_s = conf.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join(cause);
    let paths = vec![PathBuf::from(format!("rados:{POOL}?conf={conf_s}"))];
    let opts = FormatOptions { default_layout: Some("extent".into()), ..Default::default() };
    Fs::mkfs_devices(&pool_dir, &paths, Some(64 * MB), &opts).unwrap();
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    let before = pattern(1, 3 * MB as usize);
    fs.write_file("/before", &before, None).unwrap();
    fs.sync().unwrap();
    // A device of the same cluster outside the pool, for the error itself.
    let cluster = RadosCluster::connect(conf, &RadosOptions::default()).unwrap();
    let d = RadosDevice::open(cluster, POOL, "spill", 2 * CHUNK).unwrap();
    d.write_at(&pattern(2, 8192), 0).unwrap();

    no_room();
    let t = std::time::Instant::now();
    let e = d.write_at(&pattern(3, 4096), CHUNK).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10), "a refused write took {:?}", t.elapsed());
    assert!(matches!(e, Error::NoSpace(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("rados:hurricane/spill") && msg.contains("spill.0000000000000001"), "{msg}");
    assert!(msg.contains(cause), "{msg}");
    assert!(d.transient(&e), "a pool without room is the cluster's state, not damage: {e}");
    // Reads go on.
    let mut back = vec![0u8; 8192];
    d.read_at(&mut back, 0).unwrap();
    assert!(back == pattern(2, 8192));

    // The pool: what was committed reads back; new data cannot be made
    // durable, and saying so takes no longer than a refusal.
    assert!(fs.read_file("/before").unwrap() == before);
    let during = pattern(4, 2 * MB as usize);
    let t = std::time::Instant::now();
    let wrote = fs.write_file("/during", &during, None);
    let synced = wrote.as_ref().map_err(|e| e.to_string()).and_then(|_| fs.sync().map_err(|e| e.to_string()));
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?}", t.elapsed());
    let err = synced.expect_err("a write and sync without room succeeded");
    eprintln!("refused while the cluster had no room: {err}");
    assert!(err.contains(cause), "{err}");
    assert!(fs.read_file("/before").unwrap() == before);

    // Room again: the same open pool takes writes.
    room();
    d.write_at(&pattern(3, 4096), CHUNK).unwrap();
    let t = std::time::Instant::now();
    loop {
        let r = fs.write_file("/during", &during, None).and_then(|_| fs.sync());
        match r {
            Ok(()) => break,
            Err(e) if t.elapsed() < Duration::from_secs(30) => {
                eprintln!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("the pool took no writes 30 s after the cluster had room: {e}"),
        }
    }
    let after = pattern(5, MB as usize);
    fs.write_file("/after", &after, None).unwrap();
    fs.sync().unwrap();
    check_clean(&fs, "after the cluster had no room");
    fs.close().unwrap();
    drop(fs);
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    for (p, data) in [("/before", &before), ("/during", &during), ("/after", &after)] {
        assert!(fs.read_file(p).unwrap() == *data, "{p} differs after reopening");
    }
    check_clean(&fs, "reopened after the cluster had no room");
    fs.close().unwrap();
}

/// A full cluster: its OSD over the full ratio.
#[test]
fn a_full_cluster_refuses_writes_at_once_and_loses_nothing() {
    let (_own, conf) = OwnCluster::start("full");
    without_room_nothing_is_lost(
        &conf,
        "full",
        // The OSD holds a few MiB of its 2 GiB: more than 0.05% of it.
        || set_full_ratios(&conf, "0.0005", "0.0004", "0.0003", true),
        || set_full_ratios(&conf, "0.95", "0.90", "0.85", false),
    );
}

/// A pool over its quota (`ceph osd pool set-quota`), which the monitor
/// enforces once the manager has told it what the pool holds: the error
/// says so and names the command that raises it.
#[test]
fn a_pool_over_its_quota_refuses_writes_at_once_and_loses_nothing() {
    let (_own, conf) = OwnCluster::start_with_manager("quota");
    let quota = |bytes: &str| ceph(&conf, &["osd", "pool", "set-quota", POOL, "max_bytes", bytes]);
    without_room_nothing_is_lost(
        &conf,
        "quota",
        || {
            // The pool holds a few MiB: over a quota of one byte.
            quota("1");
            wait_for_pool_flag(&conf, "full_quota", true);
        },
        || {
            quota("0");
            wait_for_pool_flag(&conf, "full_quota", false);
        },
    );
}

/// The writer's record on a lease object (`LEASE_WRITER_XATTR`), as the
/// `rados` tool reads it.
fn recorded_writer(conf: &Path, object: &str) -> String {
    use hurricane::device::rados::LEASE_WRITER_XATTR;
    let got = std::process::Command::new("rados")
        .args(["-c", &conf.display().to_string(), "-p", POOL, "getxattr", object, LEASE_WRITER_XATTR])
        .output()
        .unwrap();
    String::from_utf8_lossy(&got.stdout).trim().to_string()
}

/// A pool with devices in two clusters: its writer records its address in
/// each (the second with that cluster's fsid), and a holder that did not
/// release the lease is fenced in both, so a stalled writer that resumes
/// writes to neither cluster's devices.
#[test]
fn the_next_holder_fences_the_previous_one_in_every_cluster_of_the_pool() {
    use hurricane::device::RadosLease;
    let (_a, conf_a) = OwnCluster::start("fence-a");
    let (_b, conf_b) = OwnCluster::start("fence-b");
    let connect = |c: &Path| RadosCluster::connect(c, &RadosOptions::default()).unwrap();
    let d = Duration::from_millis(1500);
    let (old_a, old_b) = (connect(&conf_a), connect(&conf_b));
    assert_ne!(old_a.fsid().unwrap(), old_b.fsid().unwrap());
    let dev_a = RadosDevice::open(old_a.clone(), POOL, "fence", 8 * MB).unwrap();
    let dev_b = RadosDevice::open(old_b.clone(), POOL, "fence", 8 * MB).unwrap();
    dev_a.write_at(b"before", 0).unwrap();
    dev_b.write_at(b"before", 0).unwrap();
    let lease =
        RadosLease::take_with(old_a.clone(), vec![old_b.clone()], POOL, "fence.lease", "host old pid 1", d).unwrap();
    let record = format!("{}\n{} {}", old_a.addrs().unwrap(), old_b.fsid().unwrap(), old_b.addrs().unwrap());
    assert_eq!(recorded_writer(&conf_a, "fence.lease"), record);

    // The old holder stalls; the next takes over from fresh connections.
    lease.abandon();
    std::thread::sleep(d + Duration::from_millis(700));
    let (new_a, new_b) = (connect(&conf_a), connect(&conf_b));
    let taken =
        RadosLease::take_with(new_a.clone(), vec![new_b.clone()], POOL, "fence.lease", "host new pid 2", d).unwrap();
    for (dev, which) in [(&dev_a, "a"), (&dev_b, "b")] {
        let e = dev.write_at(b"too late", 0).unwrap_err().to_string();
        assert!(e.contains("blocklisted"), "cluster {which}: {e}");
    }
    for c in [&new_a, &new_b] {
        let fresh = RadosDevice::open(c.clone(), POOL, "fence", 8 * MB).unwrap();
        let mut buf = [0u8; 6];
        fresh.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"before");
        fresh.write_at(b"after!", 0).unwrap();
    }
    drop(taken);
}

/// Through a pool: `Fs::open_dir` of a pool with devices in two clusters
/// takes its lease in the first device's cluster and records the writer
/// for both; a clean close releases it, and the next open fences nobody.
#[test]
fn a_pool_in_two_clusters_records_its_writer_in_both() {
    let (_a, conf_a) = OwnCluster::start("two-a");
    let (_b, conf_b) = OwnCluster::start("two-b");
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("two");
    let paths = vec![
        PathBuf::from(format!("rados:{POOL}?conf={}", conf_a.display())),
        PathBuf::from(format!("rados:{POOL}?conf={}", conf_b.display())),
    ];
    let opts = FormatOptions { default_layout: Some("replicate[extent@0,extent@1]".into()), ..Default::default() };
    Fs::mkfs_devices(&pool_dir, &paths, Some(64 * MB), &opts).unwrap();
    let lease = format!("{}.lease", first_prefix(&pool_dir));
    let data = pattern(9, MB as usize);
    for round in 0..2 {
        let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
        let record = recorded_writer(&conf_a, &lease);
        let lines: Vec<&str> = record.lines().collect();
        assert_eq!(lines.len(), 2, "round {round}: {record:?}");
        let b = RadosCluster::connect(&conf_b, &RadosOptions::default()).unwrap();
        assert!(lines[1].starts_with(&format!("{} ", b.fsid().unwrap())), "round {round}: {record:?}");
        if round == 0 {
            fs.write_file("/f", &data, None).unwrap();
        }
        assert!(fs.read_file("/f").unwrap() == data);
        check_clean(&fs, "pool in two clusters");
        fs.close().unwrap();
        // Released cleanly: no writer recorded.
        assert_eq!(recorded_writer(&conf_a, &lease), "", "round {round}");
    }
}

/// `Fs::mkfs_devices` with an image file and two `rados:` devices: pool.conf
/// names them with their objects' prefix (from the pool id), size and
/// config; the pool opens from its directory, and from another directory
/// holding only a copy of pool.conf (as another host would).
#[test]
fn a_pool_directory_names_rados_devices() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("names");
    let conf = conf().display().to_string();
    let paths = vec![
        dir.path().join("img0"),
        PathBuf::from(format!("rados:{POOL}?conf={conf}&size=64M")),
        PathBuf::from(format!("rados:{POOL}?conf={conf}")),
    ];
    let opts =
        FormatOptions { default_layout: Some("stripe(unit=64K)[extent@1,extent@2]".into()), ..Default::default() };
    Fs::mkfs_devices(&pool_dir, &paths, Some(32 * MB), &opts).unwrap();

    let listed = std::fs::read_to_string(pool_dir.join("pool.conf")).unwrap();
    let rados: Vec<&str> = listed.lines().filter_map(|l| l.strip_prefix("device = rados:")).collect();
    assert_eq!(rados.len(), 2, "{listed}");
    // Objects named after the pool id and device index; sizes and config
    // written out in full.
    assert!(rados[0].starts_with(&format!("{POOL}/hurricane.")) && rados[0].contains(".1?conf="), "{listed}");
    assert!(rados[0].ends_with(&format!("?conf={conf}&size={}", 64 * MB)), "{listed}");
    assert!(rados[1].contains(".2?conf=") && rados[1].ends_with(&format!("&size={}", 32 * MB)), "{listed}");

    let data = pattern(20, 3 * MB as usize + 999);
    {
        let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
        fs.write_file("/f", &data, None).unwrap();
        fs.close().unwrap();
    }
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(pool_dir.join("pool.conf"), other.join("pool.conf")).unwrap();
    let fs = Fs::open_dir(&other, quiet()).unwrap();
    assert!(fs.read_file("/f").unwrap() == data);
    check_clean(&fs, "pool directory with rados devices");
    fs.close().unwrap();

    // Refused by name: a rados device without a size anywhere.
    let e = Fs::mkfs_devices(&dir.path().join("p2"), &paths[1..], None, &opts).unwrap_err();
    assert!(e.to_string().contains("no size"), "{e}");
}

/// One writer at a time: a second lease on the same object is refused,
/// naming the holder, for as long as the holder renews it; a holder that
/// stops renewing (a host that died) loses it when it expires, and a
/// released lease can be taken at once.
#[test]
fn a_lease_has_one_holder_and_expires_when_its_holder_stops() {
    use hurricane::device::RadosLease;
    let object = format!("{}.lease", fresh_prefix("lease"));
    let d = Duration::from_millis(1500);
    let first = RadosLease::take(cluster(), POOL, &object, "host alpha pid 1", d).unwrap();
    let refused = |who: &str| match RadosLease::take(cluster(), POOL, &object, who, d) {
        Err(e @ Error::Busy(_)) => e.to_string(),
        Err(e) => panic!("{who}: {e}"),
        Ok(_) => panic!("{who}: a second lease on {object}"),
    };
    let e = refused("host beta pid 2");
    assert!(e.contains("host alpha pid 1") && e.contains("open for writing elsewhere"), "{e}");
    assert_eq!(hurricane::Error::Busy(String::new()).errno(), libc::EBUSY);
    // Renewed: still held well past its duration.
    std::thread::sleep(d * 2);
    assert!(!first.is_lost());
    refused("host beta pid 2");
    // The holder dies: after the duration the lease is free.
    first.abandon();
    std::thread::sleep(d + Duration::from_millis(700));
    let second = RadosLease::take(cluster(), POOL, &object, "host beta pid 2", d).unwrap();
    let e = refused("host gamma pid 3");
    assert!(e.contains("host beta pid 2"), "{e}");
    // Released on drop: free at once.
    drop(second);
    let third = RadosLease::take(cluster(), POOL, &object, "host gamma pid 3", d).unwrap();
    assert!(!third.is_lost());
}

/// A holder whose lease disappears behind its back (here its object is
/// removed, as a lock broken by an administrator would be) finds out at its
/// next renewal and counts it lost.
#[test]
fn a_lease_taken_away_is_lost() {
    use hurricane::device::RadosLease;
    let object = format!("{}.lease", fresh_prefix("lost"));
    let d = Duration::from_millis(900);
    let lease = RadosLease::take(cluster(), POOL, &object, "host alpha pid 1", d).unwrap();
    let st = std::process::Command::new("rados")
        .args(["-c", &conf().display().to_string(), "-p", POOL, "rm", &object])
        .status()
        .unwrap();
    assert!(st.success());
    let t = std::time::Instant::now();
    while !lease.is_lost() && t.elapsed() < d * 4 {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(lease.is_lost(), "the renewal after the removal failed");
}

/// A holder whose cluster stalls for longer than its lease (the OSD does
/// not answer) counts the lease lost while it cannot renew it, and takes
/// it back once the cluster answers, since no other host took the pool
/// over meanwhile; held again, it refuses a second holder as before. A
/// holder that another host took the pool from stays lost (see the
/// fencing test below: the next holder blocklists it).
#[test]
fn a_lease_lapsed_in_a_stall_is_taken_back_when_the_cluster_answers() {
    use hurricane::device::RadosLease;
    let (own, conf) = OwnCluster::start("lapse");
    let opts = RadosOptions { op_timeout: Duration::from_secs(1), ..RadosOptions::default() };
    let cluster = RadosCluster::connect(&conf, &opts).unwrap();
    let d = Duration::from_secs(3);
    let object = "lapse.lease";
    let lease = RadosLease::take(cluster.clone(), POOL, object, "host alpha pid 1", d).unwrap();
    let wait_for = |lost: bool, limit: Duration| {
        let t = std::time::Instant::now();
        while lease.is_lost() != lost && t.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(100));
        }
        lease.is_lost() == lost
    };
    own.osd("pause");
    let lapsed = wait_for(true, d * 4);
    own.osd("resume");
    assert!(lapsed, "the lease was not counted lost after {:?} without the cluster", d * 4);
    assert!(wait_for(false, Duration::from_secs(30)), "the lease was not taken back once the cluster answered");
    // Held again, and renewed.
    std::thread::sleep(d * 2);
    assert!(!lease.is_lost());
    let other = RadosCluster::connect(&conf, &opts).unwrap();
    match RadosLease::take(other, POOL, object, "host beta pid 2", d) {
        Err(e @ Error::Busy(_)) => assert!(e.to_string().contains("host alpha pid 1"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a second holder while the first one holds the lease again"),
    }
    drop(lease);

    // Fenced while it could not renew (as a host taking the pool over
    // fences it): never taken back.
    let fenced = RadosCluster::connect(&conf, &opts).unwrap();
    let lease = RadosLease::take(fenced.clone(), POOL, "fenced.lease", "host gamma pid 3", d).unwrap();
    own.osd("pause");
    let t = std::time::Instant::now();
    while !lease.is_lost() && t.elapsed() < d * 4 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let lapsed = lease.is_lost();
    let fenced_by = other_blocklists(&conf, &opts, &fenced);
    own.osd("resume");
    assert!(lapsed, "the lease was not counted lost after {:?} without the cluster", d * 4);
    fenced_by.unwrap();
    std::thread::sleep(Duration::from_secs(8));
    assert!(lease.is_lost(), "a fenced holder took its lease back");
}

/// Blocklists `victim`'s address from a connection of its own.
fn other_blocklists(conf: &Path, opts: &RadosOptions, victim: &RadosCluster) -> hurricane::Result<()> {
    let addr = victim.addrs()?;
    RadosCluster::connect(conf, opts)?.blocklist(&addr)
}

/// A pool with devices in the cluster opens for writing in one place at a
/// time: a second writable open (another host with a copy of pool.conf) is
/// refused naming this process, a read-only one is not; once the first
/// closes, the second opens.
#[test]
fn a_pool_in_the_cluster_has_one_writer() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("one-writer");
    let conf = conf().display().to_string();
    let paths =
        vec![PathBuf::from(format!("rados:{POOL}?conf={conf}")), PathBuf::from(format!("rados:{POOL}?conf={conf}"))];
    Fs::mkfs_devices(&pool_dir, &paths, Some(32 * MB), &FormatOptions::default()).unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(pool_dir.join("pool.conf"), other.join("pool.conf")).unwrap();

    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    fs.write_file("/f", b"written by the first", None).unwrap();
    fs.sync().unwrap();
    let e = Fs::open_dir(&other, quiet()).err().expect("a second writer");
    assert!(matches!(e, Error::Busy(_)), "{e}");
    assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");
    let ro = Fs::open_dir(&other, hurricane::Options { read_only: true, ..quiet() }).unwrap();
    assert_eq!(ro.read_file("/f").unwrap(), b"written by the first");
    drop(ro);
    fs.close().unwrap();
    drop(fs);
    let fs = Fs::open_dir(&other, quiet()).unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), b"written by the first");
    fs.close().unwrap();
}

/// The object prefix of the first rados device of the pool directory `dir`.
fn first_prefix(dir: &Path) -> String {
    let listed = std::fs::read_to_string(dir.join("pool.conf")).unwrap();
    let line = listed.lines().find_map(|l| l.strip_prefix(&format!("device = rados:{POOL}/")));
    line.and_then(|l| l.split('?').next()).unwrap_or_else(|| panic!("{listed}")).to_string()
}

/// A writer that lost its lease (its lock removed behind its back) stops
/// writing the pool at its next renewal: writes and commits fail as on a
/// read-only pool, naming the lease.
#[test]
fn a_pool_whose_lease_is_lost_is_written_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("lease-lost");
    let conf = conf().display().to_string();
    let paths = vec![PathBuf::from(format!("rados:{POOL}?conf={conf}"))];
    Fs::mkfs_devices(&pool_dir, &paths, Some(32 * MB), &FormatOptions::default()).unwrap();
    let prefix = first_prefix(&pool_dir);
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    fs.write_file("/before", b"kept", None).unwrap();
    fs.sync().unwrap();
    let st = std::process::Command::new("rados")
        .args(["-c", &conf, "-p", POOL, "rm", &format!("{prefix}.lease")])
        .status()
        .unwrap();
    assert!(st.success());
    // The renewal comes within a third of the lease's 30 s.
    let t = std::time::Instant::now();
    let e = loop {
        match fs.write_file(&format!("/after{}", t.elapsed().as_millis()), b"x", None) {
            Err(e) => break e,
            Ok(()) if t.elapsed() < Duration::from_secs(15) => std::thread::sleep(Duration::from_millis(200)),
            Ok(()) => panic!("still writing 15 s after the lease was taken away"),
        }
    };
    assert!(matches!(e, Error::ReadOnly(_)) && e.to_string().contains("lease"), "{e}");
    let e = fs.sync().unwrap_err();
    assert!(e.to_string().contains("lease"), "{e}");
    assert_eq!(fs.read_file("/before").unwrap(), b"kept", "reads go on");
}

/// A pool with devices in the cluster is found by name: mkfs describes it
/// in the cluster under its directory's name (refusing a name taken),
/// another host makes its own directory from `rados:POOL/NAME?conf=PATH`
/// alone, with its own config path, and a device added on one host reaches
/// the other's directory when it next opens the pool.
#[test]
fn a_pool_is_found_by_name_from_another_host() {
    use hurricane::pool::published::{locate, locator_of};
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("by-name");
    let conf_s = conf().display().to_string();
    let dev = |size: &str| PathBuf::from(format!("rados:{POOL}?conf={conf_s}{size}"));
    Fs::mkfs_devices(&pool_dir, &[dev(""), dev("")], Some(32 * MB), &FormatOptions::default()).unwrap();
    let locator = locator_of(&pool_dir).unwrap().unwrap();
    assert_eq!(locator, format!("rados:{POOL}/by-name?conf={}", std::fs::canonicalize(conf()).unwrap().display()));
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    fs.write_file("/f", b"made on the first host", None).unwrap();
    fs.close().unwrap();

    // The name is taken, from any directory; another name is not.
    let e = Fs::mkfs_devices(&dir.path().join("x/by-name"), &[dev("")], Some(32 * MB), &FormatOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::Exists(_)) && e.to_string().contains("a pool named by-name is already"), "{e}");
    assert!(!dir.path().join("x/by-name/pool.conf").exists(), "nothing made for a refused name");

    // The other host: its own copy of the cluster's config, nothing else.
    let other_conf = dir.path().join("other-ceph.conf");
    std::fs::copy(conf(), &other_conf).unwrap();
    let other_conf = std::fs::canonicalize(&other_conf).unwrap();
    let root = dir.path().join("other-host");
    let other = locate(&format!("rados:{POOL}/by-name?conf={}", other_conf.display()), &root).unwrap();
    assert_eq!(other, root.join(POOL).join("by-name"));
    let listed = std::fs::read_to_string(other.join("pool.conf")).unwrap();
    let devices: Vec<&str> = listed.lines().filter(|l| l.starts_with("device = ")).collect();
    assert_eq!(devices.len(), 2, "{listed}");
    assert!(devices.iter().all(|l| l.contains(&format!("conf={}&", other_conf.display()))), "{listed}");
    let fs = Fs::open_dir(&other, quiet()).unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), b"made on the first host");
    // A device added there.
    let mut spec = hurricane::device::RadosSpec::parse(&format!("rados:{POOL}?conf={}", other_conf.display())).unwrap();
    spec.prefix = Some(hurricane::device::rados_spec::object_prefix(&fs.pool_id(), 2));
    spec.size = Some(32 * MB);
    let new = hurricane::device::RadosConnections::default().open_device(&spec).unwrap();
    let opts = hurricane::fs::AddOptions { pool_dir: Some(other.clone()), path: Some(PathBuf::from(spec.to_string())) };
    assert_eq!(fs.add_device(new, &opts).unwrap(), 2);
    fs.write_file("/g", b"made on the other host", None).unwrap();
    fs.close().unwrap();
    drop(fs);

    // The first host's directory takes the new device list when it opens.
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    assert_eq!(fs.storage().device_count(), 3);
    assert_eq!(fs.read_file("/g").unwrap(), b"made on the other host");
    check_clean(&fs, "a pool found by name");
    fs.close().unwrap();
    let listed = std::fs::read_to_string(pool_dir.join("pool.conf")).unwrap();
    let devices: Vec<&str> = listed.lines().filter(|l| l.starts_with("device = ")).collect();
    assert_eq!(devices.len(), 3, "{listed}");
    assert!(devices.iter().all(|l| l.contains(&format!("conf={conf_s}&"))), "this host's config: {listed}");
    assert!(listed.contains("revision = 2"), "{listed}");

    // A name nobody took.
    let e = locate(&format!("rados:{POOL}/nobody?conf={conf_s}"), &root).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)) && e.to_string().contains("no pool named nobody"), "{e}");
}

/// The objects of the RADOS pool whose names start with `prefix`.
fn objects_of(prefix: &str) -> usize {
    let out = std::process::Command::new("rados")
        .args(["-c", &conf().display().to_string(), "-p", POOL, "ls"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with(prefix)).count()
}

/// A pool of one rados device of 256 MiB, files laid out by `extent`,
/// open: its temporary directory, pool directory, device prefix and pool.
fn one_device_pool(name: &str) -> (tempfile::TempDir, PathBuf, String, Fs) {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join(name);
    let conf_s = conf().display().to_string();
    let paths = vec![PathBuf::from(format!("rados:{POOL}?conf={conf_s}"))];
    let opts = FormatOptions { default_layout: Some("extent".into()), ..Default::default() };
    Fs::mkfs_devices(&pool_dir, &paths, Some(256 * MB), &opts).unwrap();
    let prefix = first_prefix(&pool_dir);
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    (dir, pool_dir, prefix, fs)
}

/// Space a pool frees goes back to the cluster once the free is durable:
/// deleting a large file removes the objects of the chunks it held whole,
/// and what is written after reads back.
#[test]
fn freed_space_goes_back_to_the_cluster() {
    let (_dir, pool_dir, prefix, fs) = one_device_pool("gives-back");
    let big = pattern(7, 48 * MB as usize);
    fs.write_file("/big", &big, None).unwrap();
    fs.write_file("/small", b"stays", None).unwrap();
    fs.sync().unwrap();
    let full = objects_of(&prefix);
    assert!(full >= 12, "48 MiB in 4 MiB objects: {full}");
    fs.remove("/big").unwrap();
    fs.sync().unwrap();
    let after = objects_of(&prefix);
    assert!(after + 10 <= full, "{full} objects before the delete, {after} after");
    // The space is used again, and reads back.
    let again = pattern(8, 20 * MB as usize);
    fs.write_file("/again", &again, None).unwrap();
    fs.sync().unwrap();
    assert!(fs.read_file("/again").unwrap() == again);
    assert_eq!(fs.read_file("/small").unwrap(), b"stays");
    check_clean(&fs, "after space went back to the cluster");
    fs.close().unwrap();
    let fs = Fs::open_dir(&pool_dir, quiet()).unwrap();
    assert!(fs.read_file("/again").unwrap() == again);
    fs.close().unwrap();
}

/// A chunk freed piece by piece (files smaller than a chunk, removed at
/// different times) goes back to the cluster with its last piece: here
/// no removal frees a chunk by its own blocks alone.
#[test]
fn a_chunk_freed_piece_by_piece_goes_back_with_its_last_piece() {
    let (_dir, _, prefix, fs) = one_device_pool("pieces");
    // 16 files of 1.5 MiB, one after the other: 24 MiB over 6 or 7 chunks,
    // each chunk shared by two to four files.
    let body = |i: usize| pattern(20 + i as u64, 3 * MB as usize / 2);
    for i in 0..16 {
        fs.write_file(&format!("/f{i}"), &body(i), None).unwrap();
        fs.sync().unwrap();
    }
    let full = objects_of(&prefix);
    for i in (0..16).step_by(2) {
        fs.remove(&format!("/f{i}")).unwrap();
    }
    fs.sync().unwrap();
    let half = objects_of(&prefix);
    for i in (1..16).step_by(2) {
        assert!(fs.read_file(&format!("/f{i}")).unwrap() == body(i), "f{i}");
        fs.remove(&format!("/f{i}")).unwrap();
    }
    fs.sync().unwrap();
    let after = objects_of(&prefix);
    assert!(after + 5 <= full, "{full} objects with the files, {half} with half of them, {after} with none");
    check_clean(&fs, "after chunks freed piece by piece went back");
    fs.close().unwrap();
}

/// Fencing: a holder that stopped renewing (stalled past its lease) is
/// blocklisted by the next holder, through the address it recorded in the
/// lease object, before the next holder writes: the old holder's
/// connection, and so the devices opened on it, can write nothing more,
/// with an error that says why. A lease released cleanly leaves no address,
/// and the next holder fences nobody.
#[test]
fn the_next_holder_fences_a_holder_that_did_not_release_the_lease() {
    use hurricane::device::RadosLease;
    let prefix = fresh_prefix("fence");
    let object = format!("{prefix}.lease");
    let d = Duration::from_millis(1500);
    let old = RadosCluster::connect(conf(), &RadosOptions::default()).unwrap();
    let dev = RadosDevice::open(old.clone(), POOL, &prefix, 8 * MB).unwrap();
    dev.write_at(b"before", 0).unwrap();
    let lease = RadosLease::take(old.clone(), POOL, &object, "host old pid 1", d).unwrap();
    assert_eq!(recorded_writer(conf(), &object), old.addrs().unwrap());

    // The old holder stalls: it renews no more, but its connection lives.
    lease.abandon();
    std::thread::sleep(d + Duration::from_millis(700));
    let new = RadosCluster::connect(conf(), &RadosOptions::default()).unwrap();
    let taken = RadosLease::take(new.clone(), POOL, &object, "host new pid 2", d).unwrap();
    let e = dev.write_at(b"too late", 0).unwrap_err().to_string();
    assert!(e.contains("blocklisted") && e.contains(&format!("{prefix}.0000000000000000")), "{e}");
    let fresh = RadosDevice::open(new.clone(), POOL, &prefix, 8 * MB).unwrap();
    let mut buf = [0u8; 6];
    fresh.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"before");

    // Released cleanly: the next holder fences nobody (its own connection
    // goes on writing).
    drop(taken);
    let again = RadosLease::take(cluster(), POOL, &object, "host third pid 3", d).unwrap();
    fresh.write_at(b"still", 0).unwrap();
    drop(again);
}
