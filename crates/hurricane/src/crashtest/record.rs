//! Recording devices (dm-log-writes in miniature): every write and flush a
//! workload issues to any device of the pool goes into one global log, in the
//! order the devices completed them, together with marks the workload drops
//! (operation and sync boundaries) so the checker knows what had completed
//! at each position of the log.

use super::image::CrashDevice;
use crate::device::Device;
use crate::error::Result;
use parking_lot::Mutex;
use std::sync::Arc;

/// One device request, in completion order.
pub(crate) enum Event {
    Write { dev: u32, off: u64, data: Vec<u8> },
    Flush { dev: u32 },
}

/// A moment of the workload: `pos` device events had completed, and `tick`
/// orders it against every other mark and event (two marks with no device
/// request between them share a `pos` but not a `tick`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Mark {
    pub pos: usize,
    pub tick: u64,
}

#[derive(Default)]
struct Log {
    events: Vec<Event>,
    ticks: u64,
}

/// The shared log. Requests are appended under its lock *and applied to the
/// device under it too*, so the log order is exactly the order in which the
/// devices saw them (a flush covers precisely the writes logged before it).
#[derive(Default)]
pub(crate) struct Recorder {
    log: Mutex<Log>,
}

impl Recorder {
    pub fn mark(&self) -> Mark {
        let mut l = self.log.lock();
        l.ticks += 1;
        Mark { pos: l.events.len(), tick: l.ticks }
    }

    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut self.log.lock().events)
    }

    fn record(&self, ev: Event, apply: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut l = self.log.lock();
        apply()?;
        l.ticks += 1;
        l.events.push(ev);
        Ok(())
    }
}

/// A memory device whose requests go through the recorder: the blocks it
/// writes are kept aside from the image it starts from, which it shares.
pub(crate) struct RecordingDevice {
    index: u32,
    inner: CrashDevice,
    rec: Arc<Recorder>,
    /// A disk that acknowledges flushes without doing them (to show that
    /// the checker catches lost writes).
    lies: bool,
}

impl RecordingDevice {
    pub fn new(index: u32, image: Arc<Vec<u8>>, rec: Arc<Recorder>, lies: bool) -> Self {
        RecordingDevice { index, inner: CrashDevice::new(format!("rec{index}"), image), rec, lies }
    }
}

impl Device for RecordingDevice {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let ev = Event::Write { dev: self.index, off: offset, data: buf.to_vec() };
        self.rec.record(ev, || self.inner.write_at(buf, offset))
    }
    fn flush(&self) -> Result<()> {
        if self.lies {
            return Ok(());
        }
        self.rec.record(Event::Flush { dev: self.index }, || self.inner.flush())
    }
}
