//! `hurricane mount | umount | stats` and the `mount.fuse.hurricane`
//! helper of mount(8).
//!
//! A background mount re-runs this program as `hurricane mount -f` in a
//! new session, with its output in a log file, and returns once the new
//! mount shows in /proc/self/mountinfo and answers a stat.

use hurricane_fuse::mountinfo::{absolute, mount_ids, read_stats, serves_since, unmount_and_wait};
use hurricane_fuse::MountOptions;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a background mount may take to answer (opening a pool
/// replays its journal, which takes seconds at most).
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `umount` waits for the server to flush and exit.
const UMOUNT_TIMEOUT: Duration = Duration::from_secs(120);
const LOG_NAME: &str = "hurricane-mount.log";
const LOG_LIMIT: u64 = 8 << 20;

#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// Pool directory, or a pool found by name in a Ceph cluster:
    /// `rados:CEPHPOOL/NAME?conf=PATH`.
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// Stay in the foreground (serve until unmounted or signalled).
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Mount options, comma-separated, repeatable: allow_other, allow_root,
    /// ro, rw, dev and suid (device nodes and set-user-id programs work; a
    /// mount by root only; FUSE's default is nodev,nosuid), noexec,
    /// relatime (the default), noatime, strictatime, nodiratime (when reads
    /// update access times), sync, dirsync, auto_unmount,
    /// fsname=NAME, subtype=NAME, threads=N, attr_timeout=SECS,
    /// commit_interval=SECS, lease=SECS (the writer's lease of a pool with
    /// devices in a Ceph cluster), cache=SIZE (data blocks), inode_cache=N (inodes
    /// kept in memory), entry_cache=N (directory entries kept in memory),
    /// meta_cache=SIZE (memory for meta-data store pages), log=FILE,
    /// txn_bytes=SIZE, txn_bytes_per_user=SIZE, txn_bytes_total=SIZE,
    /// txn_open_per_user=N, txn_open=N, txn_lock_wait=SECS (bounds on
    /// transactions, docs/TXN.md), nouring, default_permissions
    /// (the kernel checks permissions too; by default the engine alone checks
    /// and the kernel keeps only names every user may reach), writeback_cache
    /// (the kernel merges writes; their errors come at fsync or close).
    #[arg(short = 'o')]
    pub options: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// Mount point of a Hurricane pool.
    pub mountpoint: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// Mount point of a Hurricane pool.
    pub mountpoint: PathBuf,
    /// Print the raw JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn mount(args: &MountArgs) -> Result<(), String> {
    let opts = MountOptions::parse(&args.options)?;
    crate::util::warn_if_foreign(&args.pool);
    if args.foreground {
        return hurricane_fuse::serve(&args.pool, &args.mountpoint, &opts);
    }
    let pool = args.pool.canonicalize().map_err(|e| format!("{}: {e}", args.pool.display()))?;
    let mnt = absolute(&args.mountpoint);
    match std::fs::metadata(&mnt) {
        Err(e) if hurricane_fuse::is_dead_mount(&e) => {
            return Err(format!("{}: {}", mnt.display(), hurricane_fuse::DEAD_MOUNT_HINT));
        }
        Err(e) => return Err(format!("{}: {e}", mnt.display())),
        Ok(m) if !m.is_dir() => return Err(format!("{}: not a directory", mnt.display())),
        Ok(_) => {}
    }
    let (log, log_start) = match &opts.log {
        Some(named) => open_named_log(named),
        None => open_log(&pool),
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg("-f").arg(&pool).arg(&mnt);
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        // Mount and unmount events, without fuser's chatter about requests
        // it does not know (terminal ioctls and the like).
        cmd.env("RUST_LOG", "info,fuser=error");
    }
    cmd.env("NO_COLOR", "1");
    let (out, err) = match &log {
        Some(f) => match (f.try_clone(), f.try_clone()) {
            (Ok(a), Ok(b)) => (Stdio::from(a), Stdio::from(b)),
            _ => (Stdio::null(), Stdio::null()),
        },
        None => (Stdio::null(), Stdio::null()),
    };
    // The server must outlive this command and its terminal: its own
    // session, no controlling terminal, and no hold on our working directory.
    cmd.stdin(Stdio::null()).stdout(out).stderr(err).current_dir("/");
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let before = mount_ids(&mnt);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the mount server: {e}"))?;
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let tail = log_tail(log.as_ref(), log_start);
            return Err(format!(
                "mount of {} on {} failed ({status}){}",
                pool.display(),
                mnt.display(),
                if tail.is_empty() { String::new() } else { format!(":\n{tail}") }
            ));
        }
        if serves_since(&mnt, &before) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let tail = log_tail(log.as_ref(), log_start);
            return Err(format!(
                "mount of {} on {} did not answer within {MOUNT_TIMEOUT:?}; server stopped{}",
                pool.display(),
                mnt.display(),
                if tail.is_empty() { String::new() } else { format!(":\n{tail}") }
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens the background server's log, `hurricane-mount.log` in the pool
/// directory, for appending; returns where this mount's part of it starts.
/// The directory may be another user's: the log is opened relative to it,
/// never through a link, and only as a regular file with no other name
/// (`hurricane::dirfile`); a large one is first renamed to
/// `hurricane-mount.log.old` (a rename replaces a link there, never its
/// target).
fn open_log(pool: &Path) -> (Option<File>, u64) {
    let opened = hurricane::dirfile::Dir::open(pool).and_then(|d| {
        // Keep one previous log when it grows large.
        if d.lstat(LOG_NAME)?.is_some_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
                && st.st_size as u64 > LOG_LIMIT
        }) {
            let _ = d.rename(LOG_NAME, format!("{LOG_NAME}.old"));
        }
        d.open_append(LOG_NAME, 0o644)
    });
    started(opened.map_err(|e| e.to_string()), &pool.join(LOG_NAME))
}

