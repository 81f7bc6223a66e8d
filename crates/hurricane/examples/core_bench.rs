//! Core engine benchmarks through the native API, with a POSIX peer mode that
//! does the same through the kernel (run it on ext4 over a loop device).
//!
//! ```text
//! core_bench seq  POOL_DIR SIZE_MIB [LAYOUT] [DATA]   sequential 1 MiB write (+fsync), then read
//!                                              (DATA: a file whose first SIZE_MIB MiB are written; else 0x5A bytes)
//! core_bench meta POOL_DIR COUNT [INODES]      create COUNT empty files, then stat each (INODES: inode cache)
//! core_bench posix-meta DIR COUNT              create, stat, unlink with std::fs on a mounted file system
//! core_bench posix-fsync DIR COUNT             COUNT times: create a file, write 4 KiB, fsync it
//! ```
//! Prints one JSON object per measurement.

use hurricane::{Fs, Options};
use std::path::Path;
use std::time::Instant;

fn drop_caches() {
    // Reads must come from the disk, not the host page cache.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
}

fn main() {
    if let Err(e) = run() {
        eprintln!("core_bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: core_bench seq POOL SIZE_MIB [LAYOUT] [DATA] | meta POOL COUNT [INODES] | posix-meta DIR COUNT \
                 | posix-fsync DIR COUNT";
    let mode = args.get(1).ok_or(usage)?;
    let target = Path::new(args.get(2).ok_or(usage)?);
    let n: u64 = args.get(3).ok_or(usage)?.parse()?;
    match mode.as_str() {
        "seq" => {
            let fs = Fs::open_dir(target, Options::default())?;
            let layout = args.get(4).map(String::as_str);
            let mut chunk = vec![0x5Au8; 1 << 20];
            let data = match args.get(5) {
                Some(p) => {
                    let d = std::fs::File::open(p)?;
                    let need = n << 20;
                    if d.metadata()?.len() < need {
                        return Err(format!("{p}: shorter than {n} MiB").into());
                    }
                    Some(d)
                }
                None => None,
            };
            let mut f = fs.create("/seq.bin", layout)?;
            let t = Instant::now();
            for i in 0..n {
                if let Some(d) = &data {
                    std::os::unix::fs::FileExt::read_exact_at(d, &mut chunk, i << 20)?;
                }
                f.write_all_at(&chunk, i << 20)?;
            }
            f.sync_all()?;
            let w = t.elapsed().as_secs_f64();
            drop(f);
            fs.close()?;
            drop(fs);
            drop_caches();
            let fs = Fs::open_dir(target, Options::default())?;
            let f = fs.open_file("/seq.bin")?;
            let mut buf = vec![0u8; 1 << 20];
            let t = Instant::now();
            for i in 0..n {
                f.read_at(&mut buf, i << 20)?;
            }
            let r = t.elapsed().as_secs_f64();
            println!(
                "{{\"bench\":\"seq\",\"mib\":{n},\"layout\":{:?},\"write_mibs\":{:.1},\"read_mibs\":{:.1},\"stored_bytes\":{}}}",
                fs.layout_of("/seq.bin")?,
                n as f64 / w,
                n as f64 / r,
                fs.stat("/seq.bin")?.blocks * 512
            );
            drop(f);
            fs.remove("/seq.bin")?;
            fs.close()?;
        }
        "meta" => {
            // An optional fourth argument sizes the inode cache.
            let mut opts = Options::default();
            if let Some(c) = args.get(4) {
                opts.inode_cache = c.parse()?;
            }
            let fs = Fs::open_dir(target, opts)?;
            fs.mkdir_all("/m", 0o755)?;
            let root = hurricane::Creds::root();
            let dir = fs.resolve("/m")?;
            let t = Instant::now();
            for i in 0..n {
                fs.mknod(&root, dir, format!("f{i}").as_bytes(), libc_reg(), 0, None, None)?;
            }
            fs.sync()?;
            let c = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for i in 0..n {
                fs.lookup(&root, dir, format!("f{i}").as_bytes())?;
            }
            let s = t.elapsed().as_secs_f64();
            let m = fs.meta_cache_stats();
            let rss = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|t| t.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_string))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()))
                .unwrap_or(0)
                * 1024;
            println!(
                "{{\"bench\":\"meta\",\"files\":{n},\"create_per_s\":{:.0},\"stat_per_s\":{:.0},\"rss_bytes_at_end\":{rss},\"inodes_resident\":{},\"inodes_dirty\":{},\"inode_evictions\":{},\"store_bytes\":{},\"checkpoints\":{}}}",
                n as f64 / c,
                n as f64 / s,
                m.inodes.resident,
                m.inodes.dirty,
                m.inodes.evictions,
                m.store.bytes,
                fs.commit_counts().1
            );
            fs.close()?;
        }
        "posix-meta" => {
            let dir = target.join("m");
            std::fs::create_dir_all(&dir)?;
            let t = Instant::now();
            for i in 0..n {
                std::fs::File::create(dir.join(format!("f{i}")))?;
            }
            std::process::Command::new("sync").status()?;
            let c = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for i in 0..n {
                std::fs::metadata(dir.join(format!("f{i}")))?;
            }
            let s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for i in 0..n {
                std::fs::remove_file(dir.join(format!("f{i}")))?;
            }
            std::process::Command::new("sync").status()?;
            let u = t.elapsed().as_secs_f64();
            println!(
                "{{\"bench\":\"posix-meta\",\"files\":{n},\"create_per_s\":{:.0},\"stat_per_s\":{:.0},\"unlink_per_s\":{:.0}}}",
                n as f64 / c,
                n as f64 / s,
                n as f64 / u
            );
        }
        "posix-fsync" => {
            use std::io::Write;
            let dir = target.join("s");
            std::fs::create_dir_all(&dir)?;
            let block = vec![0x5au8; 4096];
            let t = Instant::now();
            for i in 0..n {
                let mut f = std::fs::File::create(dir.join(format!("f{i}")))?;
                f.write_all(&block)?;
                f.sync_all()?;
            }
            let secs = t.elapsed().as_secs_f64();
            println!("{{\"bench\":\"posix-fsync\",\"files\":{n},\"fsync_per_s\":{:.0}}}", n as f64 / secs);
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}

fn libc_reg() -> u32 {
    0o100644
}
