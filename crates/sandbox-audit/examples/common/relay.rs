//! A counting TCP relay between a PostgreSQL client and its server, shared by the audit
//! benchmark (`examples/audit_bench.rs`) and the store suite's round-trip test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A TCP relay on 127.0.0.1 to `to`: each chunk is held `delay` before it is passed on, and each
/// chunk the client sends after a reply (a round trip) is counted. Returns its port.
pub fn relay(to: (String, u16), delay: Duration, round_trips: Arc<AtomicU64>) -> u16 {
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