/// Opens the log named with `-o log=FILE` for appending, as named (the
/// caller's choice of file; a link there is followed).
fn open_named_log(path: &Path) -> (Option<File>, u64) {
    if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > LOG_LIMIT) {
        let _ = std::fs::rename(path, path.with_extension("log.old"));
    }
    // Read too, for the tail of a failed mount; a file the caller may
    // only write to is logged to all the same.
    let f = OpenOptions::new()
        .read(true)
        .create(true)
        .append(true)
        .open(path)
        .or_else(|_| OpenOptions::new().create(true).append(true).open(path));
    started(f.map_err(|e| e.to_string()), path)
}

/// An opened log and its length (where this mount's lines start), or a
/// word on stderr that the server will not log.
fn started(f: Result<File, String>, path: &Path) -> (Option<File>, u64) {
    match f {
        Ok(f) => {
            let start = f.metadata().map(|m| m.len()).unwrap_or(0);
            (Some(f), start)
        }
        Err(e) => {
            let e = e.strip_prefix(&format!("{}: ", path.display())).unwrap_or(&e).to_string();
            eprintln!("hurricane: {}: {e}; the mount server will not log", path.display());
            (None, 0)
        }
    }
}

/// The last lines the server logged since `start`, read through the
/// descriptor it logs to (not its name, which may have changed since).
fn log_tail(log: Option<&File>, start: u64) -> String {
    let Some(f) = log else { return String::new() };
    let mut buf = vec![0u8; 64 << 10];
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], start + n as u64) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    let s = String::from_utf8_lossy(&buf[..n]);
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub fn umount(args: &UmountArgs) -> Result<(), String> {
    unmount_and_wait(&args.mountpoint, UMOUNT_TIMEOUT)
}

use hurricane::units::human;

