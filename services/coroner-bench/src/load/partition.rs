//! A network partition for a few agents: a TCP relay between them and the server that can stop
//! forwarding without closing anything (packets vanish, as when a switch or a host's link dies),
//! then heal by resetting every connection it held.
//!
//! While cut, new connections are accepted and held without being forwarded, like a peer whose
//! SYN-ACKs arrive but nothing after. The agents have to notice on their own (HTTP/2 keepalive
//! pings, request timeouts), and the server has to release what their streams held.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Partition {
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
}

impl Partition {
    /// Relays `127.0.0.1:<new port>` to `upstream` until dropped.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Arc<Partition>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let p = Arc::new(Partition { addr, cut });
        let weak = Arc::downgrade(&p);
        tokio::spawn(async move {
            while let Ok((agent, _)) = listener.accept().await {
                if weak.strong_count() == 0 {
                    return;
                }
                let _ = agent.set_nodelay(true);
                tokio::spawn(relay(agent, upstream, cut_rx.clone()));
            }
        });
        Ok(p)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops forwarding; connections stay open and silent.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// Forwards again; the connections held during the cut are reset.
    pub fn heal(&self) {
        let _ = self.cut.send(false);
    }
}

async fn relay(mut agent: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        // Accepted during the cut: hold it silent until the cut heals, then reset it.
        let _ = cut.wait_for(|c| !*c).await;
        reset(agent);
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        reset(agent);
        return;
    };
    let _ = server.set_nodelay(true);
    let mut watch_cut = cut.clone();
    let was_cut = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut agent, &mut server) => false,
        _ = watch_cut.wait_for(|c| *c) => true,
    };
    if was_cut {
        // Cut: stop moving bytes but keep both sockets open until the cut heals.
        let _ = cut.wait_for(|c| !*c).await;
        reset(agent);
        reset(server);
    } else {
        let _ = agent.shutdown().await;
        let _ = server.shutdown().await;
    }
}

/// Closes with RST (SO_LINGER 0), as a peer that forgot the connection answers.
fn reset(s: TcpStream) {
    // A zero linger cannot block on drop (the deprecation is about non-zero ones).
    #[allow(deprecated)]
    let _ = s.set_linger(Some(std::time::Duration::ZERO));
    drop(s);
}
