//! Hurricane: a file system whose files are compositions of building blocks
//! (the Hurricane File System design), over a pool of devices, with a
//! journalled meta-data store and a sharded namespace.
//!
//! ```
//! use hurricane::{Fs, FormatOptions, Options, device::{Device, MemDevice}};
//! use std::io::{Read, Seek, SeekFrom, Write};
//! use std::sync::Arc;
//!
//! // A pool of three 64 MiB devices. Image files and block devices work the
//! // same way: `Fs::mkfs_dir(dir, 3, size, ..)` then `Fs::open_dir(dir, ..)`.
//! let devs: Vec<Arc<dyn Device>> =
//!     (0..3).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
//! Fs::format(devs.clone(), &FormatOptions::default())?;
//! let fs = Fs::open(devs, Options::default())?;
//!
//! // A file striped over all three devices in 64 KiB units.
//! fs.mkdir_all("/data", 0o755)?;
//! let mut f = fs.create("/data/a.bin", Some("stripe(unit=64K,width=3)"))?;
//! f.write_all(&vec![7u8; 300_000])?;          // std::io::Write at the cursor
//! f.write_at(b"head", 0)?;                   // positioned, safe from many threads
//! f.sync_all()?;                             // data and meta-data durable
//! // As stored: the pool's default checksum block above every leaf.
//! assert!(f.layout()?.starts_with("stripe(unit=64K)[checksum[extent@"));
//!
//! // Read it back through the cursor and positioned reads.
//! let mut r = fs.open_file("/data/a.bin")?;
//! r.seek(SeekFrom::Start(299_996))?;
//! let mut tail = Vec::new();
//! r.read_to_end(&mut tail)?;
//! assert_eq!(tail, [7, 7, 7, 7]);
//! let mut head = [0u8; 4];
//! r.read_at(&mut head, 0)?;
//! assert_eq!(&head, b"head");
//!
//! // Namespace: rename, readdir, stat.
//! fs.rename_path("/data/a.bin", "/data/b.bin")?;
//! let names: Vec<String> = fs.read_dir("/data")?.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
//! assert_eq!(names, ["b.bin"]);
//! assert_eq!(fs.stat("/data/b.bin")?.size, 300_000);
//! drop((f, r));
//! fs.close()?;                               // checkpoint, clean shutdown
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod affinity;
pub mod base;
pub mod blocks;
pub mod cache;
pub mod codec;
pub mod crashtest;
pub mod device;
pub mod dirfile;
pub mod error;
pub mod fs;
pub mod fsck;
pub mod helpers;
pub mod journal;
pub mod layout;
pub mod namespace;
pub mod numa;
pub mod open;
pub mod open_spec;
pub mod pool;
pub mod salvage;
pub mod units;
pub mod xattr;

pub use error::{Error, Result};
pub use fs::Transaction;
pub use fs::{Attr, DirItem, File, FormatOptions, Fs, OpenOptions, Options, RenameFlags, SetAttr, StatFs};
pub use namespace::Creds;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Top-level module of the crate at `src` -> the modules its code
    /// names as `crate::X` (comments skipped, names re-exported at the root
    /// mapped to theirs).
    fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
        let src = src.to_path_buf();
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        let mut reexports = BTreeMap::new();
        for line in lib.lines().filter_map(|l| l.strip_prefix("pub use ")) {
            let (module, names) = line.split_once("::").unwrap();
            for n in names.trim_matches(|c| "{};".contains(c)).split(',') {
                reexports.insert(n.trim().to_string(), module.to_string());
            }
        }
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut stack = vec![src.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
                let module = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
                if module == "lib" || !rel.ends_with(".rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                let out = edges.entry(module.clone()).or_default();
                for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                    for (i, _) in line.match_indices("crate::") {
                        let rest = &line[i + "crate::".len()..];
                        let names: Vec<&str> = match rest.strip_prefix('{') {
                            Some(group) => group.split('}').next().unwrap().split(',').collect(),
                            None => vec![rest],
                        };
                        for n in names {
                            let n: String = n.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                            let target = reexports.get(&n).cloned().unwrap_or(n);
                            if target != module && !target.is_empty() {
                                out.insert(target);
                            }
                        }
                    }
                }
            }
        }
        edges
    }

    /// The engine's modules form an order (no `use` cycles), so each layer
    /// can be read, tested and changed with only the layers below it in mind.
    /// The layers of `edges`, lowest first; fails on a cycle.
    fn layers(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
        let mut left = edges.clone();
        let mut order = Vec::new();
        loop {
            let ready: Vec<String> = left.iter().filter(|(_, to)| to.is_empty()).map(|(m, _)| m.clone()).collect();
            if ready.is_empty() {
                break;
            }
            for m in &ready {
                left.remove(m);
            }
            for to in left.values_mut() {
                to.retain(|t| !ready.contains(t));
            }
            order.push(ready);
        }
        assert!(left.is_empty(), "import cycle among {:?} (layers so far: {order:?})", left.keys().collect::<Vec<_>>());
        order
    }

    #[test]
    fn module_order() {
        let edges = module_edges(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
        for (m, to) in &edges {
            assert!(edges.contains_key(m));
            for t in to {
                assert!(edges.contains_key(t) || t == "lib", "{m} names unknown module {t}");
            }
        }
        assert!(edges["base"].is_empty(), "base is a leaf: {:?}", edges["base"]);
        let order = layers(&edges);
        // The storage layers come in this order.
        let pos = |m: &str| order.iter().position(|l| l.iter().any(|x| x == m)).unwrap_or(usize::MAX);
        for w in ["base", "device", "pool", "journal", "blocks", "layout"].windows(2) {
            assert!(pos(w[0]) < pos(w[1]), "{} should be below {}: {order:?}", w[0], w[1]);
        }
        assert!(pos("cache") < pos("fs"));
    }

    /// The mount crate's files form an order too (it is one directory of
    /// flat modules, so the same reading of `crate::X` applies).
    #[test]
    fn mount_crate_file_order() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hurricane-fuse/src");
        let order = layers(&module_edges(&src));
        let pos = |m: &str| order.iter().position(|l| l.iter().any(|x| x == m)).unwrap_or(usize::MAX);
        assert!(pos("workers") < pos("uring") && pos("filesystem") < pos("uring") && pos("uring") < pos("serve"));
    }
}