pub fn stats(args: &StatsArgs) -> Result<(), String> {
    let mnt = absolute(&args.mountpoint);
    let v = read_stats(&mnt)?;
    if args.json {
        println!("{}", String::from_utf8_lossy(&v.to_json()));
        return Ok(());
    }
    println!("{} on {}  (pid {}, up {:.1} s, {} threads)", v.pool, v.mountpoint, v.pid, v.uptime_s, v.threads);
    let sp = &v.space;
    let bs = u64::from(sp.block_size);
    println!(
        "space: {} free of {}, {} inodes",
        human(sp.free_blocks.saturating_mul(bs)),
        human(sp.blocks.saturating_mul(bs)),
        sp.inodes
    );
    println!(
        "\n{:<24} {:<11} {:>10} {:>11} {:>10} {:>11} {:>8} {:>7}",
        "device", "state", "reads", "read", "writes", "written", "flushes", "errors"
    );
    for d in &v.devices {
        let chars: Vec<char> = d.name.chars().collect();
        let name = if chars.len() > 24 {
            format!("...{}", chars[chars.len() - 21..].iter().collect::<String>())
        } else {
            d.name.clone()
        };
        println!(
            "{:<24} {:<11} {:>10} {:>11} {:>10} {:>11} {:>8} {:>7}",
            name,
            d.state,
            d.reads,
            human(d.read_bytes),
            d.writes,
            human(d.write_bytes),
            d.flushes,
            d.read_errors + d.write_errors + d.checksum_errors
        );
    }
    let per_queue = &v.transport.ring_requests;
    if v.transport.io_uring {
        println!(
            "\nrequests through io_uring: {} ({} per-CPU queues: {:?})",
            per_queue.iter().sum::<u64>(),
            per_queue.len(),
            per_queue
        );
    } else {
        println!("\nrequests through /dev/fuse reads (no io_uring)");
    }
    println!(
        "\njournal: {} commits, {} checkpoints ({} of them made durable by a later commit)",
        v.journal.commits, v.journal.checkpoints, v.journal.unsynced_checkpoints
    );
    let m = &v.meta;
    println!(
        "meta-data: {} inodes in memory ({} changed since the checkpoint): {} hits, {} read from the store, {} evicted; \
         directory entries: {} hits, {} misses, {} evicted; \
         store {} ({} entry and {} record reads; pages: {} hits, {} misses, {} evicted)",
        m.inodes_resident,
        m.inodes_dirty,
        m.inodes.hits,
        m.inodes.misses,
        m.inodes.evictions,
        m.entries.hits,
        m.entries.misses,
        m.entries.evictions,
        human(m.store_bytes),
        m.entry_reads,
        m.record_reads,
        m.pages.hits,
        m.pages.misses,
        m.pages.evictions
    );
    let c = &v.cache;
    println!(
        "cache: {:.1}% hits of {} block lookups; {} of {} in use; {} prefetched ({} used), {} evictions",
        c.hit_rate * 100.0,
        c.hits + c.waits + c.misses,
        human(c.bytes),
        human(c.capacity),
        c.prefetched,
        c.prefetch_used,
        c.evictions
    );
    let z = &v.compress;
    if z.chunks_compressed + z.chunks_raw + z.chunks_zero + z.bytes_decompressed > 0 {
        println!(
            "compress: {} chunks compressed, {} raw, {} zero; {} stored as {} (ratio {:.2}); {:.0} ms compressing, {:.0} ms decompressing {}",
            z.chunks_compressed,
            z.chunks_raw,
            z.chunks_zero,
            human(z.bytes_in),
            human(z.bytes_stored),
            z.ratio,
            z.compress_ms,
            z.decompress_ms,
            human(z.bytes_decompressed)
        );
    }
    for l in &v.log {
        println!(
            "log on device {}: {} segments, {} live; files wrote {} behind {} summaries, the cleaner moved {} and emptied {} segments, {} of them in the background (write amplification {:.2})",
            l.device,
            l.segments,
            human(l.live_blocks * 4096),
            human(l.written_blocks * 4096),
            human(l.summary_blocks * 4096),
            human(l.moved_blocks * 4096),
            l.cleaned_segments,
            l.background_segments,
            l.write_amplification
        );
    }
    let t = &v.transactions;
    println!(
        "transactions: {} open by {} users, {} buffered; bounds {} open ({} per user), {} ({} per user, {} per transaction), lock waits {:.0} s; {} requests waiting",
        t.open,
        t.users,
        human(t.buffered_bytes),
        t.max_open,
        t.max_open_per_user,
        human(t.max_bytes),
        human(t.max_bytes_per_user),
        human(t.max_bytes_per_txn),
        t.lock_wait_s,
        t.waiting_requests
    );
    let g = &v.groups;
    if g.placed_blocks + g.group_reads > 0 {
        println!(
            "colocate: {} groups opened, {} taken over, {} placed in groups; {} group reads brought in {} neighbouring blocks, {} reads served from them ({} cached now)",
            g.groups_opened,
            g.groups_taken_over,
            human(g.placed_blocks * 4096),
            g.group_reads,
            g.blocks_read_ahead,
            g.cache_hits,
            human(g.cached_blocks * 4096)
        );
    }
    if g.held_blocks > 0 {
        println!(
            "colocate: {} held for group writes, {} written in {} group writes, {} held now{}",
            human(g.held_blocks * 4096),
            human(g.blocks_drained * 4096),
            g.group_writes,
            human(g.dirty_blocks * 4096),
            match g.blocks_lost {
                0 => String::new(),
                n => format!(", {} LOST with a device that stopped taking writes", human(n * 4096)),
            }
        );
    }
    println!(
        "\n{:<16} {:>12} {:>8} {:>11} {:>11} {:>12}",
        "request", "count", "errors", "avg us", "max us", "total ms"
    );
    for (name, o) in v.ops.iter().filter(|(_, o)| o.count != 0) {
        println!(
            "{:<16} {:>12} {:>8} {:>11.1} {:>11.1} {:>12.1}",
            name,
            o.count,
            o.errors,
            o.avg_ns as f64 / 1e3,
            o.max_ns as f64 / 1e3,
            o.total_ns as f64 / 1e6
        );
    }
    Ok(())
}

