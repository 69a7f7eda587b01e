//! Helpers shared by the integration tests (each test file uses only some of them).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use paxsql_paxos_store::RaftEngineStorage;

/// Ends `store` as a power cut or `kill -9` would: the files are taken as they are on disk while the store is
/// still open (raft-engine's clean close would trim preallocated space and fsync), then the handle is dropped and
/// the copy replaces the directory. Writes already handed to the kernel are kept, as after a process crash.
/// The background purge is let finish first: it deletes and creates files while the copy lists and reads them,
/// and a copy that saw a file listed and then gone (it failed CI once) or missed a file created after the listing
/// is no state a crash could leave. A crash in the middle of a purge is the purge tests' concern.
pub fn crash(store: RaftEngineStorage) {
    store.settle_purge().unwrap();
    let dir = store.dir().to_path_buf();
    let copy = sibling(&dir, "crash-copy");
    let _ = fs::remove_dir_all(&copy);
    copy_dir(&dir, &copy);
    drop(store);
    fs::remove_dir_all(&dir).unwrap();
    fs::rename(&copy, &dir).unwrap();
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap().to_os_string();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The append-queue log files of a store directory, oldest first.
pub fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().ends_with(".raftlog"))
        .collect();
    v.sort();
    v
}

/// A small deterministic generator, so that a failing run repeats exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
