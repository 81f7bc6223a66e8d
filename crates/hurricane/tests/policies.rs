//! Open-instance policies and the block cache: prefetch policies issue
//! exactly the device requests they should, the adaptive policy recognises
//! each access pattern, the cache bound holds under concurrent load and
//! writes leave no stale data, and open specs are checked and inherited.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{pattern, quiet, MB};
use hurricane::device::{Device, MemDevice, SimParams};
use hurricane::open::{CursorKind, LockMode, OpenFile, OpenSpec, Pattern, Prefetch};
use hurricane::{Creds, Error, FormatOptions, Fs, Options};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

const BS: usize = 4096;

/// A device that logs (device, block, blocks) of every read while on.
struct Recorder {
    inner: MemDevice,
    index: usize,
    log: Arc<Mutex<Vec<(usize, u64, u64)>>>,
    on: Arc<AtomicBool>,
}

impl Device for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> hurricane::Result<()> {
        if self.on.load(Ordering::SeqCst) {
            self.log.lock().push((self.index, offset / BS as u64, (buf.len() / BS) as u64));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> hurricane::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> hurricane::Result<()> {
        self.inner.flush()
    }
}

struct Recorded {
    fs: Fs,
    log: Arc<Mutex<Vec<(usize, u64, u64)>>>,
    on: Arc<AtomicBool>,
}

impl Recorded {
    /// A pool of `n` recording devices with a file of `blocks` blocks.
    fn new(n: usize, layout: &str, blocks: usize) -> Recorded {
        let log = Arc::new(Mutex::new(Vec::new()));
        let on = Arc::new(AtomicBool::new(false));
        let devs: Vec<Arc<dyn Device>> = (0..n)
            .map(|i| {
                Arc::new(Recorder {
                    inner: MemDevice::new(format!("rec{i}"), 16 * MB),
                    index: i,
                    log: log.clone(),
                    on: on.clone(),
                }) as Arc<dyn Device>
            })
            .collect();
        Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(devs, quiet()).unwrap();
        fs.write_file("/f", &pattern(1, blocks * BS), Some(layout)).unwrap();
        fs.sync().unwrap();
        Recorded { fs, log, on }
    }

