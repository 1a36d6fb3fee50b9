//! Where notifications go: `--webhook URL` (one signed JSON webhook) and/or `--notify-config
//! FILE` (a TOML file with several sinks, each with the events it wants), checked at start-up so
//! that a bad URL, an unknown event or a missing secret stops coronerd with what to fix.
//!
//! Secrets come from a file (`--webhook-secret-file`, `secret_file`) or an environment variable
//! (`CORONER_WEBHOOK_SECRET`, `secret_env`), never from a flag's value (which `ps` and logs show).

use super::format::Format;
use super::sign::Secret;
use anyhow::{bail, ensure, Context};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The flags (each also an environment variable).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct NotifyFlags {
    /// POST every event as signed JSON to this URL (docs/NOTIFY.md); its HMAC secret comes from
    /// --webhook-secret-file or the CORONER_WEBHOOK_SECRET environment variable.
    #[arg(long, env = "CORONER_WEBHOOK")]
    pub webhook: Option<String>,
    /// A file holding the --webhook secret (readable by its owner only; whitespace around it ignored).
    #[arg(long, env = "CORONER_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Which events --webhook gets, comma-separated [default: failed,culprit,hang,suspect_host;
    /// also: succeeded, unknown, hang_over].
    #[arg(long, env = "CORONER_WEBHOOK_EVENTS", value_delimiter = ',')]
    pub webhook_events: Vec<String>,
    /// A TOML file of notification sinks (webhook, slack, alertmanager), their events and the
    /// retry policy (docs/NOTIFY.md).
    #[arg(long, env = "CORONER_NOTIFY_CONFIG")]
    pub notify_config: Option<PathBuf>,
}

/// The environment variable holding the --webhook secret.
pub const WEBHOOK_SECRET_ENV: &str = "CORONER_WEBHOOK_SECRET";

/// Every event a sink can ask for, and what each format gets unless it says.
pub const TOPICS: [&str; 7] = ["failed", "succeeded", "unknown", "culprit", "hang", "hang_over", "suspect_host"];
const DEFAULT_TOPICS: [&str; 4] = ["failed", "culprit", "hang", "suspect_host"];
/// Alertmanager also needs the ends of suspicions, to resolve its hang alerts.
const DEFAULT_ALERTMANAGER_TOPICS: [&str; 5] = ["failed", "culprit", "hang", "hang_over", "suspect_host"];

/// One place events go.
#[derive(Debug, Clone)]
pub struct Sink {
    /// Its name in the delivery log and the `sink` label of `coroner_notifications_total`.
    pub name: String,
    pub format: Format,
    /// Where requests go (for Alertmanager: its `/api/v2/alerts`).
    pub url: hyper::Uri,
    pub secret: Option<Secret>,
    pub topics: BTreeSet<String>,
}

/// How deliveries are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// Attempts per delivery, the first included.
    pub attempts: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { attempts: 6, first_delay: Duration::from_secs(1), max_delay: Duration::from_secs(60), timeout: Duration::from_secs(10) }
    }
}

