//! Summary of `bench/compress.sh`: per data set (compressible text, random
//! bytes) and system (Hurricane's plain, lz4 and zstd layouts through the
//! mount and natively; btrfs plain and with forced zstd and lzo compression),
//! the medians of write and cold
//! read bandwidth (bytes of file data per second) and of the bytes stored,
//! each system's read bandwidth over the same data set's uncompressed read
//! on the same file system, and `compress.png`.

use crate::mount_report::median;
use serde_json::Value;
use std::path::Path;

/// One system on one data set, reduced over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressRow {
    pub data: String,
    pub system: String,
    pub write_mibs: f64,
    pub read_mibs: f64,
    /// File bytes over bytes stored.
    pub ratio: f64,
    /// Read bandwidth over the uncompressed read of the same file system
    /// (Hurricane's `plain` or `native-plain`, btrfs's `btrfs`) on the same
    /// data.
    pub read_vs_plain: f64,
}

/// The uncompressed system a row is measured against.
fn plain_of(system: &str) -> &'static str {
    if system.starts_with("btrfs") {
        "btrfs"
    } else if system.starts_with("native") {
        "native-plain"
    } else {
        "plain"
    }
}

/// Medians of the rows in `text` (JSON lines), data set by data set, in the
/// order the systems first appear.
pub fn compress_rows(text: &str) -> Result<Vec<CompressRow>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        rows.push(v);
    }
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in &rows {
        let (Some(d), Some(s)) = (r["data"].as_str(), r["system"].as_str()) else {
            return Err("a row without data or system".into());
        };
        if !keys.iter().any(|k| k.0 == d && k.1 == s) {
            keys.push((d.to_string(), s.to_string()));
        }
    }
    if keys.is_empty() {
        return Err("no rows".into());
    }
    let med = |d: &str, s: &str, f: &str| -> Result<f64, String> {
        let mut v = Vec::new();
        for r in rows.iter().filter(|r| r["data"] == d && r["system"] == s) {
            v.push(r[f].as_f64().ok_or_else(|| format!("a {s} {d} row has no number for {f}"))?);
        }
        median(v).ok_or_else(|| format!("no {s} rows for {d}"))
    };
    let mut out = Vec::new();
    for (d, s) in &keys {
        let (stored, logical) = (med(d, s, "stored_bytes")?, med(d, s, "file_bytes")?);
        let read = med(d, s, "read_mibs")?;
        let plain = med(d, plain_of(s), "read_mibs").unwrap_or(f64::NAN);
        out.push(CompressRow {
            data: d.clone(),
            system: s.clone(),
            write_mibs: med(d, s, "write_mibs")?,
            read_mibs: read,
            ratio: if stored > 0.0 { logical / stored } else { f64::NAN },
            read_vs_plain: read / plain,
        });
    }
    Ok(out)
}

/// Reads `dir/compress.jsonl`, writes `dir/compress.png`, returns the table.
pub fn compress_report(dir: &Path) -> Result<String, String> {
    let src = dir.join("compress.jsonl");
    let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let rows = compress_rows(&text).map_err(|e| format!("{}: {e}", src.display()))?;
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.data.clone(),
                r.system.clone(),
                format!("{:.0}", r.write_mibs),
                format!("{:.0}", r.read_mibs),
                format!("{:.2}", r.ratio),
                format!("{:.2}", r.read_vs_plain),
            ]
        })
        .collect();
    let table = crate::table(
        &["data", "system", "write MiB/s", "cold read MiB/s", "ratio (file/stored)", "read / uncompressed read"],
        &body,
    );
    // The plot: the compressible data set, where the layouts differ.
    let first = rows.first().map(|r| r.data.clone()).unwrap_or_default();
    let items: Vec<(String, f64, Option<f64>)> =
        rows.iter().filter(|r| r.data == first).map(|r| (r.system.clone(), r.read_mibs, None)).collect();
    let png = dir.join("compress.png");
    let title = format!("Cold sequential read of the {first} data set, MiB of file data per second (medians)");
    crate::plot::bars(&png, &title, "MiB/s", &items)?;
    Ok(format!("{table}wrote {}\n", png.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(d: &str, s: &str, run: u32, read: f64, stored: f64) -> String {
        serde_json::json!({"bench": "compress", "data": d, "system": s, "run": run, "write_mibs": 100.0,
            "read_mibs": read, "file_bytes": 1000.0, "stored_bytes": stored})
        .to_string()
    }

    #[test]
    fn medians_ratios_and_reads_against_the_uncompressed_system() {
        let text = [
            row("text", "plain", 1, 100.0, 1000.0),
            row("text", "plain", 2, 300.0, 1000.0),
            row("text", "plain", 3, 200.0, 1000.0),
            row("text", "zstd", 1, 500.0, 200.0),
            row("text", "btrfs", 1, 100.0, 1000.0),
            row("text", "btrfs-zstd", 1, 150.0, 250.0),
        ]
        .join("\n");
        let rows = compress_rows(&text).unwrap();
        assert_eq!(rows.len(), 4);
        let p = &rows[0];
        assert_eq!((p.system.as_str(), p.read_mibs, p.ratio, p.read_vs_plain), ("plain", 200.0, 1.0, 1.0));
        let z = rows.iter().find(|r| r.system == "zstd").unwrap();
        assert_eq!((z.ratio, z.read_vs_plain), (5.0, 2.5));
        let b = rows.iter().find(|r| r.system == "btrfs-zstd").unwrap();
        assert_eq!((b.ratio, b.read_vs_plain), (4.0, 1.5));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(compress_rows("").is_err());
        assert!(compress_rows("{").is_err());
        assert!(compress_rows(r#"{"data":"text"}"#).is_err());
        let no_read = r#"{"data":"text","system":"zstd","file_bytes":1,"stored_bytes":1,"write_mibs":1}"#;
        assert!(compress_rows(no_read).unwrap_err().contains("read_mibs"));
    }
}
