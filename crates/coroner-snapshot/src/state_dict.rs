//! `torch.save` files: a zip holding `<name>/data.pkl` (the pickled structure, with tensors as
//! `torch._utils._rebuild_tensor_v2(persistent storage id, offset, size, stride, ...)`) and
//! `<name>/data/<key>` (the storages). Only `data.pkl` is read: names, shapes and dtypes, never
//! the tensor bytes.

use crate::pickle::{self, Value};
use crate::SnapshotError;
use std::io::{Cursor, Read};

/// One tensor of a state_dict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<i64>,
    /// `float32`, from the storage class (`FloatStorage`) or a dtype global.
    pub dtype: String,
    /// Where the storage lives when saved (`cuda:1`, `cpu`).
    pub device: String,
}

/// What a state_dict file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateDict {
    pub tensors: Vec<TensorInfo>,
    /// Entries that are not tensors (`_metadata`, plain numbers).
    pub other_keys: Vec<String>,
}

/// The largest data.pkl read (a pickle of structure, not of data).
const MAX_PKL: u64 = 64 << 20;

fn dtype_of_storage(class: &str) -> String {
    let name = class.rsplit('.').next().unwrap_or(class);
    let base = name.strip_suffix("Storage").unwrap_or(name);
    match base {
        "Float" => "float32",
        "Double" => "float64",
        "Half" => "float16",
        "BFloat16" => "bfloat16",
        "Long" => "int64",
        "Int" => "int32",
        "Short" => "int16",
        "Char" => "int8",
        "Byte" => "uint8",
        "Bool" => "bool",
        "ComplexFloat" => "complex64",
        "ComplexDouble" => "complex128",
        "Untyped" => "untyped",
        other => return other.to_ascii_lowercase(),
    }
    .to_string()
}

/// A tensor from `_rebuild_tensor_v2((storage pid), offset, size, stride, ...)`.
fn tensor(v: &Value) -> Option<(Vec<i64>, String, String)> {
    let Value::Call(callee, args) = v else { return None };
    let Value::Global(g) = callee.as_ref() else { return None };
    if !g.starts_with("torch._utils._rebuild") {
        return None;
    }
    // _rebuild_parameter(tensor, requires_grad, hooks) wraps a tensor.
    if let Some(inner) = args.first().filter(|a| matches!(a, Value::Call(..))) {
        if let Some(t) = tensor(inner) {
            return Some(t);
        }
    }
    let (dtype, device) = match args.first() {
        // ('storage', storage class, key, location, numel)
        Some(Value::PersId(pid)) => match pid.as_seq() {
            Some([_, Value::Global(cls), _, loc, ..]) => (dtype_of_storage(cls), loc.as_str().unwrap_or("?").to_string()),
            _ => ("?".to_string(), "?".to_string()),
        },
        _ => ("?".to_string(), "?".to_string()),
    };
    let shape = args.get(2).and_then(Value::as_seq).map(|d| d.iter().filter_map(Value::as_i64).collect()).unwrap_or_default();
    Some((shape, dtype, device))
}

fn walk(prefix: &str, v: &Value, out: &mut StateDict, depth: usize) {
    let Value::Dict(items) = v else { return };
    for (k, val) in items {
        let key = match k {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            _ => continue,
        };
        let name = if prefix.is_empty() { key } else { format!("{prefix}.{key}") };
        if let Some((shape, dtype, device)) = tensor(val) {
            out.tensors.push(TensorInfo { name, shape, dtype, device });
        } else if matches!(val, Value::Dict(_)) && depth < 8 && !name.ends_with("_metadata") {
            // A checkpoint that nests `model`, `optimizer` dicts.
            walk(&name, val, out, depth + 1);
        } else {
            out.other_keys.push(name);
        }
    }
}

/// Reads the tensors of a `torch.save` zip, or of a legacy plain pickle of its structure.
pub fn parse(bytes: &[u8]) -> Result<StateDict, SnapshotError> {
    let pkl = if bytes.starts_with(b"PK") { data_pkl(bytes)? } else { bytes.to_vec() };
    let top = pickle::parse(&pkl)?;
    if !matches!(top, Value::Dict(_)) {
        return Err(SnapshotError::Format("state_dict pickle is not a dict".into()));
    }
    let mut sd = StateDict::default();
    walk("", &top, &mut sd, 0);
    Ok(sd)
}

