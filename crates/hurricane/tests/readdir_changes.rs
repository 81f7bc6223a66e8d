//! Directory listings read a page at a time while the directory changes
//! (the native API's opendir/readdir/telldir/seekdir): every listing ends,
//! every name there from its start to its end is listed exactly once, and
//! a position taken from a listing stays valid across changes.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use hurricane::{Creds, Fs, RenameFlags};
use std::collections::{BTreeMap, BTreeSet};

const MB: u64 = 1 << 20;

/// One page of a listing of `dir` from `offset`, at most `page` entries,
/// ending where a listing begun at `end` ends: (name, next offset).
fn page(fs: &Fs, dir: u64, offset: u64, end: u64, page: usize) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    fs.readdir_to(&Creds::root(), dir, offset, end, |it| {
        v.push((String::from_utf8_lossy(&it.name).into_owned(), it.next));
        v.len() < page
    })
    .unwrap();
    v
}

/// Lists `dir` a page at a time, running `between` after each page, and
/// gives up (None) past `cap` entries: a listing that does not end.
fn paged(fs: &Fs, dir: u64, size: usize, cap: usize, mut between: impl FnMut(usize)) -> Option<Vec<String>> {
    let end = fs.readdir_end(dir).unwrap();
    let (mut seen, mut offset) = (Vec::new(), 0);
    for n in 0.. {
        let p = page(fs, dir, offset, end, size);
        let Some(&(_, last)) = p.last() else { return Some(seen) };
        offset = last;
        seen.extend(p.into_iter().map(|(name, _)| name));
        if seen.len() > cap {
            return None;
        }
        between(n);
    }
    unreachable!()
}

fn counts(names: &[String]) -> BTreeMap<&str, usize> {
    let mut c = BTreeMap::new();
    for n in names {
        *c.entry(n.as_str()).or_default() += 1;
    }
    c
}

#[test]
fn a_listing_ends_and_lists_each_lasting_name_once_while_names_move() {
    let p = MemPool::new(1, 256 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    fs.mkdir_all("/away", 0o755).unwrap();
    let (stable, moving) = (3000, 2000);
    for i in 0..stable {
        fs.write_file(&format!("/d/s{i}"), b"", None).unwrap();
    }
    for i in 0..moving {
        fs.write_file(&format!("/d/m{i}"), b"", None).unwrap();
    }
    // Half the entries come from the store, half from the changes since.
    fs.checkpoint().unwrap();
    for i in 0..stable {
        fs.write_file(&format!("/d/t{i}"), b"", None).unwrap();
    }
    let d = fs.resolve("/d").unwrap();
    let root = Creds::root();
    let away = fs.resolve("/away").unwrap();
    let total = stable * 2 + moving;
    let mut fresh = 0;
    let seen = paged(&fs, d, 100, 3 * total, |n| {
        // Between pages: every moving name goes to another directory and
        // comes back, a lasting name is replaced by a rename over it, and
        // new names are made, some renamed within the directory.
        for i in 0..moving {
            let name = format!("m{i}");
            fs.rename(&root, d, name.as_bytes(), away, name.as_bytes(), RenameFlags::default()).unwrap();
            fs.rename(&root, away, name.as_bytes(), d, name.as_bytes(), RenameFlags::default()).unwrap();
        }
        fs.write_file("/d/over", b"new", None).unwrap();
        fs.rename_path("/d/over", &format!("/d/s{}", (n * 37) % stable)).unwrap();
        for _ in 0..20 {
            fs.write_file(&format!("/d/new{fresh}"), b"", None).unwrap();
            fs.rename_path(&format!("/d/new{fresh}"), &format!("/d/renamed{fresh}")).unwrap();
            fresh += 1;
        }
        if n == 10 {
            fs.checkpoint().unwrap();
        }
    })
    .expect("the listing ends");
    let c = counts(&seen);
    for i in 0..stable {
        for name in [format!("s{i}"), format!("t{i}")] {
            assert_eq!(c.get(name.as_str()), Some(&1), "{name} is there throughout: listed once");
        }
    }
    for (name, n) in &c {
        assert_eq!(*n, 1, "{name} listed {n} times");
    }
    // A listing begun now sees everything, once.
    let all = paged(&fs, d, 1000, 3 * total + 2 * fresh, |_| {}).unwrap();
    assert_eq!(all.len(), 2 + total + fresh);
    assert_eq!(counts(&all).len(), all.len());
}

#[test]
fn a_position_stays_valid_across_changes() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    for i in 0..600 {
        fs.write_file(&format!("/d/e{i:03}"), b"", None).unwrap();
    }
    fs.checkpoint().unwrap();
    let d = fs.resolve("/d").unwrap();
    let end = fs.readdir_end(d).unwrap();
    // telldir after the first 250 entries, then the rest of the listing.
    let first = page(&fs, d, 0, end, 250);
    let pos = first.last().unwrap().1;
    let rest: Vec<String> = page(&fs, d, pos, end, usize::MAX).into_iter().map(|(n, _)| n).collect();
    assert_eq!(first.len() + rest.len(), 602);
    // Changes: entries on both sides of the position removed (the one at
    // the position among them), names added, a name renamed over one
    // still to come, one renamed within the directory.
    let at = first.last().unwrap().0.clone();
    let mut gone = BTreeSet::new();
    for n in rest.iter().step_by(7).chain(first.iter().map(|(n, _)| n).step_by(11)).chain([&at]) {
        if n != "." && n != ".." && gone.insert(n.clone()) {
            fs.remove(&format!("/d/{n}")).unwrap();
        }
    }
    for i in 0..100 {
        fs.write_file(&format!("/d/late{i}"), b"", None).unwrap();
    }
    let target = rest.iter().find(|n| !gone.contains(*n)).unwrap().clone();
    fs.rename_path("/d/late0", &format!("/d/{target}")).unwrap();
    let moved = rest.iter().rev().find(|n| !gone.contains(*n) && **n != target).unwrap().clone();
    fs.rename_path(&format!("/d/{moved}"), "/d/moved").unwrap();
    fs.checkpoint().unwrap();
    // seekdir to the position: the same stream goes on with what is left
    // of the rest, in the same order, the moved entry under its new name.
    let again: Vec<String> = page(&fs, d, pos, end, usize::MAX).into_iter().map(|(n, _)| n).collect();
    let want: Vec<String> = rest
        .iter()
        .filter(|n| !gone.contains(*n))
        .map(|n| if *n == moved { "moved".to_string() } else { n.clone() })
        .collect();
    assert_eq!(again, want);
    // rewinddir: a listing begun again sees the new names too.
    let end = fs.readdir_end(d).unwrap();
    let all = page(&fs, d, 0, end, usize::MAX);
    assert_eq!(all.len(), 602 - gone.len() + 99);
    assert!(all.iter().any(|(n, _)| n == "late99"));
}
