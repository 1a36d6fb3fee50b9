//! Printed-time parsing: the time a line states about itself, read as UTC.
//!
//! Hand-written byte parsers (no regex): glog `[E1130 08:59:11.424298747 ...` and
//! `E1130 09:03:42.336000 3148 ...` (month and day without a year: the year is the one that puts
//! the time nearest to the capture time), Python logging `2026-11-30 08:58:51,398`, ISO 8601
//! `2026-11-30T08:58:51.398Z` / `+01:00`, NCCL's `[2026-11-30 08:58:51]`, syslog `Nov 30 08:58:51`
//! and torchrun's table `2026-11-30_09:03:42`. dmesg's `[12345.678]` is relative: `None`.

use coroner_model::Nanos;

const NS: i64 = 1_000_000_000;

/// The time printed in a line, as ns since epoch treating the printed wall time as UTC, or None.
pub fn printed_time(text: &str, capture_ns: Nanos) -> Option<Nanos> {
    let b = text.as_bytes();
    let b = &b[..b.len().min(1024)];
    let start = b.iter().position(|c| *c != b' ' && *c != b'\t').unwrap_or(b.len());
    let s = &b[start..];
    if s.is_empty() {
        return None;
    }
    // `[E1130 ...` / `E1130 ...`
    let glog = if s[0] == b'[' { &s[1..] } else { s };
    if let Some(t) = glog_time(glog, capture_ns) {
        return Some(t);
    }
    if let Some(t) = syslog_time(s, capture_ns) {
        return Some(t);
    }
    if s[0] == b'[' {
        if let Some(t) = dmesg_human(&s[1..]) {
            return Some(t);
        }
        if dmesg_relative(&s[1..]) {
            // A kernel ring-buffer offset; a syslog time may still follow (`[1.2] Nov 30 ...` is rare).
            return None;
        }
        if let Some(t) = iso_time(&s[1..]) {
            return Some(t);
        }
    }
    if let Some(t) = iso_time(s) {
        return Some(t);
    }
    // Anywhere in the line: the first `YYYY-MM-DD` followed by a time (NCCL WARN after a prefix,
    // torchrun's table `time : 2026-11-30_09:03:42`, Slurm's `CANCELLED AT 2026-11-30T08:59:11`).
    let limit = s.len().min(512);
    let mut i = 1;
    while i + 19 <= limit {
        if s[i].is_ascii_digit() && !s[i - 1].is_ascii_digit() && s.get(i + 4) == Some(&b'-') {
            if let Some(t) = iso_time(&s[i..]) {
                return Some(t);
            }
        }
        i += 1;
    }
    None
}

fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let d = s.get(at..at + n)?;
    if !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(d.iter().fold(0i64, |a, c| a * 10 + i64::from(c - b'0')))
}

