//! `hurricane crashtest`: record a workload's device writes, cut them at
//! many crash points and check every resulting pool (see RELIABILITY.md).

use crate::util::{CliResult, Fail};
use hurricane::crashtest::{self, CrashOptions, CrashReport};

#[derive(clap::Args, Debug)]
pub struct CrashtestArgs {
    /// Workload to run ("all" for every one; --list shows them).
    #[arg(long, default_value = "all")]
    pub workload: String,
    /// Crash points to check per workload.
    #[arg(long, default_value_t = 300)]
    pub points: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Bigger workloads and more crash states per point.
    #[arg(long)]
    pub long: bool,
    /// Checker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub jobs: usize,
    /// List the workloads and exit.
    #[arg(long)]
    pub list: bool,
}

pub fn run(a: &CrashtestArgs) -> CliResult {
    if a.list {
        for (name, doc) in crashtest::workloads() {
            println!("{name:<16} {doc}");
        }
        return Ok(());
    }
    let opts = CrashOptions {
        workload: a.workload.clone(),
        points: a.points,
        seed: a.seed,
        long: a.long,
        jobs: a.jobs,
        ..Default::default()
    };
    let r = crashtest::run(&opts);
    let parts: Vec<&CrashReport> = if r.parts.is_empty() { vec![&r] } else { r.parts.iter().collect() };
    println!(
        "{:<16} {:>7} {:>7} {:>13} {:>9} {:>8} {:>8} {:>10} {:>9}",
        "workload", "ops", "syncs", "ckpts/unsync", "points", "states", "same", "violations", "seconds"
    );
    let (mut points, mut states, mut same, mut violations) = (0, 0, 0, 0);
    for p in &parts {
        println!(
            "{:<16} {:>7} {:>7} {:>13} {:>9} {:>8} {:>8} {:>10} {:>9.1}",
            p.workload,
            p.ops,
            p.syncs,
            format!("{}/{}", p.checkpoints, p.unsynced_checkpoints),
            p.points,
            p.states,
            p.same_states,
            p.violations,
            p.elapsed.as_secs_f64()
        );
        points += p.points;
        states += p.states;
        same += p.same_states;
        violations += p.violations;
        if let Some(e) = &p.error {
            println!("  error: {e}");
        }
        for v in &p.details {
            println!("  violation: {v}");
        }
    }
    println!(
        "crash points checked: {points} ({states} crash states, {same} more skipped as the same as one checked); \
         violations: {violations}"
    );
    if r.passed() {
        Ok(())
    } else {
        Err(Fail::new(format!("{violations} violations (see above)")))
    }
}