/// How long a remount waits for the server to follow the new flags (a
/// read-only remount writes a checkpoint first).
const REMOUNT_TIMEOUT: Duration = Duration::from_secs(60);

/// The helper name mount(8) looks for (`/sbin/mount.TYPE`); the binary
/// acts as the helper when called by that name.
pub const MOUNT_HELPER: &str = "mount.fuse.hurricane";

/// Options of a mount(8) helper's command line.
#[derive(Debug, Default, PartialEq)]
struct HelperArgs {
    operands: Vec<String>,
    options: Vec<String>,
    /// -f: do everything but mount.
    fake: bool,
    /// -s: drop the options this file system does not know.
    sloppy: bool,
}

/// Parses `OPERANDS [-sfnv] [-o OPTIONS] [-t TYPE]` in any order.
fn helper_args(args: &[String]) -> Result<HelperArgs, String> {
    let mut h = HelperArgs::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => h.options.push(it.next().ok_or("-o needs a value")?.clone()),
            "-t" => {
                it.next().ok_or("-t needs a value")?;
            }
            // Each helper would have to enter the namespace to mount or
            // unmount there, and the server to live in it.
            "-N" => return Err("-N (another mount namespace) is not supported".into()),
            s if s.starts_with("-o") && s.len() > 2 => h.options.push(s[2..].to_string()),
            s if s.starts_with('-') && s.len() > 1 => {
                // -n (no mtab) and -v (verbose) are accepted.
                for c in s[1..].chars() {
                    match c {
                        'f' => h.fake = true,
                        's' => h.sloppy = true,
                        'n' | 'v' => {}
                        _ => return Err(format!("unknown flag -{c}")),
                    }
                }
            }
            _ => h.operands.push(a.clone()),
        }
    }
    Ok(h)
}

/// The option lists without the options this file system does not know
/// (`-s`, sloppy), each named on stderr.
fn drop_unknown(lists: &[String]) -> Vec<String> {
    let mut kept = Vec::new();
    for item in lists.iter().flat_map(|l| l.split(',')).filter(|i| !i.is_empty()) {
        match MountOptions::parse(&[item]) {
            Err(e) if e.starts_with("unknown mount option") => eprintln!("hurricane: ignored: {e}"),
            _ => kept.push(item.to_string()),
        }
    }
    vec![kept.join(",")]
}

/// mount(8) runs `mount.fuse.hurricane POOL MOUNTPOINT [-sfnv] [-o
/// OPTIONS] [-t TYPE]`; mounts in the background like `hurricane mount`,
/// and returns once the mount answers. With `remount` among the options
/// it changes the flags of the mount at MOUNTPOINT instead ([`remount`]).
pub fn mount_helper_main(args: &[String]) -> Result<(), String> {
    let h = helper_args(args)?;
    let options = if h.sloppy { drop_unknown(&h.options) } else { h.options };
    let n = h.operands.len();
    let remounting = options.iter().flat_map(|l| l.split(',')).any(|i| i.trim() == "remount");
    if remounting {
        // `mount -o remount MOUNTPOINT` may name the mount point alone.
        let mnt = h.operands.last().ok_or("usage: mount.fuse.hurricane [POOL] MOUNTPOINT -o remount,...")?;
        // mount(8) passes the mount's options from /proc/self/mountinfo
        // again, the kernel's own FUSE options among them.
        let kernel = ["user_id=", "group_id=", "rootmode=", "max_read=", "blksize=", "fd="];
        let rest: Vec<&str> = options
            .iter()
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|i| *i != "remount" && !kernel.iter().any(|k| i.starts_with(k)))
            .collect();
        MountOptions::parse(&rest)?;
        return if h.fake { Ok(()) } else { remount(Path::new(mnt), &options) };
    }
    let [pool, mountpoint] = <[String; 2]>::try_from(h.operands)
        .map_err(|_| format!("usage: mount.fuse.hurricane POOL_DIR MOUNTPOINT [-o OPTIONS] (got {n} operands)"))?;
    // Options mount(8) adds for its own bookkeeping are dropped by the parser.
    MountOptions::parse(&options)?;
    if h.fake {
        return Ok(());
    }
    let pool = crate::util::pool_arg(&pool)?;
    mount(&MountArgs { pool, mountpoint: PathBuf::from(mountpoint), foreground: false, options })
}

