use super::*;
use crate::view::{MasterView, MemberView, PaxosView};

fn view() -> ClusterView {
    ClusterView {
        node_id: 2,
        role: "replica".into(),
        master_id: Some(1),
        master_version: 7,
        holds_lease: false,
        lease_remaining_ms: None,
        applied_instance: 120,
        applied_gtid: Some("0-1001-40".into()),
        global_last_gtid: "0-1001-42".into(),
        lag_transactions: Some(2),
        paxos: PaxosView { chosen_up_to: 121, proposals_in_flight: 0, promised_ballot: "(3, 1)".into() },
        members: vec![
            MemberView {
                node_id: 1,
                peer: "10.0.0.1:7100".into(),
                mariadb: Some("10.0.0.1:3306".into()),
                proxy_rw: Some("10.0.0.1:6033".into()),
                proxy_ro: None,
                admin: None,
                role: Some("master".into()),
                reachable: true,
            },
            MemberView { node_id: 2, peer: "10.0.0.2:7100".into(), reachable: false, ..Default::default() },
        ],
        master: Some(MasterView {
            node_id: 1,
            master_version: 7,
            mariadb: Some("10.0.0.1:3306".into()),
            proxy_rw: Some("10.0.0.1:6033".into()),
        }),
    }
}

fn session() -> SessionInfo {
    SessionInfo {
        user: "admin".into(),
        peer_host: "127.0.0.1".into(),
        connection_id: 9,
        database: None,
        server_version: "10.11.0-paxsql-admin".into(),
    }
}

fn rows(reply: Reply) -> Table {
    match reply {
        Reply::Rows(t) => t,
        other => panic!("expected rows, got {other:?}"),
    }
}

#[test]
fn accepted_forms_are_case_and_whitespace_tolerant() {
    for sql in [
        "SELECT * FROM paxsql.members",
        "select * from paxsql.members;",
        "  Select\n*\tFROM `paxsql`.`members` ; ; ",
        "SELECT * FROM members",
        "/* probe */ SELECT * FROM paxsql . members -- trailing comment",
    ] {
        assert_eq!(parse(sql), Some(Statement::Members), "{sql:?}");
    }
    assert_eq!(parse("select * from PAXSQL.MASTER"), Some(Statement::Master));
    assert_eq!(parse("show status"), Some(Statement::ShowStatus { like: None }));
    assert_eq!(parse("SHOW GLOBAL STATUS LIKE 'lag%'"), Some(Statement::ShowStatus { like: Some("lag%".into()) }));
    assert_eq!(
        parse("show session status like \"paxos\\_%\""),
        Some(Statement::ShowStatus { like: Some("paxos\\_%".into()) })
    );
    assert_eq!(parse("SHOW DATABASES"), Some(Statement::ShowDatabases));
    assert_eq!(parse("show full tables from paxsql"), Some(Statement::ShowTables));
    assert_eq!(parse("use `paxsql`"), Some(Statement::Use("paxsql".into())));
    assert_eq!(parse("SET NAMES utf8mb4"), Some(Statement::Set));
    assert_eq!(parse(" ; "), Some(Statement::Empty));
}

#[test]
fn unsupported_forms_are_refused() {
    for sql in [
        "SELECT * FROM paxsql.members WHERE node_id = 1",
        "SELECT * FROM mysql.user",
        "SELECT * FROM other.members",
        "DROP TABLE paxsql.members",
        "SHOW STATUS WHERE Value > 1",
        "SHOW STATUS LIKE lag",
        "SHOW TABLES FROM mysql",
        "SELECT",
        "SELECT 1,",
        "SELECT NOW()",
        "SELECT 'unterminated",
        "SELECT 1 /* unterminated",
        "INSERT INTO paxsql.members VALUES (1)",
        "SET",
    ] {
        assert_eq!(parse(sql), None, "{sql:?}");
        match answer(sql, &view(), &session()) {
            Reply::Error { kind, message } => {
                assert_eq!(kind as u16, 1064, "{sql:?}");
                assert!(message.contains("unsupported query, try"), "{message}");
            }
            other => panic!("{sql:?} answered {other:?}"),
        }
    }
}

