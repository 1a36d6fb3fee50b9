//! OTLP/HTTP: `POST /v1/logs` on the HTTP port, beside OTLP/gRPC, for the exporters that post
//! (the Collector's `otlphttp`, Vector's `opentelemetry` sink, SDKs with `http/protobuf` or
//! `http/json`). What the OTLP specification asks of a server, and how it is met:
//! - the body is an `ExportLogsServiceRequest`, `application/x-protobuf` or `application/json`
//!   (OTLP's JSON mapping: lowerCamelCase keys, 64-bit integers as strings or numbers, hex trace
//!   ids, unknown fields ignored; several objects one per line, as Vector's newline-delimited
//!   framing posts, are one request); any other type is a `415`;
//! - `Content-Encoding: gzip` bodies are inflated, up to [`MAX_BODY_BYTES`] either way (`413`
//!   beyond); any other encoding is a `415`;
//! - success and partial success are `200` with an `ExportLogsServiceResponse` in the request's
//!   content type (`partial_success` set only when records were rejected);
//! - failures carry a `google.rpc.Status` in the request's content type: `400` for what cannot be
//!   decoded or is invalid (never retried), `429`/`503` for limits and a server that is stopping
//!   (retried by the exporter), `500` for coronerd's own failures; a job another instance owns
//!   is a `307` to the same path there (exporters resend the body).
//!
//! It needs the write token, as OTLP/gRPC does (`auth.rs`).

use super::AppState;
use crate::error::ServiceError;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;
use std::io::Read;

/// The most bytes a request body may have, compressed or inflated (as OTLP/gRPC's message limit).
pub const MAX_BODY_BYTES: usize = 64 << 20;

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// How a request's body is encoded, and so its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => PROTOBUF,
            Encoding::Json => JSON,
        }
    }
}

/// `google.rpc.Status`, the body of every OTLP/HTTP failure (`details` left out).
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// A failure: its HTTP status, gRPC code (`Status.code`) and message.
#[derive(Debug)]
struct Failure(StatusCode, i32, String);

impl Failure {
    fn bad_data(message: String) -> Failure {
        Failure(StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument as i32, message)
    }

    fn unsupported(message: String) -> Failure {
        Failure(StatusCode::UNSUPPORTED_MEDIA_TYPE, tonic::Code::InvalidArgument as i32, message)
    }
}

impl From<ServiceError> for Failure {
    fn from(e: ServiceError) -> Failure {
        let (status, code) = match &e {
            ServiceError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument),
            ServiceError::NotFound(_) => (StatusCode::NOT_FOUND, tonic::Code::NotFound),
            ServiceError::FailedPrecondition(_) | ServiceError::Elsewhere(_) => (StatusCode::CONFLICT, tonic::Code::FailedPrecondition),
            ServiceError::ResourceExhausted(_) => (StatusCode::TOO_MANY_REQUESTS, tonic::Code::ResourceExhausted),
            ServiceError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, tonic::Code::Unavailable),
            ServiceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, tonic::Code::Internal),
        };
        Failure(status, code as i32, super::public_message(&e))
    }
}

/// The encoding a `Content-Type` names (parameters such as `charset` aside).
fn encoding_of(headers: &HeaderMap) -> Result<Encoding, Failure> {
    let raw = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = raw.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match media.as_str() {
        PROTOBUF => Ok(Encoding::Protobuf),
        JSON => Ok(Encoding::Json),
        _ => Err(Failure::unsupported(format!("content type {raw:?}: OTLP/HTTP logs are {PROTOBUF} or {JSON}"))),
    }
}

/// The body, inflated when it is gzip, at most [`MAX_BODY_BYTES`].
fn inflate(headers: &HeaderMap, body: &[u8]) -> Result<Vec<u8>, Failure> {
    let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("identity").trim().to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(body.to_vec()),
        "gzip" | "x-gzip" => {
            let mut out = Vec::new();
            let limit = u64::try_from(MAX_BODY_BYTES).unwrap_or(u64::MAX) + 1;
            flate2::read::MultiGzDecoder::new(body)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|e| Failure::bad_data(format!("the gzip body cannot be inflated: {e}")))?;
            if out.len() > MAX_BODY_BYTES {
                return Err(Failure(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    tonic::Code::ResourceExhausted as i32,
                    format!("the body inflates past {MAX_BODY_BYTES} bytes: send smaller batches"),
                ));
            }
            Ok(out)
        }
        other => Err(Failure::unsupported(format!("content encoding {other:?}: send gzip or no encoding"))),
    }
}

