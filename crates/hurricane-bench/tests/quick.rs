//! Every experiment runs in --quick mode and writes its files (correctness
//! only: no timing is asserted).

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hurricane_bench::{run, run_params, Params, EXPERIMENTS};
use serde_json::Value;

fn check(name: &str) -> Value {
    let out = tempfile::tempdir().unwrap();
    let s = run(name, true, out.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(s.line.starts_with(name), "{}", s.line);
    assert!(!s.table.is_empty());
    let png = std::fs::read(&s.png).unwrap();
    assert!(png.len() > 1000 && png.starts_with(b"\x89PNG"), "{name}: bad PNG");
    let text = std::fs::read_to_string(&s.json).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["experiment"], name);
    assert_eq!(v["quick"], true);
    v
}

#[test]
fn hfs_table1() {
    let v = check("hfs-table1");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for r in rows {
        for k in ["pattern", "structure"] {
            assert!(r[k] == "A" || r[k] == "B", "{r}");
        }
        assert!(r["prefetch"].is_boolean());
        assert!(r["kbps"].as_f64().unwrap() > 0.0);
        assert!(r["fraction"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn hfs_speedup() {
    let v = check("hfs-speedup");
    assert_eq!(v["rows"].as_array().unwrap().len(), 6);
}

#[test]
fn hfs_prefetch_sweep() {
    let v = check("hfs-prefetch-sweep");
    assert_eq!(v["rows"].as_array().unwrap().len(), 6);
}

#[test]
fn hfs_layers() {
    let v = check("hfs-layers");
    assert!(v["ns_per_block_per_request"].is_number());
    assert!(v["throughput_loss"].is_number());
}

#[test]
fn hfs_getattr() {
    let v = check("hfs-getattr");
    assert!(v["rows"].as_array().unwrap().iter().all(|r| r["same_file_ops"].as_f64().unwrap() > 0.0));
}

#[test]
fn hfs_parity() {
    let v = check("hfs-parity");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r["kbps"].as_f64().unwrap() > 0.0), "{v}");
    assert!(rows.iter().filter(|r| r["structure"].as_str().unwrap().contains("missing")).count() == 2);
}

#[test]
fn hfs_migrate() {
    let v = check("hfs-migrate");
    for k in ["aa", "ab_before", "ab_during_migration", "ab_after_migration"] {
        assert!(v["kbps"][k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    for k in ["migrate", "migrate_with_reader", "copy"] {
        assert!(v["seconds"][k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
}

#[test]
fn write_mostly() {
    let v = check("write-mostly");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert!(r["kbps"].as_f64().unwrap() > 0.0, "{r}");
        let per: u64 = r["bytes_per_device"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).sum();
        assert_eq!(per, 8 * (256 << 10), "{r}: every byte written is on some disk");
    }
}

#[test]
fn meta_scale() {
    let v = check("meta-scale");
    assert_eq!(v["files"], 20_000);
    assert!(v["open_s_clean"].as_f64().unwrap() > 0.0);
    assert!(v["rss_bytes"].as_u64().unwrap() > 0);
    assert!(v["create_per_s_at_100k"].as_f64().unwrap() > 0.0);
    assert!(v["create_per_s_at_end"].as_f64().unwrap() > 0.0);
    let runs = v["runs"].as_array().unwrap();
    let shapes: Vec<&str> = runs.iter().map(|r| r["shape"].as_str().unwrap()).collect();
    assert_eq!(shapes, ["one-dir", "spread"]);
    for r in runs {
        let points = r["points"].as_array().unwrap();
        assert_eq!(points.len(), 10, "{r}");
        assert_eq!(points.last().unwrap()["files"], 20_000);
        for p in points {
            for k in ["create_per_s", "stat_per_s", "lookup_per_s", "unlink_per_s"] {
                assert!(p[k].as_f64().unwrap() > 0.0, "{k}: {p}");
            }
        }
    }
}

#[test]
fn tam() {
    let v = check("tam");
    let rows = v["rows"].as_array().unwrap();
    // 8 benchmarks, cold and warm, at 1 and 2 threads.
    assert_eq!(rows.len(), 8 * 2 * 2, "{v}");
    for r in rows {
        assert!(r["per_thread_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["cache"] == "cold" || r["cache"] == "warm", "{r}");
    }
    // A cold run misses the inode cache; the warm run of the same files
    // finds them.
    let get = |bench: &str, cache: &str| {
        rows.iter().find(|r| r["bench"] == bench && r["cache"] == cache && r["threads"] == 1).unwrap().clone()
    };
    assert!(get("stat", "cold")["inode_misses"].as_u64().unwrap() > 0);
    assert_eq!(get("stat", "warm")["inode_misses"].as_u64().unwrap(), 0);
    assert!(get("regular-read", "cold")["data_misses"].as_u64().unwrap() > 0);
}

#[test]
fn web_replay() {
    let v = check("web-replay");
    let rows = v["rows"].as_array().unwrap();
    // The native run: a cold pass and warm passes at 1 and 2 threads.
    assert_eq!(rows.len(), 3, "{v}");
    assert!(rows.iter().all(|r| r["system"] == "hurricane-native" && r["requests_per_s"].as_f64().unwrap() > 0.0));
    assert!(v["params"]["missing"].as_u64().unwrap() > 0);
    assert!(v["params"]["listings"].as_u64().unwrap() > 0);
}

#[test]
fn tpcb() {
    let v = check("tpcb");
    let rows = v["rows"].as_array().unwrap();
    let systems: Vec<&str> = rows.iter().map(|r| r["system"].as_str().unwrap()).collect();
    assert_eq!(systems, ["extent", "log", "log+cleaner-70", "log+cleaner-85", "sqlite"], "{v}");
    for r in rows {
        assert!(r["tps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["transactions"].as_u64().unwrap() > 0, "{r}");
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["retries"].is_u64(), "{r}");
    }
    for r in &rows[1..4] {
        assert!(r["write_amplification"].as_f64().unwrap() >= 1.0, "{r}");
        assert!(r["cleaned_segments"].is_u64() && r["moved_mib"].is_number(), "{r}");
    }
    // The log with room to spare never cleans.
    assert_eq!(rows[1]["cleaned_segments"], 0, "{}", rows[1]);
    for (r, fill) in [(&rows[2], 0.70), (&rows[3], 0.85)] {
        assert_eq!(r["fill"].as_f64().unwrap(), fill, "{r}");
        assert!((r["fill_measured"].as_f64().unwrap() - fill).abs() < 0.02, "{r}");
        // The history grew during the run.
        assert!(r["fill_end"].as_f64().unwrap() > r["fill_measured"].as_f64().unwrap(), "{r}");
    }
    for k in ["log_over_extent", "extent_over_sqlite", "log_over_sqlite", "cleaner_loss_70", "cleaner_loss_85"] {
        assert!(v["ratios"][k].is_number(), "{k}: {v}");
    }
    assert_eq!(v["seltzer"]["lfs_tps"], 19.3);
}

#[test]
fn cffs() {
    let v = check("cffs");
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["pool"].as_str().unwrap(),
                r["workload"].as_str().unwrap(),
                r["system"].as_str().unwrap()
            )
        })
        .collect();
    // Every workload on image files, Table 4.2's two on the simulated disk.
    assert_eq!(
        names,
        [
            "image-file cffs native-colocated",
            "image-file cffs native-default",
            "image-file cffs-interleaved native-colocated",
            "image-file cffs-interleaved native-default",
            "image-file seltzer native-colocated",
            "image-file seltzer native-default",
            "sim-hdd cffs native-colocated",
            "sim-hdd cffs native-default",
            "sim-hdd cffs-interleaved native-colocated",
            "sim-hdd cffs-interleaved native-default",
        ],
        "{v}"
    );
    for r in rows {
        for p in ["create", "read", "overwrite", "remove"] {
            let ph = &r["phases"][p];
            assert!(ph["files_per_s"].as_f64().unwrap() > 0.0, "{p}: {r}");
            assert!(ph["mb_per_s"].as_f64().unwrap() > 0.0, "{p}: {r}");
            assert_eq!(ph["samples"].as_array().unwrap().len(), 1, "{p}: {r}");
        }
        // The data reached the device and was read from it (caches emptied).
        assert!(r["phases"]["create"]["writes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["phases"]["read"]["reads"].as_u64().unwrap() > 0, "{r}");
        // A file made in a workload directory got the directory's layout.
        let want = r["layout"].as_str().unwrap();
        assert!(r["layout_seen"].as_str().unwrap().contains(want), "{r}");
    }
    let large = v["large"].as_array().unwrap();
    assert_eq!(large.len(), 4);
    assert!(large.iter().all(|l| l["read_mb_per_s"].as_f64().unwrap() > 0.0 && l["bytes"] == 1 << 20));
    assert!(v["small_read_fraction"].as_f64().unwrap() > 0.0);
    assert_eq!(v["small_read_fraction_pool"], "sim-hdd");
    assert!(v["hdd_colocated_over_default"].as_f64().unwrap() > 0.0);
    assert!(v["hdd_colocated_over_default_interleaved"].as_f64().unwrap() > 0.0);
    // Every native run read again with its inodes loaded first.
    let inodes = v["embedded_inodes_at_best"].as_array().unwrap();
    assert_eq!(inodes.len(), rows.len(), "{v}");
    assert!(inodes.iter().all(|r| r["read_inodes_loaded_s"].as_f64().unwrap() > 0.0));
    assert_eq!(v["cffs_table_4_2"][2]["phases"]["read"]["files_per_s"], 680.0);
    assert!(v["params"]["host_caches_dropped"].is_boolean());
}

#[test]
fn cffs_takes_sizes_and_others_refuse_them() {
    let out = tempfile::tempdir().unwrap();
    let p = Params { files: Some(12), dirs: Some(3), size: Some(1000), sim: Some("none".into()) };
    let s = run_params("cffs", true, &p, out.path()).unwrap();
    let rows = s.data["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{}", s.data);
    assert!(rows.iter().all(|r| r["pool"] == "image-file" && r["workload"] == "custom"));
    assert_eq!(s.data["params"]["workloads"][0]["files"], 12);
    assert!(s.data["hdd_colocated_over_default"].is_null());
    let zero = Params { size: Some(0), ..Params::default() };
    assert!(run_params("cffs", true, &zero, out.path()).unwrap_err().contains("--size must be at least 1"));
    let e = run_params("tpcb", true, &Params { sim: Some("hdd".into()), ..Params::default() }, out.path()).unwrap_err();
    assert!(e.contains("does not take --sim"), "{e}");
}

#[test]
fn unknown_names_are_refused() {
    assert_eq!(EXPERIMENTS.len(), 13);
    let out = tempfile::tempdir().unwrap();
    assert!(run("hfs-nope", true, out.path()).unwrap_err().contains("unknown experiment"));
    assert_eq!(hurricane_bench::main_with_args(&["--bogus".into()]), 2);
}
