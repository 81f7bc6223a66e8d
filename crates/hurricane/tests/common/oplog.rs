//! The operations a random-operation test made last, for the message that
//! fails it: what ran, the seed, the step, and the operations before it.
//! Shared by the engine's tests and the mount's (`fuse_util` includes this
//! file).

pub struct OpLog {
    what: String,
    seed: u64,
    /// The step under way.
    pub step: usize,
    ops: Vec<String>,
}

impl OpLog {
    pub fn new(what: impl Into<String>, seed: u64) -> OpLog {
        OpLog { what: what.into(), seed, step: 0, ops: Vec::new() }
    }

    /// What runs, as given to `new`.
    pub fn what(&self) -> &str {
        &self.what
    }

    pub fn note(&mut self, op: String) {
        self.ops.push(op);
        if self.ops.len() > 400 {
            self.ops.drain(..200);
        }
    }

    pub fn fail(&self, why: String) -> ! {
        let tail = &self.ops[self.ops.len().saturating_sub(30)..];
        panic!(
            "{}: seed {}, step {}: {why}\nlast operations:\n  {}",
            self.what,
            self.seed,
            self.step,
            tail.join("\n  ")
        );
    }
}
