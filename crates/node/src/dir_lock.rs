//! One node process per data directory. Two would each start a mariadbd on the same data (seen in the fault
//! suite when a harness leaked a node process: the second mariadbd waited on InnoDB's locks, the first lost track
//! of which server it ran, and the replica diverged). The lock is an `flock` on `<data_dir>/node.lock`: the kernel
//! drops it when the process dies, kill -9 included, so a crashed node never blocks its own restart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    #[error("another paxsql node already runs on {dir} ({holder}); stop it first")]
    Held { dir: PathBuf, holder: String },
    #[error("cannot lock {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Held for the life of the node process.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, DirLockError> {
        let path = data_dir.join("node.lock");
        let io = |source| DirLockError::Io { path: path.clone(), source };
        // std opens with O_CLOEXEC, so mariadbd and other children never inherit (and outlive us with) the lock.
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
        // SAFETY: flock(2) on a descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = match text.trim() {
                    "" => "pid unknown".to_string(),
                    pid => format!("pid {pid}"),
                };
                return Err(DirLockError::Held { dir: data_dir.to_path_buf(), holder });
            }
            return Err(io(err));
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_the_lock_frees_with_its_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = DataDirLock::acquire(dir.path()).expect("first lock");
        // flock conflicts between open file descriptions, also within one process.
        let err = DataDirLock::acquire(dir.path()).expect_err("second lock");
        let text = err.to_string();
        assert!(text.contains("already runs") && text.contains(&format!("pid {}", std::process::id())), "{text}");
        drop(first);
        DataDirLock::acquire(dir.path()).expect("lock after the holder went away");
    }
}
