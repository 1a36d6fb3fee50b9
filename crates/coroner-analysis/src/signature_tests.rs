use super::*;
use crate::evidence::RankEvidence;
use coroner_model::{FaultClass, LineRef, Stream};

#[test]
fn numbers_addresses_paths_and_names_are_masked() {
    let cases = [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 1 has a total capacity of 139.80 GiB of which 12.5 GiB is free.",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <num> GiB. GPU <num> has a total capacity of <num> GiB of which <num> GiB is free.",
        ),
        (
            "[rank3]: NCCL error in: /opt/pytorch/ProcessGroupNCCL.cpp:1970, remote process exited, connection to 10.1.2.3:29500 on gpu-node-017.cluster.local closed",
            "[rank<num>]: NCCL error in: <path>:<num>, remote process exited, connection to <addr> on <host> closed",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=12345, name=python, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:<pci>): <num>, pid=<num>, name=python, GPU has fallen off the bus.",
        ),
        (
            "RuntimeError: The size of tensor a (1024) must match the size of tensor b (512) at non-singleton dimension 1; got torch.Size([8, 1024]) and [8, 512]",
            "RuntimeError: The size of tensor a (<num>) must match the size of tensor b (<num>) at non-singleton dimension <num>; got <shape> and <shape>",
        ),
        (
            "segfault at 0x7f3a2c001000 in libnccl.so.2 on GPU-5e1c9a2b-3f4d-4e5f-8a9b-0c1d2e3f4a5b (00000000:18:00.0) hash deadbeef1234",
            "segfault at <hex> in libnccl.so.<num> on <uuid> (<pci>) hash <hex>",
        ),
        (
            "E1201 10:00:00.123456 4242 ProcessGroupNCCL.cpp:688] [PG 0 Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=1153) ran for 600012 milliseconds",
            "E<date> <time> <num> ProcessGroupNCCL.cpp:<num>] [PG <num> Rank <num>] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=<num>, OpType=ALLREDUCE, NumelIn=<num>) ran for <num> milliseconds",
        ),
        ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 12 of ./data/shard-00017.bin and/or N/A", "UnicodeDecodeError: 'utf-<num>' codec can't decode byte <hex> in position <num> of <path> and/or N/A"),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input), want, "input: {input}");
    }
}

#[test]
fn normalising_is_deterministic_and_keeps_the_first_line_only() {
    let a = "KeyError: 'layer.3.weight'\n  during handling of another line 99";
    assert_eq!(normalize(a), normalize(a));
    assert_eq!(normalize(a), "KeyError: 'layer.<num>.weight'");
    assert!(normalize(&"x ".repeat(1000)).len() <= MAX_TEMPLATE);
    assert_eq!(normalize(""), "");
}

#[test]
fn the_id_is_a_fixed_hash_of_class_template_and_frames() {
    // Fixed value: ids are stored and compared across builds, so the hash must never change.
    assert_eq!(signature_id("cuda_oom", "x", &[]), signature_id("cuda_oom", "x", &[]));
    // FNV-1a 64 of the single separator byte between the (empty) class and template.
    assert_eq!(signature_id("", "", &[]), "af63bd4c8601b7df");
    assert_ne!(signature_id("cuda_oom", "x", &[]), signature_id("segfault", "x", &[]));
    assert_ne!(signature_id("cuda_oom", "x", &["f (a.py)".into()]), signature_id("cuda_oom", "x", &[]));
    assert_ne!(signature_id("ab", "c", &[]), signature_id("a", "bc", &[]));
}

#[test]
fn pci_ids_from_kernel_smi_and_nccl_agree() {
    assert_eq!(canonical_pci("PCI:0000:18:00"), "0000:18:00");
    assert_eq!(canonical_pci("00000000:18:00.0"), "0000:18:00");
    assert_eq!(canonical_pci("18:00.0"), "0000:18:00");
    assert_eq!(nccl_bus_id("18000").as_deref(), Some("0000:18:00"));
    assert_eq!(nccl_bus_id("0000:18:00.0").as_deref(), Some("0000:18:00"));
    assert_eq!(nccl_bus_id("zz"), None);
}

fn sig(class: FaultClass, template: &str, collective: Option<&str>) -> FailureSignature {
    FailureSignature {
        id: signature_id(class.as_str(), template, &[]),
        class,
        template: template.into(),
        frames: vec![],
        rank: None,
        host: None,
        gpu: None,
        collective: collective.map(str::to_string),
    }
}

