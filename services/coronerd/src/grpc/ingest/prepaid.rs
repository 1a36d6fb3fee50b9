//! The ingest budget reserved before a batch is decoded.
//!
//! tonic buffers a whole message and decodes it before the handler sees it, so a budget reserved
//! by the handler came too late: eight streams of 60 MiB batches peaked at 1.9 GB against a
//! 256 MiB budget. [`Prepaid`] wraps the Ingest service and, on a `ShipLogs` stream, reads the
//! 5-byte gRPC frame header of every message as its bytes go by: before it lets the message's
//! bytes through, it reserves twice their length (the decoded batch, see `batch_bytes`) from the
//! stream's job's share, the stream's share and the server's budget, in that order. Until the
//! reservation is granted it does not read on, so HTTP/2 flow control stops the agent.
//!
//! The handler takes the reservations in message order ([`Prepay::take`]), tops one up when the
//! decoded batch turns out larger and the budget has room ([`Prepay::top_up`], never waiting:
//! the stream's next messages may hold its share), and names the stream's job ([`Prepay::set_job`]) so the next
//! messages count against that job's share.

use super::budget::{IngestBudget, Reservation, Share};
use bytes::Bytes;
use coroner_model::JobId;
use http_body::Frame;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codegen::http;

/// The method whose messages are prepaid.
const SHIP_LOGS: &str = "/coroner.v1.Ingest/ShipLogs";

/// One `ShipLogs` stream's reservations, shared by its gate and its handler.
pub struct Prepay {
    budget: Arc<IngestBudget>,
    stream: Share,
    job: Mutex<Option<Share>>,
    ready: Mutex<VecDeque<Reservation>>,
}

impl Prepay {
    pub fn new(budget: Arc<IngestBudget>) -> Arc<Prepay> {
        Arc::new(Prepay { stream: budget.stream_share(), budget, job: Mutex::default(), ready: Mutex::default() })
    }

    /// Reserves `bytes` from the job's share (once known), the stream's and the server's.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.budget.reserve_in(job.as_ref(), &self.stream, bytes).await
    }

    /// More of the server's budget for a batch that decoded larger than its reservation, if free
    /// now. Never waits: the stream's later messages, already reserved, may hold its share, and
    /// they are taken only after this one.
    pub fn top_up(&self, bytes: u64) -> Option<Reservation> {
        self.budget.try_reserve(bytes)
    }

    /// The next message's reservation, made before it was decoded.
    pub fn take(&self) -> Option<Reservation> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }

    /// The stream's batches belong to `job`: its next messages count against the job's share.
    pub fn set_job(&self, job: &JobId) {
        let mut slot = self.job.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(self.budget.job_share(job));
        }
    }
}

/// The Ingest service with `ShipLogs` messages prepaid.
#[derive(Clone)]
pub struct Prepaid<S> {
    inner: S,
    budget: Arc<IngestBudget>,
}

impl<S> Prepaid<S> {
    pub fn new(inner: S, budget: Arc<IngestBudget>) -> Self {
        Prepaid { inner, budget }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Prepaid<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tonic::codegen::Service<http::Request<Body>> for Prepaid<S>
where
    S: tonic::codegen::Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        if req.uri().path() == SHIP_LOGS {
            let prepay = Prepay::new(self.budget.clone());
            req.extensions_mut().insert(prepay.clone());
            req = req.map(|body| Body::new(Gate::new(body, prepay)));
        }
        self.inner.call(req)
    }
}

type Pending = Pin<Box<dyn Future<Output = Reservation> + Send>>;