    fn start(&self) {
        self.log.lock().clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// The reads logged since `start`, per device, as (block, blocks)
    /// relative to the lowest block read on that device, sorted. Waits a
    /// moment for prefetches still in flight.
    fn reads(&self) -> BTreeMap<usize, Vec<(u64, u64)>> {
        let mut last = usize::MAX;
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let n = self.log.lock().len();
            if n == last {
                break;
            }
            last = n;
        }
        self.on.store(false, Ordering::SeqCst);
        let mut per: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
        for &(d, b, n) in self.log.lock().iter() {
            per.entry(d).or_default().push((b, n));
        }
        for v in per.values_mut() {
            let base = v.iter().map(|x| x.0).min().unwrap_or(0);
            for x in v.iter_mut() {
                x.0 -= base;
            }
            v.sort_unstable();
        }
        per
    }
}

fn read_blocks(f: &OpenFile, blocks: std::ops::Range<u64>) {
    let mut buf = vec![0u8; BS];
    for b in blocks {
        assert_eq!(f.read_at(&mut buf, b * BS as u64).unwrap(), BS);
        assert_eq!(buf, pattern(1, (b as usize + 1) * BS)[b as usize * BS..]);
    }
}

fn spec(s: &str) -> OpenSpec {
    s.parse().unwrap()
}

#[test]
fn no_prefetch_reads_only_what_is_asked() {
    let r = Recorded::new(1, "extent@0", 32);
    let f = OpenFile::options().read(true).spec(spec("prefetch=none")).open(&r.fs, "/f").unwrap();
    r.start();
    read_blocks(&f, 0..4);
    // One request for a multi-block read.
    let mut buf = vec![0u8; 8 * BS];
    f.read_at(&mut buf, 8 * BS as u64).unwrap();
    assert_eq!(r.reads()[&0], vec![(0, 1), (1, 1), (2, 1), (3, 1), (8, 8)]);
    // Read again: all from the cache.
    r.start();
    read_blocks(&f, 0..4);
    assert!(r.reads().is_empty());
    assert!(r.fs.cache_stats().hits >= 4);
}

#[test]
fn next_block_prefetch_requests_each_following_block() {
    let r = Recorded::new(1, "extent@0", 32);
    let f = OpenFile::options().read(true).spec(spec("prefetch=next")).open(&r.fs, "/f").unwrap();
    r.start();
    read_blocks(&f, 0..8);
    let want: Vec<(u64, u64)> = (0..=8).map(|b| (b, 1)).collect();
    assert_eq!(r.reads()[&0], want);
    assert_eq!(f.stats().prefetch_issued, 8);
}

#[test]
fn distance_prefetch_keeps_d_ahead_in_requests_of_a() {
    let r = Recorded::new(1, "extent@0", 64);
    let f = OpenFile::options().read(true).spec(spec("prefetch=distance(d=4,a=2)")).open(&r.fs, "/f").unwrap();
    r.start();
    read_blocks(&f, 0..8);
    assert_eq!(r.reads()[&0], vec![(0, 1), (1, 2), (3, 2), (5, 2), (7, 2), (9, 2), (11, 2)]);
    // Near the end of the file requests stop at the last block.
    r.start();
    read_blocks(&f, 60..64);
    let got = r.reads();
    let last = got[&0].iter().map(|(b, n)| b + n).max().unwrap();
    assert_eq!(last, 4, "{got:?}");
}

#[test]
fn per_thread_windows_follow_each_thread_on_its_own_device() {
    // Two regions of 16 blocks, one per device; each thread reads 4 blocks of its own.
    let r = Recorded::new(2, "regions(size=64K,width=2)", 32);
    let f = OpenFile::options()
        .read(true)
        .spec(spec("cursor=per-thread,prefetch=distance(d=2,a=1,per=thread)"))
        .open(&r.fs, "/f")
        .unwrap();
    r.start();
    let go = Barrier::new(2);
    std::thread::scope(|s| {
        for region in 0..2u64 {
            let (f, go) = (f.clone(), &go);
            s.spawn(move || {
                f.seek(std::io::SeekFrom::Start(region * 16 * BS as u64)).unwrap();
                let mut buf = vec![0u8; BS];
                for _ in 0..4 {
                    go.wait();
                    assert_eq!(f.read(&mut buf).unwrap(), BS);
                }
            });
        }
    });
    let want: Vec<(u64, u64)> = (0..6).map(|b| (b, 1)).collect();
    let got = r.reads();
    assert_eq!(got.get(&0), Some(&want), "{got:?}");
    assert_eq!(got.get(&1), Some(&want), "{got:?}");
}

#[test]
fn stripe_prefetch_spreads_over_devices() {
    let r = Recorded::new(2, "stripe(unit=4K,width=2)", 64);
    let f = OpenFile::options().read(true).spec(spec("prefetch=distance(d=8,a=4)")).open(&r.fs, "/f").unwrap();
    r.start();
    read_blocks(&f, 0..1);
    // Block 0 on demand; blocks 1..=8 in two requests of 4, which the
    // stripe splits over both devices, one block each.
    let got = r.reads();
    let want = |n: u64| (0..n).map(|b| (b, 1)).collect::<Vec<_>>();
    let mut per: Vec<_> = got.values().cloned().collect();
    per.sort_by_key(|v| v.len());
    assert_eq!(per, vec![want(4), want(5)], "{got:?}");
}

/// Runs `steps` lockstep rounds of `threads` threads, each calling `f(thread, step)`.
fn lockstep(threads: usize, steps: usize, f: impl Fn(usize, usize) + Sync) {
    let go = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (f, go) = (&f, &go);
            s.spawn(move || {
                for i in 0..steps {
                    go.wait();
                    f(t, i);
                }
            });
        }
    });
}