/// `HH:MM:SS` at `at`, then an optional `.frac` / `,frac`; returns (ns of day, bytes used).
fn hms(s: &[u8], at: usize) -> Option<(i64, usize)> {
    let h = digits(s, at, 2)?;
    if s.get(at + 2) != Some(&b':') || s.get(at + 5) != Some(&b':') {
        return None;
    }
    let m = digits(s, at + 3, 2)?;
    let sec = digits(s, at + 6, 2)?;
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let mut used = 8;
    let mut frac_ns = 0i64;
    if matches!(s.get(at + 8), Some(b'.') | Some(b',')) {
        let mut k = at + 9;
        let mut scale = 100_000_000i64;
        let mut any = false;
        while let Some(c) = s.get(k) {
            if !c.is_ascii_digit() {
                break;
            }
            any = true;
            frac_ns += i64::from(c - b'0') * scale;
            scale /= 10;
            k += 1;
        }
        if any {
            used = k - at;
        }
    }
    Some(((h * 3600 + m * 60 + sec) * NS + frac_ns, used))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn year_of(ns: Nanos) -> i64 {
    // Good enough: the civil year of the capture time.
    let days = ns.div_euclid(86_400 * NS);
    let mut y = 1970 + days.div_euclid(365);
    while days_from_civil(y, 1, 1) > days {
        y -= 1;
    }
    while days_from_civil(y + 1, 1, 1) <= days {
        y += 1;
    }
    y
}

fn valid_md(m: i64, d: i64) -> bool {
    (1..=12).contains(&m) && (1..=31).contains(&d)
}

/// Month and day without a year: pick the year nearest to the capture time.
fn nearest_year(m: i64, d: i64, ns_of_day: i64, capture_ns: Nanos) -> Option<Nanos> {
    if !valid_md(m, d) {
        return None;
    }
    // A line is printed before it is captured (a file's time is when it was last written, or
    // copied): the latest year that puts it no later than the capture, give or take a fast
    // clock's [`FUTURE_SLACK_NS`]. `E0226` read in December is last February, not next.
    let y = year_of(capture_ns);
    let mut best: Option<Nanos> = None;
    for yy in [y - 1, y, y + 1] {
        let t = days_from_civil(yy, m, d).checked_mul(86_400 * NS)?.checked_add(ns_of_day)?;
        if t <= capture_ns.saturating_add(FUTURE_SLACK_NS) {
            best = Some(t);
        }
    }
    best
}

/// How far after its capture a line's printed time may be (an emitter's clock running ahead).
const FUTURE_SLACK_NS: Nanos = 2 * 86_400 * NS;

/// glog: `E1130 08:59:11.424298747` (severity letter, MMDD, space, time); PyTorch's own C++
/// logging does not pad the month (`E421 02:05:38...` is April 21).
fn glog_time(s: &[u8], capture_ns: Nanos) -> Option<Nanos> {
    if !matches!(s.first(), Some(b'I' | b'W' | b'E' | b'F' | b'D')) {
        return None;
    }
    let n = s[1..].iter().take_while(|c| c.is_ascii_digit()).count();
    let (m, d) = match n {
        4 => (digits(s, 1, 2)?, digits(s, 3, 2)?),
        3 => (digits(s, 1, 1)?, digits(s, 2, 2)?),
        // glog 0.7 and later: the year too, `F20250821 13:22:09.976752`.
        8 => (digits(s, 5, 2)?, digits(s, 7, 2)?),
        _ => return None,
    };
    if s.get(1 + n) != Some(&b' ') {
        return None;
    }
    if n == 8 {
        let (tod, _) = hms(s, 2 + n)?;
        return valid_md(m, d).then(|| days_from_civil(digits(s, 1, 4)?, m, d).checked_mul(86_400 * NS)?.checked_add(tod)).flatten();
    }
    if n == 4 && m == 0 && d == 0 {
        return absl_undated(&s[2 + n..]);
    }
    let (tod, _) = hms(s, 2 + n)?;
    nearest_year(m, d, tod, capture_ns)
}

/// absl's log header when its clock has no civil time yet (XLA, PJRT, TPU runtimes):
/// `E0000 00:00:1743713172.513857` - month and day 00, hour and minute 00, and the seconds are
/// Unix seconds with their fraction.
fn absl_undated(s: &[u8]) -> Option<Nanos> {
    let rest = s.strip_prefix(b"00:00:")?;
    let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    // At least 2001-09-09 (ten digits): a real epoch, not a clock just started.
    if n != 10 {
        return None;
    }
    let secs = digits(rest, 0, n)?;
    let mut frac_ns = 0i64;
    if rest.get(n) == Some(&b'.') {
        let mut scale = 100_000_000i64;
        for c in rest[n + 1..].iter().take_while(|c| c.is_ascii_digit()).take(9) {
            frac_ns += i64::from(c - b'0') * scale;
            scale /= 10;
        }
    }
    Some(secs * NS + frac_ns)
}

const MONTHS: [&[u8; 3]; 12] = [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// syslog: `Nov 30 08:58:51` or `Nov  3 08:58:51`.
fn syslog_time(s: &[u8], capture_ns: Nanos) -> Option<Nanos> {
    let mon = s.get(..3)?;
    let m = MONTHS.iter().position(|x| &x[..] == mon)? as i64 + 1;
    if s.get(3) != Some(&b' ') {
        return None;
    }
    let (d, at) = if s.get(4) == Some(&b' ') { (digits(s, 5, 1)?, 7) } else { (digits(s, 4, 2)?, 7) };
    if s.get(at - 1) != Some(&b' ') {
        return None;
    }
    let (tod, _) = hms(s, at)?;
    nearest_year(m, d, tod, capture_ns)
}

/// `dmesg -T`: `Wed Jan 27 23:04:35 2021` (weekday, month, day, time, year).
fn dmesg_human(s: &[u8]) -> Option<Nanos> {
    const DAYS: [&[u8]; 7] = [b"Mon ", b"Tue ", b"Wed ", b"Thu ", b"Fri ", b"Sat ", b"Sun "];
    if !DAYS.iter().any(|d| s.starts_with(d)) {
        return None;
    }
    let s = &s[4..];
    let mon = s.get(..3)?;
    let m = MONTHS.iter().position(|x| &x[..] == mon)? as i64 + 1;
    let rest = &s[4..];
    let pad = rest.iter().take_while(|c| **c == b' ').count();
    let rest = &rest[pad..];
    let dn = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    let d = digits(rest, 0, dn)?;
    let (tod, used) = hms(rest, dn + 1)?;
    let y = digits(rest, dn + 1 + used + 1, 4)?;
    if !valid_md(m, d) {
        return None;
    }
    days_from_civil(y, m, d).checked_mul(86_400 * NS)?.checked_add(tod)
}

/// `[   12.345678]`: the kernel's seconds since boot.
fn dmesg_relative(s: &[u8]) -> bool {
    let s = &s[s.iter().take_while(|c| **c == b' ').count()..];
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    n > 0 && s.get(n) == Some(&b'.')
}

/// `YYYY-MM-DD` then `T`, ` ` or `_`, then `HH:MM:SS[.frac]`, then optional `Z` / `+HH:MM` / `+HHMM`.
fn iso_time(s: &[u8]) -> Option<Nanos> {
    let y = digits(s, 0, 4)?;
    if s.get(4) != Some(&b'-') || s.get(7) != Some(&b'-') {
        return None;
    }
    let m = digits(s, 5, 2)?;
    let d = digits(s, 8, 2)?;
    if !valid_md(m, d) || !matches!(s.get(10), Some(b'T' | b' ' | b'_')) {
        return None;
    }
    let (tod, used) = hms(s, 11)?;
    let mut t = days_from_civil(y, m, d).checked_mul(86_400 * NS)?.checked_add(tod)?;
    let k = 11 + used;
    match s.get(k) {
        Some(b'+') | Some(b'-') => {
            let sign = if s[k] == b'+' { 1 } else { -1 };
            if let Some(oh) = digits(s, k + 1, 2) {
                let om = if s.get(k + 3) == Some(&b':') { digits(s, k + 4, 2) } else { digits(s, k + 3, 2) };
                if let Some(om) = om {
                    t -= sign * (oh * 3600 + om * 60) * NS;
                }
            }
        }
        _ => {}
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-30T08:58:47.092747587Z
    const CAP: Nanos = 1_796_029_127_092_747_587;

    fn at(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, ns: i64) -> Nanos {
        days_from_civil(y, mo, d) * 86_400 * NS + (h * 3600 + mi * 60 + s) * NS + ns
    }

    #[test]
    fn formats() {
        let cases: &[(&str, Option<Nanos>)] = &[
            ("[E1130 08:59:11.424298747 ProcessGroupNCCL.cpp:689] x", Some(at(2026, 11, 30, 8, 59, 11, 424_298_747))),
            ("E1130 09:03:42.336000 3148 torch/x.py:986] failed", Some(at(2026, 11, 30, 9, 3, 42, 336_000_000))),
            ("[E421 02:05:38.764490322 ProcessGroupGloo.cpp:143] x", Some(at(2026, 4, 21, 2, 5, 38, 764_490_322))),
            ("[W1130 08:58:47.665 Utils.hpp:137] w", Some(at(2026, 11, 30, 8, 58, 47, 665_000_000))),
            ("2026-11-30 08:58:51,398 INFO [rank0] train: step 4", Some(at(2026, 11, 30, 8, 58, 51, 398_000_000))),
            ("2026-11-30T08:58:51.398Z x", Some(at(2026, 11, 30, 8, 58, 51, 398_000_000))),
            ("2026-11-30T09:58:51.398+01:00 x", Some(at(2026, 11, 30, 8, 58, 51, 398_000_000))),
            ("[2026-11-30 08:58:51] vm:1:1 [0] misc.cc:1 NCCL WARN x", Some(at(2026, 11, 30, 8, 58, 51, 0))),
            ("Nov 30 08:58:51 host kernel: NVRM: Xid", Some(at(2026, 11, 30, 8, 58, 51, 0))),
            ("[12345.678] NVRM: Xid (PCI:0000:0a:00): 79", None),
            ("[Wed Jan 27 23:04:35 2021] NVRM: Xid (PCI:0000:3d:00): 43, pid=35521", Some(at(2021, 1, 27, 23, 4, 35, 0))),
            ("[Fri Jan  1 03:04:05 2021] x", Some(at(2021, 1, 1, 3, 4, 5, 0))),
            ("  time      : 2026-11-30_09:03:42", Some(at(2026, 11, 30, 9, 3, 42, 0))),
            ("vm:1141:1141 [0] NCCL INFO Channel 00/24 : 0 1", None),
            ("", None),
            ("E9999 99:99:99", None),
            // absl with no civil time yet: Unix seconds after `0000 00:00:`.
            ("F0000 00:00:1700000000.250000    9049 pjrt_client.cc:487] x", Some(1_700_000_000 * NS + 250_000_000)),
            ("E0000 00:00:12.5  7 foo.cc:1] a clock just started is no time", None),
        ];
        for (text, want) in cases {
            assert_eq!(printed_time(text, CAP), *want, "{text}");
        }
    }

    #[test]
    fn glog_year_rollover_picks_nearest_year() {
        // Captured 2027-01-01 00:00:05, printed Dec 31 23:59:59: the previous year.
        let cap = at(2027, 1, 1, 0, 0, 5, 0);
        assert_eq!(printed_time("[E1231 23:59:59.000 x.cpp:1] y", cap), Some(at(2026, 12, 31, 23, 59, 59, 0)));
        // Captured Dec 31, printed Jan 1 (a fast clock on the emitter): the next year.
        let cap = at(2026, 12, 31, 23, 59, 58, 0);
        assert_eq!(printed_time("I0101 00:00:01.5 1 x.py:1] y", cap), Some(at(2027, 1, 1, 0, 0, 1, 500_000_000)));
        // Read in December (a file copied today), a February line is last February's.
        let cap = at(2026, 12, 2, 12, 0, 0, 0);
        assert_eq!(printed_time("E0226 17:22:24.778667    5122 coredump_hook.cc:603] RAW: x", cap), Some(at(2026, 2, 26, 17, 22, 24, 778_667_000)));
        // glog 0.7's header carries its year.
        assert_eq!(printed_time("F20250821 13:22:09.976752 3186121 rdma_io.cc:811] Check failed", cap), Some(at(2025, 8, 21, 13, 22, 9, 976_752_000)));
    }
}
