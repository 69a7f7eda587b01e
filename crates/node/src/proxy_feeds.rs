//! What the node tells its proxy, from the global log and the role controller: where writes go, whether the local
//! server may serve reads, which accounts the read-only port refuses, and whether this node's mariadbd serves the
//! term a write route names.

use std::sync::Arc;
use std::time::Duration;

use paxsql_proxy::{Backend, LocalServer, Route};
use tokio::sync::watch;

use crate::context::{LocalRole, RoleContext};
use crate::directory::Directory;
use crate::driver::NodeStatus;

/// Where the proxy sends writes, from what this node knows. A stale master must never serve (docs/ARCHITECTURE.md §5): the
/// local server only while it serves the current term under a held lease, another member's only while this node
/// has seen that master's lease renewed less than a lease ago — and then through that member's relay, whose node
/// accepts only while it serves the term itself.
fn route_for(
    node_id: u64,
    local: std::net::SocketAddr,
    directory: &Directory,
    st: &NodeStatus,
    serving: Option<u64>,
) -> Route {
    if st.master_id == 0 {
        return Route::no_master("no master elected yet (election in progress)");
    }
    if st.master_id == node_id {
        return match serving {
            Some(v) if st.holds_lease && v == st.master_version => {
                Route::Master { node_id, master_version: v, backend: Backend::Tcp(local) }
            }
            _ => Route::no_master("this node is taking over as master (election in progress)"),
        };
    }
    if !st.master_lease_seen {
        return Route::no_master(
            "the master's lease is not current here (election in progress, or this node is cut off)",
        );
    }
    let addr = match directory.address(st, st.master_id).map(|a| a.peer.parse()) {
        Some(Ok(addr)) => Some(addr),
        Some(Err(_)) => {
            return Route::no_master(format!("node {} is master but its recorded address is not usable", st.master_id))
        }
        None => None,
    };
    match addr {
        Some(addr) => Route::Master {
            node_id: st.master_id,
            master_version: st.master_version,
            backend: Backend::Relay { node_id: st.master_id, addr },
        },
        None => Route::no_master(format!("node {} is master but is not a configured member", st.master_id)),
    }
}

/// Publishes [`route_for`]'s answer to the proxy whenever it changes.
pub(crate) async fn publish_routes(
    node_id: u64,
    local: std::net::SocketAddr,
    directory: Directory,
    mut status: watch::Receiver<NodeStatus>,
    mut serving: watch::Receiver<Option<u64>>,
    routes: watch::Sender<Route>,
) {
    loop {
        let route = route_for(node_id, local, &directory, &status.borrow_and_update(), *serving.borrow_and_update());
        routes.send_if_modified(|r| {
            if *r == route {
                return false;
            }
            tracing::info!(?route, "proxy route");
            *r = route;
            true
        });
        tokio::select! {
            _ = status.changed() => {}
            _ = serving.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// The RO port's view of the local database: aligned only as a replica of the global log or as its master.
pub(crate) fn local_server(mut role: watch::Receiver<LocalRole>) -> watch::Receiver<LocalServer> {
    let view = |r: &LocalRole| match r {
        LocalRole::Replica | LocalRole::Master(_) => LocalServer::Aligned,
        other => LocalServer::NotAligned(match other.detail() {
            d if d.is_empty() => other.name().to_string(),
            d => format!("{}: {d}", other.name()),
        }),
    };
    let (tx, rx) = watch::channel(view(&role.borrow_and_update()));
    tokio::spawn(async move {
        while role.changed().await.is_ok() {
            let next = view(&role.borrow_and_update());
            tx.send_if_modified(|s| std::mem::replace(s, next.clone()) != next);
        }
    });
    rx
}

/// The accounts the RO port refuses, read from the local server every second while it runs (a GRANT reaches a
/// replica through the log like any other statement). Until the first read the list is empty.
pub(crate) fn privileged_accounts(
    ctx: Arc<RoleContext>,
    mut shutdown: watch::Receiver<bool>,
) -> paxsql_proxy::PrivilegedAccounts {
    let (tx, rx) = watch::channel(Arc::new(std::collections::BTreeSet::new()));
    tokio::spawn(async move {
        loop {
            let serving = matches!(*ctx.local.borrow(), LocalRole::Replica | LocalRole::Master(_));
            if serving {
                match ctx.mariadb.lock().await.privileged_users().await {
                    Ok(names) => {
                        tx.send_if_modified(|cur| {
                            let changed = **cur != names;
                            if changed {
                                tracing::info!(accounts = ?names, "accounts the read-only port refuses (READ ONLY ADMIN)");
                                *cur = Arc::new(names);
                            }
                            changed
                        });
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot read the privileged accounts"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
    rx
}

/// The RW port's confirmation that this node's mariadbd serves the term its route names, asked after the greeting
/// (a master on another node is asked by its own node, through the relay).
pub(crate) fn master_check(node_id: u64, serving: watch::Receiver<Option<u64>>) -> paxsql_proxy::MasterCheck {
    Arc::new(move |master: u64, master_version: u64| {
        let yes = master == node_id && *serving.borrow() == Some(master_version);
        Box::pin(std::future::ready(yes))
    })
}
