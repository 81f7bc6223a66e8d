//! Disk-timing simulator: a [`SimDevice`] wraps any [`Device`] and makes each
//! request take as long as it would on a mid-1990s disk, so that layout
//! effects on seeks, on-disk caching and device parallelism can be measured
//! on one machine (HFS section 5.4 on seven Conner disks).
//!
//! # The model ([`DiskModel`])
//!
//! - **Geometry**: 512-byte sectors, `spt` sectors a track, `heads` tracks a
//!   cylinder. Device offsets map linearly onto cylinders. The seek curve is
//!   scaled to `cylinders` (the nominal disk), so a small image behaves as the
//!   first part of a full-size disk rather than as a whole disk.
//! - **Seek**: 0 within a cylinder, else `seek_min_ms + (seek_full_ms -
//!   seek_min_ms) * sqrt((d - 1) / (cylinders - 1))` for a distance of `d`
//!   cylinders: the a + b*sqrt(d) short-seek curve, reaching the full-stroke
//!   time at the last cylinder.
//! - **Rotation**: the platter turns continuously from the device's creation;
//!   after a seek the head waits until the target sector comes round, so the
//!   latency follows the real angular position (half a rotation on average
//!   for random requests, nearly a full one for a request that just missed
//!   its sector).
//! - **Transfer**: the media rate is one track per rotation
//!   (`spt * 512 * rpm / 60` bytes a second); data already in the drive's
//!   buffer goes to the host at `bus_mb_s`.
//! - **Track cache with read-ahead**: after each read the drive keeps
//!   reading on at the media rate into a `cache_kib` buffer until the buffer
//!   is full or another command moves the head. A read that starts inside
//!   the buffered window, or ahead of it by less than a buffer, is served
//!   from the stream without seek or rotational delay (waiting for the
//!   stream where the data is not there yet). One segment: interleaved
//!   streams on one disk evict each other, as on drives of the period.
//! - **Command overhead**: `overhead_ms` per command that finds the drive
//!   idle; a command queued behind another overlaps it.
//! - **Writes**: seek, rotation and media transfer, no write cache; they end
//!   read-ahead.
//! - **Queue**: one FIFO per device. Each request is placed on the device's
//!   timeline (start = max(arrival, end of the previous request)), so
//!   requests to one device serialise while different devices run in
//!   parallel.
//!
//! # Clock
//!
//! The model itself runs on a virtual clock (seconds as `f64`), which the
//! unit tests drive directly. [`SimDevice`] maps it to wall time: the
//! calling thread sleeps until its request's completion time on the device
//! timeline, and benchmarks measure wall time. Because completion times come
//! from the timeline and not from the sum of sleeps, a late wake-up of one
//! thread does not slow the device down while requests are queued.
//!
//! # Default parameters (`hdd`)
//!
//! Chosen so that one simulated disk streams about 720 KB/s, the maximum the
//! HFS paper measured for its Conner CP3200 disks on Hector, making absolute
//! KB/s comparable with HFS's Table 1: 3600 rpm, 24 sectors a track (12 KiB,
//! so 737 KB/s media rate), 8 heads, 2200 cylinders (206 MiB nominal),
//! 3 ms track-to-track and 28 ms full-stroke seeks (16 ms average), 1 ms
//! command overhead, a 2 MB/s bus and a 64 KiB read-ahead buffer. Any of
//! them can be overridden: `hdd:rpm=7200,seek_full_ms=20`.

use super::Device;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECTOR: u64 = 512;

/// Parameters of the simulated disk. `Display` gives the canonical spec.
#[derive(Debug, Clone, PartialEq)]
pub struct SimParams {
    pub rpm: f64,
    /// Sectors (512 bytes) a track.
    pub spt: u32,
    pub heads: u32,
    /// Cylinders of the nominal disk the seek curve is scaled to.
    pub cylinders: u32,
    /// Seek to the adjacent cylinder.
    pub seek_min_ms: f64,
    /// Seek across every cylinder.
    pub seek_full_ms: f64,
    /// Controller time for a command that finds the drive idle.
    pub overhead_ms: f64,
    /// Transfer rate from the drive's buffer to the host, MB/s (10^6 bytes).
    pub bus_mb_s: f64,
    /// Read-ahead buffer; 0 turns read-ahead off.
    pub cache_kib: u32,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            rpm: 3600.0,
            spt: 24,
            heads: 8,
            cylinders: 2200,
            seek_min_ms: 3.0,
            seek_full_ms: 28.0,
            overhead_ms: 1.0,
            bus_mb_s: 2.0,
            cache_kib: 64,
        }
    }
}

