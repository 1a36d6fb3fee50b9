//! Records as collectors and consoles fold them (field round 9): a traceback's head with its
//! first frame on the same line, ProcessGroupNCCL's desync report under a rank prefix. Lines are
//! made up in those shapes.

mod support;

use coroner_model::{EventKind, Rank};
use support::run;

#[test]
fn a_traceback_head_with_its_first_frame_glued_on_is_a_traceback() {
    let evs = run(&[
        "Traceback (most recent call last): File \"/srv/job/run.py\", line 40, in <module>",
        "  File \"/srv/job/run.py\", line 12, in setup",
        "OSError: [Errno 5] Input/output error",
    ]);
    let frames: Vec<usize> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Exception { exc_type, frames, .. } if exc_type == "OSError" => Some(frames.len()),
            _ => None,
        })
        .collect();
    assert_eq!(frames, vec![2]);
    // Cut before its exception line, it still says the process failed, in the glued frame.
    let cut = run(&["Traceback (most recent call last): File \"/srv/job/run.py\", line 40, in <module>", "main()"]);
    assert!(cut.iter().any(|e| e.kind.message().contains("cut before its exception line, last frame <module> (/srv/job/run.py)")), "{cut:?}");
    // The head followed by prose is not a traceback.
    assert!(run(&["Traceback (most recent call last): see the log above"]).is_empty());
}

#[test]
fn a_desync_report_under_a_rank_prefix_names_the_rank_that_never_joined() {
    let evs = run(&[
        "[rank3]:[E1203 10:00:00.000000000 ProcessGroupNCCL.cpp:1937] Rank 3",
        "         - [3] Timeout at collective: ALLGATHER, #90",
        "         - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
        "             [5] finished collective #88, but didn't join collective #89 (count from 1)",
    ]);
    let stalls: Vec<Vec<Rank>> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Stall { missing, .. } => Some(missing.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(stalls, vec![vec![Rank(5)]]);
}
