//! Serves a fixed three-node [`ClusterView`] on an admin port and a metrics port, for trying the admin port with
//! the `mariadb` CLI and `curl` by hand:
//!
//! ```text
//! cargo run -p paxsql-admin-sql --example admin_demo -- 127.0.0.1:33190 127.0.0.1:33191
//! mariadb -h127.0.0.1 -P33190 -uadmin -pdemo -D paxsql
//! curl -s 127.0.0.1:33191/metrics
//! ```
//! Stops on Ctrl-C.

use paxsql_admin_sql::{AdminAuth, AdminSqlServer, ClusterView, MasterView, MemberView, Metrics, MetricsServer};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("paxsql_admin_sql=debug").init();
    let mut args = std::env::args().skip(1);
    let admin_addr = args.next().unwrap_or_else(|| "127.0.0.1:33190".into()).parse()?;
    let metrics_addr = args.next().unwrap_or_else(|| "127.0.0.1:33191".into()).parse()?;
    let members = (1..=3)
        .map(|id| MemberView {
            node_id: id,
            peer: format!("127.0.0.{id}:7100"),
            mariadb: Some(format!("127.0.0.{id}:3306")),
            role: Some(if id == 1 { "master" } else { "replica" }.into()),
            reachable: true,
            ..MemberView::default()
        })
        .collect();
    let view = ClusterView {
        node_id: 1,
        role: "master".into(),
        master_id: Some(1),
        master_version: 1,
        holds_lease: true,
        members,
        master: Some(MasterView {
            node_id: 1,
            master_version: 1,
            mariadb: Some("127.0.0.1:3306".into()),
            proxy_rw: None,
        }),
        ..ClusterView::default()
    };
    let (_view_tx, view) = tokio::sync::watch::channel(view);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let auth = AdminAuth { user: "admin".into(), password: "demo".into() };
    let admin = AdminSqlServer::bind(admin_addr, auth, view.clone()).await?;
    let http = MetricsServer::bind(metrics_addr, Metrics::new(1), view).await?;
    let admin_task = tokio::spawn(admin.run(stop.clone()));
    let http_task = tokio::spawn(http.run(stop));
    tokio::signal::ctrl_c().await?;
    stop_tx.send_replace(true);
    admin_task.await??;
    http_task.await??;
    Ok(())
}
