//! `coroner suspects`: the hosts and GPUs whose root-cause failures across jobs stand out, with
//! the evidence, for a person or a scheduler's drain logic (`--json`). Exit status 0 either way.

use crate::remote::{connect, every_page, parse_time};
use coroner_model::Suspect;
use coroner_proto::v1;
use std::process::ExitCode;

/// `--since`: an RFC 3339 time, or how long ago (`7d`, `24h`, `90m`, `2w`: any duration
/// `coroner_model::parse_duration` reads).
pub fn parse_since(s: &str, now_ns: i64) -> anyhow::Result<i64> {
    let t = s.trim();
    if let Ok(ago) = coroner_model::parse_duration(t) {
        return Ok(now_ns.saturating_sub(i64::try_from(ago.as_nanos()).unwrap_or(i64::MAX)));
    }
    parse_time("--since", t).map_err(|_| anyhow::anyhow!("--since {s:?} is neither a time ago (7d, 24h, 90m) nor an RFC 3339 time (2024-05-01T12:00:00Z)"))
}

pub async fn run(server: &crate::remote::Server, since: Option<&str>, all: bool, json: bool) -> anyhow::Result<ExitCode> {
    let now = coroner_model::now_ns();
    let since_ns = since.map(|s| parse_since(s, now)).transpose()?;
    let client = connect(server).await?;
    let since_ns = since_ns.unwrap_or(0);
    let list: Vec<Suspect> = every_page(|page_token| {
        let mut client = client.clone();
        async move {
            let page = client.list_suspects(v1::ListSuspectsRequest { since_ns, all, page_token, ..Default::default() }).await?.into_inner();
            Ok((page.suspects, page.next_page_token))
        }
    })
    .await?
    .into_iter()
    .map(coroner_proto::convert::suspect_from_wire)
    .collect();
    if json {
        crate::term::out_json(&serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        crate::say!("no host or GPU stands out{}", if all { " (no root-cause failures recorded)" } else { "" });
    }
    for s in &list {
        let what = match &s.gpu {
            Some(g) => format!("gpu {g} on {}", s.host),
            None => format!("host {}", s.host),
        };
        crate::say!("{} {what}: {}", if s.flagged { "SUSPECT" } else { "watch" }, s.reason);
        for i in &s.incidents {
            let rank = i.rank.map(|r| format!(" rank {r}")).unwrap_or_default();
            let gpu = i.gpu.as_ref().filter(|_| s.gpu.is_none()).map(|g| format!(" GPU {g}")).unwrap_or_default();
            crate::say!("  - job {} [{}] {}{rank}{gpu}", i.job_id, i.time, i.class);
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_since;

    #[test]
    fn since_takes_a_time_ago_or_an_rfc3339_time() {
        let now = 10 * 86_400 * 1_000_000_000;
        assert_eq!(parse_since("7d", now).ok(), Some(3 * 86_400 * 1_000_000_000));
        assert_eq!(parse_since("1h", now).ok(), Some(now - 3600 * 1_000_000_000));
        assert_eq!(parse_since("1970-01-02T00:00:00Z", now).ok(), Some(86_400 * 1_000_000_000));
        assert!(parse_since("yesterday", now).unwrap_err().to_string().contains("neither a time ago"));
    }
}
