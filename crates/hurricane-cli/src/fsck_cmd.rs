//! `hurricane fsck`: check a pool's consistency, and repair it.

use crate::util::{interactive, CliResult, Fail, Pool};
use clap::Args;
use hurricane::Options;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Exit status when problems were found and all repaired.
pub const EXIT_REPAIRED: i32 = 3;
/// Exit status when problems remain.
pub const EXIT_PROBLEMS: i32 = 4;

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 consistent; 1 the pool could not be checked; 3 problems found and all repaired; 4 problems remain (or, with --data, damaged file data was found)."
)]
pub struct FsckArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Repair what can be repaired (opens the pool read-write); also
    /// regroups `colocate` files whose small-file blocks were scattered over
    /// more than one group (without it they are only counted in a note).
    #[arg(short = 'r', long)]
    pub repair: bool,
    /// Also read every block of every file through its layout, verify the
    /// checksums the layout keeps, and list damaged files with their ranges.
    #[arg(long)]
    pub data: bool,
    /// Print only problems and repairs.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn run(a: &FsckArgs) -> CliResult {
    // No background commits: a repair becomes durable in one checkpoint.
    let opts = Options { read_only: !a.repair, background_commit: false, ..Options::default() };
    let pool = Pool::open_with(&a.pool, opts)?;
    let pb = bar();
    let rep = pool.finish(|fs| {
        let mut progress = |phase: &str, done: u64, total: u64| {
            pb.set_message(phase.to_string());
            pb.set_length(total);
            pb.set_position(done);
        };
        let rep = hurricane::fsck::check(fs, a.repair, &mut progress)?;
        let data = if a.data {
            pb.set_style(data_style());
            Some(hurricane::fsck::check_data(fs, &mut progress)?)
        } else {
            None
        };
        Ok((rep, data))
    });
    pb.finish_and_clear();
    let (rep, data) = rep?;
    for n in &rep.notes {
        if !a.quiet {
            println!("note: {n}");
        }
    }
    for p in &rep.problems {
        println!("problem: {p}");
    }
    for r in &rep.repaired {
        println!("repaired: {r}");
    }
    if a.repair {
        for p in &rep.remaining {
            println!("not repaired: {p}");
        }
    }
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
    if damaged > 0 && rep.is_clean() {
        return Err(Fail::code(EXIT_PROBLEMS, format!("{}: {damaged} files with damaged data", a.pool.display())));
    }
    match (rep.problems.is_empty(), rep.is_clean()) {
        (true, true) => {
            if !a.quiet {
                println!("{}: consistent", a.pool.display());
            }
            Ok(())
        }
        (false, true) => Err(Fail::code(
            EXIT_REPAIRED,
            format!("{}: {} problems found and repaired", a.pool.display(), rep.problems.len()),
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