#[test]
fn adaptive_policy_recognises_each_pattern() {
    let r = Recorded::new(2, "stripe(unit=4K,width=2)", 1024);
    let open =
        || OpenFile::options().read(true).spec(spec("cursor=per-thread,prefetch=adaptive")).open(&r.fs, "/f").unwrap();
    let mut buf = vec![0u8; BS];

    let f = open();
    for b in 0..20 {
        f.read_at(&mut buf, b * BS as u64).unwrap();
    }
    assert_eq!(f.pattern(), Pattern::Sequential);
    assert!(f.stats().prefetch_requests > 0);

    let f = open();
    for i in 0..20 {
        f.read_at(&mut buf, (500 + i * 8) * BS as u64).unwrap();
    }
    assert_eq!(f.pattern(), Pattern::Strided { stride: 8 });
    let t0 = std::time::Instant::now();
    while !r.fs.is_cached(f.ino(), 500 + 20 * 8) && t0.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(r.fs.is_cached(f.ino(), 500 + 20 * 8), "the next stride was not read ahead");

    // Four threads, each through its own region.
    let f = open();
    let seen = Mutex::new(Vec::new());
    lockstep(4, 24, |t, i| {
        let mut buf = vec![0u8; BS];
        f.read_at(&mut buf, (t as u64 * 256 + i as u64) * BS as u64).unwrap();
        if i == 23 {
            seen.lock().push(f.pattern());
        }
    });
    assert_eq!(*seen.lock(), vec![Pattern::Partitioned; 4]);

    // Four threads sharing one file pointer.
    let f = open();
    f.set_cursor(CursorKind::Shared);
    let seen = Mutex::new(Vec::new());
    lockstep(4, 24, |_, i| {
        let mut buf = vec![0u8; BS];
        f.read(&mut buf).unwrap();
        if i == 23 {
            seen.lock().push(f.pattern());
        }
    });
    assert_eq!(*seen.lock(), vec![Pattern::SharedSequential; 4]);
    assert!(f.stats().prefetch_issued > 0);

    let f = open();
    for b in [7u64, 900, 13, 400, 77, 3, 650] {
        f.read_at(&mut buf, b * BS as u64).unwrap();
    }
    assert_eq!(f.pattern(), Pattern::Random);
}

fn small_cache_pool(cache: u64) -> Fs {
    let devs: Vec<Arc<dyn Device>> =
        (0..2).map(|i| Arc::new(MemDevice::new(format!("m{i}"), 48 * MB)) as Arc<dyn Device>).collect();
    Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
    Fs::open(devs, Options { cache_bytes: cache, ..quiet() }).unwrap()
}