#[test]
fn members_and_master_show_the_view() {
    let t = rows(answer("SELECT * FROM paxsql.members", &view(), &session()));
    let names: Vec<_> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["node_id", "peer", "mariadb", "proxy_rw", "proxy_ro", "admin", "role", "reachable"]);
    assert_eq!(t.rows.len(), 2);
    assert_eq!(
        t.rows[0],
        vec![
            Cell::Int(1),
            Cell::Text("10.0.0.1:7100".into()),
            Cell::Text("10.0.0.1:3306".into()),
            Cell::Text("10.0.0.1:6033".into()),
            Cell::Null,
            Cell::Null,
            Cell::Text("master".into()),
            Cell::Int(1),
        ]
    );
    assert_eq!(t.rows[1][7], Cell::Int(0));

    let t = rows(answer("select * from paxsql.master", &view(), &session()));
    assert_eq!(
        t.rows,
        vec![vec![Cell::Int(1), Cell::Int(7), Cell::Text("10.0.0.1:3306".into()), Cell::Text("10.0.0.1:6033".into())]]
    );
    let no_master = ClusterView { master: None, master_id: None, ..view() };
    let t = rows(answer("select * from paxsql.master", &no_master, &session()));
    assert_eq!(t.columns.len(), 4);
    assert!(t.rows.is_empty());
}

#[test]
fn show_status_filters_with_like() {
    let t = rows(answer("SHOW STATUS", &view(), &session()));
    let get = |t: &Table, name: &str| {
        t.rows.iter().find(|r| r[0] == Cell::Text(name.into())).map(|r| r[1].clone()).expect(name)
    };
    assert_eq!(get(&t, "lag_transactions"), Cell::Text("2".into()));
    assert_eq!(get(&t, "applied_gtid"), Cell::Text("0-1001-40".into()));
    assert_eq!(get(&t, "global_last_gtid"), Cell::Text("0-1001-42".into()));
    assert_eq!(get(&t, "holds_lease"), Cell::Text("OFF".into()));
    assert_eq!(get(&t, "lease_remaining_ms"), Cell::Null);
    assert_eq!(get(&t, "paxos_chosen_up_to"), Cell::Text("121".into()));
    assert_eq!(get(&t, "members_reachable"), Cell::Text("1".into()));

    let t = rows(answer("show status like 'PAXOS%'", &view(), &session()));
    let names: Vec<_> = t.rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        names,
        ["paxos_chosen_up_to", "paxos_proposals_in_flight", "paxos_promised_ballot"].map(|n| Cell::Text(n.into()))
    );
    let t = rows(answer("show status like 'nothing%'", &view(), &session()));
    assert!(t.rows.is_empty());
}

#[test]
fn connect_probes_are_answered() {
    let t = rows(answer("select @@version_comment limit 1", &view(), &session()));
    assert_eq!(t.columns, vec![("@@version_comment".to_string(), ColumnKind::Text)]);
    assert_eq!(t.rows, vec![vec![Cell::Text("paxsql admin port of node 2".into())]]);

    // mysql_async at connect.
    let t = rows(answer("SELECT @@max_allowed_packet,@@wait_timeout,@@socket", &view(), &session()));
    assert_eq!(t.rows, vec![vec![Cell::Int(1 << 20), Cell::Int(28_800), Cell::Null]]);

    let t = rows(answer("SELECT 1", &view(), &session()));
    assert_eq!(t.columns, vec![("1".to_string(), ColumnKind::Int)]);
    assert_eq!(t.rows, vec![vec![Cell::Int(1)]]);

    let t = rows(answer("select DATABASE(), USER() limit 1", &view(), &session()));
    assert_eq!(t.columns[0].0, "DATABASE()");
    assert_eq!(t.rows, vec![vec![Cell::Null, Cell::Text("admin@127.0.0.1".into())]]);

    let t = rows(answer("SELECT @@SESSION.autocommit AS ac, 'x' y, CONNECTION_ID()", &view(), &session()));
    let names: Vec<_> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ac", "y", "CONNECTION_ID()"]);
    assert_eq!(t.rows, vec![vec![Cell::Int(1), Cell::Text("x".into()), Cell::Int(9)]]);

    match answer("SELECT @@no_such_variable", &view(), &session()) {
        Reply::Error { kind, message } => {
            assert_eq!(kind as u16, 1193);
            assert!(message.contains("no_such_variable"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn use_accepts_only_our_database() {
    assert_eq!(answer("USE paxsql", &view(), &session()), Reply::Use("paxsql".into()));
    match answer("use mysql", &view(), &session()) {
        Reply::Error { kind, .. } => assert_eq!(kind as u16, 1049),
        other => panic!("{other:?}"),
    }
}

#[test]
fn tokenizer_never_panics_on_odd_input() {
    // Multi-byte characters, lone quotes, NULs, stray `@@`: each is an answer (usually an error), never a panic.
    for sql in ["SELECT 'é' ü", "@@", "SELECT @@", "'", "`", "\0", "SELECT ''''", "SELECT 99999999999999999999999", "—"]
    {
        let _ = answer(sql, &view(), &session());
    }
    assert_eq!(
        parse("SELECT 'it''s'").map(|s| format!("{s:?}")),
        Some(r#"Select([SelectItem { expr: Text("it's"), name: "'it''s'" }])"#.into())
    );
}
