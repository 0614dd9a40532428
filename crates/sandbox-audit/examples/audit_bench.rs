//! Audit benchmark (not a test): records written per second by concurrent writers sharing one
//! SQLite file, and what the log adds to one execution (its `begin` + `finish`, p50/p99 in ms).
//! Usage: audit_bench [WRITERS] [RECORDS_PER_WRITER]
//!
//! With `AUDIT_BENCH_POSTGRES=URL` the writers share that PostgreSQL database instead (each its
//! own connection, as nodes would), through a TCP relay on loopback that counts the client's
//! round trips and, with `AUDIT_BENCH_DELAY_US=N`, holds every chunk N µs each way (a network
//! between the node and the database: 250 µs each way is a 0.5 ms round trip).
#![allow(clippy::print_stdout, missing_docs, clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_audit::{AuditLog, Caps};
use sandbox_core::record::Recorder;
use sandbox_core::wire::FileContent;
use sandbox_core::{ExecutionRequest, ExecutionResult, Status};

#[path = "common/relay.rs"]
mod relay;
use relay::relay;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (writers, per) = (args.first().copied().unwrap_or(16), args.get(1).copied().unwrap_or(200));
    let dir = tempfile::tempdir().expect("temp dir");
    let round_trips = Arc::new(AtomicU64::new(0));
    let url = std::env::var("AUDIT_BENCH_POSTGRES").ok().map(|url| {
        let delay = Duration::from_micros(std::env::var("AUDIT_BENCH_DELAY_US").ok().and_then(|d| d.parse().ok()).unwrap_or(0));
        let config: postgres::Config = url.parse().expect("a PostgreSQL URL");
        let host = match &config.get_hosts()[0] {
            postgres::config::Host::Tcp(h) => h.clone(),
            postgres::config::Host::Unix(_) => panic!("AUDIT_BENCH_POSTGRES: a TCP host, not a socket"),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let relay = relay((host, port), delay, round_trips.clone());
        let db = config.get_dbname().map(|d| format!(" dbname={d}")).unwrap_or_default();
        let user = config.get_user().map(|u| format!(" user={u}")).unwrap_or_default();
        println!("PostgreSQL through a relay holding each chunk {} µs each way", delay.as_micros());
        format!("host=127.0.0.1 port={relay}{db}{user}")
    });
    let mut request = ExecutionRequest { profile: "python-default".into(), code: "import pandas as pd\n".repeat(20), ..Default::default() };
    request.files.insert("data.csv".into(), FileContent::Text("a,b\n1,2\n".repeat(100)));
    let start = Instant::now();
    let latencies: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (dir, request, url) = (dir.path(), request.clone(), url.as_deref());
                s.spawn(move || {
                    // One log per writer, as separate `sandbox` processes would open it.
                    let log = AuditLog::open_url(url, dir, Caps::default()).expect("open");
                    (0..per)
                        .map(|i| {
                            let id = format!("w{w}-{i}");
                            let t = Instant::now();
                            log.begin(&id, "bench", &request, None).expect("begin");
                            let result = ExecutionResult {
                                execution_id: id,
                                status: Status::Ok,
                                profile: "python-default".into(),
                                stdout: "x".repeat(2000),
                                ..Default::default()
                            };
                            log.finish("bench", &result).expect("finish");
                            t.elapsed().as_secs_f64() * 1000.0
                        })
                        .collect::<Vec<f64>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("writer")).collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let trips = round_trips.load(Ordering::Relaxed);
    let mut l = latencies;
    l.sort_by(f64::total_cmp);
    let pct = |p: f64| l[((l.len() - 1) as f64 * p) as usize];
    let records = l.len();
    println!("{writers} concurrent writers x {per} executions = {records} records ({} events) in {wall:.2} s", records * 2);
    let store = if url.is_some() { "one PostgreSQL database" } else { "one SQLite file (WAL)" };
    println!("throughput: {:.0} records/s ({:.0} events/s), fsync'd, {store}", records as f64 / wall, 2.0 * records as f64 / wall);
    println!("audit cost per execution (begin + finish): p50 {:.2} ms, p99 {:.2} ms", pct(0.5), pct(0.99));
    if url.is_some() {
        println!("round trips per execution (begin + finish, connections' set-up included): {:.1}", trips as f64 / records as f64);
    }
    let log = AuditLog::open_url(url.as_deref(), dir.path(), Caps::default()).expect("open");
    let report = log.store().verify().expect("verify");
    println!("verify: {} events, broken: {:?}", report.events, report.broken);
}
