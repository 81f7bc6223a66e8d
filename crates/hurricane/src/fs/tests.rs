//! The engine over inodes read back from the store: what meta-data work
//! leaves unbuilt.

use crate::device::{Device, MemDevice, MissingDevice};
use crate::namespace::Body;
use crate::{FormatOptions, Fs, Options, SetAttr};
use std::sync::Arc;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn built(fs: &Fs, path: &str) -> bool {
    let n = fs.state().inode(fs.resolve(path).unwrap()).unwrap();
    let d = n.data.read();
    match &d.body {
        Body::File(l) => l.is_built(),
        _ => panic!("{path} is not a file"),
    }
}

/// Two memory devices of 64 MiB with a new pool on them.
fn formatted() -> Vec<Arc<dyn Device>> {
    let devs: Vec<Arc<dyn Device>> =
        (0..2).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
    Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
    devs
}

fn open(devs: &[Arc<dyn Device>]) -> Fs {
    Fs::open(devs.to_vec(), Options { background_commit: false, ..Options::default() }).unwrap()
}

/// Meta-data work on files read back from the store builds no layout tree
/// (stat, chmod, rename), their `st_blocks` is what the tree gives, and the
/// first read builds it with the data intact. Checkpoints of files whose
/// tree was never built write their trees back unchanged.
#[test]
fn meta_data_work_builds_no_layout_tree() {
    let devs = formatted();
    let fs = open(&devs);
    let files: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("/big", pattern(1, 300_000), Some("stripe(unit=64K)[extent@0,extent@1]")),
        ("/small", pattern(2, 3000), Some("inline")),
        ("/empty", Vec::new(), None),
        ("/default", pattern(3, 70_000), None),
    ];
    for (path, data, layout) in &files {
        fs.write_file(path, data, *layout).unwrap();
    }
    let blocks: Vec<u64> = files.iter().map(|f| fs.stat(f.0).unwrap().blocks).collect();
    assert!(blocks[0] >= 300_000 / 512 && blocks[1] >= 3000_u64.div_ceil(512) && blocks[2] == 0, "{blocks:?}");
    fs.close().unwrap();
    for round in 0..2 {
        let fs = open(&devs);
        for (i, (path, _, _)) in files.iter().enumerate() {
            assert_eq!(fs.stat(path).unwrap().blocks, blocks[i], "round {round}: {path}");
            fs.set_attr_path(path, &SetAttr { mode: Some(0o640), ..Default::default() }).unwrap();
            assert!(!built(&fs, path), "round {round}: {path}: stat and chmod built its tree");
        }
        fs.rename_path("/empty", "/empty2").unwrap();
        fs.rename_path("/empty2", "/empty").unwrap();
        assert!(!built(&fs, "/empty"));
        // Written back by a checkpoint while never built.
        fs.checkpoint().unwrap();
        fs.close().unwrap();
    }
    let fs = open(&devs);
    for (i, (path, data, _)) in files.iter().enumerate() {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path}");
        assert!(built(&fs, path), "{path}: a read builds the tree");
        assert_eq!(fs.stat(path).unwrap().blocks, blocks[i], "{path}");
    }
    fs.close().unwrap();
}

/// A pool's health walk looks at every file's tree but keeps none it had
/// to build (a status of a large pool would otherwise fill the inode cache
/// with trees), and still finds what a lost device takes: the walk's
/// counts are those of trees built for good.
#[test]
fn the_health_walk_keeps_no_tree_it_built() {
    let devs = formatted();
    let fs = open(&devs);
    // The small file's data stays in its record, on no device.
    let files = [
        ("/on0", Some("extent@0"), 20_000),
        ("/on1", Some("extent@1"), 20_000),
        ("/both", Some("replicate[extent@0,extent@1]"), 20_000),
        ("/small", Some("inline"), 1000),
    ];
    for (i, (path, layout, len)) in files.iter().enumerate() {
        fs.write_file(path, &pattern(i as u8, *len), *layout).unwrap();
    }
    fs.close().unwrap();
    let fs = open(&devs);
    let h = fs.health(10);
    assert_eq!((h.healthy, h.degraded, h.lost), (4, 0, 0), "{h:?}");
    for (path, _, _) in &files {
        assert!(!built(&fs, path), "{path}: the walk kept the tree it built");
    }
    // A tree built for use is the one the walk looks at, and stays.
    assert_eq!(fs.read_file("/both").unwrap(), pattern(2, 20_000));
    fs.health(10);
    assert!(built(&fs, "/both"));
    fs.close().unwrap();
    // With device 1 gone, the walk finds one file lost and one degraded.
    let mut gone = devs.clone();
    gone[1] = Arc::new(MissingDevice::new("mem1", 0));
    let fs = open(&gone);
    let h = fs.health(10);
    assert_eq!((h.healthy, h.degraded, h.lost), (2, 1, 1), "{h:?}");
    assert_eq!(
        (h.lost_paths.as_slice(), h.degraded_paths.as_slice()),
        (&["/on1".to_string()][..], &["/both".to_string()][..])
    );
    assert!(!built(&fs, "/on1") && !built(&fs, "/on0"));
    // Counts only: the same counts, no paths.
    let h = fs.health(0);
    assert_eq!((h.healthy, h.degraded, h.lost, h.lost_paths.len() + h.degraded_paths.len()), (2, 1, 1, 0), "{h:?}");
}
