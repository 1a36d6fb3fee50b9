//! Tests for the data-only pickle reader: protocols 0, 2, 4 and 5, shared references, hostile
//! and corrupt input.

use super::*;

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

#[test]
fn protocol_4_values() {
    let data = b"\x80\x04\x95N\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01K\x02}\x94\x8c\x01b\x94Nse\x8c\x03big\x94\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@\x8c\x03neg\x94J\xfb\xff\xff\xff\x8c\x01f\x94G?\xf8\x00\x00\x00\x00\x00\x00\x8c\x01t\x94\x88C\x02xy\x94\x86\x94u.";
    let v = parse(data).unwrap();
    assert_eq!(v.get("a"), Some(&Value::List(vec![Value::Int(1), Value::Int(2), Value::Dict(vec![(s("b"), Value::None)])])));
    assert!(matches!(v.get("big"), Some(Value::BigInt(_))));
    assert_eq!(v.get("neg"), Some(&Value::Int(-5)));
    assert_eq!(v.get("f"), Some(&Value::Float(1.5)));
    assert_eq!(v.get("t"), Some(&Value::Tuple(vec![Value::Bool(true), Value::Bytes(b"xy".to_vec())])));
}

#[test]
fn protocol_0_text_opcodes() {
    let v = parse(b"(dp0\nVa\np1\n(lp2\nI1\naVx\np3\nasVn\np4\nI-300\ns.").unwrap();
    assert_eq!(v.get("a"), Some(&Value::List(vec![Value::Int(1), s("x")])));
    assert_eq!(v.get("n"), Some(&Value::Int(-300)));
}

#[test]
fn memo_references_share_containers() {
    // {"x": l, "y": l} with l = [1]: the list is filled after it was memoized.
    let v = parse(b"\x80\x02}q\x00(X\x01\x00\x00\x00xq\x01]q\x02K\x01aX\x01\x00\x00\x00yq\x03h\x02u.").unwrap();
    assert_eq!(v.get("y"), Some(&Value::List(vec![Value::Int(1)])));
    assert_eq!(v.get("x"), v.get("y"));
}

#[test]
fn ordered_dict_reads_as_a_dict() {
    let v = parse(b"\x80\x05\x95)\x00\x00\x00\x00\x00\x00\x00\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94\x8c\x01k\x94K\x01s.").unwrap();
    assert_eq!(v.get("k"), Some(&Value::Int(1)));
}

#[test]
fn a_reduce_that_would_run_a_command_stays_inert() {
    let v = parse(b"\x80\x02cposix\nsystem\nq\x00X\n\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.").unwrap();
    assert_eq!(v, Value::Call(Box::new(Value::Global("posix.system".into())), vec![s("echo pwned")]));
}

#[test]
fn corrupt_input_is_a_clear_error() {
    let good = b"\x80\x02}q\x00(X\x01\x00\x00\x00xq\x01]q\x02K\x01aX\x01\x00\x00\x00yq\x03h\x02u.";
    for cut in 0..good.len() {
        let e = parse(&good[..cut]).unwrap_err().to_string();
        assert!(e.starts_with("pickle:"), "{e}");
    }
    assert!(parse(b"").unwrap_err().to_string().contains("truncated"));
    assert!(parse(b"\x80\x02\xff.").unwrap_err().to_string().contains("unsupported opcode 0xff"));
    assert!(parse(b"\x80\x09N.").unwrap_err().to_string().contains("protocol 9"));
    assert!(parse(b"\x80\x02h\x07.").unwrap_err().to_string().contains("memo key 7"));
    assert!(parse(b"\x80\x02a.").unwrap_err().to_string().contains("underflow"));
    // A length far beyond the data.
    assert!(parse(b"\x80\x02X\xff\xff\xff\x7f").is_err());
    // Garbage never panics.
    let mut x: u32 = 12345;
    for _ in 0..2000 {
        let bytes: Vec<u8> = (0..64)
            .map(|_| {
                x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                (x >> 24) as u8
            })
            .collect();
        let _ = parse(&bytes);
    }
}

#[test]
fn self_referencing_list_is_refused_not_looped() {
    // l = []; l.append(l)
    let e = parse(b"\x80\x02]q\x00h\x00a.").unwrap_err().to_string();
    assert!(e.contains("nested too deeply"), "{e}");
}

#[test]
fn billion_laughs_is_bounded() {
    // Each level is a list holding the previous level twice: 2^40 leaves if expanded.
    let mut p = b"\x80\x02K\x00q\x00".to_vec();
    for i in 0..40u8 {
        p.extend_from_slice(&[b'(', b'h', i, b'h', i, b'l', b'q', i + 1]);
    }
    p.push(b'.');
    let e = parse(&p).unwrap_err().to_string();
    assert!(e.contains("too many values"), "{e}");
}

/// Found while writing the snapshot fuzz target: the same bomb with a 30 KB string as its leaf
/// stayed under the value bound and expanded to gigabytes (one copy of the string per leaf).
#[test]
fn billion_laughs_of_a_long_string_is_bounded_in_bytes() {
    let n: u32 = 30_000;
    let mut p = b"\x80\x02X".to_vec();
    p.extend_from_slice(&n.to_le_bytes());
    p.extend(std::iter::repeat_n(b'a', n as usize));
    p.extend_from_slice(b"q\x00");
    for i in 0..22u8 {
        p.extend_from_slice(&[b'(', b'h', i, b'h', i, b'l', b'q', i + 1]);
    }
    p.push(b'.');
    let e = parse(&p).unwrap_err().to_string();
    assert!(e.contains("too many bytes"), "{e}");
}
