//! The crash harness in CI mode: every workload, a fixed number of crash
//! points, zero violations allowed. `hurricane crashtest --long` runs more.

use hurricane::crashtest::{run, workloads, CrashOptions};

/// Crash points per workload in CI (each checked in up to 5 crash modes).
const POINTS: usize = 500;

fn ci(workload: &str) {
    let opts = CrashOptions { jobs: 2, ..CrashOptions::new(workload, POINTS, 7) };
    let r = run(&opts);
    eprintln!("{r}");
    assert!(r.error.is_none(), "{r}");
    assert_eq!(r.points, POINTS, "{r}");
    assert!(r.states >= POINTS, "{r}");
    assert!(r.syncs >= 10, "{r}");
    assert_eq!(r.violations, 0, "{r}");
}

#[test]
fn workload_list() {
    let names: Vec<&str> = workloads().iter().map(|(n, _)| *n).collect();
    for want in ["posix", "renames", "appends", "extent", "stripe", "regions", "replicate", "inline", "nested", "concurrent"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let r = run(&CrashOptions::new("nope", 10, 1));
    assert!(r.error.as_deref().is_some_and(|e| e.contains("unknown workload")), "{r}");
    assert!(!r.passed());
}

#[test]
fn posix() {
    ci("posix");
}
#[test]
fn renames() {
    ci("renames");
}
#[test]
fn appends() {
    ci("appends");
}
#[test]
fn extent() {
    ci("extent");
}
#[test]
fn stripe() {
    ci("stripe");
}
#[test]
fn regions() {
    ci("regions");
}
#[test]
fn replicate() {
    ci("replicate");
}
#[test]
fn inline() {
    ci("inline");
}
#[test]
fn nested() {
    ci("nested");
}
#[test]
fn concurrent() {
    ci("concurrent");
}

/// The checker has teeth: a disk that acknowledges flushes without doing
/// them loses synced data, and that is reported.
#[test]
fn lying_disks_are_caught() {
    for (workload, lying) in [("posix", vec![0]), ("extent", vec![1, 2]), ("renames", vec![0]), ("appends", vec![1, 2])] {
        let opts = CrashOptions { jobs: 2, lying_devices: lying.clone(), max_reported: 3, ..CrashOptions::new(workload, 100, 3) };
        let r = run(&opts);
        eprintln!("lying {lying:?}: {r}");
        assert!(r.violations > 0, "{r}");
    }
}
