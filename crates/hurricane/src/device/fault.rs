//! Fault injection: [`FaultDevice`] wraps any device and, following a
//! [`FaultPlan`] that can be changed while the pool runs, fails reads or
//! writes at given blocks or at a rate, goes missing (now or after a number
//! of requests), silently flips a bit of data read at given blocks or at a
//! rate, or adds latency. Rates draw from a seeded generator, so a test
//! that sets a seed sees the same faults every run.
//!
//! A pool directory asks for it with `fault = DEV SPEC` lines in pool.conf
//! (see [`FaultSpec::parse`]): the device with that index is wrapped when
//! the pool opens, so CLI and mount tests can inject faults too.

use super::{Device, BLOCK_SHIFT, BLOCK_SIZE};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// What a [`FaultPlan`] does. Block numbers are device blocks of
/// `BLOCK_SIZE` bytes; a request fails (or is corrupted) when any block it
/// touches is listed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultSpec {
    /// Device block ranges (start, length) whose reads fail with EIO.
    pub read_errors: Vec<(u64, u64)>,
    /// Device block ranges whose writes fail with EIO.
    pub write_errors: Vec<(u64, u64)>,
    /// Chance (0 to 1) that a read request fails.
    pub read_error_rate: f64,
    /// Chance that a write request fails.
    pub write_error_rate: f64,
    /// Device block ranges whose data comes back with one bit flipped (the
    /// same bit every time, as a bad sector on disk would).
    pub flips: Vec<(u64, u64)>,
    /// Chance that each block read comes back with a random bit flipped.
    pub flip_rate: f64,
    /// The device goes missing after this many more requests (0: now).
    pub missing_after: Option<u64>,
    /// Added to every request.
    pub latency: Duration,
    /// Seed of the generator behind the rates.
    pub seed: u64,
}

impl FaultSpec {
    /// Parses `key=value` items separated by commas or spaces:
    /// `read-error=BLOCKS`, `write-error=BLOCKS`, `flip=BLOCKS` (BLOCKS: `N`,
    /// `N-M` inclusive, several joined by `+`; an item may be repeated),
    /// `read-error-rate=P`, `write-error-rate=P`, `flip-rate=P` (P from 0
    /// to 1), `missing` (now), `missing-after=N` (requests), `latency=D`
    /// (`5ms`, `200us`, `1s`), `seed=N`.
    pub fn parse(text: &str) -> std::result::Result<FaultSpec, String> {
        let mut s = FaultSpec::default();
        let items: Vec<&str> = text.split([',', ' ', '\t']).filter(|t| !t.is_empty()).collect();
        if items.is_empty() {
            return Err("empty fault spec".into());
        }
        for item in items {
            let (k, v) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item.trim(), None),
            };
            let need = || v.ok_or_else(|| format!("fault `{k}` needs a value (`{k}=...`)"));
            match k {
                "read-error" => s.read_errors.extend(ranges(need()?)?),
                "write-error" => s.write_errors.extend(ranges(need()?)?),
                "flip" => s.flips.extend(ranges(need()?)?),
                "read-error-rate" => s.read_error_rate = rate(k, need()?)?,
                "write-error-rate" => s.write_error_rate = rate(k, need()?)?,
                "flip-rate" => s.flip_rate = rate(k, need()?)?,
                "missing" if v.is_none() => s.missing_after = Some(0),
                "missing-after" => s.missing_after = Some(num(k, need()?)?),
                "latency" => s.latency = duration(need()?)?,
                "seed" => s.seed = num(k, need()?)?,
                _ => {
                    return Err(format!(
                        "unknown fault `{item}` (read-error=, write-error=, flip=, read-error-rate=, \
                         write-error-rate=, flip-rate=, missing, missing-after=, latency=, seed=)"
                    ))
                }
            }
        }
        Ok(s)
    }
}

fn num(k: &str, v: &str) -> std::result::Result<u64, String> {
    v.parse().map_err(|_| format!("fault `{k}={v}`: not a whole number"))
}

fn rate(k: &str, v: &str) -> std::result::Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("fault `{k}={v}`: not a rate from 0 to 1")),
    }
}

/// `N`, `N-M` (inclusive), or several of them joined by `+`.
fn ranges(v: &str) -> std::result::Result<Vec<(u64, u64)>, String> {
    v.split('+')
        .map(|r| {
            let bad = || format!("fault blocks `{r}`: expected N or N-M");
            match r.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                    if b < a {
                        return Err(format!("fault blocks `{r}`: end before start"));
                    }
                    Ok((a, b - a + 1))
                }
                None => Ok((r.parse().map_err(|_| bad())?, 1)),
            }
        })
        .collect()
}

