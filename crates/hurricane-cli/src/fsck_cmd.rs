//! `hurricane fsck`: check a pool's consistency, and repair it.
//!
//! With `--repair` the pool is first checked read-only and what was found
//! printed (the blocks a repair would return to the free maps among it);
//! only then, if the check read all the meta-data (or `--force`), is it
//! opened read-write and repaired. A pool whose meta-data could not all be
//! read is never written unless forced, and never has space freed.

use crate::util::{interactive, CliResult, Fail, Pool};
use clap::Args;
use hurricane::fsck::{self, DataReport, FsckOptions, FsckReport};
use hurricane::Options;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Exit status when problems were found and all repaired.
pub const EXIT_REPAIRED: i32 = 3;
/// Exit status when problems remain.
pub const EXIT_PROBLEMS: i32 = 4;
/// Exit status when meta-data could not be read: the check is incomplete.
pub const EXIT_INCOMPLETE: i32 = 5;

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 consistent (every meta-data block verified, everything read, nothing found); 1 the pool could not be checked; 3 problems found and all repaired; 4 problems remain (or, with --data, damaged file data was found); 5 meta-data could not be read (the check is incomplete: `hurricane recover` copies out what can be read)."
)]
pub struct FsckArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Repair what can be repaired (opens the pool read-write); also
    /// regroups `colocate` files whose small-file blocks were scattered over
    /// more than one group (without it they are only counted in a note).
    #[arg(short = 'r', long)]
    pub repair: bool,
    /// With --repair: repair what was found even when the meta-data could
    /// not all be read (space is still never freed then).
    #[arg(long, requires = "repair")]
    pub force: bool,
    /// Also read every block of every file through its layout, verify the
    /// checksums the layout keeps, and list damaged files with their ranges.
    #[arg(long)]
    pub data: bool,
    /// Print only problems and repairs.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// One check: the report and, with --data, the data check's.
fn check(a: &FsckArgs, repair: bool, data: bool) -> CliResult<(FsckReport, Option<DataReport>)> {
    // No background commits: a repair becomes durable in one checkpoint.
    let opts = Options { read_only: !repair, background_commit: false, ..Options::default() };
    let pool = Pool::open_with(&a.pool, opts)?;
    let pb = bar();
    let rep = pool.finish(|fs| {
        let mut progress = |phase: &str, done: u64, total: u64| {
            pb.set_message(phase.to_string());
            pb.set_length(total);
            pb.set_position(done);
        };
        let rep = fsck::check_with(fs, FsckOptions { repair, force: a.force }, &mut progress)?;
        let data = if data {
            pb.set_style(data_style());
            Some(fsck::check_data(fs, &mut progress)?)
        } else {
            None
        };
        Ok((rep, data))
    });
    pb.finish_and_clear();
    rep
}

/// At most this many unreadable items are printed one by one.
const SHOWN_UNREAD: usize = 50;

pub fn run(a: &FsckArgs) -> CliResult {
    // Read-only first: what a repair would do is printed before it is done.
    let (first, data) = check(a, false, a.data)?;
    for n in &first.notes {
        if !a.quiet {
            println!("note: {n}");
        }
    }
    for u in first.incomplete.iter().take(SHOWN_UNREAD) {
        println!("unreadable: {u}");
    }
    if first.incomplete.len() > SHOWN_UNREAD {
        println!("unreadable: and {} more", first.incomplete.len() - SHOWN_UNREAD);
    }
    for p in &first.problems {
        println!("problem: {p}");
    }
    if a.repair && first.would_free > 0 {
        println!("repair frees {} device blocks allocated but owned by nothing", first.would_free);
    }
    // A repair opens the pool writable even with nothing found: that open
    // rolls forward log writes made after the last commit, frees orphans
    // and brings the journal's copies up to date.
    let rep = if a.repair && (first.is_complete() || a.force) {
        let (rep, _) = check(a, true, false)?;
        // What the repair itself notes (files regrouped, copies rewritten).
        for n in rep.notes.iter().filter(|n| !first.notes.contains(n)) {
            if !a.quiet {
                println!("note: {n}");
            }
        }
        for r in &rep.repaired {
            println!("repaired: {r}");
        }
        for p in &rep.remaining {
            println!("not repaired: {p}");
        }
        rep
    } else {
        if a.repair && !first.is_complete() {
            println!(
                "note: nothing was repaired: the meta-data could not all be read (--force repairs what was found anyway, never freeing space)"
            );
        }
        first.clone()
    };
    if !a.quiet {
        println!(
            "{}: {} inodes ({} directories, {} files, {} symlinks), {} bytes in files, {} of {} blocks in use",
            a.pool.display(),
            rep.inodes,
            rep.dirs,
            rep.files,
            rep.symlinks,
            rep.bytes,
            rep.used_blocks,
            rep.total_blocks
        );
        if rep.meta_blocks > 0 {
            println!(
                "{}: meta-data: {} blocks, {} block reads verified over every copy",
                a.pool.display(),
                rep.meta_blocks,
                first.meta_checked
            );
        }
    }
    let damaged = data.as_ref().map_or(0, |d| d.damaged.len());
    if let Some(d) = &data {
        for (path, ranges) in &d.damaged {
            let shown: Vec<String> = ranges.iter().map(|&(off, len)| format!("bytes {off}..{}", off + len)).collect();
            println!("damaged: {path}: {}", shown.join(", "));
        }
        for (dev, n) in &d.checksum_errors {
            println!("checksum errors: {dev}: {n} blocks failed verification");
        }
        if !a.quiet {
            if d.unverified_files > 0 {
                println!(
                    "note: {} of {} files keep no checksums: their data was read but could not be verified",
                    d.unverified_files, d.files
                );
            }
            println!("{}: data of {} files read, {} blocks verified", a.pool.display(), d.files, d.blocks);
        }
    }
    if !rep.is_complete() {
        return Err(Fail::code(
            EXIT_INCOMPLETE,
            format!(
                "{}: the meta-data could not all be read ({} meta-file blocks held by no copy, {} items unreadable): not consistent; `hurricane recover` copies out what can be read",
                a.pool.display(),
                rep.meta_lost.len(),
                rep.incomplete.len()
            ),
        ));
    }
    if damaged > 0 && rep.is_clean() {
        return Err(Fail::code(EXIT_PROBLEMS, format!("{}: {damaged} files with damaged data", a.pool.display())));
    }
    match (first.problems.is_empty(), rep.is_clean()) {
        (true, true) => {
            if !a.quiet {
                println!("{}: consistent", a.pool.display());
            }
            Ok(())
        }
        (false, true) => Err(Fail::code(
            EXIT_REPAIRED,
            format!("{}: {} problems found and repaired", a.pool.display(), first.problems.len()),
        )),
        _ if a.repair => Err(Fail::code(
            EXIT_PROBLEMS,
            format!("{}: {} problems remain after repair", a.pool.display(), rep.remaining.len()),
        )),
        _ => Err(Fail::code(
            EXIT_PROBLEMS,
            format!("{}: {} problems found (run with --repair to fix them)", a.pool.display(), rep.problems.len()),
        )),
    }
}

fn bar() -> ProgressBar {
    if !interactive() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(0);
    if let Ok(st) = ProgressStyle::with_template("checking {msg} [{bar:30}] {pos}/{len}") {
        pb.set_style(st.progress_chars("=> "));
    }
    pb
}

fn data_style() -> ProgressStyle {
    ProgressStyle::with_template("reading file data [{bar:30}] {percent}% {pos}/{len} blocks, {per_sec}, {eta} left")
        .map(|st| st.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}
