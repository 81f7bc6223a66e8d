//! Many threads and processes at once on one mount: their own files, one
//! shared file in disjoint ranges, and a busy directory.

mod fuse_util;

use fuse_util::*;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

/// A range of the shared file: unaligned sizes so neighbours share blocks.
const PIECE: u64 = (1 << 20) + 1234;

#[test]
fn threads_on_own_and_shared_files() {
    require_fuse!();
    let pool = Pool::new(3, "512M");
    let m = pool.mount(&[]);
    let shared = m.path("shared");
    File::create(&shared).unwrap();
    let threads = 8;
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let own = m.path(&format!("own-{t}"));
            let shared = shared.clone();
            std::thread::spawn(move || {
                // Own file: uneven chunk sizes, then a full read back.
                let want = data(3_000_000 + t * 777, t as u64);
                let f = File::create(&own).unwrap();
                let mut off = 0usize;
                let mut step = 1000 + t * 313;
                while off < want.len() {
                    let n = step.min(want.len() - off);
                    f.write_all_at(&want[off..off + n], off as u64).unwrap();
                    off += n;
                    step = (step * 7) % 300_000 + 1;
                }
                drop(f);
                assert_eq!(fs::read(&own).unwrap(), want, "own file of thread {t}");
                // Shared file: this thread's disjoint range.
                let piece = data(PIECE as usize, 100 + t as u64);
                let f = OpenOptions::new().read(true).write(true).open(&shared).unwrap();
                for (i, chunk) in piece.chunks(65_537).enumerate() {
                    f.write_all_at(chunk, t as u64 * PIECE + i as u64 * 65_537).unwrap();
                }
                let mut back = vec![0u8; PIECE as usize];
                f.read_exact_at(&mut back, t as u64 * PIECE).unwrap();
                assert!(back == piece, "thread {t} reads back its range");
            })
        })
        .collect();
    for h in hs {
        h.join().expect("a worker thread failed");
    }
    let all = fs::read(&shared).unwrap();
    assert_eq!(all.len() as u64, threads as u64 * PIECE);
    for t in 0..threads {
        let r = &all[(t as u64 * PIECE) as usize..((t as u64 + 1) * PIECE) as usize];
        assert!(r == data(PIECE as usize, 100 + t as u64), "range of thread {t} in the shared file");
    }
    m.unmount();
    pool.fsck_clean();
}

const WORKER: &str = r#"
import os, sys, hashlib
mnt, idx, piece = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def pattern(n, seed):
    out = bytearray()
    h = hashlib.sha256(seed.encode()).digest()
    while len(out) < n:
        h = hashlib.sha256(h).digest()
        out += h
    return bytes(out[:n])
own = pattern(2_000_000 + idx, f"own{idx}")
with open(os.path.join(mnt, f"proc-{idx}"), "wb") as f:
    for i in range(0, len(own), 50_000):
        f.write(own[i:i + 50_000])
    f.flush()
    os.fsync(f.fileno())
fd = os.open(os.path.join(mnt, "shared"), os.O_RDWR)
mine = pattern(piece, f"shared{idx}")
for i in range(0, piece, 40_000):
    os.pwrite(fd, mine[i:i + 40_000], idx * piece + i)
os.close(fd)
with open(os.path.join(mnt, f"proc-{idx}"), "rb") as f:
    assert f.read() == own, "own file"
print(hashlib.sha256(own).hexdigest(), hashlib.sha256(mine).hexdigest())
"#;

#[test]
fn processes_on_own_and_shared_files() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    File::create(m.path("shared")).unwrap();
    let procs = 6;
    let piece = 700_001u64;
    let children: Vec<_> = (0..procs)
        .map(|i| {
            std::process::Command::new(python_bin())
                .args(["-c", WORKER, s(&m.mnt), &i.to_string(), &piece.to_string()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut sums = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "process {i}: {}", String::from_utf8_lossy(&o.stderr));
        sums.push(String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    // Check from this process with Python's hashes of what each wrote.
    let check = r#"
import hashlib, sys
mnt, piece, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(mnt + "/shared", "rb").read()
assert len(data) == piece * n, len(data)
for i in range(n):
    own = open(f"{mnt}/proc-{i}", "rb").read()
    print(hashlib.sha256(own).hexdigest(), hashlib.sha256(data[i * piece:(i + 1) * piece]).hexdigest())
"#;
    let (ok, out) = python(check, &[s(&m.mnt), &piece.to_string(), &procs.to_string()], None);
    assert!(ok, "{out}");
    assert_eq!(out.lines().map(str::to_string).collect::<Vec<_>>(), sums);
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn busy_directory_and_readers_during_writes() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    let dir = Arc::new(m.path("busy"));
    fs::create_dir(&*dir).unwrap();
    let stable = m.path("stable");
    let stable_data = data(4 << 20, 42);
    fs::write(&stable, &stable_data).unwrap();

    // Readers hammer a stable file while writers churn the directory.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stable, want, stop) = (stable.clone(), stable_data.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds == 0 {
                    assert!(fs::read(&stable).unwrap() == want, "a reader saw changed data");
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let writers: Vec<_> = (0..6)
        .map(|t| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    let a: PathBuf = dir.join(format!("t{t}-{i}"));
                    fs::write(&a, format!("{t}/{i}")).unwrap();
                    if i % 3 == 0 {
                        fs::rename(&a, dir.join(format!("t{t}-{i}-renamed"))).unwrap();
                    } else if i % 3 == 1 {
                        fs::remove_file(&a).unwrap();
                    }
                    // Everyone lists the shared directory now and then.
                    if i % 25 == 0 {
                        fs::read_dir(&*dir).unwrap().for_each(|e| drop(e.unwrap()));
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("a writer failed");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("a reader failed") > 0);
    }
    let mut names: Vec<String> =
        fs::read_dir(&*dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let mut want = Vec::new();
    for t in 0..6 {
        for i in 0..150 {
            match i % 3 {
                0 => want.push(format!("t{t}-{i}-renamed")),
                2 => want.push(format!("t{t}-{i}")),
                _ => {}
            }
        }
    }
    want.sort();
    assert_eq!(names, want);
    for n in &names {
        let body = fs::read_to_string(dir.join(n)).unwrap();
        let base = format!("t{}", body.replace('/', "-"));
        assert!(*n == base || *n == format!("{base}-renamed"), "{n}: {body}");
    }
    m.unmount();
    pool.fsck_clean();
}
