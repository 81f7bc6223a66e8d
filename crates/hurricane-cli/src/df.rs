//! `hurricane df`: space and I/O per device, and totals.

use crate::util::{human, CliResult, Pool};
use clap::Args;
use hurricane::device::{DeviceState, BLOCK_SIZE};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DfArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Sizes in KiB, MiB, GiB instead of bytes.
    #[arg(short = 'h', long = "human-readable")]
    pub human: bool,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

pub fn run(a: &DfArgs) -> CliResult {
    Pool::run(&a.pool, false, |fs| {
        let st = fs.storage();
        let stats = fs.device_stats();
        let size = |b: u64| if a.human { human(b) } else { b.to_string() };
        let mut rows = vec![[
            "dev".to_string(),
            "path".into(),
            "size".into(),
            "used".into(),
            "free".into(),
            "use%".into(),
            "reads".into(),
            "writes".into(),
            "state".into(),
        ]];
        let (mut tt, mut tu, mut tf, mut tr, mut tw) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for (i, al) in st.allocs.iter().enumerate() {
            let total = al.total_blocks() * BLOCK_SIZE as u64;
            let free = al.free_blocks() * BLOCK_SIZE as u64;
            let (name, s) = stats.get(i).cloned().unwrap_or_default();
            let writable = st.devs.get(i).is_some_and(|d| d.state().placeable());
            // A removed device is no longer part of the pool's size.
            let removed = st.devs.get(i).is_some_and(|d| d.state() == DeviceState::Removed);
            if !removed {
                tt += total;
                tu += total - free;
            }
            // Free space on a device new data may not go to is not free.
            if writable {
                tf += free;
            }
            tr += s.reads;
            tw += s.writes;
            let state = st.devs.get(i).map(|d| d.state().name()).unwrap_or("missing");
            rows.push([
                i.to_string(),
                name,
                size(total),
                size(total - free),
                size(free),
                pct(total - free, total),
                s.reads.to_string(),
                s.writes.to_string(),
                state.to_string(),
            ]);
        }
        let down = st.devs.iter().filter(|d| !matches!(d.state(), DeviceState::Online | DeviceState::Removed)).count();
        rows.push([
            "all".into(),
            format!("{} devices", st.allocs.len()),
            size(tt),
            size(tu),
            size(tf),
            pct(tu, tt),
            tr.to_string(),
            tw.to_string(),
            if down == 0 { "online".into() } else { format!("{down} down") },
        ]);
        let widths: Vec<usize> = (0..9).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        let mut o = std::io::stdout().lock();
        for r in &rows {
            // Path and state left-aligned, numbers right-aligned.
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let w = widths[c];
                if c == 1 || c == 8 {
                    line.push_str(&format!("{cell:<w$}  "));
                } else {
                    line.push_str(&format!("{cell:>w$}  "));
                }
            }
            writeln!(o, "{}", line.trim_end())?;
        }
        let unwritable: Vec<String> = st
            .devs
            .iter()
            .filter(|d| !d.state().placeable() && d.state() != DeviceState::Removed)
            .map(|d| format!("device {} ({})", d.index, d.state().name()))
            .collect();
        if !unwritable.is_empty() {
            writeln!(o, "free counts only devices that take new data: not {}", unwritable.join(", "))?;
        }
        let sf = fs.statfs();
        let default = fs.default_layout();
        let canon = hurricane::layout::parse(&default).map(|s| hurricane::layout::canonical(s).to_string());
        // What statfs offers as available (`df` on a mount): what a file
        // of the default layout can take, the meta-data's reserve left out.
        writeln!(
            o,
            "inodes: {}   default layout: {}   available to it: {}",
            sf.files,
            canon.as_deref().unwrap_or(&default),
            size(sf.bavail * u64::from(sf.bsize))
        )?;
        Ok(())
    })
}

fn pct(used: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{}%", (used as f64 * 100.0 / total as f64).ceil() as u64)
    }
}
