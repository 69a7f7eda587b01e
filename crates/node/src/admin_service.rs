//! The admin service on the peer port (gRPC, with the peer port's cluster authentication): status for operators'
//! tools, a copy of the local database for a member being rebuilt, and operators' switchovers and membership
//! changes, carried out by the parts that own them (the role controller, the global log).

use std::sync::Arc;
use std::time::Duration;

use paxsql_peer_transport::pb::admin_server::Admin;
use paxsql_peer_transport::pb::{
    BackupChunk, BackupRequest, ChangeMembershipRequest, MembershipReply, RecordMemberRequest, ServingReply,
    ServingRequest, StatusReply, StatusRequest, SwitchoverReply, SwitchoverRequest,
};
use tokio::sync::{mpsc, watch};

use crate::context::LocalRole;
use crate::membership::MembershipDesk;
use crate::rebuild::BackupDonor;

/// The admin service on the peer port: `Status` (the latest status, as [`crate::status`] publishes it) and
/// `Backup` (a copy of the local database for a member being rebuilt, only while the local database is an aligned
/// replica).
pub(crate) struct AdminService {
    status: watch::Receiver<StatusReply>,
    donor: watch::Receiver<Option<Donor>>,
    serving: watch::Receiver<Option<u64>>,
    switchover: mpsc::Sender<crate::switchover::SwitchoverRequest>,
    membership: watch::Receiver<Option<MembershipDesk>>,
}

/// Who gives copies of the local database, and what that database is doing.
type Donor = (Arc<BackupDonor>, watch::Receiver<LocalRole>);

/// What the parts that start after the admin service give it: the admin service binds with the peer port, first.
pub(crate) struct AdminFeeds {
    /// The latest status (the status publisher).
    pub status: watch::Sender<StatusReply>,
    /// The donor of copies, once the local database has its role context.
    pub donor: watch::Sender<Option<Donor>>,
    /// The global log's membership desk, once the driver runs.
    pub membership: watch::Sender<Option<MembershipDesk>>,
}

impl AdminService {
    /// `serving` is which term the local mariadbd serves as master (the role controller's), `switchover` where
    /// operators' switchovers go (the role controller carries them out: it owns the local database).
    pub(crate) fn new(
        serving: watch::Receiver<Option<u64>>,
        switchover: mpsc::Sender<crate::switchover::SwitchoverRequest>,
    ) -> (AdminService, AdminFeeds) {
        let (status_tx, status) = watch::channel(StatusReply::default());
        let (donor_tx, donor) = watch::channel(None);
        let (membership_tx, membership) = watch::channel(None);
        let service = AdminService { status, donor, serving, switchover, membership };
        (service, AdminFeeds { status: status_tx, donor: donor_tx, membership: membership_tx })
    }

    /// Operators' changes come with the operator's certificate (or, without TLS, the cluster secret), never over
    /// another member's link, and only the serving master carries them out.
    fn operator_at_master<T>(&self, request: &tonic::Request<T>, what: &str) -> Result<(), tonic::Status> {
        if let Some(paxsql_peer_transport::identity::PeerIdentity::Member(id)) =
            paxsql_peer_transport::identity::caller(request)
        {
            tracing::warn!(caller = id, what, "refused an operator's request made with a member's certificate");
            return Err(tonic::Status::permission_denied(format!("{what} is asked with the operator's certificate")));
        }
        if self.serving.borrow().is_none() {
            let st = self.status.borrow();
            return Err(tonic::Status::failed_precondition(format!(
                "node {} does not serve as master; it sees node {} as master (term {})",
                st.node_id, st.master_id, st.master_version
            )));
        }
        Ok(())
    }

