//! Ordinary tools on a mounted pool: cp -a, tar, rsync, git, SQLite, fio.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::path::{Path, PathBuf};

/// A private copy of a real source tree (this repository's crates), so
/// the comparison cannot race with edits to the originals.
fn source_tree(into: &Path) -> PathBuf {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("crates dir").to_path_buf();
    let dst = into.join("src-tree");
    ok("cp", &["-a", s(&crates), s(&dst)]);
    // Something of every kind: a symlink, a hard link, an empty file, a
    // file with odd permissions and a name with spaces.
    ok("sh", &["-c", &format!("cd '{}' && ln -s hurricane link-to-hurricane && : > empty && printf x > 'with space' && ln 'with space' hardlink && chmod 0604 'with space' && mkdir -p deep/a/b/c && printf deep > deep/a/b/c/f", s(&dst))]);
    dst
}

/// Names, types, modes, owners, sizes and mtimes of a tree, sorted (the
/// size of a directory is the file system's own business).
fn listing(dir: &Path) -> Vec<String> {
    let out = ok("find", &[s(dir), "-mindepth", "1", "-printf", "%P|%y|%m|%U|%G|%s|%T@|%l\\n"]);
    let mut lines: Vec<String> = out
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split('|').collect();
            if f.get(1) == Some(&"d") && f.len() > 5 {
                f[5] = "-";
            }
            f.join("|")
        })
        .collect();
    lines.sort();
    lines
}

fn same_trees(a: &Path, b: &Path) {
    let d = cmd("diff", &["-r", "--no-dereference", s(a), s(b)]);
    assert!(
        d.status.success(),
        "trees differ:\n{}{}",
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr)
    );
}

#[test]
fn cp_tar_and_rsync() {
    require_fuse!();
    let pool = Pool::new(3, "512M");
    let src = source_tree(pool.tmp.path());
    let m = pool.mount(&[]);

    // cp -a keeps contents, modes, owners, times, links.
    let cp_dst = m.path("cp");
    ok("cp", &["-a", s(&src), s(&cp_dst)]);
    same_trees(&src, &cp_dst);
    let (a, b) = (listing(&src), listing(&cp_dst));
    let differ: Vec<_> = a.iter().zip(&b).filter(|(x, y)| x != y).collect();
    assert!(a.len() == b.len() && differ.is_empty(), "cp -a did not keep the metadata: {differ:#?}");
    let doc = Path::new("/usr/share/doc");
    if doc.is_dir() {
        ok("cp", &["-a", s(doc), s(&m.path("doc"))]);
        same_trees(doc, &m.path("doc"));
    } else {
        eprintln!("note: /usr/share/doc is missing; copied only the source tree");
    }

    // tar: create on the mount, extract on the mount, compare both ways.
    let tarball = m.path("tree.tar");
    ok("tar", &["-C", s(&src), "-cf", s(&tarball), "."]);
    std::fs::create_dir(m.path("untar")).unwrap();
    ok("tar", &["-C", s(&m.path("untar")), "-xpf", s(&tarball)]);
    same_trees(&src, &m.path("untar"));
    ok("tar", &["-C", s(&m.path("untar")), "--compare", "-f", s(&tarball)]);
    // And a tarball made from the mount extracts to the same tree.
    let back = pool.tmp.path().join("back");
    std::fs::create_dir(&back).unwrap();
    ok("sh", &["-c", &format!("tar -C '{}' -cf - . | tar -C '{}' -xpf -", s(&m.path("untar")), s(&back))]);
    same_trees(&src, &back);

    // rsync: a full copy, then a second run that finds nothing to do.
    if have("rsync") {
        let r = format!("{}/", s(&m.path("rsync")));
        ok("rsync", &["-a", "-H", &format!("{}/", s(&src)), &r]);
        same_trees(&src, &m.path("rsync"));
        let again = ok("rsync", &["-a", "-H", "--itemize-changes", &format!("{}/", s(&src)), &r]);
        assert!(again.trim().is_empty(), "the second rsync changed things:\n{again}");
        let stats = ok("rsync", &["-a", "-H", "--stats", &format!("{}/", s(&src)), &r]);
        assert!(stats.contains("Number of regular files transferred: 0"), "{stats}");
    } else {
        eprintln!("SKIPPED rsync part: rsync is not installed");
    }
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn git_repository() {
    require_fuse!();
    if !have("git") {
        eprintln!("SKIPPED git_repository: git is not installed");
        return;
    }
    let pool = Pool::new(2, "256M");
    let src = source_tree(pool.tmp.path());
    let m = pool.mount(&[]);
    let repo = m.path("repo");
    ok("cp", &["-a", s(&src), s(&repo)]);
    // Git tracks no empty directories: drop them so a clone compares equal.
    ok("find", &[s(&repo), "-mindepth", "1", "-type", "d", "-empty", "-delete"]);
    let git = |args: &[&str]| {
        let mut all = vec![
            "-C",
            s(&repo),
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "safe.directory=*",
        ];
        all.extend_from_slice(args);
        ok("git", &all)
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("new-file"), "second commit\n").unwrap();
    std::fs::remove_file(repo.join("empty")).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "second"]);
    git(&["gc", "-q"]);
    git(&["fsck", "--full", "--strict"]);
    assert!(git(&["status", "--porcelain"]).trim().is_empty());
    assert_eq!(git(&["rev-list", "--count", "HEAD"]).trim(), "2");
    // A clone on the mount checks out the same files.
    ok("git", &["-c", "safe.directory=*", "clone", "-q", s(&repo), s(&m.path("clone"))]);
    let d = cmd("diff", &["-r", "--no-dereference", "-x", ".git", s(&repo), s(&m.path("clone"))]);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stdout));
    m.unmount();
    pool.fsck_clean();
}

