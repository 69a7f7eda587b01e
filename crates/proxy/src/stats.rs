use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one proxy, for the node to export. Shared through an `Arc`; read with [`ProxyStats::snapshot`].
#[derive(Debug, Default)]
pub struct ProxyStats {
    accepted: AtomicU64,
    active: AtomicU64,
    refused_no_master: AtomicU64,
    refused_backend_unreachable: AtomicU64,
    refused_max_connections: AtomicU64,
    refused_not_aligned: AtomicU64,
    cut_on_master_change: AtomicU64,
    kills_softened: AtomicU64,
    commands_refused: AtomicU64,
    tls_sessions: AtomicU64,
    refused_plaintext: AtomicU64,
    relayed_out: AtomicU64,
    relayed_in: AtomicU64,
    bytes_client_to_server: AtomicU64,
    bytes_server_to_client: AtomicU64,
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStatsSnapshot {
    /// Connections accepted on both ports.
    pub accepted: u64,
    /// Connections open now (waiting for a master or forwarded).
    pub active: u64,
    /// RW connections answered with ERR because no master came within the hold time.
    pub refused_no_master: u64,
    /// Connections answered with ERR because their backend did not accept within `connect_timeout`.
    pub refused_backend_unreachable: u64,
    /// Connections answered with ERR 1040 because `max_connections` were open.
    pub refused_max_connections: u64,
    /// RO connections answered with ERR because the local server was not aligned with the global log.
    pub refused_not_aligned: u64,
    /// RW connections cut because the route moved away from the master they were forwarded to.
    pub cut_on_master_change: u64,
    /// `KILL` statements and `COM_PROCESS_KILL` commands sent on as `KILL SOFT`, so that they cannot end a commit
    /// that waits for its majority.
    pub kills_softened: u64,
    /// Client commands answered with an error instead of being sent (a `KILL` inside another statement, dynamic
    /// SQL the proxy cannot read, TLS or compression asked for).
    pub commands_refused: u64,
    /// Client connections that completed a TLS handshake with the proxy.
    pub tls_sessions: u64,
    /// Logins answered with an error because the client did not ask for TLS where it is required.
    pub refused_plaintext: u64,
    /// RW connections this node's proxy sent through the master's relay (the master being another node).
    pub relayed_out: u64,
    /// Relays from other members' proxies this node connected to its mariadbd (as master).
    pub relayed_in: u64,
    /// Bytes forwarded client → server by connections that ended by themselves (cut ones are not counted:
    /// splice keeps its tally until it finishes).
    pub bytes_client_to_server: u64,
    /// Bytes forwarded server → client, same rule.
    pub bytes_server_to_client: u64,
}

impl ProxyStats {
    /// Reads every counter (each atomically, not all at one instant).
    pub fn snapshot(&self) -> ProxyStatsSnapshot {
        ProxyStatsSnapshot {
            accepted: self.accepted.load(Relaxed),
            active: self.active.load(Relaxed),
            refused_no_master: self.refused_no_master.load(Relaxed),
            refused_backend_unreachable: self.refused_backend_unreachable.load(Relaxed),
            refused_max_connections: self.refused_max_connections.load(Relaxed),
            refused_not_aligned: self.refused_not_aligned.load(Relaxed),
            cut_on_master_change: self.cut_on_master_change.load(Relaxed),
            kills_softened: self.kills_softened.load(Relaxed),
            commands_refused: self.commands_refused.load(Relaxed),
            tls_sessions: self.tls_sessions.load(Relaxed),
            refused_plaintext: self.refused_plaintext.load(Relaxed),
            relayed_out: self.relayed_out.load(Relaxed),
            relayed_in: self.relayed_in.load(Relaxed),
            bytes_client_to_server: self.bytes_client_to_server.load(Relaxed),
            bytes_server_to_client: self.bytes_server_to_client.load(Relaxed),
        }
    }

    pub(crate) fn accepted(&self) -> ActiveGuard<'_> {
        self.accepted.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        ActiveGuard(self)
    }

    pub(crate) fn refused_no_master(&self) {
        self.refused_no_master.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_backend_unreachable(&self) {
        self.refused_backend_unreachable.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_max_connections(&self) {
        self.accepted.fetch_add(1, Relaxed);
        self.refused_max_connections.fetch_add(1, Relaxed);
    }

    pub(crate) fn cut_on_master_change(&self) {
        self.cut_on_master_change.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_not_aligned(&self) {
        self.refused_not_aligned.fetch_add(1, Relaxed);
    }

    pub(crate) fn kill_softened(&self) {
        self.kills_softened.fetch_add(1, Relaxed);
    }

    pub(crate) fn command_refused(&self) {
        self.commands_refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn tls_session(&self) {
        self.tls_sessions.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_plaintext(&self) {
        self.refused_plaintext.fetch_add(1, Relaxed);
    }

    pub(crate) fn relayed_out(&self) {
        self.relayed_out.fetch_add(1, Relaxed);
    }

    pub(crate) fn relayed_in(&self) {
        self.relayed_in.fetch_add(1, Relaxed);
    }

    pub(crate) fn forwarded(&self, client_to_server: u64, server_to_client: u64) {
        self.bytes_client_to_server.fetch_add(client_to_server, Relaxed);
        self.bytes_server_to_client.fetch_add(server_to_client, Relaxed);
    }
}

/// Counts one connection as active until dropped.
pub(crate) struct ActiveGuard<'a>(&'a ProxyStats);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Relaxed);
    }
}
