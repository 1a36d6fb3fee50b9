//! The exit status of `analyze`, `report`, `watch --until-done` and `search --follow`: one code per verdict, so a
//! script can branch on the outcome without parsing JSON. 2 stays what it is for every command:
//! coroner itself could not answer (bad arguments, unreadable input, coronerd unreachable).

use coroner_model::Verdict;
use std::process::ExitCode;

/// What `--help` and the README print; keep it in step with [`exit_code`].
pub const EXIT_CODES: &str = "\
Exit status (analyze, report, watch --until-done, search --follow):
  0  the job succeeded (every rank ended well, or the logs show no failure)
  1  the job failed (the report names the first failure)
  2  coroner could not answer (bad arguments, unreadable input, coronerd unreachable)
  3  unknown: the job ended but its evidence supports no verdict (a partial log)
  4  the job is still running (report, and search --follow stopped by Ctrl-C)";

pub fn exit_code(verdict: Verdict) -> ExitCode {
    ExitCode::from(code(verdict))
}

fn code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Succeeded => 0,
        Verdict::Failed => 1,
        Verdict::Unknown => 3,
        Verdict::Running => 4,
    }
}

/// The verdict coronerd sent (the enum, else the text of a server from before it); one this CLI
/// does not know counts as unknown.
pub fn verdict_from_wire(r: &coroner_proto::v1::ReportResponse) -> Verdict {
    coroner_proto::report::verdict_from_wire(r.verdict_code, &r.verdict).unwrap_or(Verdict::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_has_its_own_code_and_none_is_two() {
        let all = [Verdict::Succeeded, Verdict::Failed, Verdict::Unknown, Verdict::Running];
        let codes: std::collections::BTreeSet<u8> = all.iter().map(|v| code(*v)).collect();
        assert_eq!(codes.len(), all.len());
        assert!(!codes.contains(&2), "2 means coroner could not answer");
        for v in all {
            assert!(EXIT_CODES.contains(&format!("  {}  ", code(v))), "{v} missing from the help text");
        }
    }

    #[test]
    fn an_unknown_wire_verdict_is_unknown() {
        let sent = |verdict_code, verdict: &str| coroner_proto::v1::ReportResponse { verdict_code, verdict: verdict.into(), ..Default::default() };
        assert_eq!(verdict_from_wire(&sent(coroner_proto::v1::Verdict::Failed as i32, "")), Verdict::Failed);
        assert_eq!(verdict_from_wire(&sent(0, "failed")), Verdict::Failed, "a server from before the enum");
        assert_eq!(verdict_from_wire(&sent(0, "exploded")), Verdict::Unknown);
    }
}