const SQLITE: &str = r#"
import sqlite3, sys, random
path, mode = sys.argv[1], sys.argv[2]
db = sqlite3.connect(path)
db.execute(f"PRAGMA journal_mode={mode}")
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
db.execute("CREATE INDEX tk ON t(k)")
rnd = random.Random(7)
for batch in range(20):
    with db:
        db.executemany("INSERT INTO t (k, v) VALUES (?, ?)",
                       [(f"key{rnd.randrange(10**6)}", rnd.randbytes(rnd.randrange(10, 3000))) for _ in range(200)])
with db:
    db.execute("UPDATE t SET v = zeroblob(100) WHERE id % 7 = 0")
    db.execute("DELETE FROM t WHERE id % 11 = 0")
db.execute("VACUUM")
db.close()
db = sqlite3.connect(path)
ok = db.execute("PRAGMA integrity_check").fetchone()[0]
n = db.execute("SELECT count(*) FROM t").fetchone()[0]
print(ok, n)
sys.exit(0 if ok == "ok" and n == 4000 - 4000 // 11 else 1)
"#;

#[test]
fn sqlite_database() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    for mode in ["DELETE", "WAL"] {
        let db = m.path(&format!("db-{mode}.sqlite"));
        let (ok, out) = python(SQLITE, &[s(&db), mode], None);
        assert!(ok, "sqlite ({mode}): {out}");
        assert!(out.starts_with("ok "), "{out}");
    }
    m.unmount();
    // The databases survive a remount intact.
    let m = pool.mount(&[]);
    let (ok, out) = python("import sqlite3,sys\nfor p in sys.argv[1:]:\n  print(sqlite3.connect(p).execute('PRAGMA integrity_check').fetchone()[0])", &[s(&m.path("db-DELETE.sqlite")), s(&m.path("db-WAL.sqlite"))], None);
    assert!(ok && out.lines().all(|l| l == "ok"), "{out}");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn fio_verify() {
    require_fuse!();
    if !have("fio") {
        eprintln!("SKIPPED fio_verify: fio is not installed");
        return;
    }
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    let dir = m.path("fio");
    std::fs::create_dir(&dir).unwrap();
    for (rw, bs, engine) in [("randwrite", "4k", "psync"), ("write", "1m", "psync"), ("randrw", "16k", "libaio")] {
        let (good, text) = fio_check(&dir, rw, bs, engine, "16m", &[]);
        if !good && engine == "libaio" && text.contains("engine") && text.contains("libaio") {
            eprintln!("note: fio has no libaio engine here; skipped that job");
            continue;
        }
        assert!(good, "fio {rw} {bs}:\n{text}");
    }
    m.unmount();
    pool.fsck_clean();
}
