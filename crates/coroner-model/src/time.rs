//! Nanosecond timestamps. Every stored time is nanoseconds since the Unix epoch *by the clock of
//! the host that took it*; aligned time exists only inside a report.

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

/// Formats nanoseconds since the epoch as RFC 3339 in UTC with nanosecond precision,
/// without pulling a date library into the model crate.
pub fn format_rfc3339_ns(ns: Nanos) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let frac = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        y,
        m,
        d,
        sod / 3600,
        (sod / 60) % 60,
        sod % 60,
        frac
    )
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
        assert_eq!(
            format_rfc3339_ns(1_796_029_127_092_747_587),
            "2026-11-30T08:58:47.092747587Z"
        );
        assert_eq!(format_rfc3339_ns(-1), "1969-12-31T23:59:59.999999999Z");
    }
}