/// (name, doc) of every parameter, for help texts.
pub const SIM_PARAMS: &[(&str, &str)] = &[
    ("rpm", "spindle speed (revolutions a minute)"),
    ("spt", "512-byte sectors a track"),
    ("heads", "tracks a cylinder"),
    ("cylinders", "cylinders of the nominal disk that the seek curve spans"),
    ("seek_min_ms", "seek to the adjacent cylinder"),
    ("seek_full_ms", "seek across the whole disk"),
    ("overhead_ms", "controller overhead of a command that finds the drive idle"),
    ("bus_mb_s", "buffer-to-host transfer rate in MB/s"),
    ("cache_kib", "read-ahead buffer in KiB (0: no read-ahead)"),
];

impl SimParams {
    /// Parses `hdd` or `hdd:key=value,...` (see [`SIM_PARAMS`]). `none` and
    /// `off` give `None`: no simulation.
    pub fn parse(spec: &str) -> Result<Option<SimParams>> {
        let spec = spec.trim();
        let bad = |msg: String| Error::Invalid(format!("simulator spec {spec:?}: {msg}"));
        let (preset, rest) = match spec.split_once(':') {
            Some((p, r)) => (p.trim(), Some(r)),
            None => (spec, None),
        };
        let mut p = match preset {
            "none" | "off" if rest.is_none() => return Ok(None),
            "hdd" => SimParams::default(),
            "" => return Err(bad("empty (expected hdd or hdd:key=value,...)".into())),
            other => return Err(bad(format!("unknown disk model {other:?} (known: hdd, none)"))),
        };
        let mut seen: Vec<&str> = Vec::new();
        for item in rest.into_iter().flat_map(|r| r.split(',')) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (k, v) = item.split_once('=').ok_or_else(|| bad(format!("{item:?} is not key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            if seen.contains(&k) {
                return Err(bad(format!("{k} given twice")));
            }
            let x: f64 = v.parse().map_err(|_| bad(format!("{k}={v}: not a number")))?;
            let range = |lo: f64, hi: f64| -> Result<f64> {
                if x.is_finite() && (lo..=hi).contains(&x) {
                    Ok(x)
                } else {
                    Err(bad(format!("{k}={v}: must be in [{lo}, {hi}]")))
                }
            };
            let int = |lo: f64, hi: f64| -> Result<u32> {
                let y = range(lo, hi)?;
                if y.fract() != 0.0 {
                    return Err(bad(format!("{k}={v}: must be a whole number")));
                }
                Ok(y as u32)
            };
            match k {
                "rpm" => p.rpm = range(60.0, 100_000.0)?,
                "spt" => p.spt = int(1.0, 10_000.0)?,
                "heads" => p.heads = int(1.0, 1024.0)?,
                "cylinders" => p.cylinders = int(2.0, 10_000_000.0)?,
                "seek_min_ms" => p.seek_min_ms = range(0.0, 1000.0)?,
                "seek_full_ms" => p.seek_full_ms = range(0.0, 10_000.0)?,
                "overhead_ms" => p.overhead_ms = range(0.0, 1000.0)?,
                "bus_mb_s" => p.bus_mb_s = range(0.001, 1_000_000.0)?,
                "cache_kib" => p.cache_kib = int(0.0, 1_048_576.0)?,
                _ => {
                    let known: Vec<&str> = SIM_PARAMS.iter().map(|(n, _)| *n).collect();
                    return Err(bad(format!("unknown parameter {k:?} (known: {})", known.join(", "))));
                }
            }
            seen.push(k);
        }
        if p.seek_full_ms < p.seek_min_ms {
            return Err(bad(format!("seek_full_ms={} is below seek_min_ms={}", p.seek_full_ms, p.seek_min_ms)));
        }
        Ok(Some(p))
    }

    /// Media transfer rate in bytes a second.
    pub fn media_rate(&self) -> f64 {
        self.spt as f64 * SECTOR as f64 * self.rpm / 60.0
    }

    fn rotation(&self) -> f64 {
        60.0 / self.rpm
    }

    fn cyl_bytes(&self) -> u64 {
        self.spt as u64 * SECTOR * self.heads as u64
    }

    /// Seek time in seconds for a distance of `d` cylinders on a disk of
    /// `cyls` cylinders.
    pub fn seek_time(&self, d: u64, cyls: u64) -> f64 {
        if d == 0 {
            return 0.0;
        }
        let span = cyls.saturating_sub(1).max(1) as f64;
        let x = ((d - 1) as f64 / span).min(1.0);
        (self.seek_min_ms + (self.seek_full_ms - self.seek_min_ms) * x.sqrt()) / 1000.0
    }
}

impl fmt::Display for SimParams {
    /// `hdd` for the defaults, else `hdd:` and every parameter that differs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = SimParams::default();
        let mut diffs = Vec::new();
        let mut num = |name: &str, a: f64, b: f64| {
            if a != b {
                diffs.push(format!("{name}={a}"));
            }
        };
        num("rpm", self.rpm, d.rpm);
        num("spt", self.spt as f64, d.spt as f64);
        num("heads", self.heads as f64, d.heads as f64);
        num("cylinders", self.cylinders as f64, d.cylinders as f64);
        num("seek_min_ms", self.seek_min_ms, d.seek_min_ms);
        num("seek_full_ms", self.seek_full_ms, d.seek_full_ms);
        num("overhead_ms", self.overhead_ms, d.overhead_ms);
        num("bus_mb_s", self.bus_mb_s, d.bus_mb_s);
        num("cache_kib", self.cache_kib as f64, d.cache_kib as f64);
        if diffs.is_empty() {
            write!(f, "hdd")
        } else {
            write!(f, "hdd:{}", diffs.join(","))
        }
    }
}

