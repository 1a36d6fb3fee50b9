//! OTLP/gRPC: `opentelemetry.proto.collector.logs.v1.LogsService/Export` on the gRPC port, so an
//! OpenTelemetry Collector's `otlp` exporter (or any OTLP exporter) can ship a job's logs. The
//! mapping, the retry rule and the commit are `crate::otlp`'s, shared with OTLP/HTTP.

use crate::otlp::OtlpReceiver;
use coroner_model::now_ns;
use opentelemetry_proto::tonic::collector::logs::v1::{logs_service_server::LogsService, ExportLogsServiceRequest, ExportLogsServiceResponse};
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsServiceServer;

pub struct OtlpLogs {
    receiver: Arc<OtlpReceiver>,
}

impl OtlpLogs {
    pub fn new(receiver: Arc<OtlpReceiver>) -> Self {
        OtlpLogs { receiver }
    }
}

#[tonic::async_trait]
impl LogsService for OtlpLogs {
    async fn export(&self, req: Request<ExportLogsServiceRequest>) -> Result<Response<ExportLogsServiceResponse>, Status> {
        Ok(Response::new(self.receiver.export(req.get_ref(), now_ns()).await?))
    }
}
