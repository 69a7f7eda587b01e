//! The node's admin SQL port and its Prometheus metrics.
//!
//! Place in the system (docs/ARCHITECTURE.md §1, §7): beside the proxy, each node offers operators a MySQL-protocol admin
//! port (so the ordinary `mariadb` CLI works) showing the cluster as this node sees it, and an HTTP `/metrics`
//! endpoint. Both read one [`ClusterView`] that the node publishes on a `tokio::sync::watch` channel (the node
//! refreshes it every status tick); neither changes anything in the cluster.
//!
//! - [`AdminSqlServer`]: `SELECT * FROM paxsql.members`, `SELECT * FROM paxsql.master`, `SHOW STATUS [LIKE
//!   'pattern']`, plus the probes clients send at connect, over the shared MySQL wire crate
//!   ([`paxsql_mysql_wire`]): MariaDB's own error 1045 on a wrong password, one task per connection.
//! - [`Metrics`] / [`MetricsServer`]: gauges from the view, counters and a histogram the node drives.
//!
//! ```no_run
//! use paxsql_admin_sql::{AdminAuth, AdminSqlServer, ClusterView, Metrics, MetricsServer};
//! # async fn demo() -> Result<(), paxsql_admin_sql::AdminError> {
//! let (view_tx, view) = tokio::sync::watch::channel(ClusterView::default());
//! let (stop_tx, stop) = tokio::sync::watch::channel(false);
//! let auth = AdminAuth { user: "admin".into(), password: "secret".into() };
//! let admin = AdminSqlServer::bind("127.0.0.1:6034".parse().unwrap(), auth, view.clone()).await?;
//! let metrics = Metrics::new(1);
//! let http = MetricsServer::bind("127.0.0.1:9104".parse().unwrap(), metrics.clone(), view).await?;
//! let admin_task = tokio::spawn(admin.run(stop.clone()));
//! let http_task = tokio::spawn(http.run(stop));
//! view_tx.send_replace(ClusterView { node_id: 1, role: "master".into(), ..ClusterView::default() });
//! // ... at shutdown:
//! stop_tx.send_replace(true);
//! let _ = (admin_task.await, http_task.await);
//! # Ok(()) }
//! ```

mod error;
mod metrics;
mod query;
mod server;
mod view;

pub use error::AdminError;
pub use metrics::{Metrics, MetricsServer, PaxosRoundPart, PeerServerCounts, ServedBinlogFigures, WriteHop};
pub use server::{AdminAuth, AdminSqlServer};
pub use view::{ClusterView, MasterView, MemberView, PaxosView};
