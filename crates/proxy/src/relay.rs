//! The master's end of a relay ([`paxsql_peer_transport::relay`]): another member's RW port hands a client to this
//! node's mariadbd through this node's peer port, instead of over a plaintext TCP connection to mariadbd.
//!
//! The dialling proxy has already read the client's login and filters every command (KILL of a waiting commit);
//! this end checks what only the master's own node knows for certain — that its mariadbd serves the term the
//! dialler routes to — before and after mariadbd greets, sends the PROXY header with the application client's
//! address, and from then on moves bytes both ways. When this node stops serving that term the connection is cut
//! at once on both sides (a reset towards mariadbd, so that a statement still queued is not executed by a master
//! that lost its lease).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use paxsql_peer_transport::{IncomingRelay, PortStream};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, info_span, Instrument as _};

use crate::forward::{open_tcp, ServerStream as _};
use crate::wire::ProxyHeader;
use crate::ProxyStats;

/// Where and how this node's relays reach its mariadbd.
#[derive(Clone, Debug)]
pub struct RelayTarget {
    /// The local mariadbd over TCP: a replica's refuses every TCP login (`require_secure_transport`), so a relay
    /// can only ever log in to a promoted master.
    pub mariadb: SocketAddr,
    /// Send the PROXY header with the application client's address (as the RW port does).
    pub proxy_protocol: bool,
    pub connect_timeout: Duration,
}

/// Serves the relays `relays` hands out until it closes or `shutdown` turns true; each one is connected to the
/// local mariadbd only while `serving` (the term this node's mariadbd serves as master) is the term it asks for.
pub async fn serve_relays(
    mut relays: mpsc::Receiver<IncomingRelay>,
    serving: watch::Receiver<Option<u64>>,
    target: RelayTarget,
    stats: Arc<ProxyStats>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let relay = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            relay = relays.recv() => match relay {
                Some(relay) => relay,
                None => return,
            },
        };
        let span = info_span!("relay_in", from = ?relay.member, remote = %relay.remote, client = %relay.request.client,
                              term = relay.request.master_version);
        let (serving, target, stats, shutdown) = (serving.clone(), target.clone(), stats.clone(), shutdown.clone());
        tokio::spawn(serve_one(relay, serving, target, stats, shutdown).instrument(span));
    }
}

async fn serve_one(
    relay: IncomingRelay,
    mut serving: watch::Receiver<Option<u64>>,
    target: RelayTarget,
    stats: Arc<ProxyStats>,
    mut shutdown: watch::Receiver<bool>,
) {
    let term = relay.request.master_version;
    let not_serving = |now: Option<u64>| match now {
        Some(v) => format!("this node serves as master in term {v}, not {term}"),
        None => format!("this node does not serve as master (asked for term {term})"),
    };
    let now = *serving.borrow_and_update();
    if now != Some(term) {
        let why = not_serving(now);
        debug!(why, "relay refused");
        relay.refuse(&why).await;
        return;
    }
    let header =
        target.proxy_protocol.then_some(ProxyHeader { source: relay.request.client, destination: relay.request.proxy });
    let (mut server, greeting) = match open_tcp(target.mariadb, target.connect_timeout, header).await {
        Ok(opened) => opened,
        Err(e) => {
            relay.refuse(&e.to_string()).await;
            return;
        }
    };
    // Checked again after the greeting, as the RW port does on its own node: the process that greeted serves the
    // term (or is already gone), never a demoted or recovering one.
    let now = *serving.borrow_and_update();
    if now != Some(term) {
        server.abort();
        relay.refuse(&not_serving(now)).await;
        return;
    }
    let mut client = match relay.accept().await {
        Ok(stream) => stream,
        Err(e) => {
            debug!(error = %e, "the dialler left before the relay was accepted");
            server.abort();
            return;
        }
    };
    stats.relayed_in();
    let outcome = tokio::select! {
        moved = pipe(&mut client, &mut server, &greeting) => Some(moved),
        _ = serving.wait_for(|now| *now != Some(term)) => None,
        _ = shutdown.wait_for(|stop| *stop) => None,
    };
    match outcome {
        Some(Ok((to_server, to_client))) => debug!(to_server, to_client, "relay closed"),
        Some(Err(e)) => debug!(error = %e, "relay ended"),
        None => {
            info!("cutting a relayed connection: this node no longer serves the term it was opened for");
            server.abort();
            client.abort();
        }
    }
}

/// The greeting already read, then both directions until both are closed.
async fn pipe(
    client: &mut PortStream,
    server: &mut tokio::net::TcpStream,
    greeting: &[u8],
) -> std::io::Result<(u64, u64)> {
    use tokio::io::AsyncWriteExt as _;
    client.write_all(greeting).await?;
    client.flush().await?;
    let (to_server, to_client) = tokio::io::copy_bidirectional(client, server).await?;
    Ok((to_server, to_client + greeting.len() as u64))
}
