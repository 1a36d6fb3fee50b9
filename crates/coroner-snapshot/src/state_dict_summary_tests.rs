use super::*;

/// Written by the crash hook (python/coroner_hook) for an 8-way FSDP2 model with two Llama-3-8B
/// sized layers (fake torch, rank 3, AdamW), the full state_dict asked for over a 256 MiB cap.
const SUMMARY: &[u8] = include_bytes!("../../../tests/data/snapshots/rank3.state_dict.json");

#[test]
fn the_hooks_summary_reads() {
    let s = parse(SUMMARY).unwrap();
    assert_eq!((s.version, s.rank), (1, Some(3)));
    assert_eq!(s.tensors.len(), 22);
    let embed = &s.tensors[0];
    assert_eq!(embed.name, "model.embed_tokens.weight");
    assert_eq!((embed.shape.as_deref(), embed.local_shape.as_deref()), (Some(&[128256, 4096][..]), Some(&[16032, 4096][..])));
    assert_eq!((embed.dtype.as_deref(), embed.device.as_deref(), embed.ranks, embed.sharded), (Some("bfloat16"), Some("cuda:3"), Some(8), true));
    assert_eq!(s.tensors[21].kind, "buffer");
    assert_eq!(s.optimizer.as_ref().unwrap().class, "AdamW");
    assert_eq!(
        s.highlights(),
        vec![
            "22 tensors (21 parameters, 1 buffers): 1.5 B parameters, bfloat16 100%, float32 <1%; on cuda:3",
            "sharded: 21 tensors over 8 ranks (DTensor Shard(dim=0)); this rank holds 185.9 M elements (354.5 MiB)",
            "largest listed: model.embed_tokens.weight [128256,4096] bfloat16 (local [16032,4096])",
            "optimizer AdamW: lr=0.0003 betas=[0.9, 0.95] eps=1e-8 weight_decay=0.1",
            "full state_dict not written: estimated 371725568 bytes of local shards, over the cap of 268435456 (CORONER_HOOK_MAX_BYTES)",
        ]
    );
}

#[test]
fn totals_come_from_the_list_when_the_file_has_none() {
    let mut v: serde_json::Value = serde_json::from_slice(SUMMARY).unwrap();
    let from_file = parse(SUMMARY).unwrap().totals();
    v.as_object_mut().unwrap().remove("totals");
    let s = parse(v.to_string().as_bytes()).unwrap();
    let t = s.totals();
    assert_eq!((t.tensors, t.parameters, t.buffers, t.numel, t.local_numel, t.sharded), (22, 21, 1, from_file.numel, from_file.local_numel, 21));
    assert_eq!((t.bytes, t.local_bytes, &t.dtypes, &t.shard_ranks), (from_file.bytes, from_file.local_bytes, &from_file.dtypes, &from_file.shard_ranks));
}

#[test]
fn a_capped_list_and_an_unsharded_model_say_so() {
    let doc = br#"{"format":"coroner.state_dict_summary","version":1,"tensors":[
        {"name":"layers.0.weight","kind":"parameter","shape":[25000],"dtype":"float32","device":"cuda:0","numel":25000,"element_size":4}],
        "totals":{"tensors":1000000,"listed":1,"omitted":999999,"parameters":1000000,"numel":25000000000,"bytes":100000000000,
        "local_numel":25000000000,"local_bytes":100000000000,"dtypes":{"float32":25000000000},"devices":{"cuda:0":1000000}},
        "incomplete":"the walk stopped after 10 s","full_state_dict":{"requested":false,"skipped":"not requested"}}"#;
    let h = parse(doc).unwrap().highlights();
    assert_eq!(
        h,
        vec![
            "1000000 tensors (1000000 parameters, 0 buffers): 25.0 B parameters, float32; on cuda:0",
            "not sharded: 93.1 GiB on this rank",
            "largest listed: layers.0.weight [25000] float32",
            "only the first 1 of 1000000 tensors are listed",
            "incomplete: the walk stopped after 10 s",
        ]
    );
}

#[test]
fn a_written_full_state_dict_and_odd_entries() {
    let doc = br#"{"format":"coroner.state_dict_summary","tensors":[{"name":"odd","kind":"parameter","error":"AttributeError()"},
        {"name":"view","kind":"parameter","shape":null,"local_shape":[100],"sharded":true,"sharding":"FSDP flattened view","element_size":2,"local_numel":100,"dtype":"bfloat16"}],
        "full_state_dict":{"requested":true,"written":["rank0.state_dict.pt"]},"future_field":{"x":1}}"#;
    let s = parse(doc).unwrap();
    let h = s.highlights();
    assert_eq!(h[0], "2 tensors (2 parameters, 0 buffers): 0 parameters (+2 tensors of unknown global shape), bfloat16");
    assert_eq!(h[1], "sharded: 1 tensors (FSDP flattened view); this rank holds 100 elements (200 B)");
    assert_eq!(h[2], "largest listed: view ? bfloat16 (local [100])");
    assert_eq!(h[3], "full state_dict written: rank0.state_dict.pt");
}

#[test]
fn truncated_and_garbage_input_are_errors() {
    for cut in [0, 1, 40, SUMMARY.len() / 2, SUMMARY.len() - 2] {
        let e = parse(&SUMMARY[..cut]).unwrap_err().to_string();
        assert!(e.starts_with("state_dict summary: "), "{cut}: {e}");
    }
    for bad in [&b"\xff\xfe\x00garbage"[..], b"[]", b"42", b"{}", br#"{"format":"something else"}"#, br#"{"format":"coroner.state_dict_summary","tensors":7}"#]
    {
        assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    // Negative sizes and deep nesting are errors, not panics; deep nesting in a field this reader
    // skips is skipped.
    assert!(parse(br#"{"format":"coroner.state_dict_summary","tensors":[{"name":"w","numel":-1}]}"#).is_err());
    let deep = |field: &str| format!("{{\"format\":\"coroner.state_dict_summary\",\"{field}\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(parse(deep("tensors").as_bytes()).is_err());
    assert!(parse(deep("future_field").as_bytes()).is_ok());
}

#[test]
fn huge_counts_saturate() {
    let max = u64::MAX;
    let doc = format!(
        r#"{{"format":"coroner.state_dict_summary","tensors":[{{"name":"a","kind":"parameter","numel":{max},"element_size":{max},"dtype":"x"}},{{"name":"b","kind":"parameter","numel":{max},"element_size":8,"dtype":"x"}}]}}"#
    );
    let s = parse(doc.as_bytes()).unwrap();
    assert_eq!(s.totals().bytes, u64::MAX);
    assert!(s.highlights()[0].contains("T parameters"), "{:?}", s.highlights());
}