/// A request body that holds each gRPC message's bytes back until they are reserved.
///
/// Data is passed on up to the end of each message header, then held until that message is
/// reserved: the previous message's last bytes always pass first, so a message waiting for room
/// never holds back the one before it (whose commit makes the room).
struct Gate {
    inner: Body,
    prepay: Arc<Prepay>,
    /// The frame header being read (5 bytes: compression flag, big-endian length).
    header: [u8; 5],
    header_len: usize,
    /// Payload bytes of the current message still to pass.
    payload_left: u64,
    /// Lengths of messages whose headers passed and that are not reserved yet.
    to_reserve: VecDeque<u64>,
    pending: Option<Pending>,
    /// Received bytes not passed on yet.
    rest: Option<Bytes>,
}

impl Gate {
    fn new(inner: Body, prepay: Arc<Prepay>) -> Gate {
        Gate { inner, prepay, header: [0; 5], header_len: 0, payload_left: 0, to_reserve: VecDeque::new(), pending: None, rest: None }
    }

    /// Reads `data` up to the end of the first message header in it (queueing that message's
    /// length to reserve): how many bytes may pass now.
    fn scan(&mut self, data: &[u8]) -> usize {
        let mut at = 0;
        while at < data.len() {
            if self.payload_left > 0 {
                let n = self.payload_left.min((data.len() - at) as u64) as usize;
                self.payload_left -= n as u64;
                at += n;
                continue;
            }
            let n = (5 - self.header_len).min(data.len() - at);
            self.header[self.header_len..self.header_len + n].copy_from_slice(&data[at..at + n]);
            self.header_len += n;
            at += n;
            if self.header_len == 5 {
                let len = u64::from(u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]));
                self.header_len = 0;
                self.payload_left = len;
                self.to_reserve.push_back(len);
                return at;
            }
        }
        at
    }
}

impl http_body::Body for Gate {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        loop {
            if let Some(pending) = this.pending.as_mut() {
                let reservation = std::task::ready!(pending.as_mut().poll(cx));
                this.prepay.ready.lock().unwrap_or_else(|p| p.into_inner()).push_back(reservation);
                this.pending = None;
            }
            if let Some(len) = this.to_reserve.pop_front() {
                let prepay = this.prepay.clone();
                // The decoded batch costs about twice its encoding (line structs, see `batch_bytes`).
                this.pending = Some(Box::pin(async move { prepay.reserve(len.saturating_mul(2)).await }));
                continue;
            }
            if let Some(mut rest) = this.rest.take() {
                let pass = this.scan(&rest);
                let now = rest.split_to(pass);
                if !rest.is_empty() {
                    this.rest = Some(rest);
                }
                if !now.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(now))));
                }
                continue;
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.rest = Some(data),
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
                other => return Poll::Ready(other),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.to_reserve.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_headers_are_found_across_frame_boundaries() {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let budget = rt.block_on(async { Arc::new(IngestBudget::new(64 << 20, Arc::default())) });
        let mut gate = Gate::new(Body::empty(), Prepay::new(budget));
        let mut wire = Vec::new();
        for len in [3u32, 0, 70_000] {
            wire.push(0);
            wire.extend_from_slice(&len.to_be_bytes());
            wire.extend(std::iter::repeat_n(9u8, len as usize));
        }
        // Fed in pieces, as frames arrive: each stops right after a message header.
        let mut passed = Vec::new();
        for piece in wire.chunks(4) {
            let mut at = 0;
            while at < piece.len() {
                let n = gate.scan(&piece[at..]);
                passed.push(n);
                at += n;
            }
        }
        assert_eq!(gate.to_reserve, [3, 0, 70_000]);
        assert_eq!((gate.header_len, gate.payload_left), (0, 0));
        // The header of the 70,000-byte message ends at byte 5+3+5+5 = 18: a scan stops there.
        let mut fresh = Gate::new(Body::empty(), gate.prepay.clone());
        assert_eq!(fresh.scan(&wire), 5);
        assert_eq!(fresh.scan(&wire[5..]), 3 + 5);
        assert_eq!(fresh.scan(&wire[13..]), 5);
        assert_eq!(fresh.scan(&wire[18..]), 70_000);
    }
}
