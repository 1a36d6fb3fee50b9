//! The Query service's conventions for client authors (docs/API.md) on a real coronerd: every
//! list pages with `page_size`/`page_token`/`next_page_token`, tokens are bound to their list and
//! filters, verdicts and classes come as enums beside the old strings, and the report comes as a
//! message that agrees with its JSON.

use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};

#[test]
fn lists_page_with_tokens_and_reports_come_as_messages() {
    let served = TestServer::start();
    let report = served.import("nccl2_hang_r1", "conv-a");
    served.import("nccl2_hang_r1", "conv-b");
    runtime().block_on(async {
        let mut q = QueryClient::connect(served.grpc_url.clone()).await.expect("connect");

        // Jobs, one per page: every job once, then no token.
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let page = q.list_jobs(v1::ListJobsRequest { page_size: 1, page_token: token, ..Default::default() }).await.expect("jobs").into_inner();
            assert!(page.jobs.len() <= 1);
            for j in &page.jobs {
                assert_eq!((j.verdict_code, j.fault_class_code), (v1::Verdict::Failed as i32, v1::FaultClass::Hang as i32), "{j:?}");
                assert_eq!((j.verdict.as_str(), j.fault_class.as_str()), ("failed", "hang"), "the old strings stay filled");
            }
            seen.extend(page.jobs.into_iter().map(|j| j.job_id));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        seen.sort();
        assert_eq!(seen, ["conv-a", "conv-b"]);

        // A token is refused with other filters, from another list, or made up.
        let first = q.list_jobs(v1::ListJobsRequest { page_size: 1, ..Default::default() }).await.expect("jobs").into_inner();
        let other = v1::ListJobsRequest { page_size: 1, page_token: first.next_page_token.clone(), verdict: "failed".into(), ..Default::default() };
        let refused = q.list_jobs(other).await.expect_err("other filters");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().contains("filters") && refused.message().contains("next_page_token"), "{refused:?}");
        let foreign = v1::ListSuspectsRequest { page_token: first.next_page_token, ..Default::default() };
        assert_eq!(q.list_suspects(foreign).await.expect_err("a jobs token").code(), tonic::Code::InvalidArgument);
        let made_up = v1::ListJobsRequest { page_token: "not-a-token".into(), ..Default::default() };
        assert_eq!(q.list_jobs(made_up).await.expect_err("made up").code(), tonic::Code::InvalidArgument);

        // Snapshots, one per page, in the one-page order; a token is bound to its job.
        let all = q.list_snapshots(v1::ListSnapshotsRequest { job_id: "conv-a".into(), ..Default::default() }).await.expect("snapshots").into_inner();
        assert!(all.snapshots.len() >= 2 && all.next_page_token.is_empty(), "{all:?}");
        let mut paged = Vec::new();
        let mut token = String::new();
        loop {
            let req = v1::ListSnapshotsRequest { job_id: "conv-a".into(), page_size: 1, page_token: token };
            let page = q.list_snapshots(req).await.expect("snapshots").into_inner();
            paged.extend(page.snapshots);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(paged, all.snapshots);
        let first =
            q.list_snapshots(v1::ListSnapshotsRequest { job_id: "conv-a".into(), page_size: 1, ..Default::default() }).await.expect("page").into_inner();
        let elsewhere = v1::ListSnapshotsRequest { job_id: "conv-b".into(), page_size: 1, page_token: first.next_page_token };
        assert_eq!(q.list_snapshots(elsewhere).await.expect_err("another job's token").code(), tonic::Code::InvalidArgument);

        // Search follows the same names; the older cursor fields carry the same value.
        let base = v1::SearchRequest { job_id: "conv-a".into(), page_size: 7, ..Default::default() };
        let page = q.search(base.clone()).await.expect("search").into_inner();
        assert!(!page.next_page_token.is_empty() && page.next_page_token == page.next_cursor && page.hits.len() == 7);
        let next = q.search(v1::SearchRequest { page_token: page.next_page_token.clone(), ..base.clone() }).await.expect("next").into_inner();
        let by_cursor = q.search(v1::SearchRequest { cursor: page.next_cursor.clone(), ..base.clone() }).await.expect("by cursor").into_inner();
        assert_eq!(next.hits, by_cursor.hits);
        assert_ne!(next.hits.first(), page.hits.first());
        let both = v1::SearchRequest { page_token: page.next_page_token, cursor: next.next_cursor, ..base };
        assert_eq!(q.search(both).await.expect_err("two different positions").code(), tonic::Code::InvalidArgument);

        // The report as a message, agreeing with the JSON.
        let r = q.get_report(v1::GetReportRequest { job_id: "conv-a".into() }).await.expect("report").into_inner();
        assert_eq!((r.verdict_code, r.fault_class_code), (v1::Verdict::Failed as i32, v1::FaultClass::Hang as i32));
        let m = r.report.expect("the report message");
        let culprit = m.culprit.expect("a culprit");
        let first_failure = &report["first_failure"];
        assert_eq!(culprit.rank.map(u64::from), first_failure["rank"].as_u64());
        assert_eq!(culprit.fault_class, v1::FaultClass::Hang as i32);
        assert_eq!(culprit.reason, first_failure["summary"].as_str().unwrap_or_default());
        assert_eq!(culprit.evidence.len(), first_failure["evidence"].as_array().map_or(0, Vec::len));
        assert!(!culprit.evidence.is_empty());
        assert_eq!(m.ranks.len(), report["ranks"].as_array().map_or(0, Vec::len));
        assert!(m.ranks.iter().any(|s| s.rank == culprit.rank && s.role == "culprit"), "{:?}", m.ranks);
        assert_eq!(m.verdict, v1::Verdict::Failed as i32);
    });
}