/// What the drive is reading ahead: it read up to `origin` by time `t0` and
/// goes on at the media rate until `consumed + buffer`.
#[derive(Debug, Clone, Copy)]
struct Stream {
    /// Oldest byte still in the buffer.
    lo: u64,
    origin: u64,
    t0: f64,
    consumed: u64,
}

/// How a request was served, for statistics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Every byte was already in the buffer.
    CacheHit,
    /// Continued the read-ahead stream: no seek, no rotational delay.
    Stream,
    /// Seek, rotational latency and media transfer.
    Media,
}

/// The timing model of one disk on a virtual clock (seconds).
#[derive(Debug, Clone)]
pub struct DiskModel {
    p: SimParams,
    cyls: u64,
    busy_until: f64,
    head_cyl: u64,
    stream: Option<Stream>,
}

impl DiskModel {
    /// A model for a device of `size` bytes (cylinders grow to cover it).
    pub fn new(p: SimParams, size: u64) -> Self {
        let need = size.div_ceil(p.cyl_bytes().max(1));
        let cyls = (p.cylinders as u64).max(need).max(2);
        DiskModel { p, cyls, busy_until: 0.0, head_cyl: 0, stream: None }
    }

    pub fn params(&self) -> &SimParams {
        &self.p
    }

    /// When the device's queue drains.
    pub fn busy_until(&self) -> f64 {
        self.busy_until
    }

    /// Forgets the buffer (cold cache) and moves the head to cylinder 0.
    pub fn reset(&mut self, now: f64) {
        self.stream = None;
        self.head_cyl = 0;
        self.busy_until = now;
    }

    fn cyl(&self, off: u64) -> u64 {
        (off / self.p.cyl_bytes().max(1)).min(self.cyls - 1)
    }

    /// Time from `t` until the head is over the sector at `off`.
    fn rotational_latency(&self, t: f64, off: u64) -> f64 {
        let rot = self.p.rotation();
        let target = ((off / SECTOR) % self.p.spt as u64) as f64 / self.p.spt as f64;
        let head = (t / rot).fract();
        (target - head).rem_euclid(1.0) * rot
    }

