//! Each sink's request for an event (pure): the generic webhook's versioned, signed JSON, a
//! Slack-compatible incoming-webhook message, and an Alertmanager API v2 alert.

use super::event::{Event, Kind, FORMAT_VERSION};
use super::sign::{self, Secret};
use coroner_model::format_rfc3339_ns;
use serde_json::{json, Value};

/// How a sink wants its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"format_version": 1, "event": {...}}`, signed (`sign.rs`).
    Webhook,
    /// Slack's incoming webhooks (`text` and `blocks`); Mattermost and others take the same.
    Slack,
    /// `POST /api/v2/alerts` on an Alertmanager.
    Alertmanager,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "webhook" => Some(Format::Webhook),
            "slack" => Some(Format::Slack),
            "alertmanager" => Some(Format::Alertmanager),
            _ => None,
        }
    }
}

/// A request to send: its body and the headers beyond `content-type: application/json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

/// How long a firing hang alert lasts without being resolved (if coronerd died before the
/// suspicion ended); Alertmanager resolves it then.
const HANG_ALERT_HORIZON_NS: i64 = 24 * 3_600 * 1_000_000_000;

/// The request for `event` as `format` wants it, signed at `now_s` (Unix seconds) when a secret is given.
pub fn request(format: Format, event: &Event, secret: Option<&Secret>, now_s: i64) -> Request {
    let body = match format {
        Format::Webhook => json!({ "format_version": FORMAT_VERSION, "event": event }),
        Format::Slack => slack(event),
        Format::Alertmanager => json!([alert(event)]),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut headers = vec![("x-coroner-event", event.kind.as_str().to_string()), ("x-coroner-event-id", event.id.clone())];
    if let Some(secret) = secret {
        headers.push((sign::TIMESTAMP_HEADER, now_s.to_string()));
        headers.push((sign::SIGNATURE_HEADER, sign::signature(secret, now_s, &body)));
    }
    Request { body, headers }
}

/// Slack's mrkdwn wants `&`, `<` and `>` escaped (log text is full of them).
fn mrkdwn(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn slack(e: &Event) -> Value {
    let icon = match (e.kind, e.verdict.as_str()) {
        (Kind::HangOver, _) | (Kind::Verdict, "succeeded") => ":white_check_mark:",
        (Kind::Hang, _) => ":hourglass:",
        (Kind::SuspectHost, _) => ":warning:",
        _ => ":x:",
    };
    let text = format!("{icon} coroner: {}", mrkdwn(&e.summary));
    let mut context = vec![json!({ "type": "mrkdwn", "text": format!("event `{}`", mrkdwn(&e.id)) })];
    if let Some(url) = &e.report_url {
        context.push(json!({ "type": "mrkdwn", "text": format!("<{}|report>", mrkdwn(url)) }));
    }
    json!({
        "text": text,
        "blocks": [
            { "type": "section", "text": { "type": "mrkdwn", "text": text } },
            { "type": "context", "elements": context },
        ],
    })
}

/// The alert's name per kind (and verdict).
fn alertname(e: &Event) -> &'static str {
    match (e.kind, e.verdict.as_str()) {
        (Kind::Verdict, "failed") => "CoronerJobFailed",
        (Kind::Verdict, "succeeded") => "CoronerJobSucceeded",
        (Kind::Verdict, _) => "CoronerJobUnknown",
        (Kind::Culprit, _) => "CoronerCulpritChanged",
        (Kind::Hang | Kind::HangOver, _) => "CoronerSuspectedHang",
        (Kind::SuspectHost, _) => "CoronerSuspectHost",
    }
}

fn alert(e: &Event) -> Value {
    let severity = match (e.kind, e.verdict.as_str()) {
        (Kind::Verdict, "succeeded") => "info",
        (Kind::Hang | Kind::HangOver | Kind::SuspectHost, _) | (Kind::Verdict, "unknown") => "warning",
        _ => "critical",
    };
    // A hang and its end carry the same labels: that is how Alertmanager knows which alert ends.
    let mut labels = serde_json::Map::new();
    labels.insert("alertname".into(), alertname(e).into());
    labels.insert("job".into(), e.job_id.clone().into());
    labels.insert("severity".into(), severity.into());
    if let Some(rank) = e.rank {
        labels.insert("rank".into(), rank.to_string().into());
    }
    for (name, value) in [("host", &e.host), ("class", &e.class)] {
        if let Some(v) = value {
            labels.insert(name.into(), v.clone().into());
        }
    }
    let mut annotations = json!({ "summary": e.summary, "event_id": e.id });
    if let Some(url) = &e.report_url {
        annotations["report"] = url.clone().into();
    }
    let mut a = json!({ "labels": labels, "annotations": annotations, "startsAt": e.time });
    match e.kind {
        Kind::HangOver => a["endsAt"] = e.time.clone().into(),
        Kind::Hang => a["endsAt"] = format_rfc3339_ns(e.at_ns.saturating_add(HANG_ALERT_HORIZON_NS)).into(),
        _ => {}
    }
    if let Some(url) = &e.report_url {
        a["generatorURL"] = url.clone().into();
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::event;
    use coroner_model::{JobId, SuspectedHang};

    fn hang_finding() -> SuspectedHang {
        event::finding(5, Some("node-2"), "rank 5 <silent> & behind", None, "t")
    }

    fn body(r: &Request) -> Value {
        serde_json::from_slice(&r.body).expect("JSON body")
    }

    #[test]
    fn the_webhook_body_is_versioned_and_signed_over_timestamp_and_body() {
        let e = event::suspect_host("j", "node-9", "why", 1);
        let key = Secret::new("k".into());
        let r = request(Format::Webhook, &e, Some(&key), 1_700_000_000);
        let v = body(&r);
        assert_eq!((v["format_version"].as_u64(), v["event"]["id"].as_str()), (Some(1), Some("j/suspect_host/node-9")));
        let header = |n: &str| r.headers.iter().find(|h| h.0 == n).map(|h| h.1.clone());
        assert_eq!(header(sign::TIMESTAMP_HEADER).as_deref(), Some("1700000000"));
        assert_eq!(header(sign::SIGNATURE_HEADER), Some(sign::signature(&key, 1_700_000_000, &r.body)));
        assert_eq!(header("x-coroner-event").as_deref(), Some("suspect_host"));
        assert!(request(Format::Webhook, &e, None, 1).headers.iter().all(|h| h.0 != sign::SIGNATURE_HEADER));
    }

    #[test]
    fn slack_gets_text_and_blocks_with_its_characters_escaped() {
        let mut e = event::hang(&JobId::parse("j").expect("id"), &hang_finding(), 1);
        e.report_url = Some("http://coroner:7071/jobs/j".into());
        let v = body(&request(Format::Slack, &e, None, 1));
        let text = v["text"].as_str().expect("text");
        assert!(text.contains("rank 5 &lt;silent&gt; &amp; behind") && text.starts_with(":hourglass:"), "{text}");
        assert_eq!(v["blocks"][0]["type"], "section");
        assert_eq!(v["blocks"][0]["text"]["type"], "mrkdwn");
        assert_eq!(v["blocks"][1]["elements"][1]["text"], "<http://coroner:7071/jobs/j|report>");
    }

    #[test]
    fn alertmanager_gets_one_alert_with_labels_and_a_hang_resolves_by_the_same_labels() {
        let job = JobId::parse("j").expect("id");
        let raised = body(&request(Format::Alertmanager, &event::hang(&job, &hang_finding(), 1_000_000_000), None, 1));
        let over = body(&request(Format::Alertmanager, &event::hang_over(&job, &hang_finding(), 61_000_000_000, "the job ended"), None, 1));
        let (a, b) = (&raised[0], &over[0]);
        assert_eq!(raised.as_array().map(Vec::len), Some(1));
        assert_eq!(
            a["labels"],
            json!({ "alertname": "CoronerSuspectedHang", "job": "j", "rank": "5", "host": "node-2", "class": "hang", "severity": "warning" })
        );
        assert_eq!(a["labels"], b["labels"]);
        assert_eq!((a["startsAt"].as_str(), a["endsAt"].as_str()), (Some("1970-01-01T00:00:01.000000000Z"), Some("1970-01-02T00:00:01.000000000Z")));
        assert_eq!(b["endsAt"].as_str(), Some("1970-01-01T00:01:01.000000000Z"), "resolved when the suspicion ended");
        assert!(a["annotations"]["summary"].as_str().is_some_and(|s| s.contains("rank 5")));
    }
}
