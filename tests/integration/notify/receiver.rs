//! A webhook receiver for the tests: an HTTP/1.1 server on a port it bound itself (port 0) that
//! records every request and answers each path from a script (`503, 503, 200`, then 200 for
//! good), one connection at a time, closing each after its answer.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {}", self.path, String::from_utf8_lossy(&self.body)))
    }
}

pub struct Receiver {
    pub url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// A receiver answering `script[path]` in turn to requests on `path` (200 once it runs out, and for other paths).
    pub fn start(script: &[(&str, &[u16])]) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut script: HashMap<String, Vec<u16>> = script.iter().map(|(p, s)| (p.to_string(), s.iter().rev().copied().collect())).collect();
        let record = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let Some(req) = read_request(&mut conn) else { continue };
                let status = script.get_mut(&req.path).and_then(Vec::pop).unwrap_or(200);
                record.lock().expect("lock").push(req);
                let _ = write!(conn, "HTTP/1.1 {status} Scripted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        });
        Receiver { url, got }
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    /// Waits (at most 30 s) until `check` holds on what was received; what was received then.
    pub fn until(&self, what: &str, check: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.received();
            if check(&got) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: received {:#?}",
                got.iter().map(|r| (r.path.clone(), String::from_utf8_lossy(&r.body).into_owned())).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn read_request(conn: &mut std::net::TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    let len: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Received { path, headers, body })
}