    /// Places a request arriving at `now` on the timeline; returns its
    /// (completion time, how it was served).
    pub fn submit(&mut self, now: f64, write: bool, off: u64, len: u64) -> (f64, Served) {
        let idle = now >= self.busy_until;
        let t = now.max(self.busy_until);
        let overhead = if idle { self.p.overhead_ms / 1000.0 } else { 0.0 };
        let rate = self.p.media_rate();
        let bus = self.p.bus_mb_s * 1e6;
        let buf = self.p.cache_kib as u64 * 1024;
        let end = off.saturating_add(len);
        if !write && buf > 0 {
            if let Some(s) = self.stream {
                // Where the read-ahead is now (it stops when the buffer is full).
                let cap = s.consumed.max(s.lo).saturating_add(buf);
                let pos = ((s.origin as f64 + (t - s.t0).max(0.0) * rate) as u64).min(cap).max(s.origin);
                let lo = s.lo.max(pos.saturating_sub(buf));
                if off >= lo && off < pos.saturating_add(buf) {
                    let (done, served, origin, t0) = if end <= pos {
                        (t + overhead + len as f64 / bus, Served::CacheHit, pos, t)
                    } else {
                        // Wait for the stream to bring the rest in.
                        let ready = t + (end - pos) as f64 / rate;
                        let done = ready.max(t + overhead + len as f64 / bus);
                        (done, Served::Stream, end, ready)
                    };
                    self.stream = Some(Stream { lo, origin, t0, consumed: s.consumed.max(end) });
                    self.busy_until = done;
                    return (done, served);
                }
            }
        }
        let target = self.cyl(off);
        let seek = self.p.seek_time(self.head_cyl.abs_diff(target), self.cyls);
        let at_track = t + overhead + seek;
        let done = at_track + self.rotational_latency(at_track, off) + len as f64 / rate;
        self.head_cyl = self.cyl(end.saturating_sub(1).max(off));
        self.stream =
            if write || buf == 0 { None } else { Some(Stream { lo: off, origin: end, t0: done, consumed: end }) };
        self.busy_until = done;
        (done, Served::Media)
    }
}

/// Counters of a simulated device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub requests: u64,
    pub cache_hits: u64,
    pub stream_hits: u64,
    pub media: u64,
    /// Simulated time the device spent serving requests, in nanoseconds.
    pub busy_ns: u64,
}

/// A device whose requests take the time the [`DiskModel`] says.
pub struct SimDevice {
    inner: Arc<dyn Device>,
    name: String,
    model: Mutex<DiskModel>,
    epoch: Instant,
    enabled: AtomicBool,
    requests: AtomicU64,
    cache_hits: AtomicU64,
    stream_hits: AtomicU64,
    media: AtomicU64,
    busy_ns: AtomicU64,
}

impl SimDevice {
    pub fn new(inner: Arc<dyn Device>, p: SimParams) -> Self {
        let name = format!("{} (sim {p})", inner.name());
        let model = DiskModel::new(p, inner.size());
        SimDevice {
            inner,
            name,
            model: Mutex::new(model),
            epoch: Instant::now(),
            enabled: AtomicBool::new(true),
            requests: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            stream_hits: AtomicU64::new(0),
            media: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
        }
    }

    /// Wraps every device of a pool.
    pub fn wrap_all(devs: Vec<Arc<dyn Device>>, p: &SimParams) -> Vec<Arc<dyn Device>> {
        devs.into_iter().map(|d| Arc::new(SimDevice::new(d, p.clone())) as Arc<dyn Device>).collect()
    }

    /// Timing on or off (off: requests go straight through, e.g. while a
    /// benchmark writes its files). Turning it on starts with a cold buffer.
    pub fn set_enabled(&self, on: bool) {
        if on && !self.enabled.load(Ordering::Acquire) {
            let now = self.now();
            self.model.lock().reset(now);
        }
        self.enabled.store(on, Ordering::Release);
    }

    /// Forgets the drive's buffer, as after a power cycle.
    pub fn reset(&self) {
        let now = self.now();
        self.model.lock().reset(now);
    }

    pub fn params(&self) -> SimParams {
        self.model.lock().params().clone()
    }

    pub fn inner(&self) -> &Arc<dyn Device> {
        &self.inner
    }

    /// Seconds the disk takes to stream `bytes` from `offset` in requests of
    /// `req` bytes, each queued before the previous one ends, after one
    /// request that brings the head there: its best sequential rate with
    /// that request size, on the model's clock (no host scheduling noise).
    /// The device's own state is not touched.
    pub fn stream_seconds(&self, offset: u64, bytes: u64, req: u64) -> f64 {
        let req = req.max(1);
        let mut m = DiskModel::new(self.params(), self.size());
        let (start, _) = m.submit(0.0, false, offset, req);
        let mut done = start;
        let mut off = offset + req;
        while off < offset + req + bytes {
            // Arriving at `start`, before the drive is free: always queued.
            done = m.submit(start, false, off, req).0;
            off += req;
        }
        done - start
    }

