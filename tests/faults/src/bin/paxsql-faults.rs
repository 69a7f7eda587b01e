//! `paxsql-faults`: the fault-injection suite against a real local cluster. `--ci` runs one schedule per fault
//! kind; `--seed S --schedules N` runs N random schedules; `--seed S --only I` replays schedule I of seed S.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use paxsql_fault_suite::nemesis::{ci_schedules, random_schedule};
use paxsql_fault_suite::runner::{run_suite, SuiteConfig, WorkloadMix};

#[derive(Parser)]
#[command(name = "paxsql-faults", about = "Jepsen-style fault injection against a local paxsql cluster")]
struct Args {
    /// Run the fixed CI list (one schedule per fault kind).
    #[arg(long)]
    ci: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many random schedules.
    #[arg(long, default_value_t = 5)]
    schedules: u64,
    /// Replay only this schedule index of --seed (with --ci: only this one of the CI list).
    #[arg(long)]
    only: Option<u64>,
    /// Ports base..base+30 for the cluster (inside its own namespace). Below the kernel's ephemeral range
    /// (32768–60999): there a client's outgoing connection can hold a port while its node is down, and the
    /// restarted node cannot listen (seen in a long run: the metrics port, 20 restarts in a row).
    #[arg(long, default_value_t = 24000)]
    base_port: u16,
    /// Where the cluster directory goes (kept when a schedule fails).
    #[arg(long, default_value = "/tmp/paxsql-faults")]
    work_dir: PathBuf,
    /// Clients per workload: bank,register,append.
    #[arg(long, default_value = "2,3,2", value_delimiter = ',', num_args = 3)]
    clients: Vec<u64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let schedules: Vec<_> = if args.ci {
        ci_schedules()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| args.only.is_none_or(|only| only == *i as u64))
            .map(|(i, s)| (s, format!("ci{i}"), i as u64))
            .collect()
    } else {
        let indices: Vec<u64> = match args.only {
            Some(i) => vec![i],
            None => (0..args.schedules).collect(),
        };
        indices
            .into_iter()
            .map(|i| (random_schedule(args.seed, i), format!("r{}_{i}", args.seed), args.seed ^ i))
            .collect()
    };
    println!("paxsql-faults: {} schedule(s), seed {}", schedules.len(), args.seed);
    for (s, suffix, _) in &schedules {
        println!("  {suffix}: {s}");
    }
    let cfg = SuiteConfig {
        netns: format!("pxfaults-{}", args.base_port),
        work_dir: args.work_dir.clone(),
        base_port: args.base_port,
        mix: WorkloadMix { bank: args.clients[0], register: args.clients[1], append: args.clients[2] },
    };
    let (seed, ci, base, dir) = (args.seed, args.ci, args.base_port, args.work_dir.display().to_string());
    let result = run_suite(cfg, schedules, move |r| {
        println!("{r}");
        for i in &r.info {
            println!("    info: {i}");
        }
        for p in &r.problems {
            println!("    PROBLEM: {p}");
        }
        if !r.passed() {
            let how = if ci {
                "--ci".to_string()
            } else {
                let index = r.name.rsplit('-').next().unwrap_or("0");
                format!("--seed {seed} --only {index}")
            };
            println!("    reproduce: paxsql-faults {how} --base-port {base} --work-dir {dir}");
        }
    });
    match result {
        Ok(reports) => {
            let failed = reports.iter().filter(|r| !r.passed()).count();
            println!("{} schedule(s), {failed} failed", reports.len());
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("paxsql-faults: {e}");
            ExitCode::FAILURE
        }
    }
}
