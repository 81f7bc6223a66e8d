//! `hurricane`: make, check, mount and use Hurricane pools.
//!
//! Every command that works on a pool takes the pool directory first, opens
//! the pool, does its work and closes it cleanly. Failures print one line,
//! `hurricane: <message>`, and exit 1 (2 for usage errors).
//! Invoked as `mount.fuse.hurricane`, the binary is mount(8)'s helper
//! (`hurricane install-helpers` links it).

// Every FUSE request allocates and frees its buffers; mimalloc keeps that
// off the serving threads' critical path (about 5% of a create).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod crashtest_cmd;
mod df;
mod files;
mod fsck_cmd;
mod layout_cmd;
mod logging;
mod maint;
mod mkfs;
mod mount;
mod recover;
mod status;
mod util;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use util::{CliResult, Fail};

#[derive(Parser, Debug)]
#[command(
    name = "hurricane",
    version,
    about = "Hurricane file system: pools of devices whose files are compositions of building blocks"
)]
#[command(after_help = "Layout specs: name[(k=v,...)][[child,...]][@dev], e.g. stripe(unit=64K,width=3); \
`hurricane layout types` lists the block types.\n\
Logging: RUST_LOG=info (default warn) on stderr.")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Make a pool: N image files in POOL_DIR, or the given devices.
    Mkfs(mkfs::MkfsArgs),
    /// Check a pool's consistency (exit 0 when consistent); --repair fixes it.
    Fsck(fsck_cmd::FsckArgs),
    /// Copy every file still reachable from a damaged pool into DEST (read-only), listing what could not be saved.
    Recover(recover::RecoverArgs),
    /// Mount a pool with FUSE.
    Mount(mount::MountArgs),
    /// Unmount a mounted pool.
    Umount(mount::UmountArgs),
    /// Statistics of a mounted pool.
    Stats(mount::StatsArgs),
    /// Link mount(8)'s helper, mount.fuse.hurricane, to this program (mount -t fuse.hurricane, fstab, remount).
    InstallHelpers(mount::InstallHelpersArgs),
    /// Device states and file health of a pool or mount (exit 1 unless healthy).
    Status(status::StatusArgs),
    /// List a directory of a pool.
    Ls(files::LsArgs),
    /// Make a directory in a pool.
    Mkdir(files::MkdirArgs),
    /// Copy a local file (or directory, with -r) into a pool.
    Put(files::PutArgs),
    /// Copy a file (or directory, with -r) out of a pool.
    Get(files::GetArgs),
    /// Write files of a pool to standard output.
    Cat(files::CatArgs),
    /// Remove files (or directories, with -r) from a pool.
    Rm(files::RmArgs),
    /// Rename or move a file or directory within a pool.
    Mv(files::MvArgs),
    /// Show attributes and layout of files in a pool.
    Stat(files::StatArgs),
    /// Show or set file layouts and directory default layouts; list the block types.
    #[command(subcommand, after_help = layout_cmd::help())]
    Layout(layout_cmd::LayoutCmd),
    /// Space and I/O per device of a pool.
    #[command(disable_help_flag = true)]
    Df(df::DfArgs),
    /// Power-cut testing: cut a recorded workload at many crash points and check each pool.
    Crashtest(crashtest_cmd::CrashtestArgs),
    /// Read and verify every copy of every block; repair from redundancy.
    Scrub(maint::ScrubArgs),
    /// Move files (or a tree, with -r) to a new layout while they stay in use.
    Migrate(maint::MigrateArgs),
    /// Run the log cleaner now: empty `log` segments by moving their live blocks.
    Clean(maint::CleanArgs),
    /// Move the scattered small-file blocks of `colocate` files back together.
    Regroup(maint::RegroupArgs),
    /// Manage the devices of a pool.
    #[command(subcommand)]
    Device(maint::DeviceCmd),
    /// Run a named experiment (`list` shows them): table, NAME.json and NAME.png.
    Bench(BenchArgs),
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    /// Experiment name, `list`, or a report (`mount-report`, `redundancy-report`: summaries of bench/*.sh results).
    name: String,
    /// Small sizes: checks that the experiment runs, not its figures.
    #[arg(long)]
    quick: bool,
    /// Files to create, for the experiments that take a count (meta-scale, cffs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..))]
    files: Option<u64>,
    /// Directories the files go in (cffs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    dirs: Option<u64>,
    /// Bytes a file (cffs): 4K, 1K, 4096.
    #[arg(long, value_parser = crate::util::parse_size)]
    size: Option<u64>,
    /// A simulated disk pool only (cffs): hdd, hdd:key=value,... (`none`: image files only).
    #[arg(long)]
    sim: Option<String>,
    /// Where NAME.json and NAME.png go.
    #[arg(long, default_value = "bench/results")]
    out: std::path::PathBuf,
}