#[test]
fn close_means_same_class_and_a_similar_message_or_the_same_collective() {
    let a = sig(FaultClass::CudaOom, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <num> GiB", None);
    let b = sig(FaultClass::CudaOom, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <num> MiB", None);
    let c = sig(FaultClass::CudaOom, "something else entirely", None);
    let d = sig(FaultClass::Segfault, &a.template, None);
    assert_eq!(compare(&a, &a), Some((true, 1.0)));
    let (same, s) = compare(&a, &b).expect("close");
    assert!(!same && (CLOSE_SIMILARITY..1.0).contains(&s), "{s}");
    assert_eq!(compare(&a, &c), None);
    assert_eq!(compare(&a, &d), None, "another class is never close");
    let h1 = sig(FaultClass::Hang, "rank stuck", Some("ALLREDUCE"));
    let h2 = sig(FaultClass::Hang, "no progress for a long while", Some("ALLREDUCE"));
    assert!(matches!(compare(&h1, &h2), Some((false, _))));
}

fn report(json: serde_json::Value) -> Report {
    let mut base = serde_json::json!({
        "format_version": 1, "job_id": "j", "verdict": "failed", "first_failure": null,
        "cascade": [], "collectives": [], "ranks": [], "advice": [], "snapshots": [], "notes": []
    });
    if let (Some(b), Some(extra)) = (base.as_object_mut(), json.as_object()) {
        b.extend(extra.clone());
    }
    serde_json::from_value(base).expect("a report")
}

fn first_failure(rank: u32, class: &str, lines: &[(u32, &str)]) -> serde_json::Value {
    serde_json::json!({
        "rank": rank, "class": class, "time": null, "host": "node-7", "confidence": 0.9,
        "summary": "s", "rule": null, "candidates": [],
        "evidence": lines.iter().map(|(r, l)| serde_json::json!({"rank": r, "time": "t", "stream": "stderr", "line": l})).collect::<Vec<_>>(),
    })
}

fn event(text: &str, kind: EventKind) -> Event {
    Event { rank: Some(Rank(1)), line: LineRef { stream: Stream::Stderr, seq: 1 }, capture_ns: 1, printed_ns: None, kind, text: text.into() }
}

#[test]
fn a_signature_reads_the_root_events_message_frames_and_gpu() {
    let text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
    let r = report(serde_json::json!({
        "first_failure": first_failure(1, "cuda_oom", &[(0, "victim line"), (1, text)]),
        "collectives": [{"pg": "0", "rank": 0, "last_enqueued": 3, "last_started": 3, "last_completed": 2, "pending": "ALLREDUCE seq 3 (10 elements)"}],
    }));
    let mut ev = JobEvidence::default();
    let frames = vec![
        Frame { file: "/opt/job/train.py".into(), line: Some(10), function: "<module>".into() },
        Frame { file: "/opt/job/train.py".into(), line: Some(5), function: "step".into() },
        Frame { file: "/usr/lib/torch/nn/modules/linear.py".into(), line: Some(125), function: "forward".into() },
    ];
    let mut rank = RankEvidence::default();
    rank.events.push(event(
        text,
        EventKind::Exception { exc_type: "torch.OutOfMemoryError".into(), message: "CUDA out of memory. Tried to allocate 2.00 GiB".into(), frames },
    ));
    rank.events
        .push(event("init", EventKind::NcclInit { host: "vm".into(), pid: 1, rank: Rank(1), nranks: 2, cuda_dev: Some(1), bus_id: Some("18000".into()) }));
    ev.insert_rank(Rank(1), rank);

    let s = signature(&r, Some(&ev)).expect("a failed report has a signature");
    assert_eq!(s.class, FaultClass::CudaOom);
    assert_eq!(s.template, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <num> GiB");
    assert_eq!(s.frames, vec!["forward (linear.py)", "step (train.py)", "<module> (train.py)"]);
    assert_eq!((s.rank, s.host.as_deref(), s.gpu.as_deref()), (Some(Rank(1)), Some("node-7"), Some("0000:18:00")));
    assert_eq!(s.collective.as_deref(), Some("ALLREDUCE"), "the stuck peers' collective when the culprit has none");
    assert_eq!(s, signature(&r, Some(&ev)).expect("again"), "deterministic");

    // Without the evidence: the report's line stands for the message, no frames.
    let bare = signature(&r, None).expect("signature");
    assert_eq!(bare.template, s.template);
    assert!(bare.frames.is_empty());
    assert_ne!(bare.id, s.id);

    // The same failure with other numbers has the same id.
    let text2 = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB";
    let r2 = report(serde_json::json!({"first_failure": first_failure(0, "cuda_oom", &[(0, text2)])}));
    assert_eq!(signature(&r2, None).map(|s| s.id), Some(bare.id));
}

#[test]
fn an_xid_names_the_gpu_and_succeeded_jobs_have_no_signature() {
    let xid = "[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.";
    let r = report(serde_json::json!({"first_failure": first_failure(2, "gpu_hardware", &[(2, xid)])}));
    let s = signature(&r, None).expect("signature");
    assert_eq!(s.gpu.as_deref(), Some("0000:3b:00"));
    assert_eq!(s.template, "[ <num>] NVRM: Xid (PCI:<pci>): <num>, pid=<num>, name=python, GPU has fallen off the bus.");
    let ok = report(serde_json::json!({"verdict": "succeeded"}));
    assert_eq!(signature(&ok, None), None);
}