fn duration(v: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("fault `latency={v}`: expected a duration such as 5ms, 200us or 1s");
    let (n, unit) = v.find(|c: char| !c.is_ascii_digit()).map(|i| v.split_at(i)).ok_or_else(bad)?;
    let n: u64 = n.parse().map_err(|_| bad())?;
    match unit {
        "us" => Ok(Duration::from_micros(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        _ => Err(bad()),
    }
}

fn touches(list: &[(u64, u64)], first: u64, n: u64) -> bool {
    list.iter().any(|&(s, l)| s < first.saturating_add(n) && first < s.saturating_add(l))
}

/// A fault plan shared between a test (or pool.conf) and the devices it
/// wraps; every change takes effect with the next request.
pub struct FaultPlan {
    spec: Mutex<(FaultSpec, StdRng)>,
    /// Requests left before the device goes missing (u64::MAX: never).
    countdown: AtomicU64,
    missing: AtomicBool,
    /// Faults injected so far: (failed reads, failed writes, flipped blocks).
    injected: [AtomicU64; 3],
}

impl Default for FaultPlan {
    fn default() -> Self {
        Self::new(FaultSpec::default())
    }
}

impl FaultPlan {
    pub fn new(spec: FaultSpec) -> Self {
        let p = FaultPlan {
            spec: Mutex::new((FaultSpec::default(), StdRng::seed_from_u64(0))),
            countdown: AtomicU64::new(u64::MAX),
            missing: AtomicBool::new(false),
            injected: Default::default(),
        };
        p.set(spec);
        p
    }

    /// Replaces the plan (a device already missing stays missing until
    /// [`FaultPlan::restore`]).
    pub fn set(&self, spec: FaultSpec) {
        let mut g = self.spec.lock();
        self.countdown.store(spec.missing_after.unwrap_or(u64::MAX), Relaxed);
        if spec.missing_after == Some(0) {
            self.missing.store(true, Relaxed);
        }
        let rng = StdRng::seed_from_u64(spec.seed);
        *g = (spec, rng);
    }

    /// Changes the plan in place.
    pub fn update(&self, f: impl FnOnce(&mut FaultSpec)) {
        let mut s = self.spec();
        f(&mut s);
        self.set(s);
    }

    pub fn spec(&self) -> FaultSpec {
        self.spec.lock().0.clone()
    }

    /// The device goes away now.
    pub fn go_missing(&self) {
        self.missing.store(true, Relaxed);
    }

    /// No faults any more, and a missing device is back.
    pub fn restore(&self) {
        self.set(FaultSpec::default());
        self.missing.store(false, Relaxed);
    }

    pub fn is_missing(&self) -> bool {
        self.missing.load(Relaxed)
    }

    /// (failed reads, failed writes, flipped blocks) injected so far.
    pub fn injected(&self) -> (u64, u64, u64) {
        (self.injected[0].load(Relaxed), self.injected[1].load(Relaxed), self.injected[2].load(Relaxed))
    }

    /// Counts a request; true when the device is (now) missing.
    fn tick(&self) -> bool {
        if self.missing.load(Relaxed) {
            return true;
        }
        let left = self.countdown.load(Relaxed);
        if left == u64::MAX {
            return false;
        }
        if left == 0 || self.countdown.fetch_sub(1, Relaxed) <= 1 {
            self.countdown.store(0, Relaxed);
            self.missing.store(true, Relaxed);
            return true;
        }
        false
    }
}

/// A device that misbehaves as its [`FaultPlan`] says.
pub struct FaultDevice {
    inner: Arc<dyn Device>,
    plan: Arc<FaultPlan>,
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn Device>, plan: Arc<FaultPlan>) -> Self {
        FaultDevice { inner, plan }
    }

    pub fn plan(&self) -> &Arc<FaultPlan> {
        &self.plan
    }

    fn missing_err(&self) -> Error {
        Error::Device(format!("{} is gone (fault injection)", self.inner.name()))
    }

    fn io_err(&self, what: &str, offset: u64) -> Error {
        Error::io(
            format!("{} ({what} at block {}, fault injection)", self.inner.name(), offset >> BLOCK_SHIFT),
            std::io::Error::from_raw_os_error(libc::EIO),
        )
    }

    /// Latency and the missing check common to every request.
    fn enter(&self) -> Result<()> {
        let latency = self.plan.spec.lock().0.latency;
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        if self.plan.tick() {
            return Err(self.missing_err());
        }
        Ok(())
    }
}

impl Device for FaultDevice {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.enter()?;
        let first = offset >> BLOCK_SHIFT;
        let n = (buf.len() as u64).div_ceil(BLOCK_SIZE as u64);
        {
            let mut g = self.plan.spec.lock();
            let (spec, rng) = &mut *g;
            let fail = touches(&spec.read_errors, first, n)
                || (spec.read_error_rate > 0.0 && rng.gen_bool(spec.read_error_rate));
            if fail {
                self.plan.injected[0].fetch_add(1, Relaxed);
                return Err(self.io_err("read", offset));
            }
        }
        self.inner.read_at(buf, offset)?;
        let mut g = self.plan.spec.lock();
        let (spec, rng) = &mut *g;
        if spec.flips.is_empty() && spec.flip_rate == 0.0 {
            return Ok(());
        }
        // Block-aligned pieces of the buffer, by device block.
        let base = (offset % BLOCK_SIZE as u64) as usize;
        for i in 0..n {
            let blk = first + i;
            let lo = (i as usize * BLOCK_SIZE).saturating_sub(base);
            let hi = ((i as usize + 1) * BLOCK_SIZE).saturating_sub(base).min(buf.len());
            if lo >= hi {
                continue;
            }
            let bit = if touches(&spec.flips, blk, 1) {
                // The same bit of the block every time: a bad sector.
                Some((blk.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) as usize % ((hi - lo) * 8))
            } else if spec.flip_rate > 0.0 && rng.gen_bool(spec.flip_rate) {
                Some(rng.gen_range(0..(hi - lo) * 8))
            } else {
                None
            };
            if let Some(bit) = bit {
                buf[lo + bit / 8] ^= 1 << (bit % 8);
                self.plan.injected[2].fetch_add(1, Relaxed);
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.enter()?;
        let first = offset >> BLOCK_SHIFT;
        let n = (buf.len() as u64).div_ceil(BLOCK_SIZE as u64);
        {
            let mut g = self.plan.spec.lock();
            let (spec, rng) = &mut *g;
            let fail = touches(&spec.write_errors, first, n)
                || (spec.write_error_rate > 0.0 && rng.gen_bool(spec.write_error_rate));
            if fail {
                self.plan.injected[1].fetch_add(1, Relaxed);
                return Err(self.io_err("write", offset));
            }
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.enter()?;
        self.inner.flush()
    }
    fn seeks(&self) -> bool {
        self.inner.seeks()
    }
    fn reclaims_freed(&self) -> bool {
        self.inner.reclaims_freed()
    }
    fn discard_unit(&self) -> u64 {
        self.inner.discard_unit()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        if self.plan.is_missing() {
            return Err(self.missing_err());
        }
        self.inner.discard(offset, len)
    }
    fn gone(&self) -> bool {
        self.plan.is_missing() || self.inner.gone()
    }
    fn gone_now(&self) -> bool {
        self.plan.is_missing() || self.inner.gone_now()
    }
    /// Injected faults are not transient; what the device under says is.
    fn transient(&self, e: &crate::Error) -> bool {
        self.inner.transient(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{DeviceHandle, DeviceState, MemDevice};

    const BS: usize = BLOCK_SIZE;

    fn dev(spec: &str) -> (Arc<FaultDevice>, Arc<MemDevice>) {
        let mem = Arc::new(MemDevice::new("mem:f", 64 * BS as u64));
        let data: Vec<u8> = (0..64 * BS).map(|i| (i * 7 + i / BS) as u8).collect();
        mem.write_at(&data, 0).unwrap();
        let plan = Arc::new(FaultPlan::new(FaultSpec::parse(spec).unwrap()));
        (Arc::new(FaultDevice::new(mem.clone(), plan)), mem)
    }

    fn read(d: &dyn Device, blk: u64, n: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; n * BS];
        d.read_at(&mut b, blk * BS as u64).map(|()| b)
    }

    #[test]
    fn read_and_write_errors_at_blocks() {
        let (d, mem) = dev("read-error=5-6,write-error=9");
        let e = read(&*d, 4, 2).unwrap_err();
        assert_eq!(e.errno(), libc::EIO);
        assert!(e.to_string().contains("mem:f") && e.to_string().contains("block"), "{e}");
        assert!(read(&*d, 7, 3).is_ok());
        assert!(d.write_at(&[1u8; BS], 9 * BS as u64).is_err());
        d.write_at(&[1u8; BS], 8 * BS as u64).unwrap();
        assert_eq!(read(&*mem, 8, 1).unwrap(), vec![1u8; BS]);
        assert_eq!(d.plan().injected(), (1, 1, 0));
        // Changed at run time.
        d.plan().restore();
        assert!(read(&*d, 5, 1).is_ok());
        d.plan().update(|s| s.read_errors.push((0, 1)));
        assert!(read(&*d, 0, 1).is_err());
    }

    #[test]
    fn error_rates_are_reproducible() {
        let count = |seed: u64| {
            let (d, _) = dev(&format!("read-error-rate=0.3,write-error-rate=0.5,seed={seed}"));
            let pattern: Vec<bool> = (0..200).map(|i| read(&*d, i % 64, 1).is_err()).collect();
            let writes = (0..100).filter(|i| d.write_at(&[0u8; BS], (i % 64) * BS as u64).is_err()).count();
            (pattern, writes)
        };
        let (a, wa) = count(11);
        let fails = a.iter().filter(|x| **x).count();
        assert!((30..=90).contains(&fails), "{fails} of 200 reads failed at rate 0.3");
        assert!((25..=75).contains(&wa), "{wa} of 100 writes failed at rate 0.5");
        assert_eq!(count(11), (a.clone(), wa), "same seed, same faults");
        assert_ne!(count(12).0, a, "another seed, other faults");
    }

    #[test]
    fn goes_missing_now_or_after_requests() {
        let (d, _) = dev("missing-after=3");
        let h = DeviceHandle::new(2, d.clone());
        let mut b = vec![0u8; BS];
        for _ in 0..2 {
            h.read_blocks(0, &mut b).unwrap();
        }
        assert!(!d.gone());
        let e = h.read_blocks(0, &mut b).unwrap_err().to_string();
        assert!(e.contains("gone"), "{e}");
        assert!(d.gone());
        assert_eq!(h.state(), DeviceState::Missing);
        assert!(h.write_blocks(0, &b).unwrap_err().to_string().contains("missing"));
        let (d, _) = dev("missing");
        assert!(d.gone() && read(&*d, 0, 1).is_err() && d.flush().is_err());
        d.plan().restore();
        assert!(!d.gone() && read(&*d, 0, 1).is_ok());
    }

    #[test]
    fn bit_flips_at_blocks_and_at_a_rate() {
        let (d, mem) = dev("flip=3");
        let good = read(&*mem, 2, 3).unwrap();
        let got = read(&*d, 2, 3).unwrap();
        let diff: Vec<usize> = (0..got.len()).filter(|&i| got[i] != good[i]).collect();
        assert_eq!(diff.len(), 1, "one byte changed");
        assert!((BS..2 * BS).contains(&diff[0]), "in block 3: {diff:?}");
        assert_eq!((got[diff[0]] ^ good[diff[0]]).count_ones(), 1, "one bit");
        assert_eq!(read(&*d, 3, 1).unwrap(), got[BS..2 * BS], "the same bit every read");
        assert_eq!(read(&*mem, 3, 1).unwrap(), good[BS..2 * BS], "the stored data is intact");
        let (d, mem) = dev("flip-rate=1,seed=4");
        let got = read(&*d, 0, 8).unwrap();
        let good = read(&*mem, 0, 8).unwrap();
        for b in 0..8 {
            let changed: u32 = (b * BS..(b + 1) * BS).map(|i| (got[i] ^ good[i]).count_ones()).sum();
            assert_eq!(changed, 1, "block {b}");
        }
        assert_eq!(d.plan().injected().2, 8);
    }

    #[test]
    fn latency_is_added() {
        let (d, _) = dev("latency=20ms");
        let t = std::time::Instant::now();
        read(&*d, 0, 1).unwrap();
        d.flush().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(40));
    }

    #[test]
    fn bad_specs_are_refused_clearly() {
        for (spec, want) in [
            ("", "empty"),
            ("read-error", "needs a value"),
            ("read-error=x", "expected N or N-M"),
            ("flip=9-3", "end before start"),
            ("flip-rate=1.5", "rate from 0 to 1"),
            ("latency=5", "duration"),
            ("latency=5h", "duration"),
            ("missing-after=-1", "whole number"),
            ("explode", "unknown fault"),
        ] {
            let e = FaultSpec::parse(spec).unwrap_err();
            assert!(e.contains(want), "{spec}: {e}");
        }
        let s =
            FaultSpec::parse("read-error=1+4-5 write-error-rate=0.25, missing-after=10,latency=200us,seed=3").unwrap();
        assert_eq!(s.read_errors, vec![(1, 1), (4, 2)]);
        assert_eq!((s.write_error_rate, s.missing_after, s.seed), (0.25, Some(10), 3));
        assert_eq!(s.latency, Duration::from_micros(200));
    }
}