fn bench(a: &BenchArgs) -> CliResult {
    if a.name == "list" {
        for (n, what) in hurricane_bench::EXPERIMENTS {
            println!("{n:20} {what}");
        }
        for (n, what, _) in hurricane_bench::REPORTS {
            println!("{n:20} {what}");
        }
        return Ok(());
    }
    if let Some((_, _, report)) = hurricane_bench::REPORTS.iter().find(|r| r.0 == a.name) {
        print!("{}", report(&a.out).map_err(Fail::new)?);
        return Ok(());
    }
    let p = hurricane_bench::Params { files: a.files, dirs: a.dirs, size: a.size, sim: a.sim.clone() };
    let s = hurricane_bench::run_params(&a.name, a.quick, &p, &a.out).map_err(Fail::new)?;
    println!("{}", s.table);
    println!("wrote {} and {}", s.json.display(), s.png.display());
    println!("{}", s.line);
    Ok(())
}

fn run(cmd: &Cmd) -> CliResult {
    match cmd {
        Cmd::Mkfs(a) => mkfs::run(a),
        Cmd::Fsck(a) => fsck_cmd::run(a),
        Cmd::Recover(a) => recover::run(a),
        Cmd::Mount(a) => Ok(mount::mount(a)?),
        Cmd::Umount(a) => Ok(mount::umount(a)?),
        Cmd::Stats(a) => Ok(mount::stats(a)?),
        Cmd::InstallHelpers(a) => Ok(mount::install_helpers(a)?),
        Cmd::Status(a) => status::run(a),
        Cmd::Clean(a) => maint::clean(a),
        Cmd::Regroup(a) => maint::regroup(a),
        Cmd::Ls(a) => files::ls(a),
        Cmd::Mkdir(a) => files::mkdir(a),
        Cmd::Put(a) => files::put(a),
        Cmd::Get(a) => files::get(a),
        Cmd::Cat(a) => files::cat(a),
        Cmd::Rm(a) => files::rm(a),
        Cmd::Mv(a) => files::mv(a),
        Cmd::Stat(a) => files::stat(a),
        Cmd::Layout(c) => layout_cmd::run(c),
        Cmd::Df(a) => df::run(a),
        Cmd::Crashtest(a) => crashtest_cmd::run(a),
        Cmd::Bench(a) => bench(a),
        Cmd::Scrub(a) => maint::scrub(a),
        Cmd::Device(c) => maint::device(c),
        Cmd::Migrate(a) => maint::migrate(a),
    }
}

fn init_logging() {
    logging::init();
}

/// One line and a distinct status even for a bug: never a backtrace.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("hurricane: internal error: {msg}{at}");
    }));
}

fn finish(r: CliResult) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail { msg, code }) => {
            if !msg.is_empty() {
                eprintln!("hurricane: {msg}");
            }
            ExitCode::from(code.clamp(0, 255) as u8)
        }
    }
}

fn main() -> ExitCode {
    // `hurricane cat ... | head` ends quietly, as other tools do.
    // SAFETY: restoring the default action of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    quiet_panics();
    init_logging();
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let argv0 = args.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
    if argv0 == mount::MOUNT_HELPER {
        return finish(mount::mount_helper_main(args.get(1..).unwrap_or(&[])).map_err(Fail::new));
    }
    let cli = Cli::parse();
    match std::panic::catch_unwind(|| run(&cli.cmd)) {
        Ok(r) => finish(r),
        Err(_) => ExitCode::from(101),
    }
}