/// The per-mount flags of a remount: those the mount has (its options in
/// /proc/self/mountinfo), then the options given, later ones winning.
/// Options that cannot change on a live mount (allow_other, threads=, ...:
/// mount(8) passes an fstab line's options again) are left out.
fn remount_flags<'a>(current: &'a str, given: impl Iterator<Item = &'a str>) -> rustix::mount::MountFlags {
    use rustix::mount::MountFlags as F;
    let atime = F::NOATIME | F::RELATIME | F::STRICTATIME;
    let mut f = F::empty();
    for o in current.split(',').chain(given) {
        match o.trim() {
            "ro" => f |= F::RDONLY,
            "rw" => f -= F::RDONLY,
            "nosuid" => f |= F::NOSUID,
            "suid" => f -= F::NOSUID,
            "nodev" => f |= F::NODEV,
            "dev" => f -= F::NODEV,
            "noexec" => f |= F::NOEXEC,
            "exec" => f -= F::NOEXEC,
            "sync" => f |= F::SYNCHRONOUS,
            "async" => f -= F::SYNCHRONOUS,
            "dirsync" => f |= F::DIRSYNC,
            "nodiratime" => f |= F::NODIRATIME,
            "diratime" => f -= F::NODIRATIME,
            "lazytime" => f |= F::LAZYTIME,
            "nolazytime" => f -= F::LAZYTIME,
            "noatime" => f = (f - atime) | F::NOATIME,
            "relatime" => f = (f - atime) | F::RELATIME,
            "strictatime" => f = (f - atime) | F::STRICTATIME,
            "atime" => f -= atime,
            "bind" => f |= F::BIND,
            _ => {}
        }
    }
    f
}

