//! Sizes on flags: the one syntax every coroner program takes (`--spool-max-bytes`,
//! `--retain-max-bytes`).

/// A size in bytes as every flag and variable takes it: a bare number of bytes, or a number with
/// a unit as `bytesize` reads it (`64MiB`, `1 GB`, `1.5TiB`; `KB` is 1000, `KiB` 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(n);
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{text:?} is not a size ({e}): use a number of bytes or one with a unit, such as 500MiB, 20GB or 2TiB"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_read_as_bytes_or_with_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1 GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        let err = parse_size("lots").expect_err("not a size");
        assert!(err.contains("\"lots\" is not a size") && err.contains("500MiB"), "{err}");
    }
}
