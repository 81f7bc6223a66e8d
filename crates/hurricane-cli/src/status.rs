//! `hurricane status POOL|MOUNTPOINT`: each device's state and error
//! counts, how many files are healthy, degraded or lost, and the files on
//! the pool's permanent error list (data a read, scrub, replacement or
//! `fsck --data` found no good copy of). Exit status 0 when the pool is
//! healthy (every device online, every file with all its copies, no
//! permanent errors), 1 when it is not (and on errors). `--clear-errors`
//! empties the permanent error list first (as `zpool clear` does).

use crate::util::{human, CliResult, Fail, Pool};
use clap::Args;
use hurricane_fuse::mountinfo::{absolute, fuse_mounts_at, read_status};
use hurricane_fuse::report::StatusReport;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Pool directory, or the mount point of a mounted pool.
    #[arg(value_parser = crate::util::pool_arg)]
    pub target: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Empty the pool's list of permanent errors first (root only on a
    /// mount; offline the pool is opened writable). A file whose data is
    /// still bad goes back on the list when a read or scrub finds it again.
    #[arg(long)]
    pub clear_errors: bool,
}

pub fn run(a: &StatusArgs) -> CliResult {
    let mnt = absolute(&a.target);
    let mounted = !fuse_mounts_at(&mnt).is_empty();
    if a.clear_errors {
        if mounted {
            crate::maint::online(&mnt, &hurricane_fuse::control::Request::ClearErrors)?;
        } else {
            let n = Pool::run(&a.target, true, |fs| Ok(fs.clear_data_errors()?))?;
            tracing::info!("cleared {n} permanent errors");
        }
    }
    let rep = if mounted {
        read_status(&mnt).map_err(Fail::new)?
    } else {
        let pool = a.target.display().to_string();
        Pool::run(&a.target, false, |fs| Ok(StatusReport::of(fs, &pool)))?
    };
    let mut o = std::io::stdout().lock();
    if a.json {
        writeln!(o, "{}", String::from_utf8_lossy(&rep.to_json()))?;
    } else {
        print(&mut o, &rep)?;
    }
    if rep.healthy() {
        Ok(())
    } else {
        Err(Fail::code(1, ""))
    }
}

fn print(o: &mut impl Write, r: &StatusReport) -> std::io::Result<()> {
    let what = if r.healthy() {
        "healthy"
    } else if r.health.lost > 0 || r.health.error_files > 0 {
        "lost data"
    } else {
        "degraded"
    };
    let at = if r.mountpoint.is_empty() { String::new() } else { format!(" on {}", r.mountpoint) };
    writeln!(o, "pool {}{at}: {what}", r.pool)?;
    let mut rows =
        vec![["dev", "path", "state", "read err", "write err", "cksum err", "size", "used"].map(String::from)];
    for d in &r.devices {
        rows.push([
            d.index.to_string(),
            d.name.clone(),
            d.state.clone(),
            d.read_errors.to_string(),
            d.write_errors.to_string(),
            d.checksum_errors.to_string(),
            human(d.size),
            human(d.used),
        ]);
    }
    let widths: Vec<usize> = (0..8).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let w = widths[c];
            if c == 1 || c == 2 {
                line.push_str(&format!("{cell:<w$}  "));
            } else {
                line.push_str(&format!("{cell:>w$}  "));
            }
        }
        writeln!(o, "{}", line.trim_end())?;
    }
    let h = &r.health;
    writeln!(o, "files: {} healthy, {} degraded, {} lost; meta-data: {}", h.healthy, h.degraded, h.lost, h.meta)?;
    let m = &r.meta_copies;
    let devs = |v: &[(u32, bool)]| -> String {
        v.iter().map(|(d, ok)| if *ok { d.to_string() } else { format!("{d} (down)") }).collect::<Vec<_>>().join(", ")
    };
    let kept = if m.wanted == 0 { "as made at mkfs".to_string() } else { format!("{} kept", m.wanted) };
    writeln!(
        o,
        "meta-data copies ({kept}): meta-file on devices {}; journal on devices {}; survives {} more device failure{}{}",
        devs(&m.meta_file),
        devs(&m.journal),
        m.survives,
        if m.survives == 1 { "" } else { "s" },
        if m.degraded { " (DEGRADED)" } else { "" }
    )?;
    if m.last_record.0 < m.last_record.1 {
        writeln!(o, "  the last journal record reached {} of its {} copies", m.last_record.0, m.last_record.1)?;
    }
    let list = |o: &mut dyn Write, what: &str, paths: &[String], total: u64| -> std::io::Result<()> {
        if total == 0 {
            return Ok(());
        }
        writeln!(o, "{what} files:")?;
        for p in paths {
            writeln!(o, "  {p}")?;
        }
        let more = total.saturating_sub(paths.len() as u64);
        if more > 0 {
            writeln!(o, "  ... and {more} more")?;
        }
        Ok(())
    };
    list(o, "lost", &h.lost_paths, h.lost)?;
    list(o, "degraded", &h.degraded_paths, h.degraded)?;
    if h.error_files > 0 {
        writeln!(o, "permanent errors in the following files:")?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        for e in &h.errors {
            let names = if e.paths.is_empty() { format!("<inode {}>", e.ino) } else { e.paths.join(", ") };
            let ranges: Vec<String> = e.ranges.iter().map(|(o, l)| format!("{o}+{l}")).collect();
            writeln!(
                o,
                "  {names} (bytes {}; found by {} {} ago: {})",
                ranges.join(", "),
                e.source,
                age(now - e.last_s),
                e.detail
            )?;
        }
        let more = h.error_files.saturating_sub(h.errors.len() as u64);
        if more > 0 {
            writeln!(o, "  ... and {more} more")?;
        }
    }
    Ok(())
}

/// A time span in seconds, in the largest unit that keeps it above 1.
fn age(s: i64) -> String {
    let s = s.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86400),
    }
}
