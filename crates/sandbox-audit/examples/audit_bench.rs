//! Audit benchmark (not a test): records written per second by concurrent writers sharing one
//! SQLite file, and what the log adds to one execution (its `begin` + `finish`, p50/p99 in ms).
//! Usage: audit_bench [WRITERS] [RECORDS_PER_WRITER]
#![allow(clippy::print_stdout, missing_docs, clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::Instant;

use sandbox_audit::{AuditLog, Caps};
use sandbox_core::record::Recorder;
use sandbox_core::wire::FileContent;
use sandbox_core::{ExecutionRequest, ExecutionResult, Status};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (writers, per) = (args.first().copied().unwrap_or(16), args.get(1).copied().unwrap_or(200));
    let dir = tempfile::tempdir().expect("temp dir");
    let mut request = ExecutionRequest { profile: "python-default".into(), code: "import pandas as pd\n".repeat(20), ..Default::default() };
    request.files.insert("data.csv".into(), FileContent::Text("a,b\n1,2\n".repeat(100)));
    let start = Instant::now();
    let latencies: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (dir, request) = (dir.path(), request.clone());
                s.spawn(move || {
                    // One log per writer, as separate `sandbox` processes would open it.
                    let log = AuditLog::open(dir, Caps::default()).expect("open");
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
    let mut l = latencies;
    l.sort_by(f64::total_cmp);
    let pct = |p: f64| l[((l.len() - 1) as f64 * p) as usize];
    let records = l.len();
    println!("{writers} concurrent writers x {per} executions = {records} records ({} events) in {wall:.2} s", records * 2);
    println!("throughput: {:.0} records/s ({:.0} events/s), fsync'd, one SQLite file (WAL)", records as f64 / wall, 2.0 * records as f64 / wall);
    println!("audit cost per execution (begin + finish): p50 {:.2} ms, p99 {:.2} ms", pct(0.5), pct(0.99));
    let log = AuditLog::open(dir.path(), Caps::default()).expect("open");
    let report = log.store().verify().expect("verify");
    println!("verify: {} events, broken: {:?}", report.events, report.broken);
}
