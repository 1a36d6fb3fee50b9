//! An error as a notebook front end renders it when the output is copied as JSON: VS Code and
//! Jupyter show an uncaught exception as an object with its type and message on lines of their
//! own (`"name": "FloatingPointError",` then `"message": "invalid value (nan) ..."`; the
//! `.ipynb` file itself says `"ename"` and `"evalue"`), and the traceback is one escaped string.
//! Read across the two lines, it is the exception `FloatingPointError: invalid value (nan) ...`.

/// Which field of the error object a line holds, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// The exception's type (only a name that ends like an exception type is taken).
    Name(&'a str),
    Message(&'a str),
}

/// Reads `"name": "SomeError",` / `"message": "...",` (or `ename` / `evalue`).
pub fn field(t: &str) -> Option<Field<'_>> {
    let t = t.trim_start();
    let rest = t.strip_prefix('"')?;
    let (key, rest) = rest.split_once("\":")?;
    let value = rest.trim().strip_prefix('"')?;
    let value = value.strip_suffix(',').unwrap_or(value);
    let value = value.strip_suffix('"').unwrap_or(value);
    match key {
        "name" | "ename" => {
            let ty = value.rsplit('.').next().unwrap_or(value);
            let exceptional = ["Error", "Exception", "Interrupt", "Exit"].iter().any(|s| ty.ends_with(s));
            (exceptional && ty.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')).then_some(Field::Name(value))
        }
        "message" | "evalue" => Some(Field::Message(value)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_a_rendered_error() {
        assert_eq!(field("\t\"name\": \"FloatingPointError\","), Some(Field::Name("FloatingPointError")));
        assert_eq!(field("  \"ename\": \"jaxlib.xla_extension.XlaRuntimeError\","), Some(Field::Name("jaxlib.xla_extension.XlaRuntimeError")));
        assert_eq!(
            field("\t\"message\": \"invalid value (nan) encountered in jit(train_step). Because\","),
            Some(Field::Message("invalid value (nan) encountered in jit(train_step). Because"))
        );
        assert_eq!(field("\"name\": \"resnet50\","), None, "a model's name is not an exception");
        assert_eq!(field("{"), None);
        assert_eq!(field("name: FooError"), None);
    }
}