fn data_pkl(bytes: &[u8]) -> Result<Vec<u8>, SnapshotError> {
    let zerr = |e: zip::result::ZipError| SnapshotError::Format(format!("state_dict zip: {e}"));
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(zerr)?;
    let name = archive
        .file_names()
        .filter_map(Result::ok)
        .find(|n| n == "data.pkl" || n.ends_with("/data.pkl"))
        .map(|n| n.into_owned())
        .ok_or_else(|| SnapshotError::Format("state_dict zip has no data.pkl".into()))?;
    let file = archive.by_name(&name).map_err(zerr)?;
    let mut out = Vec::new();
    file.take(MAX_PKL).read_to_end(&mut out).map_err(|e| SnapshotError::Format(format!("state_dict zip: read {name}: {e}")))?;
    Ok(out)
}

impl StateDict {
    pub fn highlights(&self) -> Vec<String> {
        // Shapes come from the file: products and sum saturate rather than overflow.
        let total = self.tensors.iter().map(|t| t.shape.iter().fold(1i64, |n, d| n.saturating_mul(*d))).fold(0i64, i64::saturating_add);
        let mut head = format!("state_dict: {} tensors, {} elements", self.tensors.len(), total);
        let shown: Vec<String> = self.tensors.iter().take(6).map(|t| format!("{} {:?} {}", t.name, t.shape, t.dtype).replace(", ", ",")).collect();
        if !shown.is_empty() {
            head.push_str(": ");
            head.push_str(&shown.join("; "));
            if self.tensors.len() > shown.len() {
                head.push_str(&format!("; and {} more", self.tensors.len() - shown.len()));
            }
        }
        let mut out = vec![head];
        let devices: std::collections::BTreeSet<&str> = self.tensors.iter().map(|t| t.device.as_str()).collect();
        if !devices.is_empty() {
            out.push(format!("saved from {}", devices.into_iter().collect::<Vec<_>>().join(", ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SD: &[u8] = include_bytes!("../../../tests/data/snapshots/rank1.state_dict.pt");

    #[test]
    fn corpus_state_dict() {
        let sd = parse(SD).unwrap();
        let names: Vec<_> = sd.tensors.iter().map(|t| (t.name.as_str(), t.shape.clone(), t.dtype.as_str())).collect();
        assert_eq!(
            names,
            vec![("0.weight", vec![64, 16], "float32"), ("0.bias", vec![64], "float32"), ("2.weight", vec![1, 64], "float32"), ("2.bias", vec![1], "float32"),]
        );
        assert_eq!(sd.tensors[0].device, "cuda:1");
        assert_eq!(
            sd.highlights()[0],
            "state_dict: 4 tensors, 1153 elements: 0.weight [64,16] float32; 0.bias [64] float32; 2.weight [1,64] float32; 2.bias [1] float32"
        );
    }

    /// Found while writing the snapshot fuzz target: shapes whose element count passes i64
    /// panicked with an overflow (debug builds).
    #[test]
    fn huge_shapes_saturate_the_element_count() {
        let t = |shape: Vec<i64>| TensorInfo { name: "w".into(), shape, dtype: "float32".into(), device: "cpu".into() };
        let sd = StateDict { tensors: vec![t(vec![1 << 40, 1 << 40]), t(vec![i64::MAX]), t(vec![-1, i64::MIN])], other_keys: Vec::new() };
        assert!(sd.highlights()[0].starts_with(&format!("state_dict: 3 tensors, {} elements", i64::MAX)), "{:?}", sd.highlights());
    }

    #[test]
    fn corrupt_zips_are_clear_errors() {
        for cut in [0, 2, 100, SD.len() / 2, SD.len() - 1] {
            let e = parse(&SD[..cut]).unwrap_err().to_string();
            assert!(e.contains("state_dict zip") || e.contains("pickle"), "{cut}: {e}");
        }
        let mut flipped = SD.to_vec();
        for b in flipped.iter_mut().skip(40).take(400) {
            *b ^= 0x5a;
        }
        assert!(parse(&flipped).is_err());
        assert!(parse(b"PK\x03\x04garbage").is_err());
    }
}
