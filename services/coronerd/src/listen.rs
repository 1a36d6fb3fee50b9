//! The listening sockets. A job's agents connect together: 16,384 ranks started by one launcher
//! open their connections within a second or two, far more than the 1,024 pending connections
//! `tokio::net::TcpListener::bind` asks the kernel to queue. Connections beyond the queue are
//! dropped at the handshake and retried by TCP after 1, 3, 7 s..., so a large job's start took
//! minutes of retransmissions. [`bind`] asks for [`BACKLOG`]; the kernel caps it at
//! `net.core.somaxconn` (4,096 on current Linux), which an operator running the largest jobs
//! raises (docs/LOAD.md).

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpSocket};

/// Pending connections asked of the kernel (capped by `net.core.somaxconn`).
pub const BACKLOG: u32 = 16_384;

/// A listener on `addr`, as `TcpListener::bind` makes one (address reuse on Unix), with a queue
/// of [`BACKLOG`] pending connections.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listener_bound_here_accepts_more_connections_than_tokio_queues_by_default() {
        // The kernel caps the queue at somaxconn: below tokio's 1,024 there is nothing to show.
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        if somaxconn < 1_200 {
            eprintln!("net.core.somaxconn is {somaxconn}: the kernel queues no more than tokio's default here");
            return;
        }
        crate::fd_limit::raise_open_file_limit().expect("the open-file limit raised");
        let listener = bind("127.0.0.1:0".parse().expect("an address")).expect("bound");
        let addr = listener.local_addr().expect("its address");
        // Connections complete their handshake in the kernel's queue before any accept: with
        // tokio's default queue of 1,024, the 1,026th would wait for a SYN retransmission (1 s).
        let mut held = Vec::new();
        for _ in 0..1_100 {
            let connect = tokio::time::timeout(std::time::Duration::from_millis(500), tokio::net::TcpStream::connect(addr));
            held.push(connect.await.expect("connected without waiting for a retransmission").expect("connected"));
        }
        let (_accepted, _) = listener.accept().await.expect("accepted");
    }
}
