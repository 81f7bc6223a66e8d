//! Cost of data checksums (BENCHMARKS.md, "Checksums").
//!
//! ```text
//! checksum_bench hash [MIB]               crc32c and xxh3 over 4 KiB blocks in memory (median of 5)
//! checksum_bench seqread POOL SIZE_MIB RUNS [warm]
//! ```
//! `seqread` takes a pool made with `--checksum off` and one device, writes
//! two files of SIZE_MIB there, `/plain` (`extent@0`) and `/sum`
//! (`checksum[extent@0]`), then reads each whole with 1 MiB reads, RUNS times
//! alternately, the pool reopened and the host page cache dropped before
//! every read (with `warm`, the page cache is kept: the files are read from
//! memory, so the figure is the CPU cost alone). It also reports the checkpoint size before and after `/sum`
//! was written. Prints one JSON object per measurement.

use hurricane::{pool, Fs, Options};
use std::path::Path;
use std::time::Instant;

const BLOCK: usize = 4096;

fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if let Err(e) = run() {
        eprintln!("checksum_bench: {e}");
        std::process::exit(1);
    }
}

/// The meta-file checkpoint's length, from the pool's superblock.
fn meta_len(dir: &Path) -> Result<u64, Box<dyn std::error::Error>> {
    let devs = pool::open_paths(&pool::device_paths(dir)?, false)?;
    Ok(pool::identify(devs)?.0.meta_len)
}

fn read_all(dir: &Path, path: &str, mib: u64, cold: bool) -> Result<f64, Box<dyn std::error::Error>> {
    if cold {
        drop_caches();
    }
    let fs = Fs::open_dir(dir, Options::default())?;
    let f = fs.open_file(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    for i in 0..mib {
        f.read_at(&mut buf, i << 20)?;
    }
    let s = t.elapsed().as_secs_f64();
    drop(f);
    fs.close()?;
    Ok(mib as f64 / s)
}

fn write_file(fs: &Fs, path: &str, layout: &str, chunk: &[u8], mib: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut f = fs.create(path, Some(layout))?;
    for i in 0..mib {
        f.write_all_at(chunk, i << 20)?;
    }
    f.sync_all()?;
    Ok(())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: checksum_bench hash [MIB] | seqread POOL SIZE_MIB RUNS";
    match args.get(1).map(String::as_str) {
        Some("hash") => {
            let mib: usize = args.get(2).map_or(Ok(1024), |s| s.parse())?;
            // 64 MiB of varied bytes, hashed block by block until MIB are done.
            let data: Vec<u8> = (0..64usize << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            let mut results = Vec::new();
            type Hash = fn(&[u8]) -> u64;
            let hashes: [(&str, Hash); 2] =
                [("crc32c", |b| crc32c::crc32c(b) as u64), ("xxh3-64", |b| xxhash_rust::xxh3::xxh3_64(b))];
            for (name, h) in hashes {
                let mut rates = Vec::new();
                let mut sink = 0u64;
                for _ in 0..5 {
                    let t = Instant::now();
                    let mut done = 0;
                    while done < mib << 20 {
                        for b in data.chunks_exact(BLOCK) {
                            sink ^= h(std::hint::black_box(b));
                        }
                        done += data.len();
                    }
                    rates.push((done >> 20) as f64 / t.elapsed().as_secs_f64());
                }
                std::hint::black_box(sink);
                let m = median(rates);
                results.push((name, m));
                println!(
                    "{{\"bench\":\"hash\",\"hash\":\"{name}\",\"block\":{BLOCK},\"mibs\":{m:.0},\"ns_per_block\":{:.1}}}",
                    1e9 / (m * 256.0)
                );
            }
        }
        Some("seqread") => {
            let dir = Path::new(args.get(2).ok_or(usage)?);
            let mib: u64 = args.get(3).ok_or(usage)?.parse()?;
            let runs: usize = args.get(4).ok_or(usage)?.parse()?;
            let cold = args.get(5).map(String::as_str) != Some("warm");
            let chunk: Vec<u8> = (0..1usize << 20).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
            let fs = Fs::open_dir(dir, Options::default())?;
            if fs.checksum() {
                return Err("make the pool with --checksum off: the layouts are given explicitly".into());
            }
            write_file(&fs, "/plain", "extent@0", &chunk, mib)?;
            fs.checkpoint()?;
            fs.close()?;
            drop(fs);
            let before = meta_len(dir)?;
            let fs = Fs::open_dir(dir, Options::default())?;
            write_file(&fs, "/sum", "checksum[extent@0]", &chunk, mib)?;
            let layouts = (fs.layout_of("/plain")?, fs.layout_of("/sum")?);
            fs.checkpoint()?;
            fs.close()?;
            drop(fs);
            let after = meta_len(dir)?;
            let (mut plain, mut sum) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                plain.push(read_all(dir, "/plain", mib, cold)?);
                sum.push(read_all(dir, "/sum", mib, cold)?);
            }
            let (p, s) = (median(plain.clone()), median(sum.clone()));
            println!(
                "{{\"bench\":\"seqread\",\"cache\":\"{}\",\"mib\":{mib},\"runs\":{runs},\"plain\":{:?},\"sum\":{:?},\"plain_mibs\":{p:.1},\"sum_mibs\":{s:.1},\"ratio\":{:.3},\"plain_all\":{plain:.0?},\"sum_all\":{sum:.0?}}}",
                if cold { "cold" } else { "warm" },
                layouts.0,
                layouts.1,
                s / p
            );
            println!(
                "{{\"bench\":\"meta-size\",\"mib\":{mib},\"checkpoint_before\":{before},\"checkpoint_after\":{after},\"bytes_per_mib\":{:.1}}}",
                (after as f64 - before as f64) / mib as f64
            );
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
