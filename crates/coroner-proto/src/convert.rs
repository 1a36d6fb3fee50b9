//! Conversions between wire messages and model types. Everything that arrives from the network
//! is validated here, once.

use crate::v1;
use coroner_model::{FaultClass, LogLine, PastIncident, Rank, Stream, Suspect};

/// Why a wire message cannot be accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("line {seq}: stream kind is unspecified or unknown ({value})")]
    UnknownStream { seq: u64, value: i32 },
    #[error("{0}")]
    Invalid(String),
}

pub fn stream_to_wire(stream: Stream) -> v1::StreamKind {
    match stream {
        Stream::Stdout => v1::StreamKind::Stdout,
        Stream::Stderr => v1::StreamKind::Stderr,
        Stream::File => v1::StreamKind::File,
    }
}

pub fn stream_from_wire(value: i32, seq: u64) -> Result<Stream, WireError> {
    match v1::StreamKind::try_from(value) {
        Ok(v1::StreamKind::Stdout) => Ok(Stream::Stdout),
        Ok(v1::StreamKind::Stderr) => Ok(Stream::Stderr),
        Ok(v1::StreamKind::File) => Ok(Stream::File),
        _ => Err(WireError::UnknownStream { seq, value }),
    }
}

/// A wire line as a model line. `session_rank` is the rank the session speaks for; a line that
/// names its own rank (a launcher agent's worker line) keeps that one.
/// A line as the server keeps it: a line longer than [`coroner_model::MAX_LINE_BYTES`] is cut
/// there with a marker (`coroner_model::cap_line`), whoever sent it.
pub fn line_from_wire(line: v1::LogLine, session_rank: Option<Rank>) -> Result<LogLine, WireError> {
    let stream = stream_from_wire(line.stream, line.seq)?;
    let mut bytes = line.raw;
    coroner_model::cap_line(&mut bytes);
    Ok(LogLine { rank: line.rank.map(Rank).or(session_rank), stream, seq: line.seq, capture_ns: line.capture_ns, bytes })
}

pub fn line_to_wire(line: &LogLine) -> v1::LogLine {
    v1::LogLine {
        seq: line.seq,
        capture_ns: line.capture_ns,
        stream: stream_to_wire(line.stream) as i32,
        raw: line.bytes.clone(),
        rank: line.rank.map(|r| r.0),
        file: String::new(),
    }
}

/// A suspect host or GPU as `Query.ListSuspects` sends it.
pub fn suspect_to_wire(s: Suspect) -> v1::Suspect {
    v1::Suspect {
        host: s.host,
        gpu: s.gpu.unwrap_or_default(),
        score: s.score,
        expected: s.expected,
        failures: s.failures,
        hardware_failures: s.hardware_failures,
        jobs_seen: s.jobs_seen,
        flagged: s.flagged,
        reason: s.reason,
        incidents: s
            .incidents
            .into_iter()
            .map(|i| v1::SuspectIncident {
                job_id: i.job_id,
                time: i.time,
                fault_class: i.class.as_str().to_string(),
                fault_class_code: crate::report::fault_class_to_wire(i.class) as i32,
                rank: i.rank.map(|r| r.0),
                gpu: i.gpu.unwrap_or_default(),
            })
            .collect(),
    }
}

/// A suspect as `coroner suspects` receives it (incidents are the culprit's own: `same`).
pub fn suspect_from_wire(s: v1::Suspect) -> Suspect {
    Suspect {
        host: s.host,
        gpu: (!s.gpu.is_empty()).then_some(s.gpu),
        score: s.score,
        expected: s.expected,
        failures: s.failures,
        hardware_failures: s.hardware_failures,
        jobs_seen: s.jobs_seen,
        flagged: s.flagged,
        reason: s.reason,
        incidents: s
            .incidents
            .into_iter()
            .map(|i| PastIncident {
                job_id: i.job_id,
                time: i.time,
                class: FaultClass::parse(&i.fault_class).unwrap_or(FaultClass::None),
                same: true,
                similarity: 1.0,
                rank: i.rank.map(Rank),
                host: None,
                gpu: (!i.gpu.is_empty()).then_some(i.gpu),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_survives_the_round_trip_with_its_exact_bytes() {
        let line = LogLine { rank: Some(Rank(3)), stream: Stream::Stderr, seq: 7, capture_ns: 42, bytes: vec![0xff, b'a', 0, b'b'] };
        assert_eq!(line_from_wire(line_to_wire(&line), None).unwrap(), line);
    }

    #[test]
    fn a_ten_megabyte_line_is_cut_to_the_limit_with_a_marker() {
        let wire = v1::LogLine { seq: 1, stream: 1, raw: vec![b'x'; 10 << 20], ..Default::default() };
        let line = line_from_wire(wire, None).unwrap();
        let cut = (10 << 20) - coroner_model::MAX_LINE_BYTES;
        assert!(line.bytes.ends_with(format!(" [coroner: truncated {cut} bytes]").as_bytes()));
        assert!(line.bytes.len() < coroner_model::MAX_LINE_BYTES + 64);
    }

    #[test]
    fn an_unspecified_stream_is_refused_with_the_line_it_came_from() {
        let wire = v1::LogLine { seq: 9, stream: 0, ..Default::default() };
        assert_eq!(line_from_wire(wire, None), Err(WireError::UnknownStream { seq: 9, value: 0 }));
    }

    #[test]
    fn the_session_rank_applies_unless_the_line_names_its_own() {
        let wire = v1::LogLine { stream: 1, ..Default::default() };
        assert_eq!(line_from_wire(wire.clone(), Some(Rank(2))).unwrap().rank, Some(Rank(2)));
        let own = v1::LogLine { rank: Some(5), ..wire };
        assert_eq!(line_from_wire(own, Some(Rank(2))).unwrap().rank, Some(Rank(5)));
    }
}
