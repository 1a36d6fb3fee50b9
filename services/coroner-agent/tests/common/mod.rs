//! What the agent's test binaries share: a fake coronerd's Ingest service served on a port it
//! bound itself.

use coroner_proto::v1::ingest_server::{Ingest, IngestServer};

/// Serves `fake` (a clone of the test's handle on what it received) on 127.0.0.1, port 0;
/// answers its URL.
pub async fn serve_ingest<S: Ingest>(fake: S) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake server");
    let addr = listener.local_addr().expect("the fake server's address");
    let svc = IngestServer::new(fake);
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tonic::transport::Server::builder().add_service(svc).serve_with_incoming(incoming).await.expect("the fake server");
    });
    format!("http://{addr}")
}
