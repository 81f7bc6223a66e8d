//! Summary of `bench/mount.sh`: the rows it appends to `mount.jsonl` (one per
//! system and run) reduced to medians, Hurricane/ext4 speed ratios against
//! the issue's targets, a table and `mount.png` (one bar per measurement,
//! the target as a black tick).

use serde_json::Value;
use std::path::Path;

/// (field, label, higher is better, target ratio).
const FIELDS: &[(&str, &str, bool, Option<f64>)] = &[
    ("seq_write_mibs", "seq write", true, Some(0.8)),
    ("seq_read_mibs", "seq read", true, Some(0.8)),
    ("rand_read_iops", "rand read", true, None),
    ("rand_write_iops", "rand write", true, None),
    ("tar_extract_s", "tar", false, Some(1.0 / 3.0)),
    ("create_per_s", "create", true, Some(1.0 / 3.0)),
    ("stat_per_s", "stat", true, Some(1.0 / 3.0)),
    ("unlink_per_s", "unlink", true, Some(1.0 / 3.0)),
];

/// One measurement reduced over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct MountRow {
    pub field: &'static str,
    pub hurricane: f64,
    pub ext4: f64,
    /// Hurricane's speed over ext4's (time ratios are inverted).
    pub ratio: f64,
    pub target: Option<f64>,
}

/// The median of `v` (the mean of the middle two for an even count).
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Medians and ratios of the rows in `text` (JSON lines).
pub fn mount_rows(text: &str) -> Result<Vec<MountRow>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        rows.push(v);
    }
    let pick = |sys: &str, field: &str| -> Result<Option<f64>, String> {
        let mut v = Vec::new();
        for r in rows.iter().filter(|r| r["system"] == sys) {
            v.push(r[field].as_f64().ok_or_else(|| format!("a {sys} row has no number for {field}"))?);
        }
        Ok(median(v))
    };
    let mut out = Vec::new();
    for &(field, _, higher, target) in FIELDS {
        let (Some(h), Some(e)) = (pick("hurricane", field)?, pick("ext4-loop", field)?) else {
            return Err("need rows of both systems (hurricane and ext4-loop)".into());
        };
        let ratio = match (higher, h > 0.0 && e > 0.0) {
            (_, false) => f64::NAN,
            (true, true) => h / e,
            (false, true) => e / h,
        };
        out.push(MountRow { field, hurricane: h, ext4: e, ratio, target });
    }
    Ok(out)
}

/// Reads `dir/mount.jsonl`, writes `dir/mount.png`, returns the table.
pub fn mount_report(dir: &Path) -> Result<String, String> {
    let src = dir.join("mount.jsonl");
    let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let rows = mount_rows(&text).map_err(|e| format!("{}: {e}", src.display()))?;
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let verdict = match r.target {
                Some(t) if r.ratio >= t => format!(">= {t:.2}: met"),
                Some(t) => format!(">= {t:.2}: NOT met"),
                None => String::new(),
            };
            vec![r.field.to_string(), fmt(r.hurricane), fmt(r.ext4), format!("{:.2}", r.ratio), verdict]
        })
        .collect();
    let table = crate::table(&["measurement", "hurricane", "ext4", "speed ratio", "target"], &body);
    let items: Vec<(String, f64, Option<f64>)> = rows
        .iter()
        .zip(FIELDS)
        .map(|(r, f)| (f.1.to_string(), if r.ratio.is_finite() { r.ratio } else { 0.0 }, r.target))
        .collect();
    let png = dir.join("mount.png");
    crate::plot::bars(&png, "Hurricane mount / ext4 on loop: speed ratio (medians; tick = target)", "ratio", &items)?;
    Ok(format!("{table}wrote {}\n", png.display()))
}

fn fmt(x: f64) -> String {
    if x >= 100.0 {
        let s = format!("{:.0}", x);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sys: &str, run: u32, scale: f64, tar: f64) -> String {
        serde_json::json!({"bench": "mount", "system": sys, "run": run,
            "seq_write_mibs": 100.0 * scale, "seq_read_mibs": 200.0 * scale, "rand_read_iops": 1000.0 * scale,
            "rand_write_iops": 500.0 * scale, "tar_extract_s": tar, "create_per_s": 30000.0 * scale,
            "stat_per_s": 1e5 * scale, "unlink_per_s": 5e4 * scale})
        .to_string()
    }

    #[test]
    fn medians_and_ratios() {
        let text = [
            row("hurricane", 1, 1.0, 2.0),
            row("ext4-loop", 1, 2.0, 1.0),
            row("hurricane", 2, 9.0, 40.0), // an outlier run: the median drops it
            row("ext4-loop", 2, 2.0, 1.0),
            row("hurricane", 3, 1.0, 2.0),
            row("ext4-loop", 3, 2.0, 1.0),
        ]
        .join("\n");
        let rows = mount_rows(&text).unwrap();
        assert_eq!(rows.len(), FIELDS.len());
        let seq = &rows[0];
        assert_eq!((seq.hurricane, seq.ext4, seq.ratio), (100.0, 200.0, 0.5));
        let tar = rows.iter().find(|r| r.field == "tar_extract_s").unwrap();
        assert_eq!((tar.hurricane, tar.ext4, tar.ratio), (2.0, 1.0, 0.5), "times are inverted: slower is < 1");
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(mount_rows("{not json").unwrap_err().contains("line 1"));
        assert!(mount_rows(&row("hurricane", 1, 1.0, 1.0)).unwrap_err().contains("both systems"));
        let broken = format!("{}\n{}", row("ext4-loop", 1, 1.0, 1.0), r#"{"system":"hurricane","seq_write_mibs":"x"}"#);
        assert!(mount_rows(&broken).unwrap_err().contains("seq_write_mibs"));
    }

    #[test]
    fn report_writes_plot() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("mount.jsonl"),
            [row("hurricane", 1, 1.0, 4.0), row("ext4-loop", 1, 1.0, 1.0)].join("\n"),
        )
        .unwrap();
        let t = mount_report(d.path()).unwrap();
        assert!(t.contains("tar_extract_s") && t.contains("NOT met"), "{t}");
        assert!(std::fs::metadata(d.path().join("mount.png")).unwrap().len() > 1000);
        assert!(mount_report(&d.path().join("missing")).is_err());
    }
}