/// `mount -o remount,OPTIONS MOUNTPOINT`: changes the flags of a live
/// mount (read-only or read-write, and the per-mount flags the kernel lets
/// a remount change), then waits until the server follows: read-only, it
/// writes a checkpoint and then refuses every change; read-write, it takes
/// changes again. A pool mounted with `-o ro` was opened for reading only
/// and cannot be remounted read-write.
pub fn remount(mountpoint: &Path, options: &[String]) -> Result<(), String> {
    let mnt = absolute(mountpoint);
    let Some(m) = hurricane_fuse::mountinfo::fuse_mounts_at(&mnt).pop() else {
        return Err(format!("{}: no Hurricane mount there to remount", mnt.display()));
    };
    let stats = read_stats(&mnt)?;
    let flags = remount_flags(&m.options, options.iter().flat_map(|l| l.split(',')));
    let ro = flags.contains(rustix::mount::MountFlags::RDONLY);
    if !ro && stats.opened_read_only {
        return Err(format!(
            "{}: mounted with -o ro, the pool is open for reading only; unmount it and mount it read-write",
            mnt.display()
        ));
    }
    rustix::mount::mount_remount(&mnt, flags, "").map_err(|e| format!("{}: remount: {e}", mnt.display()))?;
    if flags.contains(rustix::mount::MountFlags::BIND) {
        // Only this mount's flags changed, not the file system's.
        return Ok(());
    }
    let deadline = Instant::now() + REMOUNT_TIMEOUT;
    loop {
        match read_stats(&mnt) {
            Ok(s) if s.writable != ro => return Ok(()),
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(_) => {
                return Err(format!(
                    "{}: remounted, but the server did not turn {} within {REMOUNT_TIMEOUT:?} (see its log)",
                    mnt.display(),
                    if ro { "read-only" } else { "read-write" }
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct InstallHelpersArgs {
    /// Where mount(8) looks for helpers.
    #[arg(long, default_value = "/sbin")]
    pub dir: PathBuf,
}

/// `hurricane install-helpers`: links `mount.fuse.hurricane` in DIR to this
/// program, so that `mount -t fuse.hurricane`, /etc/fstab lines, systemd
/// mount units and `mount -o remount` use it.
pub fn install_helpers(args: &InstallHelpersArgs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let link = args.dir.join(MOUNT_HELPER);
    match std::fs::symlink_metadata(&link) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?
        }
        Ok(_) => return Err(format!("{}: exists and is not a link; remove it first", link.display())),
        Err(_) => {}
    }
    std::os::unix::fs::symlink(&exe, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    println!("{} -> {}", link.display(), exe.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn helper_command_lines() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let h =
            helper_args(&v(&["/p", "/m", "-s", "-n", "-v", "-o", "rw,allow_other", "-t", "fuse.hurricane"])).unwrap();
        assert_eq!(h.operands, v(&["/p", "/m"]));
        assert_eq!(h.options, v(&["rw,allow_other"]));
        assert!(h.sloppy && !h.fake);
        assert!(helper_args(&v(&["-fo", "ro", "/p", "/m"])).is_err());
        let h = helper_args(&v(&["-f", "-oro", "/p", "/m"])).unwrap();
        assert!(h.fake && h.options == v(&["ro"]));
        assert!(helper_args(&v(&["/p", "/m", "-N", "/proc/1/ns/mnt"])).unwrap_err().contains("-N"));
        assert!(helper_args(&v(&["/p", "/m", "-o"])).is_err());
        assert_eq!(drop_unknown(&v(&["ro,bogus", "threads=2"])), v(&["ro,threads=2"]));
    }

    #[test]
    fn remount_flags_keep_the_mounts_and_apply_the_given() {
        use rustix::mount::MountFlags as F;
        let given = "ro,remount,user_id=0,allow_other,noexec".split(',');
        assert_eq!(
            remount_flags("rw,nosuid,nodev,relatime", given),
            F::RDONLY | F::NOSUID | F::NODEV | F::NOEXEC | F::RELATIME
        );
        let f = remount_flags("ro,nosuid,nodev,relatime", "rw,suid,noatime".split(','));
        assert_eq!(f, F::NODEV | F::NOATIME);
        assert_eq!(remount_flags("rw,noatime", "strictatime".split(',')), F::STRICTATIME);
        assert_eq!(remount_flags("rw,noatime", "atime".split(',')), F::empty());
    }

    /// The pool directory may be another user's: a log name she linked to
    /// a file of root's, or hard-linked to one, is not written to; the
    /// mount then goes on without a log.
    #[test]
    fn the_log_in_the_pool_directory_is_written_through_no_planted_link() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "root's\n").unwrap();
        let pool = t.path().join("pool");
        std::fs::create_dir(&pool).unwrap();
        let log = pool.join(LOG_NAME);
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        assert!(open_log(&pool).0.is_none());
        std::fs::remove_file(&log).unwrap();
        std::fs::hard_link(&victim, &log).unwrap();
        assert!(open_log(&pool).0.is_none());
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's\n");
        std::fs::remove_file(&log).unwrap();
        // A log of its own: appended to, and its tail read back through
        // the descriptor even when the name is made a link meanwhile.
        let (f, start) = open_log(&pool);
        let mut f = f.unwrap();
        assert_eq!(start, 0);
        writeln!(f, "first").unwrap();
        let (g, start) = open_log(&pool);
        let mut g = g.unwrap();
        writeln!(g, "second").unwrap();
        std::fs::rename(&log, pool.join("moved")).unwrap();
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        assert_eq!(log_tail(Some(&g), start), "second");
        assert_eq!(log_tail(Some(&f), 0), "first\nsecond");
        // A large log is set aside under a name where a link was planted:
        // the link is replaced.
        std::fs::remove_file(&log).unwrap();
        std::fs::rename(pool.join("moved"), &log).unwrap();
        f.set_len(LOG_LIMIT + 1).unwrap();
        let old = pool.join(format!("{LOG_NAME}.old"));
        std::os::unix::fs::symlink(&victim, &old).unwrap();
        let (h, start) = open_log(&pool);
        assert!(h.is_some() && start == 0);
        assert!(std::fs::symlink_metadata(&old).unwrap().is_file());
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's\n");
    }
}
