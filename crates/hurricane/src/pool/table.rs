//! The pool's per-device tables (device handles, allocators): indexed by
//! device number, read without locks by every request, and grown while the
//! pool is in use when a device is added. Entries never move and are never
//! taken out (a removed device keeps its slot, so device numbers stay put),
//! so a reference to one stays valid for as long as the pool is open.
//!
//! Appending is serialised by the caller (the pool's meta-data lock); the
//! length is published only after the new entry is in place, so a reader
//! never sees a slot that is not there yet.

use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Table<T> {
    items: boxcar::Vec<T>,
    len: AtomicUsize,
}

impl<T> Table<T> {
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        if i < self.len() {
            self.items.get(i)
        } else {
            None
        }
    }

    /// In index order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.items.iter().take(self.len()).map(|(_, t)| t)
    }

    /// Appends `t` and returns its index. Callers serialise appends.
    pub fn push(&self, t: T) -> usize {
        let i = self.items.push(t);
        self.len.fetch_max(i + 1, Ordering::Release);
        i
    }
}

impl<T> std::ops::Index<usize> for Table<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).unwrap_or_else(|| panic!("index {i} past the {} entries of a pool table", self.len()))
    }
}

impl<T> From<Vec<T>> for Table<T> {
    fn from(v: Vec<T>) -> Self {
        let len = AtomicUsize::new(v.len());
        Table { items: v.into_iter().collect(), len }
    }
}

impl<T> FromIterator<T> for Table<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        Self::from(it.into_iter().collect::<Vec<T>>())
    }
}

impl<'a, T> IntoIterator for &'a Table<T> {
    type Item = &'a T;
    type IntoIter = Box<dyn Iterator<Item = &'a T> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_while_shared_and_keeps_entries_in_place() {
        let t: Table<u32> = vec![10, 20].into();
        let first: *const u32 = &t[0];
        std::thread::scope(|s| {
            s.spawn(|| {
                for k in 0..100 {
                    t.push(30 + k);
                }
            });
            s.spawn(|| {
                for _ in 0..1000 {
                    let n = t.len();
                    assert!(t.get(n - 1).is_some());
                    assert!(t.iter().count() >= n);
                }
            });
        });
        assert_eq!(t.len(), 102);
        assert_eq!(t.get(102), None);
        assert_eq!(t.iter().copied().take(3).collect::<Vec<_>>(), vec![10, 20, 30]);
        assert!(std::ptr::eq(first, &t[0]));
    }
}
