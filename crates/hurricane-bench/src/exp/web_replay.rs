//! `web-replay`: a web server's file-system load replayed, in the manner
//! of Tam's chapter 7 (a World Cup 1998 server log replayed against HFS).
//! The log here is synthetic and fixed by a seed: a site of files sized
//! like a web site's (most a few KB, a long tail to 1 MB) in a tree of
//! directories, and requests whose popularity follows Zipf's law. A
//! request for a file is what a server does: stat, open, read it whole,
//! close. Some requests list a directory and stat every entry (an index
//! page); some ask for paths that do not exist (the errors a real log
//! holds). Threads take requests from the log in turn.
//!
//! Measured natively (`Fs` calls), through Hurricane's mount, and on ext4
//! over a loop device (std::fs calls), in the same run over the same host
//! disk: the first pass after a fresh open or mount (cold), then 1 to N
//! threads (warm).

use super::{f0, Rng};
use crate::{plot, table, Outcome};
use hurricane::{FormatOptions, Fs, Options};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

struct Site {
    dirs: Vec<String>,
    /// (path, size), paths relative to the root.
    files: Vec<(String, u64)>,
}

enum Req {
    File(usize),
    List(usize),
    Missing(String),
}

/// A site of `n` files in `n / 25` directories two levels deep, sizes from
/// a web site's mix: 70% of 1–20 KB, 25% of 20–100 KB, 5% of 100 KB–1 MB
/// (`max` caps them).
fn site(n: usize, max: u64, rng: &mut Rng) -> Site {
    let ndirs = (n / 25).max(2);
    let dirs: Vec<String> = (0..ndirs).map(|d| format!("s{}/d{d}", d % 10)).collect();
    let files = (0..n)
        .map(|i| {
            let u = rng.unit();
            let (lo, hi) = if u < 0.70 {
                (1 << 10, 20 << 10)
            } else if u < 0.95 {
                (20 << 10, 100 << 10)
            } else {
                (100 << 10, 1 << 20)
            };
            let size = (lo as f64 + rng.unit() * (hi - lo) as f64) as u64;
            (format!("{}/p{i}.html", dirs[i % ndirs]), size.min(max))
        })
        .collect();
    Site { dirs, files }
}

