//! Summary of `bench/redundancy.sh`: per profile (raid1, raid5, raid6), the
//! medians of Hurricane's layout and of the btrfs profile it is measured
//! against, their ratio against the targets, Hurricane's degraded read
//! against its own healthy read, and `redundancy.png`.

use crate::mount_report::median;
use serde_json::Value;
use std::path::Path;

/// (field, label, higher is better, target speed ratio against btrfs).
const FIELDS: &[(&str, &str, bool, Option<f64>)] = &[
    ("seq_write_mibs", "seq write", true, Some(0.9)),
    ("seq_read_mibs", "seq read", true, None),
    ("rand_write_iops", "4K rand write", true, None),
    ("degraded_read_mibs", "degraded read", true, None),
    ("scrub_mibs", "scrub", true, Some(1.0)),
    ("rebuild_s_per_gib", "rebuild", false, Some(1.0)),
];
/// Degraded read over healthy read that Hurricane must reach.
const DEGRADED_TARGET: f64 = 0.8;

/// One measurement of one profile reduced over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RedundancyRow {
    pub profile: String,
    pub field: &'static str,
    pub hurricane: f64,
    pub btrfs: f64,
    /// Hurricane's speed over btrfs's (time ratios inverted).
    pub ratio: f64,
    pub target: Option<f64>,
}

/// Medians and ratios of the rows in `text` (JSON lines), profile by profile.
pub fn redundancy_rows(text: &str) -> Result<Vec<RedundancyRow>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        rows.push(v);
    }
    let mut profiles: Vec<String> = rows.iter().filter_map(|r| r["profile"].as_str().map(String::from)).collect();
    profiles.sort();
    profiles.dedup();
    if profiles.is_empty() {
        return Err("no rows".into());
    }
    let pick = |sys: &str, profile: &str, field: &str| -> Result<Option<f64>, String> {
        let mut v = Vec::new();
        for r in rows.iter().filter(|r| r["system"] == sys && r["profile"] == profile) {
            v.push(r[field].as_f64().ok_or_else(|| format!("a {sys} {profile} row has no number for {field}"))?);
        }
        Ok(median(v))
    };
    let mut out = Vec::new();
    for p in &profiles {
        let peer = format!("btrfs-{p}");
        for &(field, _, higher, target) in FIELDS {
            let (Some(h), Some(b)) = (pick("hurricane", p, field)?, pick(&peer, p, field)?) else {
                return Err(format!("profile {p}: need rows of hurricane and {peer}"));
            };
            let ratio = match (higher, h > 0.0 && b > 0.0) {
                (_, false) => f64::NAN,
                (true, true) => h / b,
                (false, true) => b / h,
            };
            out.push(RedundancyRow { profile: p.clone(), field, hurricane: h, btrfs: b, ratio, target });
        }
    }
    Ok(out)
}

/// Reads `dir/redundancy.jsonl`, writes `dir/redundancy.png`, returns the table.
pub fn redundancy_report(dir: &Path) -> Result<String, String> {
    let src = dir.join("redundancy.jsonl");
    let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let rows = redundancy_rows(&text).map_err(|e| format!("{}: {e}", src.display()))?;
    let verdict = |ok: bool, t: f64| format!(">= {t:.2}: {}", if ok { "met" } else { "NOT met" });
    let mut body = Vec::new();
    for r in &rows {
        body.push(vec![
            r.profile.clone(),
            label(r.field).to_string(),
            format!("{:.1}", r.hurricane),
            format!("{:.1}", r.btrfs),
            format!("{:.2}", r.ratio),
            r.target.map(|t| verdict(r.ratio >= t, t)).unwrap_or_default(),
        ]);
    }
    // Degraded read against the same system's healthy read.
    let mut extra = String::new();
    let mut profiles: Vec<&str> = rows.iter().map(|r| r.profile.as_str()).collect();
    profiles.dedup();
    for p in profiles {
        let get = |f: &str| rows.iter().find(|r| r.profile == p && r.field == f);
        if let (Some(d), Some(h)) = (get("degraded_read_mibs"), get("seq_read_mibs")) {
            let (hr, br) = (d.hurricane / h.hurricane, d.btrfs / h.btrfs);
            extra.push_str(&format!(
                "{p}: degraded/healthy read: hurricane {hr:.2} ({}), btrfs {br:.2}\n",
                verdict(hr >= DEGRADED_TARGET, DEGRADED_TARGET)
            ));
        }
    }
    let table =
        crate::table(&["profile", "measurement", "hurricane", "btrfs", "speed ratio", "target vs btrfs"], &body);
    let items: Vec<(String, f64, Option<f64>)> = rows
        .iter()
        .map(|r| {
            (format!("{} {}", r.profile, label(r.field)), if r.ratio.is_finite() { r.ratio } else { 0.0 }, r.target)
        })
        .collect();
    let png = dir.join("redundancy.png");
    crate::plot::bars(&png, "Hurricane / btrfs RAID on loops: speed ratio (medians; tick = target)", "ratio", &items)?;
    Ok(format!("{table}{extra}(rebuild is seconds per GiB of file data: its ratio is btrfs's time over Hurricane's)\nwrote {}\n", png.display()))
}

fn label(field: &str) -> &'static str {
    FIELDS.iter().find(|f| f.0 == field).map(|f| f.1).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sys: &str, p: &str, run: u32, scale: f64) -> String {
        serde_json::json!({"bench": "redundancy", "system": sys, "profile": p, "run": run,
            "seq_write_mibs": 100.0 * scale, "seq_read_mibs": 200.0 * scale, "rand_write_iops": 1000.0 * scale,
            "degraded_read_mibs": 150.0 * scale, "scrub_mibs": 300.0 * scale, "rebuild_s_per_gib": 10.0 / scale})
        .to_string()
    }

    #[test]
    fn medians_and_ratios_per_profile() {
        let text = [
            row("hurricane", "raid1", 1, 1.0),
            row("hurricane", "raid1", 2, 3.0),
            row("hurricane", "raid1", 3, 2.0),
            row("btrfs-raid1", "raid1", 1, 1.0),
            row("btrfs-raid1", "raid1", 2, 1.0),
        ]
        .join("\n");
        let rows = redundancy_rows(&text).unwrap();
        assert_eq!(rows.len(), FIELDS.len());
        let w = rows.iter().find(|r| r.field == "seq_write_mibs").unwrap();
        assert_eq!((w.hurricane, w.btrfs, w.ratio), (200.0, 100.0, 2.0));
        // Times: btrfs 10 s, Hurricane's median 5 s: twice as fast.
        let rb = rows.iter().find(|r| r.field == "rebuild_s_per_gib").unwrap();
        assert_eq!(rb.ratio, 2.0);
    }

    #[test]
    fn a_profile_without_its_peer_is_an_error() {
        let text = row("hurricane", "raid5", 1, 1.0);
        assert!(redundancy_rows(&text).unwrap_err().contains("btrfs-raid5"));
        assert!(redundancy_rows("").is_err());
        assert!(redundancy_rows("{").is_err());
    }
}
