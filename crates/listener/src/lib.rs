//! The one TCP accept loop every paxsql endpoint runs: the proxy's RW and RO ports, the replication server, the
//! admin SQL port and the metrics endpoint.
//!
//! Place in the system (docs/ARCHITECTURE.md §2, crate map): below the endpoints, above tokio. What each endpoint
//! does with a connection is its own; how connections are let in, limited and let go is written once here:
//!
//! - a connection limit, shared by several listeners if they share one [`Semaphore`]; when it is reached the
//!   loop either stops accepting (clients wait in the kernel's backlog: [`WhenFull::Wait`]) or accepts and
//!   hands the connection to a refusal (the proxy answers "too many connections": [`WhenFull::Refuse`]);
//! - an accept error (EMFILE and the like) is waited out with a growing backoff, never spun on or returned;
//! - shutdown stops accepting at once, closes the listening socket, and waits for the connection tasks (each
//!   watches the same shutdown signal) up to a bound.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{info, warn};

/// What the loop does when every connection slot is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// Stop accepting until a slot frees: new clients wait in the listen backlog.
    Wait,
    /// Accept and hand the connection to the refusal, which tells the client and drops it.
    Refuse,
}

/// How one listener runs.
#[derive(Clone, Debug)]
pub struct AcceptLoop {
    /// For logs: which endpoint ("proxy rw", "replication", "admin", "metrics").
    pub name: &'static str,
    /// Connection slots; share one semaphore between listeners that share a limit.
    pub slots: Arc<Semaphore>,
    pub when_full: WhenFull,
    /// How long shutdown waits for connection tasks to end.
    pub drain: Duration,
}

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

impl AcceptLoop {
    /// A loop with `max_connections` slots of its own that waits when they are all taken.
    pub fn new(name: &'static str, max_connections: usize) -> AcceptLoop {
        AcceptLoop {
            name,
            slots: Arc::new(Semaphore::new(max_connections)),
            when_full: WhenFull::Wait,
            drain: Duration::from_secs(30),
        }
    }

    /// Accepts until `shutdown` turns true (or its sender is dropped), running `serve(stream, peer, permit)` as
    /// a task for each connection (the permit is the connection's slot: it is free again when dropped) and
    /// `refuse(stream, peer)` for each connection that found no slot under [`WhenFull::Refuse`]. Then closes the
    /// listening socket and waits for the connection tasks, at most [`AcceptLoop::drain`].
    pub async fn run<S, F, R>(
        &self,
        listener: TcpListener,
        mut shutdown: watch::Receiver<bool>,
        mut serve: S,
        refuse: R,
    ) where
        S: FnMut(TcpStream, SocketAddr, OwnedSemaphorePermit) -> F + Send,
        F: Future<Output = ()> + Send + 'static,
        R: Fn(TcpStream, SocketAddr) + Send,
    {
        let mut tasks = JoinSet::new();
        let mut backoff = BACKOFF_MIN;
        loop {
            let slot = match self.when_full {
                WhenFull::Wait => tokio::select! {
                    permit = Arc::clone(&self.slots).acquire_owned() => match permit {
                        Ok(p) => Some(p),
                        Err(_) => break,
                    },
                    _ = shutdown.wait_for(|stop| *stop) => break,
                },
                WhenFull::Refuse => None,
            };
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = shutdown.wait_for(|stop| *stop) => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => {
                    backoff = BACKOFF_MIN;
                    a
                }
                Err(e) => {
                    warn!(listener = self.name, error = %e, backoff_ms = backoff.as_millis() as u64, "accept failed");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.wait_for(|stop| *stop) => break,
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            let slot = match slot {
                Some(slot) => slot,
                None => match Arc::clone(&self.slots).try_acquire_owned() {
                    Ok(slot) => slot,
                    Err(_) => {
                        refuse(stream, peer);
                        continue;
                    }
                },
            };
            tasks.spawn(serve(stream, peer, slot));
            while tasks.try_join_next().is_some() {}
        }
        drop(listener);
        if !tasks.is_empty() {
            info!(listener = self.name, connections = tasks.len(), "stopped accepting; waiting for connections to end");
        }
        let drained = tokio::time::timeout(self.drain, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            warn!(listener = self.name, connections = tasks.len(), "connections still open after shutdown; aborted");
            tasks.abort_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_once(mut s: TcpStream, mut stop: watch::Receiver<bool>) {
        let mut b = [0u8; 1];
        let read = tokio::select! {
            r = s.read_exact(&mut b) => r.is_ok(),
            _ = stop.wait_for(|s| *s) => false,
        };
        if read {
            let _ = s.write_all(&b).await;
        }
    }

    /// Runs `acceptor` on a fresh loopback listener, each connection echoing one byte; refusals write "full".
    fn spawn(acceptor: AcceptLoop) -> (SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let conn_stop = stop.clone();
        let task = tokio::spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            let serve = move |s, _, permit| {
                let stop = conn_stop.clone();
                async move {
                    let _permit = permit;
                    echo_once(s, stop).await;
                }
            };
            acceptor
                .run(listener, stop, serve, |s: TcpStream, _| {
                    let _ = s.try_write(b"full");
                })
                .await
        });
        (addr, stop_tx, task)
    }

    #[tokio::test]
    async fn waits_when_full_and_drains_at_shutdown() {
        let acceptor = AcceptLoop::new("test", 1);
        let slots = Arc::clone(&acceptor.slots);
        let (addr, stop_tx, task) = spawn(acceptor);
        let mut first = TcpStream::connect(addr).await.unwrap();
        let mut second = TcpStream::connect(addr).await.unwrap();
        second.write_all(b"b").await.unwrap();
        // The only slot is the first connection's: the second waits in the backlog, unanswered.
        let mut b = [0u8; 1];
        assert!(tokio::time::timeout(Duration::from_millis(300), second.read_exact(&mut b)).await.is_err());
        assert_eq!(slots.available_permits(), 0);
        first.write_all(b"a").await.unwrap();
        first.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"a");
        second.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"b", "served once the slot was free");
        let _third = TcpStream::connect(addr).await.unwrap();
        stop_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("drained").unwrap();
        assert!(TcpStream::connect(addr).await.is_err(), "the listening socket is closed");
    }

    #[tokio::test]
    async fn refuses_when_full() {
        let (addr, stop_tx, task) = spawn(AcceptLoop { when_full: WhenFull::Refuse, ..AcceptLoop::new("test", 1) });
        let _first = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut second = TcpStream::connect(addr).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), second.read_to_end(&mut answer)).await.unwrap().unwrap();
        assert_eq!(answer, b"full");
        stop_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("drained").unwrap();
    }
}