/// Draws from Zipf(1) over `n` ranks, by the inverse of its cumulative sum.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut s = 0.0;
        for k in 1..=n {
            s += 1.0 / k as f64;
            cdf.push(s);
        }
        for c in &mut cdf {
            *c /= s;
        }
        Zipf { cdf }
    }
    fn draw(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// `n` requests: 95% files by popularity (rank shuffled over the site),
/// 2% directory listings, 3% missing paths.
fn log(site: &Site, n: usize, rng: &mut Rng) -> Vec<Req> {
    let zf = Zipf::new(site.files.len());
    let zd = Zipf::new(site.dirs.len());
    // Popularity ranks in a shuffled order, so popular files are spread.
    let mut order: Vec<usize> = (0..site.files.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    (0..n)
        .map(|i| {
            let u = rng.unit();
            if u < 0.02 {
                Req::List(zd.draw(rng))
            } else if u < 0.05 {
                Req::Missing(format!("{}/gone{i}.html", site.dirs[zd.draw(rng)]))
            } else {
                Req::File(order[zf.draw(rng)])
            }
        })
        .collect()
}

/// What a request does, on one system.
trait Server: Sync {
    /// Stat, open, read whole, close: the bytes read.
    fn get(&self, path: &str, buf: &mut Vec<u8>) -> Result<u64, String>;
    /// List a directory and stat each entry: the entries.
    fn list(&self, dir: &str) -> Result<usize, String>;
    /// A path that does not exist: Ok(true) when the system says so.
    fn missing(&self, path: &str) -> Result<bool, String>;
}

struct Native<'a> {
    fs: &'a Fs,
}

impl Server for Native<'_> {
    fn get(&self, path: &str, buf: &mut Vec<u8>) -> Result<u64, String> {
        let p = format!("/{path}");
        let a = self.fs.stat(&p).map_err(|e| format!("{p}: {e}"))?;
        let f = self.fs.open_file(&p).map_err(|e| format!("{p}: {e}"))?;
        buf.resize(a.size as usize, 0);
        let mut off = 0;
        while off < a.size {
            let n = f.read_at(&mut buf[off as usize..], off).map_err(|e| format!("{p}: {e}"))?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
        Ok(off)
    }
    fn list(&self, dir: &str) -> Result<usize, String> {
        let items = self.fs.read_dir(&format!("/{dir}")).map_err(crate::err)?;
        for it in &items {
            self.fs.getattr(it.ino).map_err(crate::err)?;
        }
        Ok(items.len())
    }
    fn missing(&self, path: &str) -> Result<bool, String> {
        match self.fs.stat(&format!("/{path}")) {
            Err(hurricane::Error::NotFound(_)) => Ok(true),
            Err(e) => Err(format!("{path}: {e}")),
            Ok(_) => Ok(false),
        }
    }
}

struct Posix {
    root: PathBuf,
}

impl Server for Posix {
    fn get(&self, path: &str, buf: &mut Vec<u8>) -> Result<u64, String> {
        use std::io::Read;
        let p = self.root.join(path);
        let m = std::fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mut f = std::fs::File::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        buf.clear();
        buf.reserve(m.len() as usize);
        Ok(f.read_to_end(buf).map_err(|e| format!("{}: {e}", p.display()))? as u64)
    }
    fn list(&self, dir: &str) -> Result<usize, String> {
        let mut n = 0;
        for e in std::fs::read_dir(self.root.join(dir)).map_err(crate::err)? {
            std::fs::metadata(e.map_err(crate::err)?.path()).map_err(crate::err)?;
            n += 1;
        }
        Ok(n)
    }
    fn missing(&self, path: &str) -> Result<bool, String> {
        match std::fs::metadata(self.root.join(path)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(format!("{path}: {e}")),
            Ok(_) => Ok(false),
        }
    }
}

/// Replays `reqs` with `threads` threads; requests a second. Checks every
/// answer: a file's bytes are its size, a missing path is missing.
fn replay(srv: &dyn Server, site: &Site, reqs: &[Req], threads: usize) -> Result<f64, String> {
    let next = AtomicUsize::new(0);
    let errors = AtomicU64::new(0);
    let t0 = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<(), String> {
                    let mut buf = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(r) = reqs.get(i) else { return Ok(()) };
                        match r {
                            Req::File(f) => {
                                let (path, size) = &site.files[*f];
                                let got = srv.get(path, &mut buf)?;
                                if got != *size {
                                    return Err(format!("{path}: read {got} bytes of {size}"));
                                }
                            }
                            Req::List(d) => {
                                srv.list(&site.dirs[*d])?;
                            }
                            Req::Missing(p) => {
                                if !srv.missing(p)? {
                                    return Err(format!("{p} exists"));
                                }
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a replay thread panicked".into()))).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    Ok(reqs.len() as f64 / secs.max(1e-9))
}

/// Builds the site under `root` through std::fs (for the kernel file
/// system) or the native API.
fn build_posix(root: &Path, site: &Site) -> Result<(), String> {
    for d in &site.dirs {
        std::fs::create_dir_all(root.join(d)).map_err(crate::err)?;
    }
    let data = vec![b'w'; 1 << 20];
    for (p, size) in &site.files {
        std::fs::write(root.join(p), &data[..*size as usize]).map_err(crate::err)?;
    }
    Ok(())
}

fn build_native(fs: &Fs, site: &Site) -> Result<(), String> {
    for d in &site.dirs {
        fs.mkdir_all(&format!("/{d}"), 0o755).map_err(crate::err)?;
    }
    let data = vec![b'w'; 1 << 20];
    for (p, size) in &site.files {
        fs.write_file(&format!("/{p}"), &data[..*size as usize], None).map_err(crate::err)?;
    }
    fs.sync().map_err(crate::err)
}

struct Series {
    system: String,
    cold: f64,
    /// (threads, requests a second)
    warm: Vec<(usize, f64)>,
}

fn passes(srv: &dyn Server, site: &Site, reqs: &[Req], threads: &[usize], system: &str) -> Result<Series, String> {
    let cold = replay(srv, site, reqs, 1)?;
    let mut warm = Vec::new();
    for &t in threads {
        warm.push((t, replay(srv, site, reqs, t)?));
    }
    eprintln!("web-replay: {system}: cold {} req/s, warm {:?}", f0(cold), warm);
    Ok(Series { system: system.into(), cold, warm })
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let top = if quick { 2 } else { cores.clamp(4, 16) };
    let threads: Vec<usize> = (0..).map(|i| 1usize << i).take_while(|&t| t <= top).collect();
    let (nfiles, nreqs, max) = if quick { (300, 2_000, 64 << 10) } else { (5_000, 40_000, 1 << 20) };
    let mut rng = Rng(0x5745_4232_3938);
    let site = site(nfiles, max, &mut rng);
    let reqs = log(&site, nreqs, &mut rng);
    let site_bytes: u64 = site.files.iter().map(|f| f.1).sum();
    let base = std::env::var_os("HURRICANE_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| "/var/tmp".into());
    let tmp = tempfile::Builder::new().prefix("web-replay.").tempdir_in(&base).map_err(crate::err)?;
    let pool = tmp.path().join("pool");
    let size = (site_bytes * 3).max(256 << 20);
    Fs::mkfs_dir(&pool, 2, size, &FormatOptions::default()).map_err(crate::err)?;
    {
        let fs = Fs::open_dir(&pool, Options::default()).map_err(crate::err)?;
        build_native(&fs, &site)?;
        fs.close().map_err(crate::err)?;
    }
    let mut all = Vec::new();
    let mut notes = Vec::new();
    {
        // Opened afresh: the first pass is cold.
        let fs = Fs::open_dir(&pool, Options::default()).map_err(crate::err)?;
        all.push(passes(&Native { fs: &fs }, &site, &reqs, &threads, "hurricane-native")?);
        fs.close().map_err(crate::err)?;
    }
    if quick {
        notes.push("mount and ext4: measured in full runs".to_string());
    } else {
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir_all(&mnt).map_err(crate::err)?;
        match crate::mounts::serve(&pool, &mnt, hurricane_fuse::MountOptions::default(), || {
            passes(&Posix { root: mnt.clone() }, &site, &reqs, &threads, "hurricane-mount")
        }) {
            Ok((s, _)) => all.push(s),
            Err(e) => notes.push(format!("hurricane-mount not measured: {e}")),
        }
        let ext4 = (|| -> Result<Series, String> {
            let mut l =
                crate::mounts::LoopFs::make("ext4", &tmp.path().join("ext4.img"), size, &tmp.path().join("ext4"), &[])?;
            build_posix(&l.mnt, &site)?;
            // Nothing cached: the first pass is cold.
            l.remount()?;
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            passes(&Posix { root: l.mnt.clone() }, &site, &reqs, &threads, "ext4")
        })();
        match ext4 {
            Ok(s) => all.push(s),
            Err(e) => notes.push(format!("ext4 not measured: {e}")),
        }
    }
    let ext4 = all.iter().find(|s| s.system == "ext4").map(|s| s.warm.clone());
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let mut series = Vec::new();
    for s in &all {
        rows.push(vec![s.system.clone(), "1 (cold)".into(), f0(s.cold), "-".into()]);
        out.push(json!({"system": s.system, "cache": "cold", "threads": 1, "requests_per_s": s.cold}));
        for &(t, r) in &s.warm {
            let peer = ext4.as_ref().and_then(|e| e.iter().find(|p| p.0 == t)).map(|p| r / p.1);
            rows.push(vec![
                s.system.clone(),
                t.to_string(),
                f0(r),
                peer.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into()),
            ]);
            out.push(
                json!({"system": s.system, "cache": "warm", "threads": t, "requests_per_s": r, "ratio_to_ext4": peer}),
            );
        }
        series.push((s.system.clone(), s.warm.iter().map(|&(t, r)| (t as f64, r)).collect::<Vec<_>>()));
    }
    let errors = reqs.iter().filter(|r| matches!(r, Req::Missing(_))).count();
    let lists = reqs.iter().filter(|r| matches!(r, Req::List(_))).count();
    let mut text = format!(
        "web-replay: {} files ({} MB) in {} directories, {} requests ({} listings, {} missing paths); {} cores, load average {}\n{}",
        site.files.len(),
        site_bytes >> 20,
        site.dirs.len(),
        reqs.len(),
        lists,
        errors,
        cores,
        crate::loadavg(),
        table(&["system", "threads", "requests/s", "vs ext4"], &rows)
    );
    for n in &notes {
        text.push_str(n);
        text.push('\n');
    }
    let best = |name: &str| all.iter().find(|s| s.system == name).and_then(|s| s.warm.last().copied());
    let mut line = String::from("web-replay:");
    for s in &all {
        if let Some((t, r)) = best(&s.system) {
            line.push_str(&format!(" {} {} req/s at {t} threads;", s.system, f0(r)));
        }
    }
    line.push_str(&format!(" {} requests, all answers checked", reqs.len()));
    let data = json!({
        "params": {"files": site.files.len(), "site_bytes": site_bytes, "dirs": site.dirs.len(), "requests": reqs.len(),
                   "listings": lists, "missing": errors, "threads": threads, "cores": cores, "notes": notes},
        "rows": out,
    });
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: plot::lines_later(
            "Web-server replay: requests per second",
            "threads",
            "requests per second",
            plot::Legend::UpperLeft,
            series,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_the_first_ranks() {
        let z = Zipf::new(1000);
        let mut rng = Rng(1);
        let draws: Vec<usize> = (0..20_000).map(|_| z.draw(&mut rng)).collect();
        let top = draws.iter().filter(|&&d| d < 10).count();
        // Zipf(1) over 1,000 ranks puts about 39% of draws on the first 10.
        assert!((6_000..10_000).contains(&top), "{top}");
        assert!(draws.iter().all(|&d| d < 1000));
    }

    #[test]
    fn the_log_mixes_files_listings_and_errors() {
        let mut rng = Rng(2);
        let s = site(500, 1 << 20, &mut rng);
        assert!(s.files.iter().all(|f| (1024..=1 << 20).contains(&f.1)));
        let l = log(&s, 10_000, &mut rng);
        let lists = l.iter().filter(|r| matches!(r, Req::List(_))).count();
        let missing = l.iter().filter(|r| matches!(r, Req::Missing(_))).count();
        assert!((100..300).contains(&lists), "{lists}");
        assert!((200..400).contains(&missing), "{missing}");
    }
}
