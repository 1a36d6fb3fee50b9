//! Nanosecond timestamps, and durations as people write them. Every stored time is nanoseconds
//! since the Unix epoch *by the clock of the host that took it*; aligned time exists only inside
//! a report.

use std::time::Duration;

/// Nanoseconds since the Unix epoch, on some host's clock.
pub type Nanos = i64;

/// Nanoseconds since the Unix epoch by this host's wall clock (negative before 1970, saturating
/// beyond what an `i64` holds). The one place the workspace reads the wall clock as a number.
pub fn now_ns() -> Nanos {
    use std::time::{SystemTime, UNIX_EPOCH};
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// A duration as every flag and variable of every coroner program takes it: as `humantime`
/// writes it (`500ms`, `45s`, `90m`, `12h`, `30d`, `2w`, `1m 30s`), or a bare number of seconds
/// (`1.5`, `0`), which is what several flags took before. A fraction with one unit (`1.5h`),
/// which `--retention` took, is read too.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let usable = |secs: f64| Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?} is not a usable duration: {e}"));
    if let Ok(secs) = t.parse::<f64>() {
        return usable(secs);
    }
    match humantime::parse_duration(t) {
        Ok(d) => Ok(d),
        Err(e) => match fraction_with_unit(t) {
            Some(secs) => usable(secs),
            None => Err(format!("{text:?} is not a duration ({e}): use 500ms, 45s, 90m, 12h, 30d or a number of seconds")),
        },
    }
}

/// `1.5h`: a decimal number and one unit humantime knows by its short name.
fn fraction_with_unit(t: &str) -> Option<f64> {
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = t.split_at(split);
    let unit_secs = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        _ => return None,
    };
    Some(number.parse::<f64>().ok()? * unit_secs)
}

/// Formats nanoseconds since the epoch as RFC 3339 in UTC with nanosecond precision,
/// without pulling a date library into the model crate.
pub fn format_rfc3339_ns(ns: Nanos) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let frac = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", y, m, d, sod / 3600, (sod / 60) % 60, sod % 60, frac)
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_epoch_and_a_corpus_time() {
        assert_eq!(format_rfc3339_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(format_rfc3339_ns(1_796_029_127_092_747_587), "2026-11-30T08:58:47.092747587Z");
        assert_eq!(format_rfc3339_ns(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn durations_in_every_syntax_the_flags_took() {
        let secs = Duration::from_secs;
        // A bare number is seconds (coronerd's --lease-ttl, --hang-floor; the agent's --linger).
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(" 45 "), Ok(secs(45)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        // humantime (the agent's flags; --retention's 30d, 12h, 90m, 2w).
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m 30s"), Ok(secs(90)));
        assert_eq!(parse_duration("90m"), Ok(secs(5400)));
        assert_eq!(parse_duration("12h"), Ok(secs(43_200)));
        assert_eq!(parse_duration("30d"), Ok(secs(30 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(secs(14 * 86_400)));
        // A fraction with a unit, which --retention took.
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.5d"), Ok(secs(43_200)));
        for bad in ["soon", "", "-1", "1.5x", "h"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
