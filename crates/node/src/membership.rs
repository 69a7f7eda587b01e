//! Membership changes an operator asks of the serving master over the admin service: where a node is reached
//! (recorded in the log, so every member connects to it) and who votes (one member added or removed, one value in
//! the log). Both are proposals: the answer says the value is on its way, and the caller watches the members'
//! status for the outcome. Deciding *when* a node may start to vote (once its database is a caught-up replica) is
//! the operator tool's part: `paxsql member add` waits for it.

use std::net::SocketAddr;
use std::sync::mpsc::SyncSender;

use paxsql_global_log::{GlobalLogError, MemberAddress};
use paxsql_paxos::Membership;
use paxsql_peer_transport::pb::MembershipReply;
use tokio::sync::{oneshot, watch};
use tonic::Status;

use crate::driver::send_input;
use crate::driver::{Input, NodeStatus};

/// The driver, as the admin service reaches it for membership changes.
#[derive(Clone)]
pub struct MembershipDesk {
    pub inbox: SyncSender<Input>,
    pub status: watch::Receiver<NodeStatus>,
}

impl MembershipDesk {
    /// Records `node`'s addresses in the log.
    pub async fn record(&self, node: u64, peer: &str, mariadb: &str) -> Result<MembershipReply, Status> {
        if node == 0 {
            return Err(Status::invalid_argument("node id 0 is reserved"));
        }
        for (what, address) in [("peer", peer), ("mariadb", mariadb)] {
            address.parse::<SocketAddr>().map_err(|e| {
                Status::invalid_argument(format!("{what} address {address:?} is not host:port with an IP: {e}"))
            })?;
        }
        let address = MemberAddress { peer: peer.to_string(), mariadb: mariadb.to_string() };
        let reply = self.ask(|reply| Input::RecordMember { node, address, reply }).await?;
        tracing::info!(node, peer, mariadb, "operator: recording a member's addresses");
        Ok(reply)
    }

    /// Adds or removes one voting member.
    pub async fn change(&self, add: u64, remove: u64) -> Result<MembershipReply, Status> {
        let st = self.status.borrow().clone();
        let mut next: std::collections::BTreeSet<u64> = st.members.iter().copied().collect();
        match (add, remove) {
            (0, 0) | (1.., 1..) => {
                return Err(Status::invalid_argument("name exactly one node to add or to remove"));
            }
            (node, 0) => {
                if next.contains(&node) {
                    return Err(Status::already_exists(format!("node {node} is a member already")));
                }
                // A member nobody can reach would count in every majority from now on.
                if node != st.node_id && !st.addresses.iter().any(|(n, _)| *n == node) {
                    return Err(Status::failed_precondition(format!(
                        "no address is recorded for node {node}: record it first (RecordMember)"
                    )));
                }
                next.insert(node);
            }
            (0, node) => {
                if !next.contains(&node) {
                    return Err(Status::not_found(format!("node {node} is not a member")));
                }
                if node == st.node_id {
                    return Err(Status::failed_precondition(format!(
                        "node {node} is the master: switch over to another member first"
                    )));
                }
                if next.len() <= 2 {
                    return Err(Status::failed_precondition(format!(
                        "the cluster has {} members: removing one would leave no majority to survive a failure",
                        next.len()
                    )));
                }
                next.remove(&node);
            }
        }
        let next = Membership::new(next);
        let members: Vec<u64> = next.members.iter().copied().collect();
        let reply = self.ask(|reply| Input::ChangeMembership { next, reply }).await?;
        tracing::info!(?members, "operator: membership change proposed");
        Ok(reply)
    }

    async fn ask(
        &self,
        input: impl FnOnce(oneshot::Sender<Result<(), GlobalLogError>>) -> Input,
    ) -> Result<MembershipReply, Status> {
        let (reply, answer) = oneshot::channel();
        let st = self.status.borrow().clone();
        send_input(&self.inbox, input(reply)).await.map_err(|()| Status::unavailable("the node is stopping"))?;
        match answer.await {
            Ok(Ok(())) => Ok(MembershipReply { members: st.members, master_version: st.master_version }),
            Ok(Err(e @ GlobalLogError::NotMaster { .. })) | Ok(Err(e @ GlobalLogError::LeaseExpired)) => {
                Err(Status::failed_precondition(e.to_string()))
            }
            Ok(Err(e)) => Err(Status::aborted(e.to_string())),
            Err(_) => Err(Status::unavailable("the node is stopping")),
        }
    }
}