/// Everything the notifier is told.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub sinks: Vec<Sink>,
    pub retry: Retry,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    retry: Option<RetryFile>,
    #[serde(default)]
    sink: Vec<SinkFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryFile {
    attempts: Option<u32>,
    first_delay: Option<String>,
    max_delay: Option<String>,
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkFile {
    name: String,
    format: String,
    url: String,
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    events: Option<Vec<String>>,
}

/// What resolving the settings may read: files and environment variables (tests pass their own).
pub trait Sources {
    fn env(&self, name: &str) -> Option<String>;
    fn secret_file(&self, path: &Path) -> anyhow::Result<String>;
    fn config_file(&self, path: &Path) -> anyhow::Result<String>;
}

/// The process's environment and files (a secret file must be private to its owner).
pub struct System;

impl Sources for System {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn secret_file(&self, path: &Path) -> anyhow::Result<String> {
        crate::config::check_secret_file_mode("webhook secret", path)?;
        std::fs::read_to_string(path).with_context(|| format!("read the webhook secret file {}", path.display()))
    }
    fn config_file(&self, path: &Path) -> anyhow::Result<String> {
        std::fs::read_to_string(path).with_context(|| format!("read the notification config {} (--notify-config)", path.display()))
    }
}

impl Settings {
    /// The settings the flags name; empty (notifications off) without --webhook or --notify-config.
    pub fn resolve(flags: &NotifyFlags, sources: &dyn Sources) -> anyhow::Result<Settings> {
        let mut settings = match &flags.notify_config {
            Some(path) => {
                let text = sources.config_file(path)?;
                Settings::parse(&text, sources).with_context(|| format!("the notification config {} (--notify-config)", path.display()))?
            }
            None => Settings::default(),
        };
        if let Some(url) = &flags.webhook {
            let secret = match &flags.webhook_secret_file {
                Some(path) => Some(sources.secret_file(path)?),
                None => sources.env(WEBHOOK_SECRET_ENV),
            };
            let secret = secret.with_context(|| {
                format!("--webhook needs a secret to sign its requests with: put it in a file given by --webhook-secret-file, or in {WEBHOOK_SECRET_ENV}")
            })?;
            let events = (!flags.webhook_events.is_empty()).then(|| flags.webhook_events.clone());
            let sink = sink("webhook", Format::Webhook, url, Some(secret), events).context("--webhook")?;
            ensure!(settings.sinks.iter().all(|s| s.name != "webhook"), "--webhook is named \"webhook\" and so is a sink in --notify-config; rename that one");
            settings.sinks.push(sink);
        }
        Ok(settings)
    }

    /// The settings a TOML file holds.
    pub fn parse(text: &str, sources: &dyn Sources) -> anyhow::Result<Settings> {
        let file: File = toml::from_str(text).context("not a notification config (see docs/NOTIFY.md for its keys)")?;
        ensure!(file.version.unwrap_or(1) == 1, "version {} is not known to this coronerd: it reads version 1", file.version.unwrap_or(1));
        let mut retry = Retry::default();
        if let Some(r) = file.retry {
            let duration = |what: &str, v: Option<String>, default: Duration| -> anyhow::Result<Duration> {
                v.map_or(Ok(default), |v| coroner_model::parse_duration(&v).map_err(|e| anyhow::anyhow!("retry.{what} {v:?}: {e}")))
            };
            retry = Retry {
                attempts: r.attempts.unwrap_or(retry.attempts),
                first_delay: duration("first_delay", r.first_delay, retry.first_delay)?,
                max_delay: duration("max_delay", r.max_delay, retry.max_delay)?,
                timeout: duration("timeout", r.timeout, retry.timeout)?,
            };
            ensure!((1..=100).contains(&retry.attempts), "retry.attempts is {}: give 1 to 100", retry.attempts);
            ensure!(!retry.timeout.is_zero(), "retry.timeout is 0: give how long one attempt may take (10s)");
        }
        let mut sinks: Vec<Sink> = Vec::new();
        for s in file.sink {
            let what = format!("sink {:?}", s.name);
            let format = Format::parse(&s.format).with_context(|| format!("{what}: format {:?} is not webhook, slack or alertmanager", s.format))?;
            let secret = match (&s.secret_file, &s.secret_env) {
                (Some(_), Some(_)) => bail!("{what}: give secret_file or secret_env, not both"),
                (Some(path), None) => Some(sources.secret_file(path).with_context(|| what.clone())?),
                (None, Some(var)) => Some(sources.env(var).with_context(|| format!("{what}: the environment variable {var} (secret_env) is not set"))?),
                (None, None) => None,
            };
            ensure!(sinks.iter().all(|o| o.name != s.name), "two sinks are named {:?}; give each its own name", s.name);
            sinks.push(sink(&s.name, format, &s.url, secret, s.events).with_context(|| what.clone())?);
        }
        Ok(Settings { sinks, retry })
    }
}

fn sink(name: &str, format: Format, url: &str, secret: Option<String>, events: Option<Vec<String>>) -> anyhow::Result<Sink> {
    ensure!(
        !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
        "the name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
    );
    let mut uri: hyper::Uri = url.parse().with_context(|| format!("{url:?} is not a URL"))?;
    ensure!(matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some(), "{url:?} is not an http:// or https:// URL");
    if format == Format::Alertmanager && !uri.path().ends_with("/api/v2/alerts") {
        // Given the Alertmanager's address, post to its v2 API.
        let base = url.trim_end_matches('/');
        uri = format!("{base}/api/v2/alerts").parse().with_context(|| format!("{url:?} plus /api/v2/alerts is not a URL"))?;
    }
    let secret = secret.map(|s| s.trim().to_string());
    match (format, &secret) {
        (Format::Webhook, None) => bail!("a webhook signs its requests: give its secret (secret_file or secret_env)"),
        (Format::Webhook, Some(s)) if s.is_empty() => bail!("the secret is empty; give a non-empty one"),
        (Format::Slack | Format::Alertmanager, Some(_)) => bail!("only the webhook format is signed; remove the secret (Slack's URL is its secret)"),
        _ => {}
    }
    let defaults: &[&str] = if format == Format::Alertmanager { &DEFAULT_ALERTMANAGER_TOPICS } else { &DEFAULT_TOPICS };
    let topics: BTreeSet<String> =
        events.unwrap_or_else(|| defaults.iter().map(|t| t.to_string()).collect()).into_iter().map(|t| t.trim().to_string()).collect();
    for t in &topics {
        ensure!(TOPICS.contains(&t.as_str()), "event {t:?} is not one of {}", TOPICS.join(", "));
    }
    Ok(Sink { name: name.to_string(), format, url: uri, secret: secret.map(Secret::new), topics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Fake {
        env: HashMap<String, String>,
        files: HashMap<PathBuf, String>,
    }

    impl Sources for Fake {
        fn env(&self, name: &str) -> Option<String> {
            self.env.get(name).cloned()
        }
        fn secret_file(&self, path: &Path) -> anyhow::Result<String> {
            self.files.get(path).cloned().with_context(|| format!("read the webhook secret file {}", path.display()))
        }
        fn config_file(&self, path: &Path) -> anyhow::Result<String> {
            self.files.get(path).cloned().with_context(|| format!("read {}", path.display()))
        }
    }

    fn fake(files: &[(&str, &str)], env: &[(&str, &str)]) -> Fake {
        Fake {
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            files: files.iter().map(|(k, v)| (PathBuf::from(k), v.to_string())).collect(),
        }
    }

    fn error(flags: &NotifyFlags, sources: &Fake) -> String {
        format!("{:#}", Settings::resolve(flags, sources).expect_err("refused"))
    }

    const FILE: &str = r#"
        [retry]
        attempts = 3
        first_delay = "200ms"

        [[sink]]
        name = "oncall"
        format = "webhook"
        url = "https://hooks.example.com/coroner"
        secret_file = "/run/secret"
        events = ["failed", "hang"]

        [[sink]]
        name = "chat"
        format = "slack"
        url = "https://hooks.slack.com/services/T/B/X"

        [[sink]]
        name = "am"
        format = "alertmanager"
        url = "http://alertmanager:9093/"
    "#;

    #[test]
    fn a_config_file_names_its_sinks_events_and_retries() {
        let s = Settings::resolve(
            &NotifyFlags { notify_config: Some("/etc/notify.toml".into()), ..Default::default() },
            &fake(&[("/etc/notify.toml", FILE), ("/run/secret", "abc\n")], &[]),
        )
        .expect("valid");
        assert_eq!(s.retry, Retry { attempts: 3, first_delay: Duration::from_millis(200), ..Retry::default() });
        let names: Vec<_> = s.sinks.iter().map(|s| (s.name.as_str(), s.format, s.url.to_string())).collect();
        assert_eq!(
            names,
            [
                ("oncall", Format::Webhook, "https://hooks.example.com/coroner".to_string()),
                ("chat", Format::Slack, "https://hooks.slack.com/services/T/B/X".to_string()),
                ("am", Format::Alertmanager, "http://alertmanager:9093/api/v2/alerts".to_string()),
            ]
        );
        assert_eq!(s.sinks[0].secret, Some(Secret::new("abc".into())), "whitespace around a secret is ignored");
        assert_eq!(s.sinks[0].topics.iter().map(String::as_str).collect::<Vec<_>>(), ["failed", "hang"]);
        assert!(s.sinks[1].topics.contains("suspect_host") && !s.sinks[1].topics.contains("hang_over"));
        assert!(s.sinks[2].topics.contains("hang_over"), "Alertmanager resolves its hang alerts");
    }

    #[test]
    fn the_webhook_flag_takes_its_secret_from_a_file_or_the_environment_never_a_flag() {
        let flags = NotifyFlags { webhook: Some("http://127.0.0.1:9/hook".into()), ..Default::default() };
        let from_env = Settings::resolve(&flags, &fake(&[], &[(WEBHOOK_SECRET_ENV, "e")])).expect("valid");
        assert_eq!(from_env.sinks[0].secret, Some(Secret::new("e".into())));
        let with_file = NotifyFlags { webhook_secret_file: Some("/s".into()), webhook_events: vec!["succeeded".into()], ..flags.clone() };
        let from_file = Settings::resolve(&with_file, &fake(&[("/s", "f")], &[(WEBHOOK_SECRET_ENV, "e")])).expect("valid");
        assert_eq!((from_file.sinks[0].secret.clone(), from_file.sinks[0].topics.len()), (Some(Secret::new("f".into())), 1));
        assert!(error(&flags, &fake(&[], &[])).contains("--webhook-secret-file"));
        assert!(Settings::resolve(&NotifyFlags::default(), &fake(&[], &[])).expect("off").sinks.is_empty());
    }

    #[test]
    fn a_bad_config_says_what_to_fix() {
        let cases = [
            ("[[sink]]\nname = \"a\"\nformat = \"email\"\nurl = \"http://x\"", "format \"email\" is not webhook, slack or alertmanager"),
            ("[[sink]]\nname = \"a\"\nformat = \"slack\"\nurl = \"ftp://x\"", "is not an http:// or https:// URL"),
            ("[[sink]]\nname = \"a\"\nformat = \"webhook\"\nurl = \"http://x\"", "give its secret"),
            ("[[sink]]\nname = \"a\"\nformat = \"webhook\"\nurl = \"http://x\"\nsecret_env = \"NOPE\"", "NOPE (secret_env) is not set"),
            ("[[sink]]\nname = \"a\"\nformat = \"slack\"\nurl = \"http://x\"\nevents = [\"fail\"]", "event \"fail\" is not one of failed"),
            (
                "[[sink]]\nname = \"a\"\nformat = \"slack\"\nurl = \"http://x\"\n[[sink]]\nname = \"a\"\nformat = \"slack\"\nurl = \"http://y\"",
                "two sinks are named \"a\"",
            ),
            ("[[sink]]\nname = \"a b\"\nformat = \"slack\"\nurl = \"http://x\"", "letters, digits"),
            ("[retry]\nattempts = 0", "retry.attempts is 0"),
            ("[retry]\nfirst_delay = \"soon\"", "retry.first_delay \"soon\""),
            ("[[sinks]]\nname = \"a\"", "unknown field `sinks`"),
            ("version = 2", "version 2 is not known"),
        ];
        for (text, want) in cases {
            let flags = NotifyFlags { notify_config: Some("/n.toml".into()), ..Default::default() };
            let e = error(&flags, &fake(&[("/n.toml", text)], &[]));
            assert!(e.contains(want) && e.contains("/n.toml"), "{text:?}: {e}");
        }
    }
}
