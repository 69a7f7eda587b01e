//! Secret files (passwords, the cluster secret, private keys, a cluster file holding a password), as every command
//! that makes a cluster's files writes them: below both the local cluster and its certificates.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;

/// Writes a secret file created with mode 0600 from the start: no moment at which another user could read it.
pub(crate) fn write_secret(path: &Path, value: &str) -> anyhow::Result<()> {
    // A file left by an interrupted `cluster up` is replaced, never reopened with whatever mode it had.
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("cannot replace {}", path.display()))
        }
        _ => {}
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writeln!(f, "{value}")?;
    Ok(())
}
