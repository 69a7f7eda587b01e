//! raft-engine's `purge_expired_files` runs on a thread of its own, not in the write that compacted the log.
//!
//! Why: when the oldest files still hold live records, raft-engine rewrites them forward inside the purge call —
//! seconds of file IO for a long window. Called from `write`, that ran on the node's driver thread, which also
//! renews the master's lease: a soak lost its master at the first compaction that way. Purging concurrently with
//! writes is what raft-engine is built for (TiKV purges from a worker thread).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use raft_engine::Engine;

/// What the purge thread and the store share.
#[derive(Default)]
struct State {
    /// Purges asked for so far; the thread runs one for any number asked while it was busy.
    requested: u64,
    /// The request count the last finished purge covered.
    done: u64,
    stop: bool,
    /// The last purge failure not yet reported to [`Purger::settle`].
    error: Option<String>,
}

/// The background purge of one store.
pub(crate) struct Purger {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Purger {
    pub(crate) fn start(engine: Arc<Engine>) -> std::io::Result<Purger> {
        let shared: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let theirs = shared.clone();
        let thread =
            std::thread::Builder::new().name("paxos-store-purge".into()).spawn(move || run(&engine, &theirs))?;
        Ok(Purger { shared, thread: Some(thread) })
    }

    /// Asks for a purge after a compaction; returns at once.
    pub(crate) fn request(&self) {
        lock(&self.shared.0).requested += 1;
        self.shared.1.notify_all();
    }

    /// Waits until every purge asked for so far has run; the last failure since the previous call, if any.
    pub(crate) fn settle(&self) -> Option<String> {
        let mut s = lock(&self.shared.0);
        let target = s.requested;
        while s.done < target {
            if self.thread.as_ref().map_or(true, JoinHandle::is_finished) {
                return Some("the purge thread has ended".into());
            }
            s = self
                .shared
                .1
                .wait_timeout(s, std::time::Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        s.error.take()
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        lock(&self.shared.0).stop = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            // A panic in raft-engine's purge (it panics when fsync fails) already ended the thread; the store is
            // closing either way.
            let _ = t.join();
        }
    }
}

fn run(engine: &Engine, shared: &(Mutex<State>, Condvar)) {
    let (state, wake) = shared;
    loop {
        let target = {
            let mut s = lock(state);
            while !s.stop && s.done == s.requested {
                s = wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.stop {
                // Files left for the next open to purge; nothing is lost by stopping here.
                s.done = s.requested;
                wake.notify_all();
                return;
            }
            s.requested
        };
        let started = std::time::Instant::now();
        let result = engine.purge_expired_files();
        let mut s = lock(state);
        match result {
            Ok(_) => tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "global log files purged"),
            Err(e) => {
                // The files stay; the next compaction asks again. Disk use grows meanwhile, so say it.
                tracing::warn!(error = %e, "purging the global log's files failed");
                s.error = Some(e.to_string());
            }
        }
        s.done = target;
        wake.notify_all();
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state is a few counters, consistent at every unlock: a panic elsewhere leaves it usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
