//! Skews a rank's clock the way a real host with a wrong clock would: its capture times and the
//! times printed inside its lines (glog `[E1130 08:59:11.424298747 ...`, Python logging
//! `2026-11-30 08:58:51,398`, torchrun `I1130 09:03:42.336000 3148 ...`) all move together.

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, Timelike};
use coroner_model::LogLine;
use regex::bytes::{Captures, Regex};
use std::sync::LazyLock;

static PY_LOGGING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}),(\d{3})").expect("regex"));
static GLOG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d+)").expect("regex"));

fn num(c: &Captures<'_>, i: usize) -> u32 {
    std::str::from_utf8(&c[i]).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Shifts one line by `shift_ns`, in place.
pub fn shift_line(line: &mut LogLine, shift_ns: i64) {
    line.capture_ns += shift_ns;
    let d = Duration::nanoseconds(shift_ns);
    let text = PY_LOGGING.replace_all(&line.bytes, |c: &Captures<'_>| {
        let t =
            NaiveDate::from_ymd_opt(num(c, 1) as i32, num(c, 2), num(c, 3)).and_then(|date| date.and_hms_milli_opt(num(c, 4), num(c, 5), num(c, 6), num(c, 7)));
        match t {
            Some(t) => (t + d).format("%Y-%m-%d %H:%M:%S,%3f").to_string().into_bytes(),
            None => c[0].to_vec(),
        }
    });
    let text = GLOG.replace_all(&text, |c: &Captures<'_>| {
        let digits = c[7].len().min(9);
        let frac = i64::from(num(c, 7)) * 10i64.pow(9 - digits as u32);
        let t = NaiveDate::from_ymd_opt(2026, num(c, 2), num(c, 3))
            .and_then(|date| date.and_hms_opt(num(c, 4), num(c, 5), num(c, 6)))
            .map(|t: NaiveDateTime| t + Duration::nanoseconds(frac) + d);
        match t {
            Some(t) => {
                let ns = i64::from(t.nanosecond());
                let frac = ns / 10i64.pow(9 - digits as u32);
                format!(
                    "{}{:02}{:02} {:02}:{:02}:{:02}.{:0width$}",
                    String::from_utf8_lossy(&c[1]),
                    t.month(),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second(),
                    frac,
                    width = digits
                )
                .into_bytes()
            }
            None => c[0].to_vec(),
        }
    });
    line.bytes = text.into_owned();
}

/// A small deterministic generator, so a failing seed can be rerun.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-max, max].
    pub fn shift(&mut self, max_ns: i64) -> i64 {
        (self.next_u64() % (2 * max_ns as u64 + 1)) as i64 - max_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::Stream;

    #[test]
    fn printed_times_move_with_the_capture_time() {
        let mut l = LogLine {
            rank: None,
            stream: Stream::Stderr,
            seq: 0,
            capture_ns: 0,
            bytes: b"[rank0]:[E1130 23:59:59.900000000 X.cpp:1] a; 2026-11-30 23:59:59,900 INFO b".to_vec(),
        };
        shift_line(&mut l, 200_000_000);
        assert_eq!(String::from_utf8_lossy(&l.bytes), "[rank0]:[E1201 00:00:00.100000000 X.cpp:1] a; 2026-12-01 00:00:00,100 INFO b");
        assert_eq!(l.capture_ns, 200_000_000);
    }
}
