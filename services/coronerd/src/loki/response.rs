//! Loki's answers, in its exact JSON (what Grafana's Loki datasource reads). Pure.

use super::logql::Label;
use super::select::Entry;
use serde_json::{json, Map, Value};

/// `{"status":"success","data":{"resultType":"streams","result":[{"stream":{..},"values":[["ns","line"],..]},..]}}`:
/// entries grouped by their stream's labels, streams in the order of their first entry, each
/// stream's values in the entries' order. A label a line does not have (rank, for a line no rank
/// owns) is left out, as Loki leaves out empty labels.
pub fn streams(entries: &[Entry]) -> Value {
    let mut order: Vec<Vec<(Label, String)>> = Vec::new();
    let mut values: Vec<Vec<Value>> = Vec::new();
    for e in entries {
        let labels: Vec<(Label, String)> =
            [Label::Job, Label::Rank, Label::Host, Label::Stream].into_iter().map(|l| (l, e.label(l))).filter(|(_, v)| !v.is_empty()).collect();
        let i = order.iter().position(|o| *o == labels).unwrap_or_else(|| {
            order.push(labels);
            values.push(Vec::new());
            order.len() - 1
        });
        values[i].push(json!([e.hit.time_ns.to_string(), e.hit.line]));
    }
    let result: Vec<Value> = order
        .into_iter()
        .zip(values)
        .map(|(labels, values)| {
            let stream: Map<String, Value> = labels.into_iter().map(|(l, v)| (l.name().to_string(), Value::String(v))).collect();
            json!({ "stream": stream, "values": values })
        })
        .collect();
    json!({ "status": "success", "data": { "resultType": "streams", "result": result } })
}

/// A constant as an instant vector at `time_ns`: `{"resultType":"vector","result":[{"metric":{},"value":[secs, "n"]}]}`.
pub fn vector(value: f64, time_ns: i64) -> Value {
    let secs = time_ns as f64 / 1e9;
    json!({ "status": "success", "data": { "resultType": "vector", "result": [ { "metric": {}, "value": [secs, value.to_string()] } ] } })
}

/// A constant over a range, one sample per step: `{"resultType":"matrix",...}`.
pub fn matrix(value: f64, start_ns: i64, end_ns: i64, step_ns: i64) -> Value {
    let step = step_ns.max(1);
    let mut samples = Vec::new();
    let mut t = start_ns;
    while t <= end_ns && samples.len() < 11_000 {
        samples.push(json!([t as f64 / 1e9, value.to_string()]));
        t = t.saturating_add(step);
    }
    json!({ "status": "success", "data": { "resultType": "matrix", "result": [ { "metric": {}, "values": samples } ] } })
}

/// `{"status":"success","data":[..]}`: label names or values.
pub fn names(list: Vec<String>) -> Value {
    json!({ "status": "success", "data": list })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::search::Hit;
    use coroner_model::JobId;

    fn entry(job: &str, rank: Option<u32>, t: i64, line: &str) -> Entry {
        let hit = Hit {
            rank,
            time_ns: t,
            time: String::new(),
            capture_ns: t,
            host: "node1".into(),
            stream: "stderr".into(),
            seq: 0,
            line: line.into(),
            context: false,
        };
        Entry { job: JobId::parse(job).expect("job"), hit }
    }

    #[test]
    fn streams_group_lines_by_labels_in_lokis_shape() {
        let v = streams(&[entry("j", Some(1), 30, "c"), entry("j", None, 20, "b"), entry("j", Some(1), 10, "a")]);
        assert_eq!(
            v,
            json!({"status": "success", "data": {"resultType": "streams", "result": [
                {"stream": {"job": "j", "rank": "1", "host": "node1", "stream": "stderr"}, "values": [["30", "c"], ["10", "a"]]},
                {"stream": {"job": "j", "host": "node1", "stream": "stderr"}, "values": [["20", "b"]]},
            ]}})
        );
    }

    #[test]
    fn a_constant_is_a_vector_at_the_query_time() {
        assert_eq!(vector(2.0, 4_000_000_000), json!({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [4.0, "2"]}]}}));
        let m = matrix(1.0, 0, 2_000_000_000, 1_000_000_000);
        assert_eq!(m["data"]["result"][0]["values"].as_array().map(Vec::len), Some(3));
    }
}
