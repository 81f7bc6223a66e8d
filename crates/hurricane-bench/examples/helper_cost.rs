//! What running a request's pieces side by side costs before any piece
//! does work (BENCHMARKS.md, "Helper threads kept between requests").
//!
//! ```text
//! helper_cost [ROUNDS]     (default 20000)
//! ```
//! For 1, 2, 3 and 6 helpers, the time of a scope that spawns that many
//! empty pieces and joins them: with threads started for each scope
//! (`std::thread::scope`, how every request ran its pieces before) and with
//! `hurricane::helpers::scope`. Medians of 5, microseconds a scope; one JSON
//! object per line.

use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time(rounds: usize, f: impl Fn()) -> f64 {
    median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..rounds {
                    f();
                }
                t.elapsed().as_secs_f64() * 1e6 / rounds as f64
            })
            .collect(),
    )
}

fn main() {
    let rounds: usize = match std::env::args().nth(1).map_or(Ok(20_000), |s| s.parse()) {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("usage: helper_cost [ROUNDS]  (a positive number)");
            std::process::exit(2);
        }
    };
    for n in [1usize, 2, 3, 6] {
        let started = time(rounds, || {
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..n).map(|_| s.spawn(|| std::hint::black_box(1))).collect();
                // Empty pieces cannot panic; a join only waits.
                hs.into_iter().for_each(|h| {
                    let _ = h.join();
                });
            })
        });
        let kept = time(rounds, || {
            hurricane::helpers::scope(|s| {
                let hs: Vec<_> = (0..n).map(|_| s.spawn(|| std::hint::black_box(1))).collect();
                // Empty pieces cannot panic; a join only waits.
                hs.into_iter().for_each(|h| {
                    let _ = h.join();
                });
            })
        });
        println!(
            "{{\"helpers\": {n}, \"threads_started_us\": {started:.1}, \"helpers_kept_us\": {kept:.1}, \"ratio\": {:.2}}}",
            kept / started
        );
    }
}
