//! Flight recorder dumps written as JSON (`_dump_nccl_trace_json`, `TORCH_NCCL_DEBUG_INFO_*`
//! consumers that asked for JSON): read into the same inert [`Value`] tree a pickle gives, so one
//! reader ([`crate::flight_recorder`]) serves both. serde_json bounds the nesting (128 levels).

use crate::pickle::Value;
use crate::SnapshotError;

/// Whether the bytes look like a JSON object (a pickle starts with its protocol byte, 0x80).
pub fn is_json(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

pub fn parse(bytes: &[u8]) -> Result<Value, SnapshotError> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| SnapshotError::Format(format!("json: {e}")))?;
    Ok(convert(v))
}

fn convert(v: serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::None,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(s),
        serde_json::Value::Array(items) => Value::List(items.into_iter().map(convert).collect()),
        serde_json::Value::Object(map) => Value::Dict(map.into_iter().map(|(k, v)| (Value::Str(k), convert(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_pickle_are_told_apart_by_their_first_byte() {
        assert!(is_json(b"  {\"entries\": []}"));
        assert!(!is_json(b"\x80\x02}."));
        assert!(!is_json(b""));
    }

    #[test]
    fn values_keep_their_types() {
        let v = parse(br#"{"a": [1, 2.5, "3", null, true], "b": {"c": -4}}"#).unwrap();
        assert_eq!(v.get("a").and_then(Value::as_seq).map(<[Value]>::len), Some(5));
        assert_eq!(v.get("b").and_then(|b| b.get("c")).and_then(Value::as_i64), Some(-4));
        assert!(parse(b"{\"a\": ").is_err());
    }
}