/// Decodes a request body. JSON may hold several requests, one per line (Vector's framing).
fn decode(encoding: Encoding, body: &[u8]) -> Result<ExportLogsServiceRequest, Failure> {
    match encoding {
        Encoding::Protobuf => ExportLogsServiceRequest::decode(body).map_err(|e| Failure::bad_data(format!("not an ExportLogsServiceRequest: {e}"))),
        Encoding::Json => {
            let mut all = ExportLogsServiceRequest::default();
            for part in serde_json::Deserializer::from_slice(body).into_iter::<ExportLogsServiceRequest>() {
                let part = part.map_err(|e| Failure::bad_data(format!("not an ExportLogsServiceRequest in OTLP's JSON mapping: {e}")))?;
                all.resource_logs.extend(part.resource_logs);
            }
            Ok(all)
        }
    }
}

fn encode<T: Message + serde::Serialize>(encoding: Encoding, message: &T) -> Vec<u8> {
    match encoding {
        Encoding::Protobuf => message.encode_to_vec(),
        Encoding::Json => serde_json::to_vec(message).unwrap_or_default(),
    }
}

fn answer<T: Message + serde::Serialize>(status: StatusCode, encoding: Encoding, message: &T) -> Response {
    (status, [(header::CONTENT_TYPE, encoding.content_type())], encode(encoding, message)).into_response()
}

/// `POST /v1/logs`.
pub async fn logs(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    // A failure before the type is known is answered in JSON, which a person can read.
    let encoding = match encoding_of(&headers) {
        Ok(e) => e,
        Err(f) => return failure(Encoding::Json, f),
    };
    // Inflating and decoding up to 64 MiB is CPU work: off the runtime's threads.
    let decoded = tokio::task::spawn_blocking(move || decode(encoding, &inflate(&headers, &body)?)).await;
    let request = match decoded {
        Ok(Ok(r)) => r,
        Ok(Err(f)) => return failure(encoding, f),
        Err(e) => return failure(encoding, ServiceError::from(e).into()),
    };
    match s.otlp.export(&request, coroner_model::now_ns()).await {
        Ok(r) => answer(StatusCode::OK, encoding, &r),
        // A job another instance owns: the exporter resends the same body there (307).
        Err(e) => super::elsewhere(&e).unwrap_or_else(|| failure(encoding, e.into())),
    }
}

fn failure(encoding: Encoding, Failure(status, code, message): Failure) -> Response {
    answer(status, encoding, &RpcStatus { code, message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).expect("header value"));
        }
        h
    }

    #[test]
    fn the_content_type_picks_the_decoder_and_other_types_are_415() {
        assert_eq!(encoding_of(&headers(&[(header::CONTENT_TYPE, "application/x-protobuf")])).ok(), Some(Encoding::Protobuf));
        assert_eq!(encoding_of(&headers(&[(header::CONTENT_TYPE, "application/json; charset=utf-8")])).ok(), Some(Encoding::Json));
        let Err(Failure(status, _, message)) = encoding_of(&headers(&[(header::CONTENT_TYPE, "text/plain")])) else { panic!("text/plain accepted") };
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(message.contains("application/x-protobuf"), "{message}");
    }

    #[test]
    fn gzip_is_inflated_and_a_bomb_is_refused() {
        use std::io::Write;
        let gzip = |bytes: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(bytes).expect("gzip");
            e.finish().expect("gzip")
        };
        let h = headers(&[(header::CONTENT_ENCODING, "gzip")]);
        assert_eq!(inflate(&h, &gzip(b"hello")).ok().as_deref(), Some(&b"hello"[..]));
        let bomb = gzip(&vec![0u8; MAX_BODY_BYTES + 1]);
        assert!(matches!(inflate(&h, &bomb), Err(Failure(StatusCode::PAYLOAD_TOO_LARGE, ..))));
        assert!(matches!(inflate(&h, b"not gzip"), Err(Failure(StatusCode::BAD_REQUEST, ..))));
        let br = headers(&[(header::CONTENT_ENCODING, "br")]);
        assert!(matches!(inflate(&br, b"x"), Err(Failure(StatusCode::UNSUPPORTED_MEDIA_TYPE, ..))));
    }

    #[test]
    fn json_lines_are_one_request_and_garbage_is_bad_data() {
        let one = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"5","body":{"stringValue":"a"}}]}]}],"host":"vector"}"#;
        let two = format!("{one}\n{one}\n");
        let req = decode(Encoding::Json, two.as_bytes()).expect("two objects");
        assert_eq!(req.resource_logs.len(), 2);
        assert_eq!(req.resource_logs[0].scope_logs[0].log_records[0].time_unix_nano, 5);
        assert!(matches!(decode(Encoding::Json, b"{\"resourceLogs\": 7}"), Err(Failure(StatusCode::BAD_REQUEST, ..))));
        assert!(matches!(decode(Encoding::Protobuf, b"\xff\xff\xff"), Err(Failure(StatusCode::BAD_REQUEST, ..))));
    }
}
