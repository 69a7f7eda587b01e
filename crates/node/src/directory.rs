//! Where each node is reached. The config names the initial members (and nodes added since, under `peers`); the
//! log records the addresses of nodes added later, or moved (`RecordMember`). The log's record wins. Routes to the
//! master, donors for a rebuild and the status all ask here, so the rule is written once.

use std::collections::BTreeMap;

use paxsql_global_log::MemberAddress;
use paxsql_paxos::NodeId;

use crate::config::NodeConfig;
use crate::driver::NodeStatus;

/// The config's addresses, by node, looked up together with the log's record in a [`NodeStatus`].
#[derive(Clone, Debug, Default)]
pub struct Directory {
    configured: BTreeMap<NodeId, MemberAddress>,
}

impl Directory {
    pub fn from_config(cfg: &NodeConfig) -> Directory {
        let configured = cfg
            .known_members()
            .map(|m| {
                let mariadb = m.mariadb.map(|a| a.to_string()).unwrap_or_default();
                (m.id, MemberAddress { peer: m.peer.to_string(), mariadb })
            })
            .collect();
        Directory { configured }
    }

    /// Where node `id` is reached: the log's record, else the config's (`mariadb` empty when neither names it).
    pub fn address<'a>(&'a self, st: &'a NodeStatus, id: NodeId) -> Option<&'a MemberAddress> {
        st.addresses.iter().find(|(n, _)| *n == id).map(|(_, a)| a).or_else(|| self.configured.get(&id))
    }

    /// Every node either source names, by id.
    pub fn all<'a>(&'a self, st: &'a NodeStatus) -> BTreeMap<NodeId, &'a MemberAddress> {
        let mut all: BTreeMap<NodeId, &MemberAddress> = self.configured.iter().map(|(id, a)| (*id, a)).collect();
        all.extend(st.addresses.iter().map(|(id, a)| (*id, a)));
        all
    }
}
