//! Bank transfers in a loop through a paxsql cluster, printing each failover the client rides out.
//!
//! ```text
//! cargo run -p paxsql-client --example transfer -- \
//!     --endpoints 127.0.0.1:24004,127.0.0.1:24014,127.0.0.1:24024 --user app --password '...' --database app
//! ```
//! (`paxsql cluster status --dir D --json` shows the application account.) Kill the master's node meanwhile
//! (`kill -9`): the loop pauses, then goes on; the sum of all balances never changes, except that a transfer
//! reported as "outcome unknown" may or may not have happened (the sum holds either way: a transfer is one
//! transaction).

use std::time::{Duration, Instant};

use paxsql_client::{Client, Error};

const ACCOUNTS: u64 = 10;
const OPENING_BALANCE: i64 = 1000;

struct Args {
    endpoints: Vec<String>,
    user: String,
    password: String,
    database: String,
    transfers: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        endpoints: Vec::new(),
        user: "app".into(),
        password: String::new(),
        database: "app".into(),
        transfers: u64::MAX,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--endpoints" => args.endpoints = value()?.split(',').map(str::to_string).collect(),
            "--user" => args.user = value()?,
            "--password" => args.password = value()?,
            "--database" => args.database = value()?,
            "--transfers" => args.transfers = value()?.parse().map_err(|e| format!("--transfers: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.endpoints.is_empty() {
        return Err("--endpoints host:port,host:port,... is required".into());
    }
    Ok(args)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| {
        format!("{e}\nusage: transfer --endpoints A,B,C [--user U] [--password P] [--database D] [--transfers N]")
    })?;
    let client = Client::builder()
        .endpoints(args.endpoints)
        .user(args.user)
        .password(args.password)
        .database(args.database)
        .build()?;
    client.execute("CREATE TABLE IF NOT EXISTS account (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)", ()).await?;
    for id in 1..=ACCOUNTS {
        client.execute("INSERT IGNORE INTO account VALUES (?, ?)", (id, OPENING_BALANCE)).await?;
    }
    println!("transferring between {ACCOUNTS} accounts via {}", client.active_endpoint().unwrap_or_default());

    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut done, mut unknown) = (0u64, 0u64);
    let mut failovers = client.failovers();
    for n in 0..args.transfers {
        // xorshift: enough randomness for picking accounts, no extra dependency.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let from = seed % ACCOUNTS + 1;
        let to = (from + seed / ACCOUNTS % (ACCOUNTS - 1)) % ACCOUNTS + 1;
        let amount = (seed % 50 + 1) as i64;
        let started = Instant::now();
        let result = client
            .run_transaction(async |tx| {
                let balance: Option<i64> =
                    tx.exec_first("SELECT balance FROM account WHERE id = ? FOR UPDATE", (from,)).await?;
                if balance.unwrap_or(0) < amount {
                    return Ok(false);
                }
                tx.exec_drop("UPDATE account SET balance = balance - ? WHERE id = ?", (amount, from)).await?;
                tx.exec_drop("UPDATE account SET balance = balance + ? WHERE id = ?", (amount, to)).await?;
                Ok(true)
            })
            .await;
        match result {
            Ok(_) => done += 1,
            Err(Error::OutcomeUnknown { endpoint, during, .. }) => {
                unknown += 1;
                println!("transfer {n}: outcome unknown (connection to {endpoint} lost after {during} was sent)");
            }
            Err(e) => return Err(e.into()),
        }
        if client.failovers() != failovers {
            failovers = client.failovers();
            println!(
                "failover #{failovers} ridden out: master now via {}, transfer {n} took {} ms",
                client.active_endpoint().unwrap_or_default(),
                started.elapsed().as_millis()
            );
        }
        if n % 500 == 0 {
            let total: Option<i64> = client.query_first("SELECT CAST(SUM(balance) AS SIGNED) FROM account", ()).await?;
            println!("{done} transfers, {unknown} unknown, total balance {total:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}
