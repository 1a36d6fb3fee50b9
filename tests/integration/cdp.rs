//! A thin Chrome DevTools Protocol client for the browser tests: headless Debian `chromium` with
//! `--remote-debugging-port=0`, reached over its websocket (`tungstenite`, blocking). Enough to
//! open pages, run JavaScript in them, wait for what they show, and take screenshots; each call
//! has a deadline, so a wedged browser fails the test instead of hanging it.

use serde_json::{json, Value};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// How long one protocol call may take on a loaded machine.
const CALL_LIMIT: Duration = Duration::from_secs(60);

pub struct Browser {
    child: Child,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

/// One tab, attached in flat mode (commands carry its session id).
pub struct Tab {
    session: String,
}

impl Browser {
    /// Starts headless `chromium` and connects to it.
    pub fn launch(binary: &Path) -> Browser {
        let profile = tempfile::tempdir().expect("tempdir");
        let child = Command::new(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "about:blank",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        // Chromium writes its port and websocket path there once it listens.
        let file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + CALL_LIMIT;
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break (port.trim().to_string(), path.trim().to_string());
                }
            }
            assert!(Instant::now() < deadline, "chromium did not open its DevTools port within {CALL_LIMIT:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let stream = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect to chromium");
        let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream).expect("the DevTools websocket");
        // From now on a read returns now and then, so every call can keep its deadline.
        ws.get_ref().set_read_timeout(Some(Duration::from_millis(500))).expect("read timeout");
        Browser { child, ws, next_id: 1, _profile: profile }
    }

    /// Sends `method` (to `tab`, or to the browser) and waits for its answer's `result`.
    pub fn call(&mut self, tab: Option<&Tab>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(t) = tab {
            msg["sessionId"] = json!(t.session);
        }
        self.ws.send(Message::text(msg.to_string())).unwrap_or_else(|e| panic!("send {method}: {e}"));
        let deadline = Instant::now() + CALL_LIMIT;
        loop {
            assert!(Instant::now() < deadline, "{method}: no answer from chromium within {CALL_LIMIT:?}");
            let text = match self.ws.read() {
                Ok(Message::Text(t)) => t.as_str().to_string(),
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e)) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => panic!("{method}: the DevTools connection broke: {e}"),
            };
            let v: Value = serde_json::from_str(&text).expect("DevTools sends JSON");
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method} failed: {}", v["error"]);
                return v["result"].clone();
            }
        }
    }

    /// A new tab of `width` x `height` CSS pixels, showing `url`.
    pub fn open(&mut self, url: &str, width: u32, height: u32) -> Tab {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(None, "Target.attachToTarget", json!({ "targetId": target["targetId"], "flatten": true }));
        let tab = Tab { session: attached["sessionId"].as_str().expect("a session id").to_string() };
        self.call(Some(&tab), "Emulation.setDeviceMetricsOverride", json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }));
        self.navigate(&tab, url);
        tab
    }

    pub fn navigate(&mut self, tab: &Tab, url: &str) {
        self.call(Some(tab), "Page.navigate", json!({ "url": url }));
    }

    /// The value of `expression` in the tab (promises awaited); panics on a JavaScript error.
    pub fn eval(&mut self, tab: &Tab, expression: &str) -> Value {
        let r = self.call(Some(tab), "Runtime.evaluate", json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }));
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {}", r["exceptionDetails"]);
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy (then answers its value and how long it took), or
    /// panics after `limit` with `what` and the last value.
    pub fn wait_for(&mut self, tab: &Tab, what: &str, expression: &str, limit: Duration) -> (Value, Duration) {
        let start = Instant::now();
        // A page still loading has no document to evaluate in yet: errors count as "not yet".
        let guarded = format!("(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()");
        loop {
            let v = self.eval(tab, &guarded);
            let truthy = !(v.is_null() || v == false || v == 0 || v == "" || v == json!([]));
            if truthy {
                return (v, start.elapsed());
            }
            assert!(start.elapsed() < limit, "{what}: not there after {limit:?} (last: {v})");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Brings the tab to the front: a background tab draws no frames (a screenshot would wait).
    pub fn front(&mut self, tab: &Tab) {
        self.call(Some(tab), "Page.bringToFront", json!({}));
    }

    /// A PNG of what the tab shows.
    pub fn screenshot(&mut self, tab: &Tab, path: &Path) {
        self.front(tab);
        let r = self.call(Some(tab), "Page.captureScreenshot", json!({ "format": "png", "captureBeyondViewport": false }));
        let data = r["data"].as_str().expect("image data");
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD.decode(data).expect("DevTools sends base64");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
