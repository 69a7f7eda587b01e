//! The paxsql node: what `paxsql node --config node.toml` runs beside one unmodified mariadbd (docs/ARCHITECTURE.md §1).
//!
//! [`config`] reads and checks the TOML configuration; [`driver`] runs the global log — the pure
//! [`paxsql_global_log::GlobalLogNode`] over the raft-engine store and the peer transport — in a tokio task,
//! doing the disk and network work its outputs ask for, in the order they require. [`roles`] keeps the local
//! mariadbd in the role the log gives it, and [`rebuild`] replaces its data from a healthy member when it diverged.
//! [`switchover`] moves the master role to another member on an operator's request. [`dir_lock`] keeps a second
//! node process off a data directory.

mod admin_service;
mod binlog_retention;
mod capture;
pub mod config;
pub mod context;
pub mod dir_lock;
pub mod directory;
pub mod driver;
pub mod feed;
pub mod mariadb;
pub mod membership;
mod proxy_feeds;
pub mod rebuild;
pub mod roles;
pub mod runtime;
mod startup;
mod status;
pub mod switchover;