#[test]
fn cache_bound_holds_under_concurrent_load() {
    let fs = small_cache_pool(MB);
    let size = 24 * MB as usize;
    let data = pattern(3, size);
    fs.write_file("/big", &data, Some("stripe(unit=64K,width=2)")).unwrap();
    let bound = fs.cache_stats().capacity;
    assert!(bound > 0 && bound <= MB);
    let done = AtomicBool::new(false);
    let worst = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let b = fs.cache_stats().bytes;
                worst.fetch_max(b, Ordering::Relaxed);
                assert!(b <= bound, "cache holds {b} bytes, bound {bound}");
            }
        });
        let readers: Vec<_> = (0..4)
            .map(|t| {
                let (fs, data) = (&fs, &data);
                let f = OpenFile::options()
                    .read(true)
                    .spec(spec("cursor=per-thread,prefetch=adaptive"))
                    .open(fs, "/big")
                    .unwrap();
                s.spawn(move || {
                    // Each thread reads the whole file from its own starting point.
                    let mut buf = vec![0u8; 3 * BS + 100];
                    let mut off = (t * size / 4) as u64;
                    for _ in 0..(size / buf.len()) {
                        if off as usize + buf.len() > size {
                            off = 0;
                        }
                        let n = f.read_at(&mut buf, off).unwrap();
                        assert_eq!(&buf[..n], &data[off as usize..off as usize + n]);
                        off += n as u64;
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let st = fs.cache_stats();
    assert!(st.bytes <= bound && worst.load(Ordering::Relaxed) > bound / 2, "{st:?}");
    assert!(st.evictions > 0 && st.prefetched > 0, "{st:?}");
}

#[test]
fn writes_and_truncates_leave_no_stale_blocks() {
    let fs = small_cache_pool(4 * MB);
    let blocks = 256;
    fs.write_file("/w", &vec![0u8; blocks * BS], Some("stripe(unit=4K,width=2)")).unwrap();
    let ino = fs.resolve("/w").unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Readers with prefetch keep the blocks cached and loading.
        for t in 0..3 {
            let f = OpenFile::options().read(true).spec(spec("prefetch=distance(d=16,a=4)")).open(&fs, "/w").unwrap();
            let stop = &stop;
            s.spawn(move || {
                let mut buf = vec![0u8; BS];
                let mut b = t * 40;
                while !stop.load(Ordering::Relaxed) {
                    f.read_at(&mut buf, (b % blocks) as u64 * BS as u64).unwrap();
                    b += 1;
                }
            });
        }
        // The writer stamps every block with a version, several times over.
        for version in 1..=5u8 {
            for b in 0..blocks {
                let off = (b * BS) as u64 + if b % 3 == 0 { 100 } else { 0 };
                let len = if b % 3 == 0 { BS - 100 } else { BS };
                fs.write(ino, off, &vec![version; len]).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let back = fs.read_file("/w").unwrap();
    for b in 0..blocks {
        let want = if b % 3 == 0 { 100 } else { 0 };
        assert!(back[b * BS + want..(b + 1) * BS].iter().all(|&x| x == 5), "block {b} is stale");
    }
    // Truncate, extend: the old tail must read as zeros.
    fs.truncate(ino, 10 * BS as u64 + 7).unwrap();
    fs.truncate(ino, 20 * BS as u64).unwrap();
    let back = fs.read_file("/w").unwrap();
    assert!(back[100..10 * BS + 7].iter().filter(|&&x| x != 5).count() <= 3 * 100);
    assert!(back[10 * BS + 7..].iter().all(|&x| x == 0), "data past a truncate came back");
}

#[test]
fn open_specs_are_checked_stored_and_inherited() {
    let fs = small_cache_pool(MB);
    let root = Creds::root();
    fs.mkdir_all("/a/b", 0o755).unwrap();
    fs.write_file("/a/b/f", b"hello", None).unwrap();
    let a = fs.resolve("/a").unwrap();
    let b = fs.resolve("/a/b").unwrap();
    let f = fs.resolve("/a/b/f").unwrap();
    let key = b"user.hurricane.open";
    let e = fs.setxattr(&root, f, key, b"prefetch=sometimes", 0).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)) && e.to_string().contains("prefetch=sometimes"), "{e}");
    assert_eq!(fs.default_open_spec(f).unwrap(), OpenSpec::default());
    // A directory's spec applies beneath it, canonical when read back.
    fs.setxattr(&root, a, key, b"prefetch = distance(d=30, a=5) ,cursor=per-thread\n", 0).unwrap();
    assert_eq!(
        fs.getxattr(&root, a, key).unwrap(),
        b"cursor=per-thread,prefetch=distance(d=30,a=5),locks=none,cache=page"
    );
    assert_eq!(fs.default_open_spec(b).unwrap().cursor, CursorKind::PerThread);
    let of = OpenFile::open(&fs, "/a/b/f").unwrap();
    assert_eq!(of.spec().prefetch, Prefetch::Distance { d: 30, a: 5, scope: hurricane::open::Scope::File });
    // The file's own spec wins, and can be changed while open.
    fs.setxattr(&root, f, key, b"prefetch=next,locks=auto", 0).unwrap();
    let of = OpenFile::open(&fs, "/a/b/f").unwrap();
    assert_eq!(of.spec(), spec("cursor=shared,prefetch=next,locks=auto"));
    assert_eq!(fs.open_policy_for(f), of.spec());
    of.set_prefetch(Prefetch::Adaptive);
    of.set_cursor(CursorKind::PerThread);
    assert_eq!(of.spec().to_string(), "cursor=per-thread,prefetch=adaptive,locks=auto,cache=page");
    let mut buf = [0u8; 5];
    assert_eq!(of.read(&mut buf).unwrap(), 5);
    assert_eq!(&buf, b"hello");
    // The spec survives a remount (it is an ordinary journalled xattr).
    assert!(fs.listxattr(&root, f).unwrap().iter().any(|k| k == key));
}

#[test]
fn advisory_locks_of_an_instance() {
    let fs = small_cache_pool(MB);
    fs.write_file("/l", &[0u8; 100], None).unwrap();
    let f = OpenFile::options().read(true).write(true).open(&fs, "/l").unwrap();
    let g = f.lock(0, 50, LockMode::Exclusive).unwrap();
    let f2 = f.clone();
    std::thread::scope(|s| {
        s.spawn(move || {
            assert!(matches!(f2.try_lock(10, 5, LockMode::Shared), Err(Error::WouldBlock(_))));
            let _ok = f2.try_lock(50, 10, LockMode::Shared).unwrap();
        });
    });
    drop(g);
    assert!(f.try_lock(0, 0, LockMode::Exclusive).is_ok());
}

#[test]
fn sim_option_is_kept_in_the_pool_directory() {
    let dir = tempfile::tempdir().unwrap();
    Fs::mkfs_dir(dir.path(), 2, 8 * MB, &FormatOptions::default()).unwrap();
    // A very fast disk: the test checks the plumbing, not the timing.
    let p =
        SimParams::parse("hdd:rpm=60000,seek_min_ms=0,seek_full_ms=0.1,overhead_ms=0,bus_mb_s=1000").unwrap().unwrap();
    hurricane::pool::set_sim(dir.path(), Some(&p)).unwrap();
    hurricane::pool::set_sim(dir.path(), Some(&p)).unwrap();
    assert_eq!(hurricane::pool::sim_params(dir.path()).unwrap(), Some(p));
    assert_eq!(hurricane::pool::device_paths(dir.path()).unwrap().len(), 2);
    let conf = std::fs::read_to_string(dir.path().join("pool.conf")).unwrap();
    assert_eq!(conf.matches("sim =").count(), 1, "{conf}");
    let fs = Fs::open_dir(dir.path(), quiet()).unwrap();
    assert!(fs.device_stats()[0].0.contains("sim hdd:rpm=60000"));
    fs.write_file("/x", b"simulated", None).unwrap();
    assert_eq!(fs.read_file("/x").unwrap(), b"simulated");
    fs.close().unwrap();
    hurricane::pool::set_sim(dir.path(), None).unwrap();
    assert_eq!(hurricane::pool::sim_params(dir.path()).unwrap(), None);
    std::fs::write(dir.path().join("pool.conf"), format!("{conf}sim = ssd\n")).unwrap();
    let e = Fs::open_dir(dir.path(), quiet()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("unknown disk model"), "{e}");
}

/// `numa = DEV NODE` lines place devices on NUMA nodes, and
/// `replicate(read=nearest)` reads the copy on the reading CPU's node.
#[test]
fn numa_lines_steer_nearest_reads() {
    let dir = tempfile::tempdir().unwrap();
    Fs::mkfs_dir(dir.path(), 3, 16 * MB, &FormatOptions::default()).unwrap();
    let conf = std::fs::read_to_string(dir.path().join("pool.conf")).unwrap();
    let here = hurricane::numa::current_node();
    // Devices 0 and 1 far away (a node no CPU of this machine is on), 2 here.
    let near = here.unwrap_or(0);
    std::fs::write(dir.path().join("pool.conf"), format!("{conf}numa = 0 4000\nnuma = 1 4000\nnuma = 2 {near}\n"))
        .unwrap();
    assert_eq!(hurricane::pool::device_paths(dir.path()).unwrap().len(), 3);
    let fs = Fs::open_dir(dir.path(), quiet()).unwrap();
    let nodes: Vec<Option<u32>> = fs.storage().devs.iter().map(|d| d.numa_node()).collect();
    assert_eq!(nodes, [Some(4000), Some(4000), Some(near)]);
    let data = pattern(5, 2 << 20);
    fs.write_file("/r", &data, Some("replicate(read=nearest)[extent@0,extent@1,extent@2]")).unwrap();
    fs.drop_caches();
    let before: Vec<u64> = fs.device_stats().iter().map(|d| d.1.read_bytes).collect();
    assert_eq!(fs.read_file("/r").unwrap(), data);
    let got: Vec<u64> = fs.device_stats().iter().zip(&before).map(|(d, b)| d.1.read_bytes - b).collect();
    if here.is_some() {
        // The file's 2 MiB came from device 2 (the others may have served
        // a meta-data page or two).
        assert!(got[2] >= 2 << 20 && got[0] + got[1] < 256 << 10, "bytes read per device {got:?}");
    }
    fs.close().unwrap();
    // A bad line is refused by name.
    std::fs::write(dir.path().join("pool.conf"), format!("{conf}numa = 0 far\n")).unwrap();
    let e = Fs::open_dir(dir.path(), quiet()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("not a node number"), "{e}");
}