    pub fn stats(&self) -> SimStats {
        SimStats {
            requests: self.requests.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            stream_hits: self.stream_hits.load(Ordering::Relaxed),
            media: self.media.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
        }
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Queues the request on the device timeline and sleeps until it is done.
    fn delay(&self, write: bool, off: u64, len: usize) {
        if !self.enabled.load(Ordering::Acquire) {
            return;
        }
        let now = self.now();
        let (done, served) = {
            let mut m = self.model.lock();
            let start = now.max(m.busy_until());
            let r = m.submit(now, write, off, len as u64);
            self.busy_ns.fetch_add(((r.0 - start).max(0.0) * 1e9) as u64, Ordering::Relaxed);
            r
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        match served {
            Served::CacheHit => &self.cache_hits,
            Served::Stream => &self.stream_hits,
            Served::Media => &self.media,
        }
        .fetch_add(1, Ordering::Relaxed);
        let wait = done - self.now();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.delay(false, offset, buf.len());
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.delay(true, offset, buf.len());
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    /// A simulated disk seeks and waits for its platter.
    fn seeks(&self) -> bool {
        true
    }
    fn reclaims_freed(&self) -> bool {
        self.inner.reclaims_freed()
    }
    fn discard_unit(&self) -> u64 {
        self.inner.discard_unit()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.discard(offset, len)
    }
    fn transient(&self, e: &crate::Error) -> bool {
        self.inner.transient(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn model() -> DiskModel {
        DiskModel::new(SimParams::default(), 64 * MB)
    }

    #[test]
    fn parse_and_format() {
        assert_eq!(SimParams::parse("hdd").unwrap(), Some(SimParams::default()));
        assert_eq!(SimParams::parse("none").unwrap(), None);
        let p = SimParams::parse("hdd: rpm=7200, seek_full_ms=20").unwrap().unwrap();
        assert_eq!(p.rpm, 7200.0);
        assert_eq!(p.seek_full_ms, 20.0);
        assert_eq!(p.to_string(), "hdd:rpm=7200,seek_full_ms=20");
        assert_eq!(SimParams::parse(&p.to_string()).unwrap(), Some(p));
        assert_eq!(SimParams::default().to_string(), "hdd");
        for bad in [
            "",
            "ssd",
            "hdd:rpm",
            "hdd:rpm=fast",
            "hdd:rpm=0",
            "hdd:color=red",
            "hdd:spt=1.5",
            "hdd:rpm=1,rpm=2",
            "hdd:seek_min_ms=30",
        ] {
            let e = SimParams::parse(bad).unwrap_err().to_string();
            assert!(e.contains("simulator spec"), "{bad}: {e}");
        }
    }

    #[test]
    fn media_rate_matches_the_documented_default() {
        let r = SimParams::default().media_rate();
        assert!((r - 737_280.0).abs() < 1.0, "{r}");
    }

    #[test]
    fn seek_is_monotone_in_distance() {
        let p = SimParams::default();
        let mut last = 0.0;
        for d in [0u64, 1, 2, 5, 10, 100, 500, 1000, 2199, 5000] {
            let s = p.seek_time(d, 2200);
            assert!(s >= last, "seek({d}) = {s} < {last}");
            last = s;
        }
        assert_eq!(p.seek_time(0, 2200), 0.0);
        assert!((p.seek_time(1, 2200) - 0.003).abs() < 1e-9);
        assert!((p.seek_time(2200, 2200) - 0.028).abs() < 1e-9);
    }

    #[test]
    fn sequential_reads_are_faster_than_random() {
        let n = 200;
        let mut m = model();
        let mut t = 0.0;
        for i in 0..n {
            t = m.submit(t, false, i * 4096, 4096).0;
        }
        let seq = t;
        let mut m = model();
        let mut t = 0.0;
        let mut x: u64 = 12345;
        for _ in 0..n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let off = (x >> 20) % (64 * MB / 4096) * 4096;
            t = m.submit(t, false, off, 4096).0;
        }
        let random = t;
        assert!(random > 3.0 * seq, "random {random} vs sequential {seq}");
        // Sequential 4 KiB reads stream at about the media rate.
        let rate = (n * 4096) as f64 / seq;
        let media = SimParams::default().media_rate();
        assert!(rate > 0.9 * media && rate <= 1.01 * media, "rate {rate} media {media}");
    }

    #[test]
    fn track_cache_hit_is_cheaper_than_media() {
        let mut m = model();
        let (d1, s1) = m.submit(0.0, false, 0, 4096);
        assert_eq!(s1, Served::Media);
        // Long enough for the read-ahead to fill the buffer.
        let later = d1 + 0.2;
        let (d2, s2) = m.submit(later, false, 4096, 4096);
        assert_eq!(s2, Served::CacheHit);
        let hit = d2 - later;
        let mut m = model();
        let (d3, s3) = m.submit(0.0, false, 32 * MB, 4096);
        assert_eq!(s3, Served::Media);
        assert!(hit < d3 / 2.0, "hit {hit} media {d3}");
        // Without read-ahead the same access goes to the media.
        let p = SimParams { cache_kib: 0, ..SimParams::default() };
        let mut m = DiskModel::new(p, 64 * MB);
        let (d1, _) = m.submit(0.0, false, 0, 4096);
        assert_eq!(m.submit(d1 + 0.2, false, 4096, 4096).1, Served::Media);
    }

    #[test]
    fn rotational_latency_averages_half_a_rotation() {
        let m = model();
        let rot = 60.0 / 3600.0;
        let n = 10_000;
        let mut sum = 0.0;
        for i in 0..n {
            let lat = m.rotational_latency(i as f64 * 0.000_37, (i * 7919 % 24) * 512);
            assert!((0.0..rot).contains(&lat));
            sum += lat;
        }
        let avg = sum / n as f64;
        assert!((avg - rot / 2.0).abs() < rot * 0.05, "average {avg}");
    }

    #[test]
    fn writes_pay_for_the_media_and_end_read_ahead() {
        let mut m = model();
        let (d1, _) = m.submit(0.0, false, 0, 4096);
        let (d2, s) = m.submit(d1, true, 8192, 4096);
        assert_eq!(s, Served::Media);
        assert!(d2 - d1 >= 4096.0 / SimParams::default().media_rate());
        assert_eq!(m.submit(d2 + 0.2, false, 12288, 4096).1, Served::Media);
    }

    /// A device that does nothing, under the timing of the simulator.
    struct Null(u64);
    impl Device for Null {
        fn name(&self) -> &str {
            "null"
        }
        fn size(&self) -> u64 {
            self.0
        }
        fn read_at(&self, _: &mut [u8], _: u64) -> Result<()> {
            Ok(())
        }
        fn write_at(&self, _: &[u8], _: u64) -> Result<()> {
            Ok(())
        }
        fn flush(&self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn requests_queue_per_device_and_devices_run_in_parallel() {
        // Random reads cost about 20 ms each: four on one device take about
        // four times as long as one on each of four devices.
        let far = |i: u64| (i * 13 + 5) * 4 * MB;
        let one = Arc::new(SimDevice::new(Arc::new(Null(64 * MB)), SimParams::default()));
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for i in 0..4 {
                let d = one.clone();
                s.spawn(move || d.read_at(&mut [0u8; 4096], far(i) % (60 * MB)).unwrap());
            }
        });
        let serial = t0.elapsed();
        assert_eq!(one.stats().requests, 4);
        let many: Vec<_> =
            (0..4).map(|_| Arc::new(SimDevice::new(Arc::new(Null(64 * MB)), SimParams::default()))).collect();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for (i, d) in many.iter().enumerate() {
                s.spawn(move || d.read_at(&mut [0u8; 4096], far(i as u64) % (60 * MB)).unwrap());
            }
        });
        let parallel = t0.elapsed();
        // One device: the requests waited for each other, so the wall time
        // covers the sum of their services.
        let busy = Duration::from_nanos(one.stats().busy_ns);
        assert!(busy > Duration::from_millis(40), "busy {busy:?}");
        assert!(serial + Duration::from_millis(1) >= busy, "busy {busy:?} wall {serial:?}");
        // Four devices: they overlapped (checked loosely: a loaded machine
        // wakes sleepers late, but not by the whole difference).
        let total: Duration = many.iter().map(|d| Duration::from_nanos(d.stats().busy_ns)).sum();
        assert!(parallel < total.mul_f64(0.8), "four devices {parallel:?}, their services {total:?}");
        assert!(parallel < serial, "one device {serial:?}, four devices {parallel:?}");
    }

    #[test]
    fn a_queued_stream_runs_at_the_media_rate() {
        let d = SimDevice::new(Arc::new(Null(64 * MB)), SimParams::default());
        let secs = d.stream_seconds(8 * MB, MB, 4096);
        let rate = MB as f64 / secs;
        let media = SimParams::default().media_rate();
        assert!((rate - media).abs() < media * 0.01, "rate {rate} media {media}");
        assert_eq!(d.stats().requests, 0);
    }

    #[test]
    fn disabled_devices_do_not_wait() {
        let d = SimDevice::new(Arc::new(Null(64 * MB)), SimParams::default());
        d.set_enabled(false);
        let t0 = Instant::now();
        for i in 0..50 {
            d.read_at(&mut [0u8; 4096], (i * 997 % 1000) * 65536).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_millis(50));
        assert_eq!(d.stats().requests, 0);
    }
}
