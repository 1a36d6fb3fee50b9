//! The connection plumbing the shipper, the replay of orphaned spools, heartbeats and leftover
//! spools share: a channel to one coronerd of the list, a session on it, the `ShipLogs` stream
//! whose batches go out as encoded bytes, and the redirect to the instance that owns the job.
//!
//! Every step is bounded in time (2 s to connect, 5 s to open a session or the stream), so a
//! server that accepts connections and then says nothing costs one attempt, not the agent.

use crate::wire::{Outgoing, ShipCodec};
use coroner_proto::auth::{Channel, ClientAuth};
use coroner_proto::v1;
use coroner_proto::v1::ingest_client::IngestClient;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// One open connection: a session and the sending half of its `ShipLogs` stream.
pub struct Conn {
    pub client: IngestClient<Channel>,
    pub session_id: String,
    pub resume_from: HashMap<String, u64>,
    /// Where this session numbers streams `resume_from` does not name.
    pub seq_offset: u64,
    pub tx: mpsc::Sender<Outgoing>,
}

/// What the server says on a connection's `ShipLogs` stream.
pub enum AckEvent {
    Ack(v1::BatchAck),
    Closed(Option<tonic::Status>),
}

/// A connection and its acknowledgements, as [`connect`] opens them.
pub type Connected = (Conn, mpsc::Receiver<AckEvent>);

/// Why [`connect`] did not connect.
#[derive(Debug)]
pub enum ConnectError {
    /// The server does not own the job: reconnect to the owner at this address.
    Redirect(String),
    Failed(String),
}

impl From<String> for ConnectError {
    fn from(s: String) -> Self {
        ConnectError::Failed(s)
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Redirect(owner) => write!(f, "the job is owned by the coronerd at {owner}"),
            ConnectError::Failed(s) => f.write_str(s),
        }
    }
}

/// A reconnect delay of between half and all of `backoff`, at random: thousands of agents that
/// lost one coronerd together do not all come back in the same instant.
pub fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(0.5 + 0.5 * fastrand::f64())
}

/// The addresses of a server list (`--server`: one URL, or several separated by commas).
pub fn servers(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// A channel to `server` (TLS for `https://`, the token on every request).
pub async fn open_channel(server: &str, auth: &ClientAuth) -> Result<Channel, String> {
    let endpoint = auth.endpoint(server)?.connect_timeout(Duration::from_secs(2)).tcp_nodelay(true);
    let channel = endpoint.connect().await.map_err(|e| format!("connect to {server}: {e}"))?;
    Ok(auth.channel(channel))
}

/// Opens a session and a `ShipLogs` stream on `channel`, following one redirect to the owner
/// of the job when `server` does not own it.
pub async fn connect_or_follow(channel: Channel, server: &str, auth: &ClientAuth, request: v1::OpenSessionRequest) -> Result<Connected, String> {
    match connect(channel, request.clone()).await {
        Err(ConnectError::Redirect(owner)) => {
            tracing::info!("{server} does not own this job; connecting to its owner at {owner}");
            connect(open_channel(&owner, auth).await?, request).await.map_err(|e| e.to_string())
        }
        other => other.map_err(|e| e.to_string()),
    }
}

/// Opens a session and a `ShipLogs` stream.
pub async fn connect(channel: Channel, request: v1::OpenSessionRequest) -> Result<Connected, ConnectError> {
    let mut client = IngestClient::new(channel.clone());
    let open = tokio::time::timeout(Duration::from_secs(5), client.open_session(request))
        .await
        .map_err(|_| "open session: timed out".to_string())?
        .map_err(open_refused)?
        .into_inner();
    // Sent batches leave this channel as fast as the connection takes them: a few suffice.
    let (tx, rx) = mpsc::channel::<Outgoing>(8);
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let acks = tokio::time::timeout(Duration::from_secs(5), ship_logs(channel, stream))
        .await
        .map_err(|_| "ship logs: timed out".to_string())?
        .map_err(|s| format!("ship logs: {}", s.message()))?
        .into_inner();
    let conn = Conn { client, session_id: open.session_id, resume_from: open.resume_from, seq_offset: open.seq_offset, tx };
    Ok((conn, forward_acks(acks)))
}

fn open_refused(s: tonic::Status) -> ConnectError {
    let owner = s.metadata().get("coroner-owner").and_then(|v| v.to_str().ok());
    match owner {
        Some(o) if s.code() == tonic::Code::FailedPrecondition => ConnectError::Redirect(o.to_string()),
        _ => ConnectError::Failed(format!("open session: {}", s.message())),
    }
}

/// Reads the stream's acknowledgements into a channel until it closes (the close is the last
/// event).
fn forward_acks(mut acks: tonic::Streaming<v1::BatchAck>) -> mpsc::Receiver<AckEvent> {
    let (ack_tx, ack_rx) = mpsc::channel(256);
    tokio::spawn(async move {
        loop {
            let event = match acks.message().await {
                Ok(Some(ack)) => AckEvent::Ack(ack),
                Ok(None) => AckEvent::Closed(None),
                Err(status) => AckEvent::Closed(Some(status)),
            };
            let closed = matches!(event, AckEvent::Closed(_));
            if ack_tx.send(event).await.is_err() || closed {
                break;
            }
        }
    });
    ack_rx
}

/// `Ingest.ShipLogs` with batches sent as encoded bytes (the generated client would encode
/// `LogBatch` messages again).
async fn ship_logs(
    channel: Channel,
    batches: impl tokio_stream::Stream<Item = Outgoing> + Send + 'static,
) -> Result<tonic::Response<tonic::Streaming<v1::BatchAck>>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("the connection is not ready: {e}")))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/coroner.v1.Ingest/ShipLogs");
    let mut request = tonic::Request::new(batches);
    request.extensions_mut().insert(tonic::GrpcMethod::new("coroner.v1.Ingest", "ShipLogs"));
    grpc.streaming(request, path, ShipCodec).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delays_are_spread_over_the_upper_half_of_the_backoff() {
        let b = Duration::from_secs(4);
        let d: Vec<Duration> = (0..200).map(|_| jittered(b)).collect();
        assert!(d.iter().all(|d| *d >= b / 2 && *d <= b));
        let distinct: std::collections::HashSet<_> = d.iter().collect();
        assert!(distinct.len() > 150, "delays differ from agent to agent");
    }

    #[test]
    fn a_server_list_is_split_on_commas() {
        assert_eq!(servers(" http://a:1, ,http://b:2 "), vec!["http://a:1", "http://b:2"]);
        assert!(servers("").is_empty());
    }
}