    fn membership_desk(&self) -> Result<MembershipDesk, tonic::Status> {
        self.membership.borrow().clone().ok_or_else(|| tonic::Status::unavailable("the node is starting"))
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn switchover(
        &self,
        request: tonic::Request<SwitchoverRequest>,
    ) -> Result<tonic::Response<SwitchoverReply>, tonic::Status> {
        use crate::switchover::{SwitchoverError, SwitchoverRequest as Asked};
        self.operator_at_master(&request, "a switchover")?;
        let req = request.into_inner();
        let drain_timeout =
            Duration::from_millis(if req.drain_timeout_ms == 0 { 5_000 } else { req.drain_timeout_ms.min(600_000) });
        let (reply, answer) = tokio::sync::oneshot::channel();
        let asked = Asked {
            to: Some(req.to).filter(|t| *t != 0),
            drain_timeout,
            deadline: std::time::Instant::now() + Duration::from_secs(2),
            reply,
        };
        if self.switchover.try_send(asked).is_err() {
            return Err(tonic::Status::unavailable("another switchover is under way"));
        }
        let done = match tokio::time::timeout(drain_timeout + Duration::from_secs(10), answer).await {
            Ok(Ok(Ok(done))) => done,
            Ok(Ok(Err(e @ SwitchoverError::NotMaster { .. }))) => {
                return Err(tonic::Status::failed_precondition(e.to_string()))
            }
            Ok(Ok(Err(e))) => return Err(tonic::Status::aborted(e.to_string())),
            Ok(Err(_)) => return Err(tonic::Status::unavailable("the node is stopping")),
            Err(_) => return Err(tonic::Status::deadline_exceeded("no answer from the role controller")),
        };
        Ok(tonic::Response::new(SwitchoverReply {
            successor: done.successor,
            master_version: done.master_version,
            drained_gtid: done.drained_gtid,
            drain_ms: done.drain.as_millis() as u64,
        }))
    }

    async fn record_member(
        &self,
        request: tonic::Request<RecordMemberRequest>,
    ) -> Result<tonic::Response<MembershipReply>, tonic::Status> {
        self.operator_at_master(&request, "a membership change")?;
        let req = request.into_inner();
        let reply = self.membership_desk()?.record(req.node_id, &req.peer, &req.mariadb).await?;
        Ok(tonic::Response::new(reply))
    }

    async fn change_membership(
        &self,
        request: tonic::Request<ChangeMembershipRequest>,
    ) -> Result<tonic::Response<MembershipReply>, tonic::Status> {
        self.operator_at_master(&request, "a membership change")?;
        let req = request.into_inner();
        let reply = self.membership_desk()?.change(req.add, req.remove).await?;
        Ok(tonic::Response::new(reply))
    }

    async fn status(&self, _: tonic::Request<StatusRequest>) -> Result<tonic::Response<StatusReply>, tonic::Status> {
        Ok(tonic::Response::new(self.status.borrow().clone()))
    }

    async fn serving(
        &self,
        request: tonic::Request<ServingRequest>,
    ) -> Result<tonic::Response<ServingReply>, tonic::Status> {
        let asked = request.into_inner().master_version;
        Ok(tonic::Response::new(ServingReply { serving: *self.serving.borrow() == Some(asked) }))
    }

    type BackupStream = tokio_stream::wrappers::ReceiverStream<Result<BackupChunk, tonic::Status>>;

    async fn backup(
        &self,
        request: tonic::Request<BackupRequest>,
    ) -> Result<tonic::Response<Self::BackupStream>, tonic::Status> {
        let Some((donor, local)) = self.donor.borrow().clone() else {
            return Err(tonic::Status::unavailable("this node is still starting"));
        };
        let role = local.borrow().clone();
        let from_master = request.get_ref().from_master && matches!(role, LocalRole::Master(_));
        if role != LocalRole::Replica && !from_master {
            return Err(tonic::Status::failed_precondition(format!(
                "only an aligned replica (or, when none can, the master) gives copies; this node's database is {}",
                role.name()
            )));
        }
        if from_master {
            tracing::warn!(requester = request.get_ref().requester, "no replica can give a copy: the master sends one");
        }
        // With TLS a copy of the database goes only to the member that asks for it, as its certificate proves:
        // an operator's certificate (status, watch) or another member's cannot fetch one.
        let requester = request.get_ref().requester;
        if let Some(who) = paxsql_peer_transport::identity::caller(&request) {
            if who != paxsql_peer_transport::identity::PeerIdentity::Member(requester) {
                tracing::warn!(requester, ?who, "refused a database copy: the certificate does not name the requester");
                return Err(tonic::Status::permission_denied(
                    "a database copy goes only to the member that asks for it, as its certificate names it",
                ));
            }
        }
        let rx = donor.start(requester)?;
        Ok(tonic::Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}
