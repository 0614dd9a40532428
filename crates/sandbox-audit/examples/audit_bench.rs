//! Audit benchmark (not a test): records written per second by concurrent writers sharing one
//! SQLite file, and what the log adds to one execution (its `begin` + `finish`, p50/p99 in ms).
//! Usage: audit_bench [WRITERS] [RECORDS_PER_WRITER]
//!
//! With `AUDIT_BENCH_POSTGRES=URL` the writers share that PostgreSQL database instead (each its
//! own connection, as nodes would), through a TCP relay on loopback that counts the client's
//! round trips and, with `AUDIT_BENCH_DELAY_US=N`, holds every chunk N µs each way (a network
//! between the node and the database: 250 µs each way is a 0.5 ms round trip).
#![allow(clippy::print_stdout, missing_docs, clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_audit::{AuditLog, Caps};
use sandbox_core::record::Recorder;
use sandbox_core::wire::FileContent;
use sandbox_core::{ExecutionRequest, ExecutionResult, Status};

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

/// A TCP relay on 127.0.0.1 to `to`: each chunk is held `delay` before it is passed on, and each
/// chunk the client sends after a reply (a round trip) is counted. Returns its port.
fn relay(to: (String, u16), delay: Duration, round_trips: Arc<AtomicU64>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
    let port = listener.local_addr().expect("relay address").port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let server = TcpStream::connect((to.0.as_str(), to.1)).expect("connect to PostgreSQL");
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            // Set by the server side's thread when a reply passed: the client's next chunk is a new round trip.
            let replied = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let pipe = move |mut from: TcpStream, mut to: TcpStream, client_side: bool, replied: Arc<std::sync::atomic::AtomicBool>, trips: Arc<AtomicU64>| {
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if client_side && replied.swap(false, Ordering::Relaxed) {
                        trips.fetch_add(1, Ordering::Relaxed);
                    }
                    if !client_side {
                        replied.store(true, Ordering::Relaxed);
                    }
                    std::thread::sleep(delay);
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            };
            let (c2, s2) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
            let (r1, r2, t1, t2) = (replied.clone(), replied, round_trips.clone(), round_trips.clone());
            std::thread::spawn(move || pipe(client, server, true, r1, t1));
            std::thread::spawn(move || pipe(s2, c2, false, r2, t2));
        }
    });
    port
}
