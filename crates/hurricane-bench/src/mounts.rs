//! The mounted systems the experiments compare: a Hurricane pool served
//! through FUSE by a thread of this process, and a kernel file system
//! (ext4, XFS) on a loop device over an image file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Serves `pool` at `mnt` while `f` runs, then unmounts and waits for the
/// server to end. Returns `f`'s result and the seconds the unmount took
/// (the final checkpoint included).
pub fn serve<R>(
    pool: &Path,
    mnt: &Path,
    opts: hurricane_fuse::MountOptions,
    f: impl FnOnce() -> Result<R, String>,
) -> Result<(R, f64), String> {
    let m = Served::start(pool, mnt, opts)?;
    let r = f();
    let secs = m.stop()?;
    Ok((r?, secs))
}

/// A pool served through FUSE at a mount point by a thread of this
/// process, from [`Served::start`] until [`Served::stop`] (or a lazy
/// unmount when dropped).
pub struct Served {
    mnt: PathBuf,
    rx: Option<std::sync::mpsc::Receiver<Result<(), String>>>,
}

impl Served {
    /// Mounts `pool` at `mnt` and waits until the mount serves
    /// (`mountinfo::serves_since`: not only in the mount table).
    pub fn start(pool: &Path, mnt: &Path, opts: hurricane_fuse::MountOptions) -> Result<Served, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (p2, m2) = (pool.to_path_buf(), mnt.to_path_buf());
        let before = hurricane_fuse::mountinfo::mount_ids(mnt);
        std::thread::Builder::new()
            .name("bench-mount".into())
            .spawn(move || {
                let _ = tx.send(hurricane_fuse::serve(&p2, &m2, &opts));
            })
            .map_err(crate::err)?;
        let t0 = Instant::now();
        while !hurricane_fuse::mountinfo::serves_since(mnt, &before) {
            if let Ok(r) = rx.try_recv() {
                return Err(format!("mount failed: {}", r.err().unwrap_or_else(|| "it ended at once".into())));
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = hurricane_fuse::mountinfo::unmount(mnt, true);
                return Err("mount did not come up in 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Served { mnt: mnt.to_path_buf(), rx: Some(rx) })
    }

    /// Unmounts and waits for the server to end: the seconds that took
    /// (the final checkpoint included).
    pub fn stop(mut self) -> Result<f64, String> {
        let Some(rx) = self.rx.take() else { return Err("the mount was stopped already".into()) };
        let t = Instant::now();
        if let Err(e) = hurricane_fuse::mountinfo::unmount(&self.mnt, false) {
            let _ = hurricane_fuse::mountinfo::unmount(&self.mnt, true);
            return Err(format!("unmount: {e}"));
        }
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(Ok(())) => Ok(t.elapsed().as_secs_f64()),
            Ok(Err(e)) => Err(format!("mount ended with: {e}")),
            Err(_) => Err("the mount did not end after unmount".into()),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.rx.take().is_some() {
            let _ = hurricane_fuse::mountinfo::unmount(&self.mnt, true);
        }
    }
}

fn sh(cmd: &str, args: &[&str]) -> Result<String, String> {
    let o = std::process::Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !o.status.success() {
        return Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A kernel file system on a loop device, mounted at `mnt` until dropped.
pub struct LoopFs {
    /// `loopN`, for its counters in /sys/block.
    pub dev: String,
    pub mnt: PathBuf,
    mounted: bool,
}

impl LoopFs {
    /// Makes `fstype` (`ext4` or `xfs`, with `mkfs_args`) on a sparse image
    /// of `size` bytes at `img`, and mounts it at `mnt`.
    pub fn make(fstype: &str, img: &Path, size: u64, mnt: &Path, mkfs_args: &[&str]) -> Result<LoopFs, String> {
        std::fs::create_dir_all(mnt).map_err(crate::err)?;
        std::fs::File::create(img).and_then(|f| f.set_len(size)).map_err(|e| format!("{}: {e}", img.display()))?;
        let img_s = img.to_string_lossy().to_string();
        let force = if fstype == "xfs" { "-f" } else { "-F" };
        let mut args = vec!["-q", force];
        args.extend_from_slice(mkfs_args);
        args.push(&img_s);
        sh(&format!("mkfs.{fstype}"), &args)?;
        let dev = sh("losetup", &["-f", "--show", &img_s])?;
        let mut fs =
            LoopFs { dev: dev.trim_start_matches("/dev/").to_string(), mnt: mnt.to_path_buf(), mounted: false };
        fs.mount()?;
        Ok(fs)
    }

    fn mount(&mut self) -> Result<(), String> {
        sh("mount", &[&format!("/dev/{}", self.dev), &self.mnt.to_string_lossy()])?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts and mounts again (nothing of it left cached); the seconds
    /// the unmount and the mount took.
    pub fn remount(&mut self) -> Result<(f64, f64), String> {
        let t = Instant::now();
        sh("umount", &[&self.mnt.to_string_lossy()])?;
        self.mounted = false;
        let down = t.elapsed().as_secs_f64();
        let t = Instant::now();
        self.mount()?;
        Ok((down, t.elapsed().as_secs_f64()))
    }

    /// Requests the loop device has completed: (reads, writes).
    pub fn requests(&self) -> Result<(u64, u64), String> {
        let s = std::fs::read_to_string(format!("/sys/block/{}/stat", self.dev)).map_err(crate::err)?;
        let f: Vec<u64> = s.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
        match (f.first(), f.get(4)) {
            (Some(&r), Some(&w)) => Ok((r, w)),
            _ => Err(format!("/sys/block/{}/stat: too few fields", self.dev)),
        }
    }

    /// Bytes the loop device has written.
    pub fn written(&self) -> Result<u64, String> {
        let s = std::fs::read_to_string(format!("/sys/block/{}/stat", self.dev)).map_err(crate::err)?;
        let sectors: u64 = s.split_whitespace().nth(6).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(sectors * 512)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = sh("umount", &[&self.mnt.to_string_lossy()]);
        }
        let _ = sh("losetup", &["-d", &format!("/dev/{}", self.dev)]);
    }
}

#[cfg(test)]
mod tests {
    // A test: a panic is how it fails.
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::Arc;

    /// `start` returns once the mount serves, not once it is in the mount
    /// table: a stop right after it found a server still in its handshake,
    /// whose mount was then gone ("FUSE device disconnected during
    /// handshake"), now and then in `hurricane bench cffs`.
    #[test]
    fn a_mount_stopped_at_once_after_it_started_ends_cleanly() {
        if !hurricane_fuse::mountinfo::tests_can_mount() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (pool, mnt) = (tmp.path().join("pool"), tmp.path().join("mnt"));
        hurricane::Fs::mkfs_dir(&pool, 1, 64 << 20, &Default::default()).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        // Busy processors keep the server's thread waiting for one, as a
        // loaded host does: the window between the mount and the handshake
        // widens.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinners: Vec<_> = (0..2 * std::thread::available_parallelism().map_or(2, |n| n.get()))
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let rounds: Vec<Result<f64, String>> = (0..30)
            .map(|_| Served::start(&pool, &mnt, hurricane_fuse::MountOptions::default()).and_then(Served::stop))
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in spinners {
            t.join().unwrap();
        }
        for (i, r) in rounds.iter().enumerate() {
            assert!(r.is_ok(), "round {i}: {r:?}");
        }
    }
}
